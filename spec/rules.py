"""Store rules (Z3) as interchangeable modules: what one ``_build_store_jobs``
call submits for the SWA group, for one tracked chunk ``c``.

Each rule is a function ``(s, cursor, n, finished, c, aux) -> StoreStep``
with ``n`` the step's ``storable_chunks``. ``aux`` holds fresh witnesses the
rule needs (0.29's ``ceil(W / chunk)``).
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from kvreach.params import RetentionMode
from kvreach.spec import mask
from kvreach.spec.config import SymConfig, z3_max, z3_min


@dataclass
class StoreStep:
    submitted: z3.BoolRef  # the tracked chunk c is submitted this step
    next_cursor: z3.ArithRef
    side: z3.BoolRef  # constraints on the rule's auxiliary witnesses


def storable_chunks(s: SymConfig, rule: str, offloadable, finished) -> z3.ArithRef:
    """``RequestOffloadState.storable_chunks``: the EAGLE group drops its
    volatile trailing chunk while decoding; 0.33 lifts that once finished;
    0.34.0 under lookahead hashes drops nothing (``apply_eagle_drop = not
    use_lookahead_block_hashes``: :attr:`SymConfig.legacy_eagle`)."""
    n = offloadable / s.C
    decoding = offloadable > s.P
    lifted = z3.BoolVal(False) if rule == "vllm-0.29" else finished
    return z3.If(z3.And(s.legacy_eagle, decoding, z3.Not(lifted)), z3_max(0, n - 1), n)


def finish_tokens(s: SymConfig, rule: str, num_tokens, computed=None) -> z3.ArithRef:
    """``num_tokens_after_batch`` of a finished request that was not aborted
    (``req.is_finished()``). ``computed``: ``num_computed_tokens`` when the
    release also caps it by them (``Release.finish_computed_clamp``, 0.34.0:
    ``min(num_computed_tokens, max(P, num_tokens - 1))``; at a normal finish,
    ``num_computed_tokens >= P`` and ``num_tokens = num_computed_tokens + 1``,
    so the cap changes nothing there: only a request finished before its
    prompt is computed, ``FINISHED_ERROR``, differs)."""
    t = num_tokens if rule == "vllm-0.29" else z3_max(s.P, num_tokens - 1)
    return t if computed is None else z3_min(computed, t)


def no_final_segment(s: SymConfig) -> z3.BoolRef:
    """``_build_store_jobs`` hands the mask no final segment end: a retention
    interval is set or the group is EAGLE."""
    return z3.Or(s.eagle, s.retention_mode != RetentionMode.NONE)


def final_segment_end(s: SymConfig, H) -> z3.ArithRef:
    """The final segment end (blocks) handed to the mask for horizon ``H``
    chunks taken as final: ``H * bpc``, or none (-1: the final-tail term is
    off) by :func:`no_final_segment`."""
    return z3.If(no_final_segment(s), -1, H * s.bpc)


def partial_segment_start(s: SymConfig, n) -> z3.ArithRef:
    """Chunk where the final partial segment of ``n`` chunks starts
    (``_final_swa_alignment_blocks``: the alignment in blocks, representable
    and non-EAGLE)."""
    horizon_blocks = n * s.bpc
    return (horizon_blocks - horizon_blocks % s.alignment_blocks) / s.bpc


def v033_store(s: SymConfig, cursor, n, finished, c, aux, horizon_at_frontier: bool = False,
               final_tail: bool = True, skip_stored: bool = True) -> StoreStep:
    """vLLM 0.33.0 ``_build_store_jobs``: horizon, reconsideration, mask.
    Mutation parameters (``kvreach.proofs.mutants`` only):
    ``horizon_at_frontier``: the step's count taken as the final end (the
    pre-fix horizon); ``final_tail=False``: no final-segment tail;
    ``skip_stored=False``: the reconsideration forgets what was stored.
    ``aux["shared_prefix_boundary"]`` (world "restarts"): ``Request.shared_prefix_boundary``,
    a further reachable boundary with a retention interval (F8).
    ``aux["num_tokens"]`` (lookahead rows): the step's ``Request.num_tokens``,
    whose hashed end caps ``prompt_offloadable_tokens`` (vLLM 0.34.0 with
    L >= 1: :meth:`SymConfig.prompt_horizon_at`, the prompt horizon is the
    hashed end while the prompt is being computed)."""
    bpc = s.bpc
    spb = aux.get("shared_prefix_boundary")
    extra = () if spb is None else (spb,)
    nt = aux.get("num_tokens")
    Hp = s.prompt_horizon if nt is None else s.prompt_horizon_at(nt)
    # store_horizon_chunks: None -> the final-tail term is off (F irrelevant).
    horizon = n if horizon_at_frontier else z3.If(finished, n, z3.If(n <= Hp, Hp, -1))
    has_horizon = z3.And(z3.Not(no_final_segment(s)), horizon >= 0)
    reconsider = z3.And(
        finished, n != Hp, s.retention_mode == RetentionMode.NONE, s.has_align, z3.Not(s.eagle),
    )
    start = z3.If(reconsider, z3_min(cursor, partial_segment_start(s, n)), cursor)
    reach = z3.If(
        has_horizon,
        mask.chunk_reachable(s, c, horizon * bpc, boundaries=extra),
        mask.chunk_reachable(s, c, None, boundaries=extra),
    ) if final_tail else mask.chunk_reachable(s, c, None, boundaries=extra)
    skip = z3.And(reconsider, c < cursor, mask.chunk_reachable(s, c, Hp * bpc))
    submitted = z3.And(start <= c, c < n, z3.Not(skip), reach) if skip_stored else z3.And(
        start <= c, c < n, reach)
    return StoreStep(submitted, z3_max(cursor, n), z3.BoolVal(True))


def v029_store(s: SymConfig, cursor, n, finished, c, aux) -> StoreStep:
    """vLLM 0.29.0 ``_build_store_jobs`` with ``is_store_reachable_swa_chunk``:
    the step's storable count is taken as the final horizon."""
    wc = aux["wc"]
    submitted = z3.And(cursor <= c, c < n, mask.v029_chunk_reachable(s, c, n, wc))
    return StoreStep(submitted, z3_max(cursor, n), mask.v029_window_chunks(s, wc))


