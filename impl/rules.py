"""The SWA store rules as plain executable Python (no Z3 at run time): the
twin of ``kvreach.spec.rules``.

What one ``_build_store_jobs`` call submits for one group, per rule: the
store horizon and the end-of-request reconsideration (vLLM 0.33.0), the
pre-fix chunk rule (vLLM 0.29.0), kvreach's ``lookup-window``; the mask they
consult is ``kvreach.impl.mask``. Each function names the vLLM code it
models. Contracts (deal) state the rule, not the code
(``kvreach.impl.oracles``); they are checked by CrossHair and, when switched
on, at run time (``kvreach.impl.contracts``).

Coordinates: a *block* is ``B = block_size * dcp_world_size`` tokens, a
*chunk* is ``blocks_per_chunk`` blocks (the offload unit, one key per chunk).
"""

from __future__ import annotations

from dataclasses import dataclass

import deal

from kvreach.impl import contracts as _contracts  # noqa: F401  (sets the default mode)
from kvreach.impl import mask  # called as mask.X: a substituted mask (tests/test_docs.py) sees store_step's calls too
from kvreach.impl.oracles import horizon_is_final, submitted_wanted
from kvreach.params import RULES, GroupConfig, RequestConfig, cdiv, check_rule

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
    return store_horizon_chunks_with(g, finished, num_chunks, prompt_horizon_chunks)


