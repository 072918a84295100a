"""vLLM 0.33.0 side of the ``reachable_block_mask`` diffbehavior check.

``vllm_mask`` has the same plain-int signature and bounds as
``diff_targets.impl_mask``. It only builds vLLM's arguments -- a
``SlidingWindowSpec`` (one KV head of size 1, torch.float16) and, when a
retention interval is set, the replay boundary ``num_prompt_tokens - 1`` as
``reachable_boundaries`` (what ``OffloadingConnectorScheduler._build_store_jobs``
passes) -- and calls ``SlidingWindowManager.reachable_block_mask``.

torch and vLLM are imported at module import, outside CrossHair's analysis
(their import runs subprocesses, which CrossHair refuses during analysis).
"""

from __future__ import annotations

import torch
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import SlidingWindowSpec

from diff_targets import OUT_OF_BOUNDS, impl_mask, in_bounds  # noqa: F401


def vllm_mask(
    block_size: int, window: int, alignment_tokens: int | None, eagle: bool,
    dcp_world_size: int, retention_interval: int | None, prompt_tokens: int,
    start_block: int, end_block: int, final_segment_end_block: int | None,
) -> list[bool] | None | str:
    if not in_bounds(
        block_size, window, alignment_tokens, eagle, dcp_world_size,
        retention_interval, prompt_tokens, start_block, end_block,
        final_segment_end_block,
    ):
        return OUT_OF_BOUNDS
    spec = SlidingWindowSpec(
        block_size=block_size, num_kv_heads=1, head_size=1,
        dtype=torch.float16, sliding_window=window,
    )
    boundaries = (prompt_tokens - 1,) if retention_interval is not None else ()
    return SlidingWindowManager.reachable_block_mask(
        start_block=start_block,
        end_block=end_block,
        alignment_tokens=alignment_tokens,
        kv_cache_spec=spec,
        use_eagle=eagle,
        retention_interval=retention_interval,
        reachable_boundaries=boundaries,
        dcp_world_size=dcp_world_size,
        final_segment_end_block=final_segment_end_block,
    )
