"""The offload lookup's obligations in the single-request world (a later
request looking up what this request stored): no hit lost to the SWA mask
(``hit-preservation``), no chunk stored that no lookup loads (``no-waste``),
the lookup's closed forms (``lookup-prefix-scan``, ``lookup-scan-closed-form``),
the step a lost hit reduces to (``lookup-run-stored``), monotonicity in the
store content, and the trade-off where ``W - 1`` is a multiple of the chunk
(``hit-preserving-wastes``). Rows named ``...-read-window`` check the same
under the lookup variant ``read-window`` (docs/findings.md F7), set on the
context's later request(s) when the runner makes it (``Ctx.lookup_variant``),
so the decoded counterexample records it and replays through the twin with
the same variant.
"""

from __future__ import annotations

from dataclasses import replace

import z3

from kvreach.params import RetentionMode
from kvreach.proofs import mutants
from kvreach.proofs.config import (
    CONFIRM_RETRIES, LOAD_CHECKED_BOUND_KEYS, MONOTONE_BOUND_CHUNKS, NO_WASTE_MAX_TOKENS,
    RUN_STORED_BOUND_CHUNKS, SCAN_BOUND_KEYS, SCOPE_FULL_NOT_EAGLE, SCOPE_HIT_SYMBOLIC, scope_grid,
)
from kvreach.proofs.decode import (OFFLOADABLE_TOKENS, decode_no_waste, lost_hit_chunks,
                                   unloaded_kept_chunk)
from kvreach.proofs.flatten import flat_query
from kvreach.proofs.framework import Ctx, Mutant, Obligation, Query, Replay
from kvreach.proofs.geometries import (FAMILY_RETENTION_CHUNKS, Geometry, family, family_text,
                                      worked_text)
from kvreach.proofs.keep import one_shot_mask
from kvreach.proofs.matrix import LOOKUP_PARTS
from kvreach.spec.config import z3_max, z3_min
from kvreach.spec.lookup import READ_WINDOW, VLLM_WINDOW


def later_request(ctx: Ctx, computed_tokens) -> z3.BoolRef:
    """A later request (any length, any GPU-local hit, any max_load_tokens)
    sharing its first ``ctx.shared`` tokens with this request's computed
    tokens, looking up with this request's groups (``spec.lookup.link``)."""
    from kvreach.spec.lookup import link

    lk, D = ctx.lk, ctx.shared
    return z3.And(lk.well_formed(), link(ctx.s, lk), 0 <= D, D <= lk.num_tokens,
                  D <= computed_tokens, lk.local_hit_tokens <= D)


def dense_lookup(ctx: Ctx, offloadable_tokens):
    """The later request's lookup when the tier holds every chunk this request
    could offload (dense), as far as the two requests share tokens."""
    from kvreach.spec.lookup import lookup, prefix_keys

    lk = ctx.lk
    shared = z3_min(offloadable_tokens, ctx.shared)
    return lookup(lk, prefix_keys(z3.If(lk.has_full, shared / lk.C_full, 0), shared / lk.C))


def promised(ctx: Ctx, t) -> z3.BoolRef:
    """Which later requests a retention mode promises a full hit: every one
    without a retention interval; with interval R > 0 a hit ending at a
    multiple of R; with any interval the repeated prompt (same tokens, no
    GPU-local hit, no max_load_tokens)."""
    s, lk = ctx.s, ctx.lk
    end = lk.local_hit_tokens + t.hit_tokens
    repeated = z3.And(lk.num_tokens == s.P, ctx.shared == s.P, lk.local_hit_tokens == 0,
                      z3.Not(lk.has_max_load))
    return z3.Or(s.retention_mode == RetentionMode.NONE,
                 z3.And(s.retention_mode == RetentionMode.POSITIVE, end % (s.Rc * s.C) == 0), repeated)


def _no_local_hit(ctx: Ctx) -> list[list]:
    """A later request vLLM's scheduler runs as decoded: no GPU-local hit
    (kvreach/vllm_harness/replay.py resets the prefix cache before it looks up)."""
    return [[ctx.lk.local_hit_tokens == 0]]


def _no_local_hit_in_prompt(ctx: Ctx) -> list[list]:
    """:func:`_no_local_hit`, the later request sharing only prompt tokens
    (the executable replay, ``impl.worlds.later_lookup``, shares the prompt;
    the spec's later request may also share decoded tokens): the family
    rows' searches, one per member (``Obligation.confirm_each``)."""
    return [[ctx.lk.local_hit_tokens == 0, ctx.shared <= ctx.s.P]]


def _hash_block_of_vllm(ctx: Ctx) -> list[list]:
    """With L symbolic (0.34.0's lookahead hashes), ``tokens_per_hash`` as
    vLLM derives it, the GCD of the groups' blocks: the SWA block, which
    divides the full-attention block in every geometry of the grid (the spec
    lets it be any divisor of B and the alignment; vLLM's scheduler runs
    only vLLM's, ``vllm_harness.replay_lifecycle``). No shape without L."""
    return [] if ctx.s.L is None else [[ctx.s.tokens_per_hash == ctx.s.B]]


def _hit_step(ctx: Ctx, pre, tr, post):
    """The request ended; a later request's dense hit needs chunk ``c`` (it
    lies in the SWA run the dense lookup accepted) and ``c`` was not stored:
    with the rule's stores that run breaks, and the hit is shorter."""
    t = dense_lookup(ctx, tr.off)
    return z3.And(
        tr.finished, later_request(ctx, post.f), t.hit_tokens > 0, promised(ctx, t),
        t.swa_verified[0] <= ctx.c, ctx.c < t.swa_verified[1], z3.Not(post.stored),
    )


def _hit_bmc(ctx, sts, trs):
    return _hit_step(ctx, sts[-2], trs[-1], sts[-1])


def _hit_step_aligned(ctx: Ctx, pre, tr, post):
    """As ``_hit_step``, for the later requests whose dense
    hit ends on an SWA chunk boundary (``load_window_size_in_chunks`` adds no
    right padding): not a repeated prompt of a whole number of alignments,
    whose hit ends at ``num_tokens - 1``."""
    t = dense_lookup(ctx, tr.off)
    end = ctx.lk.local_hit_tokens + t.hit_tokens
    return z3.And(
        tr.finished, later_request(ctx, post.f), t.hit_tokens > 0, promised(ctx, t),
        end % ctx.lk.C == 0,
        t.swa_verified[0] <= ctx.c, ctx.c < t.swa_verified[1], z3.Not(post.stored),
    )


def _hit_bmc_aligned(ctx, sts, trs):
    return _hit_step_aligned(ctx, sts[-2], trs[-1], sts[-1])


