"""The vLLM release this connector runs on, chosen once at import from
``vllm.__version__``, and the parts of vLLM's offloading scheduler API that
differ between the releases it supports (one name per differing part; the
code that depends on one reads it here, nowhere else).

- 0.33.0: ``RequestOffloadState.storable_chunks(group_config, group_state,
  num_offloadable_tokens)``; no lookahead block hashes under a KV connector.
- 0.34.0: ``storable_chunks`` / ``advance_stored_idx`` take
  ``apply_eagle_drop``; ``OffloadingConnectorScheduler.use_lookahead_block_hashes``
  (``vllm_config.num_hash_lookahead_tokens > 0``) makes an EAGLE group a plain
  sliding-window group for store and lookup (no trailing drop, no mask shift)
  and caps the offloadable tokens by the hashed ones
  (``len(block_hashes) * tokens_per_hash``).

A release not listed is refused at import (``ImportError``, one line).
"""

from __future__ import annotations

import vllm

SUPPORTED = ("0.33.0", "0.34.0")

VERSION: str = vllm.__version__
if VERSION not in SUPPORTED:
    raise ImportError(
        f"kvreach's vLLM connector runs on vLLM {', '.join(SUPPORTED)}; the installed "
        f"vLLM is {VERSION} (python -m kvreach.vllm_install installs 0.34.0)"
    )

# 0.34.0: use_lookahead_block_hashes exists, and storable_chunks /
# advance_stored_idx take apply_eagle_drop (= not use_lookahead_block_hashes).
LOOKAHEAD_HASHES: bool = VERSION != "0.33.0"


def use_lookahead_block_hashes(scheduler) -> bool:
    """``scheduler.use_lookahead_block_hashes`` (0.34.0); False on 0.33.0,
    which has no such mode under a KV connector."""
    return LOOKAHEAD_HASHES and bool(getattr(scheduler, "use_lookahead_block_hashes", False))


if LOOKAHEAD_HASHES:
    def storable_chunks(scheduler, req_status, group_config, group_state,
                        num_offloadable_tokens: int) -> int:
        """``req_status.storable_chunks`` as vLLM 0.34.0's ``_build_store_jobs``
        calls it (``apply_eagle_drop = not use_lookahead_block_hashes``)."""
        return req_status.storable_chunks(
            group_config, group_state, num_offloadable_tokens,
            not use_lookahead_block_hashes(scheduler),
        )
else:
    def storable_chunks(scheduler, req_status, group_config, group_state,
                        num_offloadable_tokens: int) -> int:
        """``req_status.storable_chunks`` as vLLM 0.33.0's ``_build_store_jobs``
        calls it."""
        return req_status.storable_chunks(group_config, group_state, num_offloadable_tokens)


def hashed_tokens(scheduler, req) -> int | None:
    """The cap lookahead block hashes put on the offloadable tokens
    (``_calc_num_offloadable_tokens``: ``len(block_hashes) *
    tokens_per_hash``); None when the mode is off (always on 0.33.0)."""
    if not use_lookahead_block_hashes(scheduler):
        return None
    return len(req.block_hashes) * scheduler.config.tokens_per_hash
