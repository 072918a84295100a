"""Plain-int adapters for ``crosshair diffbehavior``.

- ``impl_mask``: kvreach's ``reachable_block_mask`` behind the plain-int
  signature shared with ``vllm_diff_targets.vllm_mask`` (vLLM 0.33.0's
  ``SlidingWindowManager.reachable_block_mask``; kept in its own module so
  that importing this one does not import torch/vLLM).
- ``store_v029`` / ``store_v033``: ``kvreach.impl.rules.store_step`` with the
  rule fixed, returning the submitted chunks and the cursor after the step.

Inputs outside the bounds return ``OUT_OF_BOUNDS`` from both sides (so they
never count as a difference). Bounds: block_size 1..64, dcp_world_size in
{1, 2, 4}, window 1..4096, alignment_tokens None or 1..4096, retention interval
None or a multiple of the block (0..4096, needs alignment), num_prompt_tokens
1..32768, 0 <= start_block <= end_block <= 4096 with at most 16 blocks in the
mask, final_segment_end_block None or end_block..4096.
"""

from __future__ import annotations

from kvreach.impl import mask, rules
from kvreach.params import GroupConfig, RequestConfig
from kvreach.proofs.scenarios import PR_54362

OUT_OF_BOUNDS = "out of bounds"
MAX_BLOCK_SIZE, MAX_WINDOW, MAX_ALIGNMENT = 64, 4096, 4096
MAX_BLOCK, MAX_SPAN, MAX_PROMPT = 4096, 16, 32768


def in_bounds(
    block_size, window, alignment_tokens, eagle, dcp_world_size, retention_interval,
    prompt_tokens, start_block, end_block, final_segment_end_block,
) -> bool:
    if not (1 <= block_size <= MAX_BLOCK_SIZE and 1 <= window <= MAX_WINDOW):
        return False
    if dcp_world_size not in (1, 2, 4):
        return False
    if alignment_tokens is not None and not 1 <= alignment_tokens <= MAX_ALIGNMENT:
        return False
    if retention_interval is not None:
        if alignment_tokens is None or not 0 <= retention_interval <= MAX_ALIGNMENT:
            return False
        if retention_interval % (block_size * dcp_world_size):
            return False
    if not 1 <= prompt_tokens <= MAX_PROMPT:
        return False
    if not (0 <= start_block <= end_block <= MAX_BLOCK and end_block - start_block <= MAX_SPAN):
        return False
    if final_segment_end_block is not None and not (
        end_block <= final_segment_end_block <= MAX_BLOCK
    ):
        return False
    return True


def impl_mask(
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
    g = GroupConfig(
        block_size=block_size, window=window, alignment_tokens=alignment_tokens,
        dcp_world_size=dcp_world_size, eagle=eagle,
        retention_interval=retention_interval,
    )
    return mask.reachable_block_mask(
        start_block, end_block, g, prompt_tokens, final_segment_end_block
    )


# ---------------------------------------------------------------------------
# vllm-0.29 vs vllm-0.33 store step (kvreach's two rules)
# ---------------------------------------------------------------------------


def _store(rule, block_size, window, alignment_tokens, prompt_tokens, cursor, num_chunks, finished):
    if not (
        1 <= block_size <= MAX_BLOCK_SIZE and 1 <= window <= MAX_WINDOW
        and alignment_tokens is not None and 1 <= alignment_tokens <= MAX_ALIGNMENT
        and 1 <= prompt_tokens <= MAX_PROMPT and 0 <= cursor <= num_chunks <= MAX_BLOCK
    ):
        return OUT_OF_BOUNDS
    g = GroupConfig(block_size=block_size, window=window, alignment_tokens=alignment_tokens)
    w = rules.store_step(rule, g, RequestConfig(prompt_tokens), cursor, num_chunks, finished)
    return (w.chunks, w.next_cursor)


def store_v029(
    block_size: int, window: int, alignment_tokens: int | None, prompt_tokens: int,
    cursor: int, num_chunks: int, finished: bool,
) -> tuple[tuple[int, ...], int] | str:
    return _store("vllm-0.29", block_size, window, alignment_tokens, prompt_tokens, cursor, num_chunks, finished)


def store_v033(
    block_size: int, window: int, alignment_tokens: int | None, prompt_tokens: int,
    cursor: int, num_chunks: int, finished: bool,
) -> tuple[tuple[int, ...], int] | str:
    return _store("vllm-0.33", block_size, window, alignment_tokens, prompt_tokens, cursor, num_chunks, finished)


def store_v029_example(cursor: int, num_chunks: int, finished: bool) -> tuple[tuple[int, ...], int] | str:
    """The worked example's group (SWA block 4, window 16, alignment 36) and
    1200-token prompt (``PR_54362``), vllm-0.29 rule."""
    ex = PR_54362
    return _store("vllm-0.29", ex.swa_block_size, ex.window, ex.alignment_tokens, ex.prompt,
                  cursor, num_chunks, finished)


def store_v033_example(cursor: int, num_chunks: int, finished: bool) -> tuple[tuple[int, ...], int] | str:
    """As ``store_v029_example`` under the vllm-0.33 rule."""
    ex = PR_54362
    return _store("vllm-0.33", ex.swa_block_size, ex.window, ex.alignment_tokens, ex.prompt,
                  cursor, num_chunks, finished)