def _no_waste(ctx: Ctx):
    """A chunk the rule keeps at its final horizon that none of the witness
    later requests loads: requests of exactly the boundary after the chunk
    (its hit is capped one token short), one token and one chunk longer, and
    one chunk past the boundary at the chunk's start (an EAGLE lookup's
    queried chunk), and the farthest alignment boundary whose lookup window
    still holds the chunk, and one token past it (a window of several chunks
    is loaded only by a run reaching past the chunk). Each loads the chunk
    iff its dense hit is nonzero, the chunk is in its loaded range, and no
    chunk of the run its lookup accepts is missing from the rule's stores.

    With vLLM 0.34.0's lookahead hashes symbolic (``s.L``, the rows of
    ``rows.models_lookahead``): the rule also keeps what a prefill of the
    whole prompt stores at the prompt's hashed end (:func:`_kept_hashed`,
    F14's class), and each witness has L tokens more (its keys cover
    ``num_tokens - L`` tokens, ``LookupSym.L``: the same keys as without
    the mode)."""
    from kvreach.spec.lookup import LookupSym, link, lookup, prefix_keys, window_chunks

    s, c, H = ctx.s, ctx.c, ctx.final_horizon_chunks
    la = s.L is not None
    off = z3.Int(OFFLOADABLE_TOKENS)

    def kept(x):
        at_final = z3.And(x >= 0, x < H, one_shot_mask(ctx, x, H))
        return z3.Or(at_final, _kept_hashed(ctx, x)) if la else at_final

    b1 = (c * s.C / s.A + 1) * s.A
    b0 = c * s.C / s.A * s.A
    # the farthest alignment boundary whose lookup window still holds the
    # chunk (a run that needs the chunks after it: a window of several chunks)
    w = window_chunks(ctx.lk.W, ctx.lk.extra, s.C, ctx.lk.variant, ctx.release)
    b_far = z3_min((c + w) * s.C, off) / s.A * s.A
    prem = ctx.base() + [H >= 1, H == off / s.C, off >= 0, off <= NO_WASTE_MAX_TOKENS,
                         z3.Implies(s.prompt_only, off <= s.P), kept(c)]
    fails = []
    for i, T in enumerate([b1, b1 + 1, b1 + s.C + 1, b0 + s.C + 1, b_far, b_far + 1]):
        lk = LookupSym.fresh(f"witness{i}_", ctx.lk.variant, ctx.release, lookahead=la)
        shared = z3_min(T, off)  # with L: the keys' tokens (num_tokens - L) shared
        prem += [lk.well_formed(), link(s, lk), lk.num_tokens == (T + s.L if la else T),
                 lk.local_hit_tokens == 0,
                 z3.Not(lk.has_max_load), ctx.lk.has_full == lk.has_full,
                 ctx.lk.full_block_tokens == lk.full_block_tokens, ctx.lk.W == lk.W,
                 ctx.lk.extra == lk.extra] + ([lk.L == s.L] if la else [])
        t = lookup(lk, prefix_keys(z3.If(lk.has_full, shared / lk.C_full, 0), shared / lk.C))
        c2 = z3.Int(f"witness{i}_missing_chunk")
        fails.append(z3.Or(
            t.hit_tokens == 0, z3.Not(z3.And(t.swa_loaded[0] <= c, c < t.swa_loaded[1])),
            z3.And(t.swa_verified[0] <= c2, c2 < t.swa_verified[1], z3.Not(kept(c2)))))
    prem += [ctx.lk.well_formed(), link(s, ctx.lk)]
    return [flat_query(Query(prem, z3.And(fails)))]


def _kept_hashed(ctx: Ctx, x) -> z3.BoolRef:
    """vLLM 0.34.0 with lookahead hashes on (L >= 1): chunk ``x`` is one a
    prefill of the whole prompt stores (every prefill step sees
    ``num_tokens`` = the prompt, so its prompt horizon is the hashed end
    ``prompt_horizon_at(P)``, taken as final: F14), for a request that
    then reaches its final horizon ``H`` (at least that end)."""
    s, H = ctx.s, ctx.final_horizon_chunks
    Hh = s.prompt_horizon_at(s.P)
    return z3.And(s.lookahead, Hh <= H, x >= 0, x < Hh, one_shot_mask(ctx, x, Hh))


def _lookahead_example_geometry() -> Geometry:
    """F14's groups (``scenarios.LOOKAHEAD_HASHED_END``): full-attention
    block 8, SWA block 2, window 4."""
    from kvreach.proofs.scenarios import LOOKAHEAD_HASHED_END as ex

    return Geometry("F14 (lookahead hashes, hashed end)", ex.full_block_size,
                    ex.swa_block_size, ex.window, example=(ex.prompt, ex.budget))


def _no_waste_lookahead_pins(ctx: Ctx) -> list:
    """F14's request (a 14-token prompt, L = 1, ``tokens_per_hash`` 2) with
    the chunk kept only at the prompt's hashed end, not at the final
    horizon: the class the mode adds."""
    from kvreach.proofs.scenarios import LOOKAHEAD_HASHED_END as ex
    from kvreach.scenario import tokens_per_hash

    s = ctx.s
    return [s.P == ex.prompt, s.prompt_only, z3.Not(s.has_max), s.L == ex.hash_lookahead_tokens,
            s.tokens_per_hash == tokens_per_hash(ex),
            z3.Not(one_shot_mask(ctx, ctx.c, ctx.final_horizon_chunks))]


def _prefix_scan(ctx: Ctx):
    """``spec.lookup.prefix_scan_end`` is the scan's end when exactly the
    keys below ``present_below`` hit: it qualifies, and no larger end does."""
    from kvreach.spec import lookup

    x, n = z3.Int("present_below"), z3.Int("scan_keys")
    w, w0, e = z3.Int("sliding_window_chunks"), z3.Int("initial_window_chunks"), z3.Int("larger_end")
    end = lookup.prefix_scan_end(x, n, ctx.mutant.get("short_by", 0))

    def qualifies(k):  # keys at and above x break the run
        return lookup.run_qualifies(k, n, w, w0, k >= x, lambda lo, hi: hi > z3_max(lo, x))

    base = [0 <= n, 1 <= w, w <= w0]
    return [Query(base, z3.Not(qualifies(end))),
            Query(base, z3.And(e > end, qualifies(e)))]


def _geometries():
    from kvreach.proofs.geometries import GEOMETRIES

    return GEOMETRIES


