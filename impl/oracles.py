"""The contract oracles of the store rules, stated from the load side.

A hit at token boundary ``L`` needs the KV of the ``W - 1`` tokens before
``L``, plus the EAGLE peek block; the predicates here say which blocks and
chunks that makes the store side keep, without the mask's interval
arithmetic (``kvreach.impl.mask``) or the store step's bookkeeping
(``kvreach.impl.rules``). They are the ``deal`` contracts of those modules,
checked by CrossHair (``scripts/crosshair_check.sh``,
``tests/conformance/``) and, when switched on, at run time
(``kvreach.impl.contracts``).
"""

from __future__ import annotations

from kvreach.impl.load import replay_boundary, wanted_chunks
from kvreach.params import GroupConfig, RequestConfig


def hit_requests_block(boundary_tokens: int, block: int, g: GroupConfig) -> bool:
    """A hit at token ``boundary_tokens`` reads block ``block``: the block's
    tokens ``[block*B, (block+1)*B)`` meet ``[L - (W - 1), L)``, widened by one
    block past ``L`` for an EAGLE/MTP draft group (its matched run is one block
    longer and the last block is dropped)."""
    B = g.block_tokens
    lo = boundary_tokens - (g.mask_window_tokens - 1)
    hi = boundary_tokens + (B if g.legacy_eagle else 0)
    return block * B < hi and (block + 1) * B > lo


def rule_hit_boundaries(
    block: int, g: GroupConfig, prompt_tokens: int, final_segment_end_block: int | None
) -> list[int]:
    """Token boundaries whose hit can read ``block`` (only those near it; any
    other boundary is too far away to read it): every segment boundary
    ``k * segment_tokens`` (k >= 1), the final horizon ``F * B`` (non-EAGLE, segments
    exist), and with a retention interval the replay boundary
    ``num_prompt_tokens - 1`` aligned down (vLLM keeps its tail even when it
    aligns down to 0; for EAGLE that keeps block 0, which no hit reads)."""
    B, W = g.block_tokens, g.mask_window_tokens
    out: list[int] = []
    segment_tokens = g.segment_tokens
    if segment_tokens is not None and g.representable:  # segment tails of whole blocks
        k_lo = max(1, (block * B - B) // segment_tokens)
        k_hi = ((block + 1) * B + W) // segment_tokens + 1
        out.extend(k * segment_tokens for k in range(k_lo, k_hi + 1))
        if final_segment_end_block is not None and not g.eagle:
            out.append(final_segment_end_block * B)
    if g.retention_interval is not None:
        out.append(replay_boundary(g, prompt_tokens))
    return out


def kept_by_hits(
    block: int, g: GroupConfig, prompt_tokens: int, final_segment_end_block: int | None
) -> bool:
    """The sparse store rule stated from the load side: keep a block iff some
    hit boundary of :func:`rule_hit_boundaries` reads it."""
    return any(
        hit_requests_block(L, block, g)
        for L in rule_hit_boundaries(block, g, prompt_tokens, final_segment_end_block)
    )


def mask_matches_hits(
    start_block: int,
    end_block: int,
    g: GroupConfig,
    prompt_tokens: int,
    final_segment_end_block: int | None,
    result: list[bool] | None,
) -> bool:
    """Contract of ``reachable_block_mask``: dense (None) exactly for the dense
    fallbacks, else entry ``i`` is :func:`kept_by_hits` for block
    ``start_block + i``."""
    if result is None:
        return g.dense
    if g.dense or len(result) != end_block - start_block:
        return False
    return all(
        result[i - start_block]
        == kept_by_hits(i, g, prompt_tokens, final_segment_end_block)
        for i in range(start_block, end_block)
    )


def horizon_is_final(
    g: GroupConfig,
    finished: bool,
    num_chunks: int,
    prompt_horizon_chunks: int,
    result: int | None,
) -> bool:
    """Contract of ``store_horizon_chunks`` (PR #54362): the final segment end
    handed to the mask must be a horizon that is final, never an intermediate
    frontier. While the request runs the only horizon known to be final is the
    prompt's offloadable horizon; once it finished, the current count. While
    prefill is active (frontier within the prompt horizon) a non-EAGLE group
    without retention interval must use the prompt horizon (else the prompt's
    final partial-segment tail would be skipped past by the cursor). EAGLE
    groups and retention intervals use no final segment. It is never earlier
    than the frontier."""
    if result is not None and result < num_chunks:
        return False
    if g.eagle or g.retention_interval is not None:
        return result is None
    if finished:
        return result in (None, num_chunks)
    if num_chunks <= prompt_horizon_chunks:
        return result == prompt_horizon_chunks
    return result in (None, prompt_horizon_chunks)


def submitted_wanted(rule, g, req, cursor, num_chunks, finished, result) -> bool:
    """Contract of ``store_step`` tied to the load side (vllm-0.33, sparse
    non-EAGLE group without retention interval): every chunk submitted is
    wanted under the ``intended`` load model (``kvreach.impl.load.wanted_chunks``) for the
    horizon this step treats as final -- the prompt horizon while prefill is
    active, the current count once finished. (The pre-fix rule breaks this:
    it stores the tail of an intermediate frontier.) Decode past the prompt
    has no known final horizon and is not constrained here. The horizon is
    restated here (``horizon_is_final``'s cases), not taken from
    ``kvreach.impl.rules``, whose step this checks."""
    if rule != "vllm-0.33" or g.dense or g.eagle or g.retention_interval is not None:
        return True
    prompt_h = req.prompt_offloadable_tokens // g.chunk_tokens
    if finished:
        horizon = num_chunks
    elif num_chunks <= prompt_h:
        horizon = prompt_h
    else:
        return True
    wanted = wanted_chunks("intended", g, req, horizon)
    return all(c in wanted for c in result.chunks)