def lookup_window_keep(s: SymConfig, c, short_by: int = 0, replay_short_by: int = 0) -> z3.BoolRef:
    """``kvreach.impl.rules.lookup_window_keep``: chunk ``c`` lies in
    ``[b - ws, b + shift)`` for a boundary ``b`` (chunks) a later lookup can end
    at, ``ws = ceil((W + extra) / C) + shift`` (``s.W`` is the mask window
    ``W + extra``): the multiples of the segment (``k = (c + ws) // segment_chunks >= 1``
    and ``k * segment_chunks > c - shift``) and, with a retention interval, the repeated
    prompt's boundary ``floor(P' / A) * A``, ``P'`` the prompt's offloadable
    tokens. Dense when the alignment is not a whole
    number of chunks. ``short_by``: the mutant keeping a shorter run;
    ``replay_short_by``: the mutant whose replay run starts that many chunks
    late (``tests/test_impl_equals_spec.py`` must tell it apart; 0 adds no
    term, so the rule's Z3 text is the same as without the parameter)."""
    from kvreach.spec.lookup import cdiv

    C, shift = s.C, s.shift
    ws = cdiv(s.W, C) + shift - short_by
    segment_chunks = z3.If(s.retention_mode == RetentionMode.POSITIVE, s.Rc, s.A / C)
    k = (c + ws) / segment_chunks
    in_seg = z3.And(s.retention_mode != RetentionMode.ZERO, k >= 1, k * segment_chunks > c - shift)
    b = s.prompt_offloadable / s.A * (s.A / C)
    replay_lo = b - ws if replay_short_by == 0 else b - ws + replay_short_by
    in_replay = z3.And(s.retention_mode != RetentionMode.NONE, b >= 1, replay_lo <= c, c < b + shift)
    return z3.Or(z3.Not(s.has_align), s.A % C != 0, in_seg, in_replay)


def lookup_window_store(s: SymConfig, cursor, n, finished, c, aux, short_by: int = 0) -> StoreStep:
    """kvreach's rule ``lookup-window`` (``kvreach.impl.rules.store_step``):
    the chunks in ``[cursor, n)`` that :func:`lookup_window_keep` keeps; the
    cursor moves to ``max(cursor, n)``. The keep decision does not depend on
    the step, so no horizon and no reconsideration."""
    submitted = z3.And(cursor <= c, c < n, lookup_window_keep(s, c, short_by))
    return StoreStep(submitted, z3_max(cursor, n), z3.BoolVal(True))


RULES = {"vllm-0.29": v029_store, "vllm-0.33": v033_store, "lookup-window": lookup_window_store}
# Rules whose keep decision is a function of the chunk alone (their lifecycle
# invariant is "stored iff below the cursor and kept").
STATIC_KEEP = {"lookup-window": lookup_window_keep}