def _lookup_scan(ctx: Ctx):
    """Closed form of ``_sliding_window_lookup`` == the loop, for every key
    count ``n <= SCAN_BOUND_KEYS``, windows ``1 <= w <= w0`` and every
    HIT / HIT_PENDING / RETRY / MISS answer per key."""
    from kvreach.spec import lookup

    K = SCAN_BOUND_KEYS
    brk = [z3.Bool(f"scan_break_{i}") for i in range(K)]
    retry = [z3.Bool(f"scan_retry_{i}") for i in range(K)]
    pend = [z3.Bool(f"scan_pending_{i}") for i in range(K)]

    def at(arr, outside):
        return lambda i: arr[i.as_long()] if 0 <= i.as_long() < K else z3.BoolVal(outside)

    breaks = at(brk, True)
    retries = lambda i: z3.And(breaks(i), at(retry, False)(i))  # noqa: E731
    pending = lambda i: z3.And(z3.Not(breaks(i)), at(pend, False)(i))  # noqa: E731
    n, w, w0 = z3.Int("scan_keys"), z3.Int("sliding_window_chunks"), z3.Int("initial_window_chunks")
    cf = lookup.scan_end(breaks, pending, retries, n, w, w0, K,
                         ctx.mutant.get("reset_window_on_break", True))
    loop = lookup.scan_loop(breaks, pending, retries, n, w, w0, K)
    premise = [0 <= n, n <= K, 1 <= w, w <= w0] + cf.side
    return [Query(premise, z3.Or(cf.deferred != loop.deferred,
                                 z3.And(z3.Not(cf.deferred), cf.end != loop.end)))]


def _lookup_monotone(ctx: Ctx):
    """More keys stored never shortens the hit: for any HIT sets ``S`` and
    ``S + X`` of both groups (uninterpreted, so every subset pair), the hit
    against ``S + X`` is at least the hit against ``S``; for vLLM 0.33.0's
    lookup and for the variant, each with the store configuration's groups
    (``link``, the geometry's pins)."""
    from kvreach.spec.lookup import LookupSym, bounded_keys, link, lookup

    K = MONOTONE_BOUND_CHUNKS
    widen = ctx.mutant.get("widen_initial_by", 0)
    I, Bo = z3.IntSort(), z3.BoolSort()
    full, swa = z3.Function("mono_full_hit", I, Bo), z3.Function("mono_swa_hit", I, Bo)
    full_x, swa_x = z3.Function("mono_full_added", I, Bo), z3.Function("mono_swa_added", I, Bo)
    out = []
    for variant in (VLLM_WINDOW, READ_WINDOW):
        lk = ctx.lk if variant == VLLM_WINDOW else LookupSym.fresh("mono_rw_", variant, ctx.release)
        same = [] if lk is ctx.lk else [
            getattr(lk, f) == getattr(ctx.lk, f) for f in (
                "full_block_tokens", "B", "bpc", "W", "extra", "num_tokens",
                "local_hit_tokens", "max_load_tokens", "has_full", "eagle", "has_max_load")]
        less = lookup(lk, bounded_keys(full, swa, K, f"mono_{variant}_less"), widen)
        more = lookup(lk, bounded_keys(lambda c: z3.Or(full(c), full_x(c)),
                                       lambda c: z3.Or(swa(c), swa_x(c)), K,
                                       f"mono_{variant}_more"), widen)
        prem = ctx.base() + same + [lk.well_formed(), link(ctx.s, lk), lk.num_tokens <= K * lk.C,
                                    less.scope, more.scope] + less.side + more.side
        out.append(flat_query(Query(prem, more.hit_tokens < less.hit_tokens)))
    return out  # one query per variant (one query for both is slower in Z3)


def _lookup_run_stored(ctx: Ctx):
    """The step ``hit-preservation`` (world (a)) and
    ``hit-preservation-neighbours`` (world (b)) reduce a lost hit to: for any
    store whose SWA keys are a subset ``R`` of a prefix ``D = [0, d)`` of
    chunks (the rule's stores inside the dense ones) and any full-attention
    answers, the same for both, the lookup's hit against ``R`` equals its hit
    against ``D`` iff ``D``'s hit is 0 or every chunk of the SWA run ``D``'s
    lookup accepts (``swa_verified``) is in ``R``. Two queries per lookup
    variant: a differing hit with that run stored (the encodings would miss
    the loss), and a chunk of that run missing with an equal hit (their
    counterexamples would not be losses). One query: the hits differ exactly
    when that run is stored is the violation (both directions at once)."""
    from kvreach.spec.lookup import bounded_keys, forall_in, link, lookup

    K = RUN_STORED_BOUND_CHUNKS
    short = ctx.mutant.get("verified_short_by", 0)
    I, Bo = z3.IntSort(), z3.BoolSort()
    full, swa = z3.Function("rs_full_hit", I, Bo), z3.Function("rs_rule_swa_hit", I, Bo)
    d = z3.Int("rs_dense_swa_chunks")
    dense = lambda c: z3.And(c >= 0, c < d)  # noqa: E731
    rule = lambda c: z3.And(swa(c), dense(c))  # noqa: E731
    lk = ctx.lk
    keys = bounded_keys(full, rule, K, "rs_rule")
    r = lookup(lk, keys)
    # the same full-attention answers: one prefix end (its symbols) for both lookups
    D = lookup(lk, replace(bounded_keys(full, dense, K, "rs_dense"), full_end=keys.full_end))
    v0, v1 = D.swa_verified
    run_stored = z3.Or(D.hit_tokens == 0, forall_in(v0 + short, v1, rule, K))
    prem = ctx.base() + [lk.well_formed(), link(ctx.s, lk), lk.num_tokens <= K * lk.C,
                         d >= 0, r.scope, D.scope] + r.side + D.side
    return [flat_query(Query(prem, (r.hit_tokens != D.hit_tokens) == run_stored))]


def hit_preserving_wastes_queries(ctx: Ctx):
    """Where ``W - 1`` is a multiple of the chunk, no store rule is both
    hit-preserving and waste-free (docs/findings.md F7): the later request of
    ``A + 1`` tokens sharing them (no GPU-local hit, no ``max_load_tokens``)
    has a dense hit whose accepted SWA run starts at chunk ``c0``, so a rule
    without ``c0`` loses that hit (``lookup-run-stored``); and no later
    request's dense hit (any length, shared prefix, GPU-local hit,
    ``max_load_tokens``, dense store) loads ``c0``. A hit-preserving rule's
    hits are the dense ones, so it stores ``c0`` and no lookup loads it.
    The premise holds the witness request (non-vacuity shows it exists);
    the violation is a dense hit loading ``c0``."""
    from kvreach.spec.lookup import LookupSym, link, lookup, prefix_keys

    s, lk = ctx.s, ctx.lk
    wk = LookupSym.fresh("hw_witness_", lk.variant, ctx.release)
    seen, seen_w = z3.Int("hw_dense_seen_tokens"), z3.Int("hw_witness_seen_tokens")

    def dense(k, tokens):  # a prefix store as far as the later request shares it
        return lookup(k, prefix_keys(z3.If(k.has_full, tokens / k.C_full, 0), tokens / k.C))

    D, Dw = dense(lk, seen), dense(wk, seen_w)
    c0 = Dw.swa_verified[0]
    same = [getattr(wk, f) == getattr(lk, f) for f in (
        "full_block_tokens", "B", "bpc", "W", "extra", "has_full", "eagle")]
    prem = ctx.base() + same + [
        lk.well_formed(), link(s, lk), wk.well_formed(), link(s, wk), seen >= 0,
        wk.num_tokens == s.A + 1, seen_w == s.A + 1, wk.local_hit_tokens == 0,
        z3.Not(wk.has_max_load), Dw.hit_tokens > 0] + D.side + Dw.side
    return [Query(prem, z3.And(D.hit_tokens > 0, D.swa_loaded[0] <= c0, c0 < D.swa_loaded[1]))]


