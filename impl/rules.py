"""The SWA store rules as plain executable Python (no Z3 at run time).

Each function names the vLLM code it models. Contracts (deal) state the rule,
not the code; they are checked by CrossHair and, when switched on, at run time
(``kvreach.impl.contracts``).

Coordinates: a *block* is ``B = block_size * dcp_world_size`` tokens, a
*chunk* is ``blocks_per_chunk`` blocks (the offload unit, one key per chunk).
"""

from __future__ import annotations

from dataclasses import dataclass

import deal

from kvreach.impl import contracts as _contracts  # noqa: F401  (sets the default mode)
from kvreach.impl.load import replay_boundary, wanted_chunks
from kvreach.params import RULES, GroupConfig, RequestConfig, cdiv, check_rule

# ---------------------------------------------------------------------------
# Contract predicates, stated from the load side (a hit at token boundary L
# needs the KV of the W - 1 tokens before L, plus the EAGLE peek block), not
# from the mask's interval arithmetic. Used by the deal contracts below and by
# the CrossHair harness in tests/conformance/.
# ---------------------------------------------------------------------------


def hit_requests_block(boundary_tokens: int, block: int, g: GroupConfig) -> bool:
    """A hit at token ``boundary_tokens`` reads block ``block``: the block's
    tokens ``[block*B, (block+1)*B)`` meet ``[L - (W - 1), L)``, widened by one
    block past ``L`` for an EAGLE/MTP draft group (its matched run is one block
    longer and the last block is dropped)."""
    B = g.block_tokens
    lo = boundary_tokens - (g.mask_window_tokens - 1)
    hi = boundary_tokens + (B if g.eagle else 0)
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
    if g.per_segment is not None and segment_tokens is not None:
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
    if per_segment is not None:
        if _segment_tail(block, per_segment, need, shift):
            return True
        F = final_segment_end_block
        if F is not None and not g.eagle and F % per_segment:
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
    return _block_mask(start_block, end_block, g, prompt_tokens, final_segment_end_block,
                       g.need, g.shift)


def _block_mask(start_block: int, end_block: int, g: GroupConfig, prompt_tokens: int,
                final_segment_end_block: int | None, need: int, shift: int) -> list[bool] | None:
    """The body of :func:`reachable_block_mask` with ``need`` and ``shift``
    as parameters: ``g.need`` and ``g.shift`` there, another value only in a
    mutant (``tests/conformance/crosshair_targets.py``)."""
    if g.dense:
        return None
    n = end_block - start_block
    mask = [False] * n
    per_segment = g.per_segment

    def fill(lo: int, hi: int) -> None:
        lo, hi = max(lo, start_block), min(hi, end_block)
        if lo < hi:
            mask[lo - start_block : hi - start_block] = [True] * (hi - lo)

    if per_segment is not None:
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
        if F is not None and not g.eagle and F % per_segment:
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
# vLLM 0.33.0: OffloadingConnectorScheduler._build_store_jobs (horizon part)
# ---------------------------------------------------------------------------


@deal.pre(lambda g, finished, num_chunks, prompt_horizon_chunks: num_chunks >= 0)
@deal.pre(lambda g, finished, num_chunks, prompt_horizon_chunks: prompt_horizon_chunks >= 0)
@deal.ensure(
    lambda g, finished, num_chunks, prompt_horizon_chunks, result: (
        result is None or result >= num_chunks
    )
)
@deal.ensure(
    lambda g, finished, num_chunks, prompt_horizon_chunks, result: horizon_is_final(
        g, finished, num_chunks, prompt_horizon_chunks, result
    )
)
def store_horizon_chunks(
    g: GroupConfig, finished: bool, num_chunks: int, prompt_horizon_chunks: int
) -> int | None:
    """``store_horizon_chunks`` of ``_build_store_jobs``: the final segment end
    handed to the mask. Prompt horizon while prefill is active, the current
    horizon once finished, none during decode past the prompt, with a
    retention interval, or for EAGLE groups. Never earlier than the frontier:
    an earlier end would call an intermediate frontier final."""
    return _store_horizon(g, finished, num_chunks, prompt_horizon_chunks)


