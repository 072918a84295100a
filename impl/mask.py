"""The store mask as plain executable Python: the twin of ``kvreach.spec.mask``.

- ``block_reachable`` / ``reachable_block_mask``: vLLM 0.33.0
  ``SlidingWindowManager.reachable_block_mask`` (one entry; the whole range).
- ``chunk_reachable``: ``_build_store_jobs`` keeps a chunk iff any of its
  blocks is reachable; ``shared_prefix_tail_chunks`` the chunks of the further
  reachable boundary ``Request.shared_prefix_boundary`` (F8).
- ``v029_chunk_reachable``: vLLM 0.29.0 ``is_store_reachable_swa_chunk`` with
  its own window ``ceil(W / chunk)`` and alignment ``A // chunk``.

Contracts (deal) state the mask from the load side (``kvreach.impl.oracles``),
not from its interval arithmetic.

Coordinates: a *block* is ``B = block_size * dcp_world_size`` tokens, a
*chunk* is ``blocks_per_chunk`` blocks (the offload unit, one key per chunk).
"""

from __future__ import annotations

import deal

from kvreach.impl import contracts as _contracts  # noqa: F401  (sets the default mode)
from kvreach.impl.load import replay_boundary
from kvreach.impl.oracles import kept_by_hits, mask_matches_hits
from kvreach.params import GroupConfig, cdiv

# ---------------------------------------------------------------------------
# vLLM 0.33.0: SlidingWindowManager.reachable_block_mask
# ---------------------------------------------------------------------------


def _segment_tail(i: int, per_segment: int, need: int, shift: int) -> bool:
    return i >= shift and (i - shift) % per_segment >= per_segment - need


def boundary_end_block(g: GroupConfig, boundary_tokens: int, shift: int | None = None) -> int:
    """End block of the tail a reachable boundary keeps (``reachable_boundaries``
    of ``reachable_block_mask``): the boundary aligned down to
    ``alignment_tokens``, plus shift (``g.shift`` unless a mutant drops it);
    the tail is the ``need`` blocks before it."""
    assert g.alignment_tokens is not None
    aligned = boundary_tokens // g.alignment_tokens * g.alignment_tokens
    return aligned // g.block_tokens + (g.shift if shift is None else shift)


def shared_prefix_tail_chunks(rule: str, g: GroupConfig, shared_prefix_boundary: int,
                              start_chunk: int, end_chunk: int) -> set[int]:
    """Chunks in ``[start_chunk, end_chunk)`` meeting the tail of
    ``Request.shared_prefix_boundary``: vllm-0.33's ``_build_store_jobs`` adds
    it to ``reachable_boundaries`` with a retention interval (F8; the spec's
    ``chunk_reachable(..., boundaries=)``)."""
    if rule != "vllm-0.33" or g.retention_interval is None or not shared_prefix_boundary \
            or g.dense or g.need < 1:
        return set()
    end = boundary_end_block(g, shared_prefix_boundary)
    bpc = g.blocks_per_chunk
    return {c for c in range(start_chunk, end_chunk)
            if c * bpc < end and (c + 1) * bpc > end - g.need}


def _replay_end_block(g: GroupConfig, prompt_tokens: int, shift: int | None = None) -> int:
    """End block of the replay boundary ``num_prompt_tokens - 1`` aligned down."""
    return boundary_end_block(g, replay_boundary(g, prompt_tokens), shift)


@deal.pre(lambda block, g, prompt_tokens, final_segment_end_block: block >= 0)
@deal.pre(lambda block, g, prompt_tokens, final_segment_end_block: not g.dense)
@deal.pre(
    lambda block, g, prompt_tokens, final_segment_end_block: (
        final_segment_end_block is None or final_segment_end_block >= 0
    )
)
@deal.pre(lambda block, g, prompt_tokens, final_segment_end_block: prompt_tokens >= 1)
@deal.post(lambda r: isinstance(r, bool))
@deal.ensure(
    lambda block, g, prompt_tokens, final_segment_end_block, result: (
        result == kept_by_hits(block, g, prompt_tokens, final_segment_end_block)
    )
)
def block_reachable(
    block: int,
    g: GroupConfig,
    prompt_tokens: int,
    final_segment_end_block: int | None,
) -> bool:
    """One entry of ``reachable_block_mask`` (sparse case; the range bounds the
    caller applies are ``start_block <= block < end_block``).

    A block is kept iff it is in a segment-boundary tail (the last ``need``
    blocks before each segment boundary, shifted by one for EAGLE), or in the
    final partial segment's tail ``[max(seg_start, F - need), F)`` (non-EAGLE,
    ``F % per_segment != 0``), or (with a retention interval) in the tail of the
    replay boundary ``num_prompt_tokens - 1`` aligned down.
    """
    need, shift, per_segment = g.need, g.shift, g.per_segment
    if g.has_segments:  # not dense (the caller's): an alignment of whole blocks
        if _segment_tail(block, per_segment, need, shift):
            return True
        F = final_segment_end_block
        if F is not None and not g.legacy_eagle and F % per_segment:
            if max(F - F % per_segment, F - need) <= block < F:
                return True
    if g.retention_interval is not None:
        end = _replay_end_block(g, prompt_tokens)
        if end - need <= block < end:
            return True
    return False