def _geometries_window_one_past_chunks():
    """The grid's geometries where ``W - 1`` is a multiple of the SWA chunk
    (no EAGLE, no retention interval, no extra retained tokens)."""
    return tuple(g for g in _geometries() if g.full_block is not None and not g.eagle
                 and g.retention is None and not g.extra
                 and (g.window - 1) % (g.swa_block * g.bpc) == 0)


def _geometries_of_the_lookup():
    """The grid's geometries that differ for the lookup (it does not see the
    retention interval: those geometries are the PR example's for it)."""
    return tuple(g for g in _geometries() if g.retention is None)


def _geometries_no_eagle_no_retention():
    return tuple(g for g in _geometries() if not g.eagle and g.retention is None)


# --- the obligations --------------------------------------------------------

# A lifted row's grid: the worked geometries of proofs/geometries.py first
# (their counterexamples decode at their worked examples and replay on vLLM's
# scheduler, tests/vllm), then every member of the block-shape family
# (``geometries.family``: block sizes and blocks_per_chunk fixed, window,
# extra_retained_tokens, EAGLE and the retention interval's None / 0 symbolic).
# Lifted to the family so far: hit-preserving-wastes, lookup-run-stored(-read-
# window), lookup-monotone (and world (b)'s hit-preservation-neighbours,
# proofs/neighbours.py), and as their own deep obligations hit-preservation's
# step (hit-preservation-family and its read-window twins: lookup-window
# proved, vllm-0.33 refuted member by member; the members 36 / 4, 256 / 8 and
# 256 / 4 decided per cube leaf: geometries.FAMILY_CUBE_ONLY_SHAPES) and
# load-reads-checked-family, and no-waste(-read-window) as its own deep
# obligations (no-waste-family, no-waste-read-window-family: each member's
# counterexample confirmed on its own; docs/proofs-cost.md).
_GRID = _geometries()
_GRID_LOOKUP = _geometries_of_the_lookup()
# lookup-run-stored and lookup-monotone: the worked geometries the lookup
# tells apart and every member of the block-shape family (the lookup does not
# see the retention interval: the members' is pinned to none); deep rows
# (docs/proofs-cost.md)
_GRID_LOOKUP_FAMILY = _GRID_LOOKUP + family(retention="none")
# hit-preserving-wastes: the members with a full-attention chunk longer than
# the SWA chunk (the alignment more than one SWA chunk, as in the worked
# geometries); with the alignment one chunk (full block = SWA block) its
# query is satisfiable (full block 4, SWA block 4, W 5), and so it is with
# W - 1 a multiple of the alignment (full block 256, SWA block 4, W 257): the
# window (geometries.BlockShape) is kept shorter than the alignment.
_GRID_W1 = _geometries_window_one_past_chunks() + tuple(
    g for g in family(window_one_past_chunks=True)
    if g.full_block is not None and g.full_block > g.swa_block)
_GRID_ALIGNED = _geometries_no_eagle_no_retention()


_GRID_TEXT = "geometry fixed to each of the grid (proofs/geometries.py)"
_GRID_LOOKUP_TEXT = ("geometry: " + worked_text(_GRID_LOOKUP, " without a retention interval")
                     + family_text(", EAGLE (the lookup does not see the retention interval)"))
_GRID_W1_TEXT = (worked_text(_geometries_window_one_past_chunks(),
                         " where W - 1 is a multiple of the SWA chunk")
                 + family_text("; only the members whose full-attention block is larger than "
                               "the SWA block (the alignment more than one SWA chunk); fixed: "
                               "extra_retained_tokens 0, EAGLE off, no retention "
                               "interval, and the window W - 1 a multiple of the SWA chunk and below the "
                               "alignment (W - 1 < A)"))


def _no_waste_scope(variant: str | None, family_row: str | None = None) -> str:
    """no-waste's scope; ``family_row``: None for the family row itself
    (its geometry the family's), else the per-geometry row's, naming it."""
    looking_up = "" if variant is None else f", looking up under '{variant}'"
    geometry = (_GRID_TEXT if family_row is not None else "geometry: " + family_text(
        ", EAGLE, the retention interval None or 0; each member decided on its own"))
    return (f"{geometry}; prompt, max_offload_tokens, offload_prompt_only and the chunk "
            "symbolic, the final horizon symbolic up to "
            f"{NO_WASTE_MAX_TOKENS} offloadable tokens; the rule's keep decision at the final "
            f"horizon (one-shot); six witness later requests per chunk{looking_up} (a proof is "
            "for those witnesses; a counterexample is confirmed against every later request "
            "sharing a prefix, and a model that replay refutes is excluded and the query solved "
            f"again, at most {CONFIRM_RETRIES} times)"
            + ("" if family_row is None else
               f"; the same query over the block-shape family: the deep row {family_row}")
            + SCOPE_FULL_NOT_EAGLE)


# no-waste's rows with L symbolic: how its one-shot world reads L
_NO_WASTE_LOOKAHEAD_SCOPE = (
    "; with L >= 1 the rule also keeps what a prefill of the whole prompt in one step stores "
    "at the prompt's hashed end (its keep decision there, for a request whose final horizon "
    "is at least that end), and each witness later request is L tokens longer (its keys "
    "cover num_tokens - L tokens, no legacy EAGLE drop); the search first at F14's example "
    "(full block 8, SWA block 2, window 4, a 14-token prompt, L = 1) for a chunk kept only "
    "at the hashed end"
)


def _run_stored_scope(variant: str) -> str:
    return (f"bounded: later requests of at most {RUN_STORED_BOUND_CHUNKS} SWA chunks (any "
            "length up to that, GPU-local hit, max_load_tokens), the dense store any prefix of "
            "SWA chunks, the rule's any subset of it, the full-attention answers any (the same "
            f"for both); {_GRID_LOOKUP_TEXT}; lookup variant {variant}; one pass of "
            "_lookup_complete_chunks" + SCOPE_FULL_NOT_EAGLE)