def _store_horizon(g: GroupConfig, finished: bool, num_chunks: int, prompt_horizon_chunks: int,
                   frontier_final: bool = False) -> int | None:
    """The body of :func:`store_horizon_chunks`; ``frontier_final`` (a mutant
    only: the pre-fix horizon) takes the step's count as the final end."""
    if g.retention_interval is not None or g.eagle:
        return None
    if frontier_final:
        return num_chunks
    return known_final_horizon(
        finished, num_chunks, prompt_horizon_chunks, num_chunks, prompt_horizon_chunks
    )


def known_final_horizon(finished: bool, num_chunks: int, prompt_horizon_chunks: int,
                        current, prompt):
    """The horizon known to be final at this step: ``current`` (the request's
    horizon now) once finished, ``prompt`` (the prompt's offloadable horizon)
    while the frontier ``num_chunks`` is within the prompt horizon, else None
    (decode past the prompt: not known yet). In chunks for the mask
    (``store_horizon_chunks``), in tokens for the runtime monitor."""
    if finished:
        return current
    if num_chunks <= prompt_horizon_chunks:
        return prompt
    return None


def prompt_horizon_chunks(g: GroupConfig, req: RequestConfig) -> int:
    """``prompt_offloadable_tokens // tokens_per_chunk``: the prompt's
    offloadable horizon in chunks (``_build_store_jobs``)."""
    return req.prompt_offloadable_tokens // g.chunk_tokens