def store_horizon_chunks_with(g: GroupConfig, finished: bool, num_chunks: int, prompt_horizon_chunks: int,
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


@deal.pre(lambda c, g, prompt_offloadable_tokens, replay_short_by=0: c >= 0)
@deal.ensure(lambda c, g, prompt_offloadable_tokens, replay_short_by=0, result=None: (
    result is None or c * g.blocks_per_chunk <= result < (c + 1) * g.blocks_per_chunk))
def lookup_window_first_block(c: int, g: GroupConfig, prompt_offloadable_tokens: int,
                              replay_short_by: int = 0) -> int | None:
    """The first block (request coordinates) of chunk ``c`` that
    ``lookup-window`` keeps, or None when it keeps none of the chunk. The run
    before a boundary ``b`` (chunks) a later lookup can end at is the chunks
    ``[b - lookup_window_chunks, b + shift)`` the lookup verifies; the blocks
    of that run the later request reads are those from the one holding token
    ``b * C - (W + extra + shift * C)`` on (the sliding-window attention at
    its first computed token, the EAGLE chunk included), so in the run's
    first chunk the earlier blocks are kept only when another boundary's run
    covers them (the patch's ``_lookup_window_block_mask``: vLLM's
    null-block filter looks at the kept blocks only). The boundaries: every
    multiple of the segment (alignment; the retention interval when set; none
    for interval 0) and, with a retention interval, the repeated prompt's
    ``floor(P' / A) * A`` (``P'``: the prompt's offloadable tokens, where its
    hit ends). Every block when the alignment is not a whole number of chunks
    (or there is none). ``replay_short_by``: the mutant whose replay run
    starts that many chunks late (``tests/test_impl_equals_spec.py`` must
    tell it apart)."""
    A, C, bpc = g.alignment_tokens, g.chunk_tokens, g.blocks_per_chunk
    if A is None or A % C:
        return c * bpc
    ws, shift = lookup_window_chunks(g), g.shift
    boundaries = []  # the nearest boundary of each kind whose run holds c
    segment_tokens = g.segment_tokens
    if segment_tokens is not None:
        segment_chunks = segment_tokens // C
        b = max(1, (c - shift) // segment_chunks + 1) * segment_chunks
        if b - ws <= c:
            boundaries.append(b)
    if g.retention_interval is not None:
        b = prompt_offloadable_tokens // A * (A // C)
        if b >= 1 and b - ws + replay_short_by <= c < b + shift:
            boundaries.append(b)
    if not boundaries:
        return None
    run_start_tokens = min(boundaries) * C - g.mask_window_tokens - shift * C
    return max(c * bpc, run_start_tokens // g.block_tokens)


def lookup_window_keep(c: int, g: GroupConfig, prompt_offloadable_tokens: int,
                       replay_short_by: int = 0) -> bool:
    """``lookup-window`` keeps chunk ``c`` iff it lies in
    ``[b - lookup_window_chunks, b + shift)`` for a boundary ``b`` (chunks) a
    later lookup can end at (:func:`lookup_window_first_block`)."""
    return lookup_window_first_block(c, g, prompt_offloadable_tokens, replay_short_by) is not None


def lookup_window_block_mask(start_chunk: int, end_chunk: int, g: GroupConfig,
                             prompt_offloadable_tokens: int) -> tuple[bool, ...] | None:
    """``lookup-window``'s mask over the blocks of ``[start_chunk,
    end_chunk)``: in each kept chunk the blocks from
    :func:`lookup_window_first_block` on (None: every block)."""
    bpc = g.blocks_per_chunk
    out: list[bool] = []
    for c in range(start_chunk, end_chunk):
        first = lookup_window_first_block(c, g, prompt_offloadable_tokens)
        out += [first is not None and b >= first for b in range(c * bpc, (c + 1) * bpc)]
    return None if all(out) else tuple(out)


def storable_chunks(
    rule: str, g: GroupConfig, req: RequestConfig, offloadable: int, finished: bool
) -> int:
    """``RequestOffloadState.storable_chunks`` (allocation and keys assumed to
    cover the offloadable range). EAGLE groups drop their volatile trailing
    chunk while decoding; vLLM 0.33 lifts that once finished, 0.29 never;
    under lookahead hashes (``g.lookahead_hashes``, 0.34.0) no group drops it
    (``apply_eagle_drop`` False)."""
    n = offloadable // g.chunk_tokens
    decoding = offloadable > req.prompt_tokens
    lifted = finished and rule != "vllm-0.29"
    if g.legacy_eagle and decoding and not lifted:  # apply_eagle_drop (0.34.0)
        n = max(0, n - 1)
    return n


def finish_tokens(rule: str, req: RequestConfig, num_tokens: int,
                  num_computed_tokens: int | None = None) -> int:
    """``num_tokens_after_batch`` of a finished (not aborted) request: 0.33
    clamps to the commit point ``max(num_prompt_tokens, num_tokens - 1)``;
    0.29 used ``num_tokens``. ``num_computed_tokens``: the computed-tokens
    clamp of vLLM 0.34.0 (``min(num_computed_tokens, ...)``: a request
    finished before its prefill completed, ``FINISHED_ERROR``, stores no
    uncomputed token); None: no such clamp (0.29.0 .. 0.33.0)."""
    n = max(req.prompt_tokens, num_tokens - 1) if rule != "vllm-0.29" else num_tokens
    return n if num_computed_tokens is None else min(num_computed_tokens, n)


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
    return store_step_with(rule, g, req, cursor, num_chunks, finished)


def store_step_with(rule: str, g: GroupConfig, req: RequestConfig, cursor: int, num_chunks: int,
                  finished: bool, frontier_final: bool = False) -> StoreStep:
    """The body of :func:`store_step`; ``frontier_final`` (a mutant only)
    hands the mask the pre-fix horizon (:func:`store_horizon_chunks_with`)."""
    check_rule(rule)
    bpc = g.blocks_per_chunk
    start = cursor
    if rule == "vllm-0.29":
        chunks = tuple(
            c for c in range(start, num_chunks) if mask.v029_chunk_reachable(c, num_chunks, g)
        )
        return StoreStep(start, num_chunks, chunks, None, max(cursor, num_chunks), num_chunks)
    if rule == "lookup-window":  # no horizon: the keep decision is the chunk's alone
        block_mask = lookup_window_block_mask(start, num_chunks, g, req.prompt_offloadable_tokens)
        chunks = tuple(c for c in range(start, num_chunks)
                       if block_mask is None or any(block_mask[(c - start) * bpc:(c - start + 1) * bpc]))
        return StoreStep(start, max(start, num_chunks), chunks, block_mask, max(cursor, num_chunks), None)

    prompt_h = prompt_horizon_chunks(g, req)
    horizon = (  # the real horizon through its contract (horizon_is_final)
        store_horizon_chunks_with(g, finished, num_chunks, prompt_h, frontier_final=True) if frontier_final
        else store_horizon_chunks(g, finished, num_chunks, prompt_h))
    reconsider = reconsider_final_tail(g, finished, num_chunks, prompt_h)
    if reconsider:
        start = reconsider_start_chunk(g, start, num_chunks)
    if num_chunks <= start:
        return StoreStep(start, num_chunks, (), None, max(cursor, num_chunks), horizon)
    block_mask = mask.reachable_block_mask(
        start * bpc, num_chunks * bpc, g, req.prompt_tokens,
        None if horizon is None else horizon * bpc,
    )
    prompt_mask = None
    if reconsider:
        prompt_mask = mask.reachable_block_mask(
            start * bpc, num_chunks * bpc, g, req.prompt_tokens, prompt_h * bpc
        )
    chunks = []
    for c in range(start, num_chunks):
        k = (c - start) * bpc
        if reconsider and c < cursor and (
            prompt_mask is None or any(prompt_mask[k : k + bpc])
        ):
            continue  # stored before under the prompt horizon
        if block_mask is not None and not any(block_mask[k : k + bpc]):
            continue
        chunks.append(c)
    return StoreStep(
        start, num_chunks, tuple(chunks),
        None if block_mask is None else tuple(block_mask), max(cursor, num_chunks), horizon,
    )