# the rules hit-preservation-family and its read-window twin run for
# (vllm-0.29: its lost hits over the family, within the search's bounds, have
# a GPU-local hit or share decoded tokens, which the executable replay does
# not run; docs/findings.md F6)
FAMILY_HIT_RULES = ("vllm-0.33", "lookup-window")
HIT_PRESERVATION = Obligation(
    "hit-preservation",
    "No later request loses offload hit tokens to the SWA mask: its hit "
    "with the rule's stores equals its hit with dense stores (every chunk "
    "this request could offload), in the single-request world; with a "
    "retention interval, for the requests the interval promises.",
    "lifecycle", mutant=mutants.LOOKUP_WINDOW_SHORT,
    scope=scope_grid(_GRID, "hit-preservation-family",
                     " and ".join(FAMILY_HIT_RULES) + " (vllm-0.29 is not run over the family: "
                     "docs/findings.md F6)") + SCOPE_FULL_NOT_EAGLE,
    step_violation=_hit_step, bmc_violation=_hit_bmc,
    model_specific=False, grid=_GRID, replayable=_no_local_hit,
    reads=LOOKUP_PARTS,
    vllm_replay=Replay("hit-preservation", on_releases=True), trace_witness=lost_hit_chunks,
)
# hit-preservation over the block-shape family (every member with the
# retention interval None or 0 symbolic, and again with a positive one of each
# length of geometries.FAMILY_RETENTION_CHUNKS), for FAMILY_HIT_RULES: deep
# rows beside the per-geometry ones of the default run (docs/proofs-cost.md).
_GRID_FAMILY = family() + tuple(g for k in FAMILY_RETENTION_CHUNKS for g in family(retention=k))
def _family_hit_scope(kw_text: str) -> str:
    """A family row's scope of hit-preservation's step; ``kw_text``: what
    its members leave symbolic or fix beyond the window and extra."""
    return SCOPE_HIT_SYMBOLIC + "; geometry: " + family_text(kw_text) + "; world: single request"


_FAMILY_HIT_SCOPE = _family_hit_scope(
    ", EAGLE, the retention interval None or 0; each member again with a positive "
    "retention interval of k SWA chunks (R = k * chunk_tokens) for k in {"
    + ", ".join(map(str, FAMILY_RETENTION_CHUNKS)) + "} (longer ones: the worked "
    "geometry of 72 tokens, hit-preservation's)")
HIT_PRESERVATION_FAMILY = Obligation(
    "hit-preservation-family",
    "hit-preservation (single-request world) over the block-shape family: no "
    "later request loses offload hit tokens to the SWA mask, in every member "
    "(block sizes and blocks_per_chunk fixed; window, extra_retained_tokens, EAGLE "
    "and the retention interval None or 0 symbolic; a positive retention interval "
    "of " + " or ".join(map(str, FAMILY_RETENTION_CHUNKS)) + " SWA chunks). A rule "
    "it refutes is refuted at each member where the step fails, by a "
    "counterexample of its own (Obligation.confirm_each).",
    "lifecycle", mutant=mutants.LOOKUP_WINDOW_SHORT,
    scope=_FAMILY_HIT_SCOPE + SCOPE_FULL_NOT_EAGLE,
    step_violation=_hit_step, bmc_violation=_hit_bmc, model_specific=False,
    grid=_GRID_FAMILY, rules=FAMILY_HIT_RULES,
    replayable=_no_local_hit_in_prompt, reads=LOOKUP_PARTS, trace_witness=lost_hit_chunks,
    confirm_each=True,
    # over the family: about 130 M units for lookup-window (docs/proofs-cost.md)
    deep=True,
)
NO_WASTE = Obligation(
    "no-waste",
    "Every chunk the rule keeps at the request's final horizon is loaded "
    "by some later request's lookup against the rule's stores (single-"
    "request world); a counterexample is confirmed by trying every later "
    "request that shares a prefix.",
    "static", mutant=mutants.KEEPS_EVERY_CHUNK, scope=_no_waste_scope(None, "no-waste-family"),
    queries=_no_waste, cex_decoder=decode_no_waste, model_specific=False, grid=_GRID,
    rules=("vllm-0.29", "vllm-0.33", "lookup-window"), split=False,
    bounds={"offloadable_tokens": NO_WASTE_MAX_TOKENS},
    # vLLM 0.34.0's lookahead hashes (L symbolic: rows.models_lookahead): the
    # prefill's stores at the hashed end, the witnesses' keys; F14
    reads=LOOKUP_PARTS | {"lookahead_hashes"},
    lookahead_example=(_lookahead_example_geometry(), _no_waste_lookahead_pins),
    lookahead_scope=_NO_WASTE_LOOKAHEAD_SCOPE, replayable=_hash_block_of_vllm,
    vllm_replay=Replay("no-waste", on_releases=True), witness=unloaded_kept_chunk,
)
LOOKUP_PREFIX_SCAN = Obligation(
    "lookup-prefix-scan",
    "When exactly the keys below some index hit (one request's dense "
    "stores), the sliding-window scan ends at min(n, max(0, index)).",
    "static", mutant=mutants.PREFIX_SCAN_ONE_SHORT,
    scope=("symbolic, unbounded: key count n >= 0, windows 1 <= w <= w0, the "
           "first missing key; the closed form of the scan (largest qualifying "
           "end), no steps"),
    queries=_prefix_scan, rule_specific=False, model_specific=False, split=False,
)
LOOKUP_SCAN_CLOSED_FORM = Obligation(
    "lookup-scan-closed-form",
    "The closed form of vLLM's sliding-window lookup scan (largest run "
    "end whose window below it has no MISS/RETRY; deferred on a RETRY "
    "after it or a HIT_PENDING inside it) equals the loop "
    "_sliding_window_lookup runs.",
    "static", mutant=mutants.SCAN_KEEPS_INITIAL_WINDOW,
    scope=(f"bounded: every key count n <= {SCAN_BOUND_KEYS}, every answer "
           "(HIT / HIT_PENDING / RETRY / MISS) per key, windows 1 <= w <= w0 "
           "symbolic and unbounded; the loop unrolled over the same keys"),
    queries=_lookup_scan, rule_specific=False, model_specific=False, split=False,
    bounds={"keys": SCAN_BOUND_KEYS},
)
HIT_PRESERVATION_READ_WINDOW = Obligation(
    "hit-preservation-read-window",
    "hit-preservation (single-request world) with the lookup variant "
    "'read-window': get_sliding_window_size_in_chunks returns "
    "max(1, ceil((W - 1 + extra_retained_tokens) / C)), the chunks the load "
    "reads (docs/findings.md F7), for the later request and the dense reference.",
    "lifecycle", mutant=mutants.LOOKUP_WINDOW_SHORT,
    scope=scope_grid(_GRID, "hit-preservation-read-window-family") + SCOPE_FULL_NOT_EAGLE,
    step_violation=_hit_step, bmc_violation=_hit_bmc, model_specific=False, grid=_GRID,
    rules=("vllm-0.33", "lookup-window"), replayable=_no_local_hit, lookup_variant=READ_WINDOW,
    reads=LOOKUP_PARTS,
    vllm_replay=Replay("hit-preservation"), trace_witness=lost_hit_chunks,
)
HIT_PRESERVATION_READ_WINDOW_FAMILY = Obligation(
    "hit-preservation-read-window-family",
    "hit-preservation-read-window over the block-shape family: no later "
    "request looking up under the variant 'read-window' loses offload hit "
    "tokens to the SWA mask, in every member; a rule it refutes is refuted at "
    "each member where the step fails, by a counterexample of its own.",
    "lifecycle", mutant=mutants.LOOKUP_WINDOW_SHORT,
    scope=_FAMILY_HIT_SCOPE + "; lookup variant read-window" + SCOPE_FULL_NOT_EAGLE,
    step_violation=_hit_step, bmc_violation=_hit_bmc, model_specific=False,
    grid=_GRID_FAMILY, rules=FAMILY_HIT_RULES, replayable=_no_local_hit_in_prompt,
    lookup_variant=READ_WINDOW, reads=LOOKUP_PARTS, trace_witness=lost_hit_chunks,
    confirm_each=True,
    deep=True,  # over the family: about 105 M units for lookup-window (docs/proofs-cost.md)
)
HIT_PRESERVATION_READ_WINDOW_ALIGNED = Obligation(
    "hit-preservation-read-window-aligned",
    "hit-preservation-read-window for the later requests whose dense hit "
    "ends on an SWA chunk boundary (no right padding widens the first run: "
    "every later request but one of a whole number of alignments sharing all "
    "of it), in the geometries without EAGLE or a retention interval.",
    "lifecycle", mutant=mutants.LOOKUP_WINDOW_SHORT,
    scope=scope_grid(_GRID_ALIGNED, "hit-preservation-read-window-aligned-family",
                     "vllm-0.33") + SCOPE_FULL_NOT_EAGLE,
    step_violation=_hit_step_aligned, bmc_violation=_hit_bmc_aligned, model_specific=False,
    grid=_GRID_ALIGNED, rules=("vllm-0.33",), lookup_variant=READ_WINDOW,
    reads=LOOKUP_PARTS, trace_witness=lost_hit_chunks,
)
HIT_PRESERVATION_READ_WINDOW_ALIGNED_FAMILY = Obligation(
    "hit-preservation-read-window-aligned-family",
    "hit-preservation-read-window-aligned over the block-shape family (its "
    "members without EAGLE or a retention interval), for rule vllm-0.33.",
    "lifecycle", mutant=mutants.LOOKUP_WINDOW_SHORT,
    scope=(_family_hit_scope("; fixed: EAGLE off, no retention interval")
        + "; lookup variant read-window; the later requests whose dense hit ends on an SWA "
        "chunk boundary (every one but a repeated prompt of a whole number of alignments)"
        + SCOPE_FULL_NOT_EAGLE),
    step_violation=_hit_step_aligned, bmc_violation=_hit_bmc_aligned, model_specific=False,
    grid=family(retention="none", no_eagle=True), rules=("vllm-0.33",),
    lookup_variant=READ_WINDOW, reads=LOOKUP_PARTS, trace_witness=lost_hit_chunks,
    deep=True,  # over the family: about 10 M units (docs/proofs-cost.md)
)
NO_WASTE_READ_WINDOW = Obligation(
    "no-waste-read-window",
    "no-waste (single-request world) with the witness later requests looking "
    "up under the lookup variant 'read-window'.",
    "static", mutant=mutants.KEEPS_EVERY_CHUNK,
    scope=_no_waste_scope(READ_WINDOW, "no-waste-read-window-family"),
    queries=_no_waste, cex_decoder=decode_no_waste, model_specific=False, grid=_GRID,
    rules=("vllm-0.33", "lookup-window"), split=False, lookup_variant=READ_WINDOW,
    bounds={"offloadable_tokens": NO_WASTE_MAX_TOKENS},
    reads=LOOKUP_PARTS,
    vllm_replay=Replay("no-waste"), witness=unloaded_kept_chunk,
)