def reconsider_start_chunk(g: GroupConfig, cursor: int, num_chunks: int) -> int:
    """Where an end-of-request reconsideration starts: the cursor, or the
    start of the final partial segment (``_final_swa_alignment_blocks``) when
    that is earlier."""
    final_alignment_blocks = g.final_alignment_blocks
    assert final_alignment_blocks is not None
    bpc = g.blocks_per_chunk
    horizon_blocks = num_chunks * bpc
    return min(cursor, (horizon_blocks - horizon_blocks % final_alignment_blocks) // bpc)


def reconsider_final_tail(
    g: GroupConfig, finished: bool, num_chunks: int, prompt_horizon_chunks: int
) -> bool:
    """``reconsider_final_swa_tail`` of ``_build_store_jobs``."""
    return (
        finished
        and num_chunks != prompt_horizon_chunks
        and g.retention_interval is None
        and g.final_alignment_blocks is not None
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


# ---------------------------------------------------------------------------
# One store step for one group
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# kvreach's rule "lookup-window": the runs vLLM 0.33.0's offload lookup asks for
# ---------------------------------------------------------------------------


def lookup_window_chunks(g: GroupConfig) -> int:
    """Chunks the rule keeps before a boundary: ``ceil((W + extra) / C)``, the
    run a later request of exactly ``b`` tokens needs (its hit is capped at
    ``b - 1`` and ``load_window_size_in_chunks`` widens the run by the
    one-token right padding); it covers the aligned hit's run
    (``get_sliding_window_size_in_chunks``) too. One more for an EAGLE group
    (its run is one chunk longer), which also keeps the chunk after the
    boundary (queried, then popped)."""
    return cdiv(g.mask_window_tokens, g.chunk_tokens) + g.shift


def lookup_window_keep(c: int, g: GroupConfig, prompt_offloadable_tokens: int) -> bool:
    """``lookup-window`` keeps chunk ``c`` iff it lies in
    ``[b - lookup_window_chunks, b + shift)`` for a boundary ``b`` (chunks) a
    later lookup can end at: every multiple of the segment (alignment; the
    retention interval when set; none for interval 0) and, with a retention
    interval, the repeated prompt's ``floor(P' / A) * A`` (``P'``: the
    prompt's offloadable tokens, where its hit ends). Dense when the
    alignment is not a whole number of chunks (or there is none)."""
    A, C = g.alignment_tokens, g.chunk_tokens
    if A is None or A % C:
        return True
    ws, shift = lookup_window_chunks(g), g.shift
    segment_tokens = g.segment_tokens
    if segment_tokens is not None:
        segment_chunks = segment_tokens // C
        k = (c + ws) // segment_chunks
        if k >= 1 and k * segment_chunks > c - shift:
            return True
    if g.retention_interval is not None:
        b = prompt_offloadable_tokens // A * (A // C)
        if b >= 1 and b - ws <= c < b + shift:
            return True
    return False


def storable_chunks(
    rule: str, g: GroupConfig, req: RequestConfig, offloadable: int, finished: bool
) -> int:
    """``RequestOffloadState.storable_chunks`` (allocation and keys assumed to
    cover the offloadable range). EAGLE groups drop their volatile trailing
    chunk while decoding; vLLM 0.33 lifts that once finished, 0.29 never."""
    n = offloadable // g.chunk_tokens
    decoding = offloadable > req.prompt_tokens
    lifted = finished and rule != "vllm-0.29"
    if g.eagle and decoding and not lifted:
        n = max(0, n - 1)
    return n


def finish_tokens(rule: str, req: RequestConfig, num_tokens: int) -> int:
    """``num_tokens_after_batch`` of a normally finished request: 0.33 clamps to
    the commit point ``max(num_prompt_tokens, num_tokens - 1)``; 0.29 used
    ``num_tokens``."""
    if rule != "vllm-0.29":
        return max(req.prompt_tokens, num_tokens - 1)
    return num_tokens


@dataclass(frozen=True)
class StoreStep:
    """What one ``_build_store_jobs`` call decides for one group.

    start_chunk, end_chunk: the candidate range (``group_store_ranges``).
    chunks: candidates that pass SWA reachability and are not resubmissions,
        before vLLM's null-block filter.
    block_mask: the mask over ``[start_chunk, end_chunk)`` in blocks (None:
        dense), which vLLM's null-block check also consults.
    next_cursor: ``next_stored_chunk_idx`` after the step (manager accepts).
    horizon_chunks: the final-segment end handed to the mask
        (``store_horizon_chunks``; None: no final segment). The pre-fix rule
        takes the current count as final. Read by the runtime monitor
        (``kvreach.impl.monitor``, property ``horizon_final``).
    """

    start_chunk: int
    end_chunk: int
    chunks: tuple[int, ...]
    block_mask: tuple[bool, ...] | None
    next_cursor: int
    horizon_chunks: int | None = None


def _store_step_post(rule, g, req, cursor, num_chunks, finished, result) -> bool:
    w: StoreStep = result
    in_range = all(w.start_chunk <= c < w.end_chunk for c in w.chunks)
    sorted_unique = list(w.chunks) == sorted(set(w.chunks))
    monotone = w.next_cursor == max(cursor, num_chunks)
    # Only an end-of-request reconsideration may look below the cursor.
    below = [c for c in w.chunks if c < cursor]
    return in_range and sorted_unique and monotone and (finished or not below)


def submitted_wanted(rule, g, req, cursor, num_chunks, finished, result) -> bool:
    """Contract of ``store_step`` tied to the load side (vllm-0.33, sparse
    non-EAGLE group without retention interval): every chunk submitted is
    wanted under the ``intended`` load model (``kvreach.impl.load.wanted_chunks``) for the
    horizon this step treats as final -- the prompt horizon while prefill is
    active, the current count once finished. (The pre-fix rule breaks this:
    it stores the tail of an intermediate frontier.) Decode past the prompt
    has no known final horizon and is not constrained here."""
    if rule != "vllm-0.33" or g.dense or g.eagle or g.retention_interval is not None:
        return True
    prompt_h = prompt_horizon_chunks(g, req)
    horizon = known_final_horizon(finished, num_chunks, prompt_h, num_chunks, prompt_h)
    if horizon is None:
        return True
    wanted = wanted_chunks("intended", g, req, horizon)
    return all(c in wanted for c in result.chunks)


@deal.pre(lambda rule, g, req, cursor, num_chunks, finished: rule in RULES)
@deal.pre(lambda rule, g, req, cursor, num_chunks, finished: cursor >= 0)
@deal.pre(lambda rule, g, req, cursor, num_chunks, finished: num_chunks >= 0)
@deal.ensure(_store_step_post)
@deal.ensure(submitted_wanted)
def store_step(
    rule: str,
    g: GroupConfig,
    req: RequestConfig,
    cursor: int,
    num_chunks: int,
    finished: bool,
) -> StoreStep:
    """Per-group chunk selection of ``_build_store_jobs`` for ``rule``.

    cursor: ``next_stored_chunk_idx`` before the step.
    num_chunks: ``storable_chunks`` at this step.
    finished: the request finished (normally or aborted) in this step.
    """
    return _store_step(rule, g, req, cursor, num_chunks, finished)


def _store_step(rule: str, g: GroupConfig, req: RequestConfig, cursor: int, num_chunks: int,
                  finished: bool, frontier_final: bool = False) -> StoreStep:
    """The body of :func:`store_step`; ``frontier_final`` (a mutant only)
    hands the mask the pre-fix horizon (:func:`_store_horizon`)."""
    check_rule(rule)
    bpc = g.blocks_per_chunk
    start = cursor
    if rule == "vllm-0.29":
        chunks = tuple(
            c for c in range(start, num_chunks) if v029_chunk_reachable(c, num_chunks, g)
        )
        return StoreStep(start, num_chunks, chunks, None, max(cursor, num_chunks), num_chunks)
    if rule == "lookup-window":  # no horizon: the keep decision is the chunk's alone
        keep = [lookup_window_keep(c, g, req.prompt_offloadable_tokens) for c in range(start, num_chunks)]
        chunks = tuple(c for c, k in zip(range(start, num_chunks), keep) if k)
        mask = None if all(keep) else tuple(k for k in keep for _ in range(bpc))
        return StoreStep(start, max(start, num_chunks), chunks, mask, max(cursor, num_chunks), None)

    prompt_h = prompt_horizon_chunks(g, req)
    horizon = (  # the real horizon through its contract (horizon_is_final)
        _store_horizon(g, finished, num_chunks, prompt_h, frontier_final=True) if frontier_final
        else store_horizon_chunks(g, finished, num_chunks, prompt_h))
    reconsider = reconsider_final_tail(g, finished, num_chunks, prompt_h)
    if reconsider:
        start = reconsider_start_chunk(g, start, num_chunks)
    if num_chunks <= start:
        return StoreStep(start, num_chunks, (), None, max(cursor, num_chunks), horizon)
    mask = reachable_block_mask(
        start * bpc, num_chunks * bpc, g, req.prompt_tokens,
        None if horizon is None else horizon * bpc,
    )
    prompt_mask = None
    if reconsider:
        prompt_mask = reachable_block_mask(
            start * bpc, num_chunks * bpc, g, req.prompt_tokens, prompt_h * bpc
        )
    chunks = []
    for c in range(start, num_chunks):
        k = (c - start) * bpc
        if reconsider and c < cursor and (
            prompt_mask is None or any(prompt_mask[k : k + bpc])
        ):
            continue  # stored before under the prompt horizon
        if mask is not None and not any(mask[k : k + bpc]):
            continue
        chunks.append(c)
    return StoreStep(
        start, num_chunks, tuple(chunks),
        None if mask is None else tuple(mask), max(cursor, num_chunks), horizon,
    )