@deal.pre(lambda start_block, end_block, *a, **k: 0 <= start_block <= end_block)
@deal.pre(
    lambda start_block, end_block, g, prompt_tokens, final_segment_end_block=None: (
        prompt_tokens >= 1
        and (final_segment_end_block is None or final_segment_end_block >= 0)
    )
)
@deal.ensure(
    lambda start_block, end_block, g, prompt_tokens, final_segment_end_block, result: (
        result is None or len(result) == end_block - start_block
    )
)
@deal.ensure(
    lambda start_block, end_block, g, prompt_tokens, final_segment_end_block, result: (
        (result is None) == g.dense
    )
)
@deal.ensure(
    lambda start_block, end_block, g, prompt_tokens, final_segment_end_block, result: (
        mask_matches_hits(
            start_block, end_block, g, prompt_tokens, final_segment_end_block, result
        )
    )
)
def reachable_block_mask(
    start_block: int,
    end_block: int,
    g: GroupConfig,
    prompt_tokens: int,
    final_segment_end_block: int | None = None,
) -> list[bool] | None:
    """``SlidingWindowManager.reachable_block_mask`` (vLLM 0.33.0), same
    argument meaning; ``None`` means dense (store every block).

    Tails are built by repeating one segment's pattern with list operations
    instead of testing every block in Python.
    """
    return reachable_block_mask_with(start_block, end_block, g, prompt_tokens, final_segment_end_block,
                       g.need, g.shift)


def reachable_block_mask_with(start_block: int, end_block: int, g: GroupConfig, prompt_tokens: int,
                final_segment_end_block: int | None, need: int, shift: int) -> list[bool] | None:
    """The body of :func:`reachable_block_mask` with ``need`` and ``shift``
    as parameters: ``g.need`` and ``g.shift`` there, another value only in a
    mutant (``tests/conformance/crosshair_targets.py``)."""
    if g.dense:
        return None
    n = end_block - start_block
    mask = [False] * n
    per_segment = g.per_segment  # read when g.has_segments (not dense: whole blocks)

    def fill(lo: int, hi: int) -> None:
        lo, hi = max(lo, start_block), min(hi, end_block)
        if lo < hi:
            mask[lo - start_block : hi - start_block] = [True] * (hi - lo)

    if g.has_segments:
        # Segment-boundary tails repeat with period per_segment: one segment's pattern
        # (per_segment - need misses, need hits), rotated to start_block and repeated.
        offset = (start_block - shift) % per_segment
        if per_segment <= n:
            pattern = [False] * (per_segment - need) + [True] * need
            mask = (pattern * ((offset + n) // per_segment + 1))[offset : offset + n]
        else:  # a segment longer than the range: fill its (at most two) tails,
            # O(n) rather than O(segment)
            segment_end_block = start_block - offset + per_segment  # first segment end after start_block
            for end in (segment_end_block - per_segment, segment_end_block, segment_end_block + per_segment):
                fill(end - need, end)
        for i in range(min(n, max(0, shift - start_block))):
            mask[i] = False  # blocks before the EAGLE shift are in no tail
        F = final_segment_end_block
        if F is not None and not g.legacy_eagle and F % per_segment:
            fill(max(F - F % per_segment, F - need), F)
    if g.retention_interval is not None:
        end = _replay_end_block(g, prompt_tokens, shift)
        fill(end - need, end)
    return mask


def chunk_reachable(
    chunk: int,
    g: GroupConfig,
    prompt_tokens: int,
    final_segment_end_chunk: int | None,
) -> bool:
    """A chunk is stored iff any of its blocks is reachable (``_build_store_jobs``)."""
    if g.dense:
        return True
    bpc = g.blocks_per_chunk
    F = None if final_segment_end_chunk is None else final_segment_end_chunk * bpc
    return any(
        block_reachable(chunk * bpc + b, g, prompt_tokens, F) for b in range(bpc)
    )


# ---------------------------------------------------------------------------
# vLLM 0.29.0: is_store_reachable_swa_chunk (the pre-fix rule)
# ---------------------------------------------------------------------------


def v029_window_chunks(g: GroupConfig) -> int:
    """vLLM 0.29.0 ``get_sliding_window_size_in_chunks``: ``ceil(W / chunk)``."""
    return cdiv(g.window, g.chunk_tokens)


def v029_alignment_chunk_count(g: GroupConfig) -> int | None:
    """vLLM 0.29.0 ``SchedulerOffloadConfig.from_spec._alignment_chunk_count``."""
    a, c = g.alignment_tokens, g.chunk_tokens
    if a is None or a <= c:
        return None
    per_segment = a // c
    if v029_window_chunks(g) >= per_segment:
        return None
    return per_segment


def v029_chunk_reachable(chunk: int, storable_count: int, g: GroupConfig) -> bool:
    """vLLM 0.29.0 ``is_store_reachable_swa_chunk``: the *current step's*
    storable count is taken as the final horizon."""
    acc = v029_alignment_chunk_count(g)
    if acc is None:
        return True
    pos = chunk % acc
    seg_start = chunk - pos
    actual = min(acc, storable_count - seg_start)
    return pos >= actual - (v029_window_chunks(g) + int(g.eagle))