def _no_waste_family(name: str, variant: str, base: Obligation) -> Obligation:
    """no-waste (``base``) over the block-shape family (every member, the
    retention interval None or 0 symbolic): each member's query decided on
    its own, and each sat one needs its own counterexample confirmed against
    every later request sharing a prefix (``Obligation.confirm_each``)."""
    return Obligation(
        name,
        f"{base.name} over the block-shape family: at each member (block sizes and "
        "blocks_per_chunk fixed; window, extra_retained_tokens, EAGLE, the retention "
        "interval None or 0, the prompt and the chunk symbolic) a chunk the rule keeps "
        "that no later request loads, confirmed member by member.",
        "static", mutant=mutants.KEEPS_EVERY_CHUNK,
        scope=_no_waste_scope(None if variant == VLLM_WINDOW else variant),
        queries=_no_waste, cex_decoder=decode_no_waste, model_specific=False,
        grid=family(), rules=base.rules, split=False, lookup_variant=variant,
        # L = 0 on 0.34.0 (its scope says so): with L symbolic the family's
        # search met members whose model did not replay (docs/proofs-cost.md)
        bounds=base.bounds, reads=base.reads - {"lookahead_hashes"}, witness=unloaded_kept_chunk,
        confirm_each=True,
        deep=True,  # over the family: docs/proofs-cost.md
    )


NO_WASTE_FAMILY = _no_waste_family("no-waste-family", VLLM_WINDOW, NO_WASTE)
NO_WASTE_READ_WINDOW_FAMILY = _no_waste_family(
    "no-waste-read-window-family", READ_WINDOW, NO_WASTE_READ_WINDOW)


def _run_stored(name: str, variant: str, which: str) -> Obligation:
    return Obligation(
        name,
        "Against a store whose SWA keys are a subset of a prefix of chunks (the "
        "rule's stores inside the dense ones), with the same full-attention "
        "answers, the lookup's hit equals the prefix's hit iff that hit is 0 or "
        "every chunk of the SWA run the prefix's lookup accepts is stored: the "
        "step hit-preservation and hit-preservation-neighbours reduce a lost hit "
        f"to; for {which}.",
        "static", mutant=mutants.VERIFIED_RUN_ONE_SHORT, scope=_run_stored_scope(variant),
        queries=_lookup_run_stored, rule_specific=False, model_specific=False,
        grid=_GRID_LOOKUP_FAMILY, split=False, lookup_variant=variant,
        bounds={"swa_chunks": RUN_STORED_BOUND_CHUNKS}, reads=LOOKUP_PARTS,
        # over the block-shape family: about 100 M units per row (docs/proofs-cost.md)
        deep=True,
    )


LOOKUP_RUN_STORED = _run_stored("lookup-run-stored", VLLM_WINDOW, "vLLM's lookup (each release's)")
LOOKUP_RUN_STORED_READ_WINDOW = _run_stored(
    "lookup-run-stored-read-window", READ_WINDOW, "the lookup variant 'read-window'")
HIT_PRESERVING_WASTES = Obligation(
    "hit-preserving-wastes",
    "Where W - 1 is a multiple of the SWA chunk, every hit-preserving rule "
    "stores a chunk no later request loads: the first chunk of the run the "
    "lookup accepts for the dense hit of a later request of A + 1 tokens is "
    "loaded by no later request's dense hit (so no rule is both hit-preserving "
    "and waste-free there, worlds (a) and (b): their dense stores are prefixes).",
    "static", mutant=mutants.READ_WINDOW_LOOKUP,
    scope=("geometry: " + _GRID_W1_TEXT + "; the later request any length, shared prefix, GPU-local hit and max_load_tokens "
           "(unbounded), the store dense (a prefix: one request's or a union's); "
           "vLLM 0.33.0's lookup, one pass of _lookup_complete_chunks" + SCOPE_FULL_NOT_EAGLE),
    queries=hit_preserving_wastes_queries, rule_specific=False, model_specific=False,
    grid=_GRID_W1, split=False,
    deep=True, reads=LOOKUP_PARTS,
)
LOOKUP_MONOTONE = Obligation(
    "lookup-monotone",
    "The offload lookup is monotone in the store content: with more keys "
    "stored (any superset, both groups) no later request's hit is shorter; "
    "for vLLM 0.33.0's lookup and the variant 'read-window'.",
    "static", mutant=mutants.INITIAL_RUN_TWO_WIDER,
    scope=(f"bounded: later requests of at most {MONOTONE_BOUND_CHUNKS} SWA chunks "
           "(any length up to that, GPU-local hit, max_load_tokens), every HIT / MISS "
           f"answer per key and every superset of them (uninterpreted); {_GRID_LOOKUP_TEXT}; "
           "both lookup variants; one pass "
           "of _lookup_complete_chunks (one full-attention, one SWA group)"
           + SCOPE_FULL_NOT_EAGLE),
    queries=_lookup_monotone, rule_specific=False, model_specific=False,
    grid=_GRID_LOOKUP_FAMILY, split=False, bounds={"swa_chunks": MONOTONE_BOUND_CHUNKS},
    reads=LOOKUP_PARTS,
    # 38.9 M units over its 4 rows: with 0.34.0's soundness rows (L symbolic)
    # the default run was 329.6 M, over its 320 M budget (docs/proofs-cost.md)
    deep=True,
)


# --- load-reads-checked -------------------------------------------------------


_FULL_EAGLE = "later_full_eagle"  # the later request's full-attention group is an EAGLE group


def _load_lookup(ctx: Ctx):
    """The later request of ``load-reads-checked``: ``ctx.lk`` with the
    full-attention group's EAGLE flag a symbol too, its lookup against any
    HIT / MISS answers per key of each group (uninterpreted), and the
    answers."""
    from kvreach.spec.lookup import bounded_keys, lookup

    I, Bo = z3.IntSort(), z3.BoolSort()
    full, swa = z3.Function("lrc_full_hit", I, Bo), z3.Function("lrc_swa_hit", I, Bo)
    lk = replace(ctx.lk, full_eagle=z3.Bool(_FULL_EAGLE))
    t = lookup(lk, bounded_keys(full, swa, LOAD_CHECKED_BOUND_KEYS, "lrc"),
               load_early_by=ctx.mutant.get("load_early_by", 0))
    return lk, t, full, swa


def load_reads_checked_queries(ctx: Ctx):
    """A chunk ``update_state_after_alloc`` passes to ``prepare_load`` (the
    spec's ``swa_loaded`` / ``full_loaded`` ranges) that the manager does
    not answer HIT (``bounded_keys``' ``swa_hit`` / ``full_hit``). The
    lookup's groups are the geometry's (its SWA block, ``blocks_per_chunk``,
    EAGLE flag, window, extra, full-attention block); the store
    configuration's other parameters play no part, so its alignment need not
    be one the store side's scope admits (the 0.29.0 case's full block 2
    under an SWA block 4). Decoded by :func:`decode_load_reads_checked`
    (the record's ``cex_decoder``)."""
    lk, t, full, swa = _load_lookup(ctx)
    s, c = ctx.s, z3.Int("lrc_unchecked_chunk")
    K = LOAD_CHECKED_BOUND_KEYS  # bounded_keys unrolls chunk indices 0 .. K - 1 of each group
    prem = [*ctx.pins, lk.well_formed(), lk.B == s.B, lk.bpc == s.bpc, lk.eagle == s.eagle,
            lk.num_tokens <= K * lk.C, z3.Implies(lk.has_full, lk.num_tokens <= K * lk.C_full),
            t.scope] + t.side
    unchecked = z3.Or(
        z3.And(t.swa_loaded[0] <= c, c < t.swa_loaded[1], z3.Not(swa(c))),
        z3.And(t.full_loaded[0] <= c, c < t.full_loaded[1], z3.Not(full(c))))
    return [flat_query(Query(prem, unchecked))]


def decode_load_reads_checked(m, ctx: Ctx) -> dict:
    """A ``load-reads-checked`` model: the release, the groups, the later
    request, the store (each group's HIT chunks among the keys it has) and
    what the spec's lookup answers and loads."""
    lk, t, full, swa = _load_lookup(ctx)
    v = lambda x: m.eval(x, model_completion=True)  # noqa: E731
    num = lambda x: v(x).as_long()  # noqa: E731
    yes = lambda x: z3.is_true(v(x))  # noqa: E731
    has_full, T = yes(lk.has_full), num(lk.num_tokens)
    C, Cf = num(lk.C), num(lk.C_full)
    return {
        "world": "single", "vllm": ctx.release.name,
        "lookup_groups": {
            "full_block_tokens": num(lk.full_block_tokens) if has_full else None,
            "full_eagle": yes(lk.full_eagle) if has_full else False,
            "swa_block_tokens": num(lk.B), "blocks_per_chunk": num(lk.bpc),
            "window": num(lk.W), "extra_retained_tokens": num(lk.extra), "eagle": yes(lk.eagle)},
        "later_request": {
            "num_tokens": T, "local_hit_tokens": num(lk.local_hit_tokens),
            "max_load_tokens": num(lk.max_load_tokens) if yes(lk.has_max_load) else None},
        "store": {"full_hit_chunks": ([k for k in range(T // Cf) if yes(full(k))]
                                      if has_full else []),
                  "swa_hit_chunks": [k for k in range(T // C) if yes(swa(k))]},
        "spec": {"hit_tokens": num(t.hit_tokens),
                 "swa_loaded": [num(x) for x in t.swa_loaded],
                 "full_loaded": [num(x) for x in t.full_loaded] if has_full else [0, 0]},
    }


def replay_load_reads_checked(cex: dict) -> list[int]:
    """The decoded case through the twin (``kvreach.impl.lookup``, with the
    parameters ``kvreach.impl.release`` maps the release record to): the SWA
    chunks, and the full-attention chunks as ``-1 - c``, it loads that the
    store does not hold; [] unless the twin's hit and loads are the spec's."""
    from kvreach.impl import lookup as il
    from kvreach.impl.release import lookup_group, lookup_parts
    from kvreach.releases import release

    r = release(cex["vllm"].split("/")[0])
    g, q, st = cex["lookup_groups"], cex["later_request"], cex["store"]
    groups = ([lookup_group(r, g["full_block_tokens"], g["blocks_per_chunk"], None, 0,
                            g["full_eagle"])] if g["full_block_tokens"] else []) + [
        lookup_group(r, g["swa_block_tokens"], g["blocks_per_chunk"], g["window"],
                     g["extra_retained_tokens"], g["eagle"])]
    req = il.LaterRequest(q["num_tokens"], q["local_hit_tokens"], q["max_load_tokens"])
    content = il.StoreContent.of_chunks(
        ([st["full_hit_chunks"]] if g["full_block_tokens"] else []) + [st["swa_hit_chunks"]])
    hit = il.lookup_hit_tokens(groups, req, content, lookup_parts(r))
    loaded = il.loaded_chunks(groups, req, hit) if hit else tuple(range(0) for _ in groups)
    cex["twin"] = {"hit_tokens": hit, "swa_loaded": [loaded[-1].start, loaded[-1].stop]
                   if len(loaded[-1]) else [0, 0]}
    spec = cex["spec"]
    same = hit == spec["hit_tokens"] and (
        not len(loaded[-1]) or [loaded[-1].start, loaded[-1].stop] == spec["swa_loaded"])
    if not same:
        return []
    out = [c for c in loaded[-1] if c not in set(st["swa_hit_chunks"])]
    if g["full_block_tokens"]:
        out += [-1 - c for c in loaded[0] if c not in set(st["full_hit_chunks"])]
    return out


def _plain_later_request(ctx: Ctx) -> list[list]:
    """No GPU-local hit and no ``max_load_tokens`` (the shape a replay on
    vLLM's own scheduler runs, as F11's two cases), first with no EAGLE
    group at all."""
    plain = [ctx.lk.local_hit_tokens == 0, z3.Not(ctx.lk.has_max_load)]
    return [plain + [z3.Not(ctx.lk.eagle), z3.Not(z3.Bool(_FULL_EAGLE))], plain]


# The two cases of docs/findings.md F11, as geometries: 0.29.0's (a hit ending
# two tokens into an SWA chunk, the full-attention group an EAGLE group) and
# 0.30.0's (extra_retained_tokens > 0), run first so that a release's
# counterexample decodes to its case where it has one.
F11_029 = Geometry("F11 0.29.0 case: full block 2, SWA block 4, window 8", 2, 4, 8)
F11_030 = Geometry("F11 0.30.0 case: SWA only, block 2, window 4, extra 4", None, 2, 4, extra=4)
GRID_LOAD = (F11_029, F11_030) + _geometries_of_the_lookup()

LOAD_EARLY = Mutant(  # spec.lookup.lookup
    "load-one-chunk-early", {"load_early_by": 1},
    """``spec.lookup.lookup`` whose SWA load starts one chunk before the
    chunk of ``update_state_after_alloc``'s first fresh non-null block
    (``load_early_by=1``): that chunk lies outside the window the load
    needs, so nothing in the lookup checked it, and a store missing it is
    loaded anyway.""")

LOAD_READS_CHECKED = Obligation(
    "load-reads-checked",
    "The load reads only what the lookup checked: every chunk "
    "update_state_after_alloc passes to prepare_load, of the SWA and the "
    "full-attention group, was answered HIT by the manager's lookup (a MISS "
    "there is a load of a key the tier does not hold: the CPU manager's "
    "prepare_load asserts, docs/findings.md F11).",
    "static", mutant=LOAD_EARLY,
    scope=(f"bounded: later requests of at most {LOAD_CHECKED_BOUND_KEYS} keys (complete "
           "chunks) per group (any length up to that, GPU-local hit, max_load_tokens), every "
           "HIT / MISS answer per key of each group (uninterpreted), the full-attention group "
           "an EAGLE group or not; geometry fixed to each of docs/findings.md F11's two cases and the "
           f"grid's {len(_geometries_of_the_lookup())} without a retention interval (proofs/geometries.py); "
           "the release's lookup parts (LookupSym.release); one pass of "
           "_lookup_complete_chunks (one full-attention, one SWA group); the same query over "
           "the block-shape family: the deep row load-reads-checked-family (its scope), for "
           "the releases where this row is proved (0.31.0 on)"),
    queries=load_reads_checked_queries, cex_decoder=decode_load_reads_checked,
    rule_specific=False, model_specific=False,
    grid=GRID_LOAD, split=False, replayable=_plain_later_request,
    witness=replay_load_reads_checked, bounds={"keys": LOAD_CHECKED_BOUND_KEYS},
    reads=LOOKUP_PARTS - {"mask_window_extra"},  # no store configuration: no link()
)
# load-reads-checked over the block-shape family (the lookup and the load do
# not see the retention interval: the members' is pinned to none), for the
# releases whose per-geometry row it proves (0.29.0 and 0.30.0 load chunks
# the lookup never checked: their rows are F11's counterexamples); a deep row
# (docs/proofs-cost.md)
LOAD_READS_CHECKED_FAMILY = replace(
    LOAD_READS_CHECKED, name="load-reads-checked-family",
    statement="load-reads-checked over the block-shape family: the load reads only "
              "what the lookup checked, in every member.",
    scope=(f"bounded: later requests of at most {LOAD_CHECKED_BOUND_KEYS} keys (complete "
           "chunks) per group (any length up to that, GPU-local hit, max_load_tokens), every "
           "HIT / MISS answer per key of each group (uninterpreted), the full-attention group "
           "an EAGLE group or not; geometry: " + family_text(", EAGLE (the lookup and the load "
                                                             "do not see the retention interval)")
           + "; the release's lookup parts (LookupSym.release); one pass of "
           "_lookup_complete_chunks (one full-attention, one SWA group)"),
    grid=family(retention="none"), deep=True,
    releases=("0.31.0", "0.32.0", "0.33.0", "0.34.0"),
)
