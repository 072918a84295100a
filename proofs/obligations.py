"""Proof obligations: each builds Z3 queries whose unsatisfiability is the
property. Configurations (which rule, which load model) are chosen by the
runner; this module only says what is checked.

Lifecycle obligations are checked by induction over the number of scheduler
steps (the invariant of ``kvreach.spec.lifecycle.invariant`` is itself the
obligation ``invariant``): a violation must occur in one transition from an
arbitrary state satisfying the invariant. When that query is satisfiable the
runner searches a concrete counterexample from the initial state by bounded
model checking (BMC), so every reported counterexample is a real trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

import z3

from kvreach.params import RetentionMode
from kvreach.spec import load, mask
from kvreach.spec.config import SymConfig, _max, _min
from kvreach.spec.lifecycle import (
    K_ABORT, K_DECODE, K_FINISH, K_PREFILL, State, init, invariant, transition,
)


def _fresh_lookup():
    from kvreach.spec.lookup import LookupSym

    return LookupSym.fresh("later_")


@dataclass
class Ctx:
    """Symbols shared by one obligation's queries."""

    s: SymConfig
    rule: str
    model: str
    c: z3.ArithRef = field(default_factory=lambda: z3.Int("chunk"))
    boundary_block: z3.ArithRef = field(default_factory=lambda: z3.Int("boundary_block"))
    final_horizon_chunks: z3.ArithRef = field(default_factory=lambda: z3.Int("final_horizon_chunks"))
    budget: z3.ArithRef = field(default_factory=lambda: z3.Int("budget"))
    store_fn: Callable | None = None  # a mutant's store decision
    variant: str | None = None  # a static mutant
    # the later request of the lookup obligations (world: single request)
    lk: object = field(default_factory=lambda: _fresh_lookup())
    shared: z3.ArithRef = field(default_factory=lambda: z3.Int("later_shared_tokens"))
    pins: list = field(default_factory=list)  # a geometry's pins (grid obligations)
    # a static mutant's mutation parameters (proofs.mutants.PLANTS), each passed
    # to the one function it mutates
    mutant: dict = field(default_factory=dict)

    def base(self) -> list:
        return [self.s.well_formed(), self.budget >= 1, *self.pins]


@dataclass
class Query:
    premise: list  # assumptions (checked satisfiable: non-vacuity)
    violation: z3.BoolRef  # negated property


@dataclass
class Obligation:
    name: str
    statement: str
    kind: str  # "lifecycle" | "static"
    # static: ctx -> queries; lifecycle: (ctx, pre, tr, post) -> violation of one step
    queries: Callable | None = None
    step_violation: Callable | None = None
    bmc_violation: Callable | None = None
    rule_specific: bool = True
    model_specific: bool = True
    scope: str | None = None  # a static obligation's own scope (else the symbolic one)
    split: bool = True  # the runner's case split on the store configuration applies
    rules: tuple[str, ...] | None = None  # the rules it is run for (None: every rule)
    grid: tuple | None = None  # geometries (proofs.geometries): one proof per geometry
    # the world of kvreach.spec.lifecycle.table: "single" (one incarnation, every
    # store accepted; rests on the obligation 'invariant') or "vllm" (restarts,
    # preemption, the manager's answers; the obligation's own `invariant`,
    # (ctx, state) -> Bool, proved in the same row by base case and step)
    world: str = "single"
    invariant: Callable | None = None
    bmc_depths: tuple[int, ...] | None = None  # None: the runner's BMC_DEPTHS
    # world "vllm": facts of one step, (ctx, pre, tr, post) -> [Bool], each
    # proved from the step's premise on its own, then assumed by the main query
    lemmas: Callable | None = None
    # ctx -> [[Bool]], counterexample shapes the real scheduler can run
    # (tests/vllm, ``--replay-vllm``), tried in order by the counterexample
    # search (static: once the query is sat); the verdict never depends on them.
    replayable: Callable | None = None


def final_horizon_bounds(ctx: Ctx, tr, post) -> z3.BoolRef:
    """Final horizons (chunks) a request in ``post`` can still end with: at
    least this step's ``n`` (0.29's EAGLE exclusion may take one back), at most
    the offload cap (prompt horizon with offload_prompt_only; max_offload_tokens;
    else unbounded: decode may go on)."""
    s = ctx.s
    lo = tr.n - (s.shift if ctx.rule == "vllm-0.29" else 0)
    cap = z3.And(
        z3.Implies(s.prompt_only, ctx.final_horizon_chunks <= s.prompt_horizon),
        z3.Implies(s.has_max, ctx.final_horizon_chunks <= s.max_off / s.C),
    )
    return z3.And(ctx.final_horizon_chunks >= lo, cap)


# --- lifecycle obligations -----------------------------------------------


def _sound_step(ctx: Ctx, pre, tr, post):
    s = ctx.s
    H = z3.If(tr.finished, tr.n, ctx.final_horizon_chunks)
    return z3.And(
        z3.Implies(z3.Not(tr.finished), final_horizon_bounds(ctx, tr, post)),
        tr.submitted, z3.Not(load.wanted(s, ctx.model, ctx.c, H)),
    )


def _complete_step(ctx: Ctx, pre, tr, post):
    s = ctx.s
    return z3.And(
        tr.finished,
        load.needed(s, ctx.model, ctx.c, ctx.boundary_block, tr.n),
        (ctx.c + 1) * s.C <= post.f,
        z3.Not(post.stored),
    )


def _once_step(ctx: Ctx, pre, tr, post):
    return z3.And(pre.stored, tr.submitted)


def _computed_step(ctx: Ctx, pre, tr, post):
    return z3.And(tr.submitted, (ctx.c + 1) * ctx.s.C > post.f)


# BMC forms: a whole trace st[0..d] with transitions trs[1..d], trs[d] an end.
def _sound_bmc(ctx, sts, trs):
    H = trs[-1].n
    return z3.Or([z3.And(t.submitted, z3.Not(load.wanted(ctx.s, ctx.model, ctx.c, H))) for t in trs])


def _complete_bmc(ctx, sts, trs):
    return _complete_step(ctx, sts[-2], trs[-1], sts[-1])


def _once_bmc(ctx, sts, trs):
    return z3.Or([z3.And(sts[i].stored, trs[i].submitted) for i in range(len(trs))])


def _computed_bmc(ctx, sts, trs):
    return z3.Or([_computed_step(ctx, sts[i], trs[i], sts[i + 1]) for i in range(len(trs))])


def _invariant_step(ctx: Ctx, pre, tr, post):
    """Running transitions preserve the invariant (and init establishes it)."""
    return z3.And(z3.Not(tr.finished), z3.Not(invariant(ctx.s, ctx.rule, post, ctx.c)))


# --- static obligations ----------------------------------------------------


def one_shot_mask(ctx: Ctx, c, H) -> z3.BoolRef:
    """The rule's keep-decision for chunk ``c`` of a request whose final
    horizon is ``H`` chunks, evaluated at that horizon."""
    s = ctx.s
    if ctx.mutant.get("keep_every_chunk"):
        return z3.BoolVal(True)
    if ctx.rule == "lookup-window":
        from kvreach.spec.rules import lookup_window_keep

        return lookup_window_keep(s, c)
    if ctx.rule == "vllm-0.29":
        wc = z3.Int("wc_mask")
        return z3.And(mask.v029_window_chunks(s, wc), mask.v029_chunk_reachable(s, c, H, wc))
    from kvreach.spec.rules import final_segment_end

    return mask.chunk_reachable(s, c, final_segment_end(s, H))


def _mask_eq(ctx: Ctx):
    s, c, H, L = ctx.s, ctx.c, ctx.final_horizon_chunks, ctx.boundary_block
    rng = [c >= 0, c < H]
    keep = one_shot_mask(ctx, c, H)
    if "config" in ctx.mutant:  # the keep decision under a mutated configuration
        sm, side = ctx.mutant["config"](s)
        keep = z3.And(side, one_shot_mask(Ctx(sm, ctx.rule, ctx.model), c, H))
    return [
        Query(ctx.base() + rng + [keep], z3.Not(load.wanted(s, ctx.model, c, H))),
        Query(
            ctx.base() + rng + [load.is_boundary(s, ctx.model, L, H), load.chunk_requested(s, c, L)],
            z3.Not(keep),
        ),
    ]


def _load_witness(ctx: Ctx):
    s, c, H, L = ctx.s, ctx.c, ctx.final_horizon_chunks, ctx.boundary_block
    return [Query(
        ctx.base() + [c >= 0, c < H, load.is_boundary(s, ctx.model, L, H), load.chunk_requested(s, c, L)],
        z3.Not(load.wanted(s, ctx.model, c, H, ctx.mutant.get("witness_early", 0))),
    )]


def _chunk_closed_form(ctx: Ctx):
    s, c, F = ctx.s, ctx.c, ctx.final_horizon_chunks  # used as a free final segment end (blocks)
    j = z3.Int("block_in_chunk")
    first = c * s.bpc
    lo, _ = mask.final_tail_bounds(s, F)
    end = s.replay_end_block()
    r = (first + s.bpc - 1 - s.shift) % s.per_segment
    witnesses = [
        s.bpc - 1, s.bpc - 1 - r - 1,
        z3.If(lo > first, lo - first, 0),
        z3.If(end - s.need > first, end - s.need - first, 0),
    ]
    exists_some = z3.Or([mask.chunk_reachable_exists(s, c, w, F) for w in witnesses])
    def closed(s, c, F):
        return mask.chunk_reachable(s, c, F, ctx.mutant.get("tail_off_by_one", False))

    return [
        Query(ctx.base() + [c >= 0, F >= 0, mask.chunk_reachable_exists(s, c, j, F)],
              z3.Not(closed(s, c, F))),
        Query(ctx.base() + [c >= 0, F >= 0, closed(s, c, F)], z3.Not(exists_some)),
    ]


def _load_window_blocks(ctx: Ctx):
    s, L = ctx.s, ctx.boundary_block
    first_tok = L * s.B - (s.W - 1)
    need0, side = s.need0, []
    if "config" in ctx.mutant:  # a mutated configuration's need0
        sm, cons = ctx.mutant["config"](s)
        need0, side = sm.need0, [cons]
    return [Query(ctx.base() + side + [L >= 1, first_tok >= 0],
                  first_tok / s.B != L - need0)]


# --- the offload lookup's obligations (world: single request) --------------


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
    shared = _min(offloadable_tokens, ctx.shared)
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


def _real_alignment(ctx: Ctx) -> list[list]:
    """A configuration vLLM builds: an alignment that is a full-attention
    group's tokens per chunk (block times ``blocks_per_chunk``,
    ``SchedulerOffloadConfig.from_spec``); tests/vllm/replay_lifecycle.py
    replays only those."""
    s = ctx.s
    return [[s.has_align, s.A % s.bpc == 0]]


def _no_local_hit(ctx: Ctx) -> list[list]:
    """A later request vLLM's scheduler runs as decoded: no GPU-local hit
    (tests/vllm/replay_vllm.py resets the prefix cache before it looks up)."""
    return [[ctx.lk.local_hit_tokens == 0]]


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


from kvreach.proofs.config import NO_WASTE_MAX_TOKENS, SCAN_BOUND_KEYS  # noqa: E402


def _no_waste(ctx: Ctx):
    """A chunk the rule keeps at its final horizon that none of the witness
    later requests loads: requests of exactly the boundary after the chunk
    (its hit is capped one token short), one token and one chunk longer, and
    one chunk past the boundary at the chunk's start (an EAGLE lookup's
    queried chunk). Each loads the chunk iff its dense hit is nonzero, the
    chunk is in its loaded range, and no chunk of the run its lookup accepts
    is missing from the rule's stores."""
    from kvreach.spec.lookup import LookupSym, link, lookup, prefix_keys

    s, c, H = ctx.s, ctx.c, ctx.final_horizon_chunks
    off = z3.Int("offloadable_tokens")
    kept = lambda x: z3.And(x >= 0, x < H, one_shot_mask(ctx, x, H))  # noqa: E731
    b1 = (c * s.C / s.A + 1) * s.A
    b0 = c * s.C / s.A * s.A
    prem = ctx.base() + [H >= 1, H == off / s.C, off >= 0, off <= NO_WASTE_MAX_TOKENS,
                         z3.Implies(s.prompt_only, off <= s.P), kept(c)]
    fails = []
    for i, T in enumerate([b1, b1 + 1, b1 + s.C + 1, b0 + s.C + 1]):
        lk = LookupSym.fresh(f"witness{i}_", ctx.lk.variant)
        shared = _min(T, off)
        prem += [lk.well_formed(), link(s, lk), lk.num_tokens == T, lk.local_hit_tokens == 0,
                 z3.Not(lk.has_max_load), ctx.lk.has_full == lk.has_full,
                 ctx.lk.full_block_tokens == lk.full_block_tokens, ctx.lk.W == lk.W,
                 ctx.lk.extra == lk.extra]
        t = lookup(lk, prefix_keys(z3.If(lk.has_full, shared / lk.C_full, 0), shared / lk.C))
        c2 = z3.Int(f"witness{i}_missing_chunk")
        fails.append(z3.Or(
            t.hit_tokens == 0, z3.Not(z3.And(t.swa_loaded[0] <= c, c < t.swa_loaded[1])),
            z3.And(t.swa_verified[0] <= c2, c2 < t.swa_verified[1], z3.Not(kept(c2)))))
    prem += [ctx.lk.well_formed(), link(s, ctx.lk)]
    return [Query(prem, z3.And(fails))]


def _prefix_scan(ctx: Ctx):
    """``spec.lookup.prefix_scan_end`` is the scan's end when exactly the
    keys below ``present_below`` hit: it qualifies, and no larger end does."""
    from kvreach.spec import lookup

    x, n = z3.Int("present_below"), z3.Int("scan_keys")
    w, w0, e = z3.Int("sliding_window_chunks"), z3.Int("initial_window_chunks"), z3.Int("larger_end")
    end = lookup.prefix_scan_end(x, n, ctx.mutant.get("short_by", 0))

    def qualifies(k):  # keys at and above x break the run
        return lookup.run_qualifies(k, n, w, w0, k >= x, lambda lo, hi: hi > _max(lo, x))

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


OBLIGATIONS: dict[str, Obligation] = {
    o.name: o
    for o in [
        Obligation(
            "soundness",
            "Every chunk submitted, at every step, is wanted by the load model "
            "under the request's final horizon (requested by some hit boundary).",
            "lifecycle", step_violation=_sound_step, bmc_violation=_sound_bmc,
            rules=("vllm-0.29", "vllm-0.33"),
        ),
        Obligation(
            "completeness",
            "At the end, every chunk requested by a hit this request can serve "
            "(all requested chunks below the final horizon) whose tokens were "
            "computed has been submitted.",
            "lifecycle", step_violation=_complete_step, bmc_violation=_complete_bmc,
            rules=("vllm-0.29", "vllm-0.33"),
        ),
        Obligation(
            "exactly-once",
            "No chunk is submitted twice, abort reconsideration included.",
            "lifecycle", step_violation=_once_step, bmc_violation=_once_bmc,
            model_specific=False,
        ),
        Obligation(
            "computed-before-stored",
            "No chunk is submitted before all of its tokens are computed "
            "((c + 1) * chunk_tokens <= num_computed_tokens).",
            "lifecycle", step_violation=_computed_step, bmc_violation=_computed_bmc,
            model_specific=False,
        ),
        Obligation(
            "mask-equivalence",
            "The rule's closed-form mask at the final horizon keeps exactly the "
            "chunks of the union, over the load model's hit boundaries, of each "
            "boundary's need-window.",
            "static", queries=_mask_eq,
            rules=("vllm-0.29", "vllm-0.33"), replayable=_real_alignment,
        ),
        Obligation(
            "invariant",
            "Running steps (prefill, decode) preserve the rule's inductive "
            "invariant, which the initial state satisfies.",
            "lifecycle", step_violation=_invariant_step, model_specific=False,
        ),
        Obligation(
            "load-witness",
            "Any hit boundary that requests a chunk implies the named witness "
            "boundary requests it (justifies the quantifier-free 'wanted').",
            "static", queries=_load_witness, rule_specific=False,
        ),
        Obligation(
            "chunk-mask-closed-form",
            "The closed-form chunk mask equals 'some block of the chunk is "
            "reachable' (vLLM's any() over the chunk's blocks).",
            "static", queries=_chunk_closed_form, rule_specific=False, model_specific=False,
        ),
        Obligation(
            "hit-preservation",
            "No later request loses offload hit tokens to the SWA mask: its hit "
            "with the rule's stores equals its hit with dense stores (every chunk "
            "this request could offload), in the single-request world; with a "
            "retention interval, for the requests the interval promises.",
            "lifecycle", step_violation=_hit_step, bmc_violation=_hit_bmc,
            model_specific=False, grid=_geometries(), replayable=_no_local_hit,
        ),
        Obligation(
            "no-waste",
            "Every chunk the rule keeps at the request's final horizon is loaded "
            "by some later request's lookup against the rule's stores (single-"
            "request world); a counterexample is confirmed by trying every later "
            "request that shares a prefix.",
            "static", queries=_no_waste, model_specific=False, grid=_geometries(),
            rules=("vllm-0.29", "vllm-0.33", "lookup-window"),
            scope=("geometry fixed to each of the grid (proofs/geometries.py); prompt, "
                   "max_offload_tokens, offload_prompt_only and the chunk symbolic, the final "
                   "horizon symbolic up to 4096 offloadable tokens; the rule's keep decision "
                   "at the final horizon (one-shot); four witness later requests per chunk "
                   "(a proof is for those witnesses; a counterexample is confirmed against "
                   "every later request sharing a prefix)"),
            split=False,
        ),
        Obligation(
            "lookup-prefix-scan",
            "When exactly the keys below some index hit (one request's dense "
            "stores), the sliding-window scan ends at min(n, max(0, index)).",
            "static", queries=_prefix_scan, rule_specific=False, model_specific=False,
            scope=("symbolic, unbounded: key count n >= 0, windows 1 <= w <= w0, the "
                   "first missing key; the closed form of the scan (largest qualifying "
                   "end), no steps"),
            split=False,
        ),
        Obligation(
            "lookup-scan-closed-form",
            "The closed form of vLLM's sliding-window lookup scan (largest run "
            "end whose window below it has no MISS/RETRY; deferred on a RETRY "
            "after it or a HIT_PENDING inside it) equals the loop "
            "_sliding_window_lookup runs.",
            "static", queries=_lookup_scan, rule_specific=False, model_specific=False,
            scope=(f"bounded: every key count n <= {SCAN_BOUND_KEYS}, every answer "
                   "(HIT / HIT_PENDING / RETRY / MISS) per key, windows 1 <= w <= w0 "
                   "symbolic and unbounded; the loop unrolled over the same keys"),
            split=False,
        ),
        Obligation(
            "load-window-blocks",
            "For a block-aligned hit L, the window tokens [L*B-(W-1), L*B) start "
            "in block L - ceil((W-1)/B).",
            "static", queries=_load_window_blocks, rule_specific=False, model_specific=False,
        ),
    ]
}


def lifecycle_step_query(ob: Obligation, ctx: Ctx) -> Query:
    """One transition from an arbitrary invariant state (induction step). In
    world "vllm" the invariant is the obligation's own, and its preservation
    by a running step is part of the violation."""
    pre, post = State.fresh("pre", ob.world), State.fresh("post", ob.world)
    tr = transition(ctx.s, ctx.rule, pre, post, ctx.c, ctx.budget, "t", ctx.store_fn,
                    world=ob.world)
    if ob.world == "single":
        prem = ctx.base() + [ctx.c >= 0, invariant(ctx.s, ctx.rule, pre, ctx.c), tr.constraints]
        return Query(prem, ob.step_violation(ctx, pre, tr, post))
    prem = ctx.base() + [ctx.c >= 0, ob.invariant(ctx, pre), tr.constraints]
    return Query(prem + _step_lemmas(ob, ctx, pre, tr, post), ob.step_violation(ctx, pre, tr, post))


def _step_lemmas(ob: Obligation, ctx: Ctx, pre, tr, post) -> list:
    """A world-"vllm" obligation's step facts, in order: a running step keeps
    its invariant (the induction step's second half, decided on its own:
    Z3 takes far longer on the disjunction of the two), then its own lemmas."""
    keeps = z3.Implies(z3.Not(tr.finished), ob.invariant(ctx, post))
    return [keeps] + (ob.lemmas(ctx, pre, tr, post) if ob.lemmas else [])


def lemma_queries(ob: Obligation, ctx: Ctx) -> list[Query]:
    """Each of a world-"vllm" obligation's step lemmas from the step's premise
    and the lemmas before it (the terms are those of
    :func:`lifecycle_step_query`: same names)."""
    if ob.world == "single":
        return []
    pre, post = State.fresh("pre", ob.world), State.fresh("post", ob.world)
    tr = transition(ctx.s, ctx.rule, pre, post, ctx.c, ctx.budget, "t", ctx.store_fn,
                    world=ob.world)
    prem = ctx.base() + [ctx.c >= 0, ob.invariant(ctx, pre), tr.constraints]
    lems = _step_lemmas(ob, ctx, pre, tr, post)
    return [Query(prem + lems[:i], z3.Not(lem)) for i, lem in enumerate(lems)]


def invariant_base_query(ctx: Ctx, ob: Obligation | None = None) -> Query:
    """The initial state satisfies the invariant (the rule's, or a world
    "vllm" obligation's own)."""
    world = "single" if ob is None else ob.world
    st = State.fresh("init", world)
    inv = invariant(ctx.s, ctx.rule, st, ctx.c) if world == "single" else ob.invariant(ctx, st)
    return Query(ctx.base() + [ctx.c >= 0, init(st)], z3.Not(inv))


def bmc_query(ob: Obligation, ctx: Ctx, depth: int):
    """``depth`` transitions from the initial state, the last one an end; the
    steps before it run (world "single": prefill or decode; "vllm": any kind
    that does not end the request)."""
    sts = [State.fresh(f"s{i}", ob.world) for i in range(depth + 1)]
    trs = [
        transition(ctx.s, ctx.rule, sts[i], sts[i + 1], ctx.c, ctx.budget, f"t{i + 1}",
                   ctx.store_fn, world=ob.world)
        for i in range(depth)
    ]
    prem = ctx.base() + [ctx.c >= 0, init(sts[0])]
    for i, t in enumerate(trs):
        prem.append(t.constraints)
        if i < depth - 1:
            prem.append(z3.Or(t.kind == K_PREFILL, t.kind == K_DECODE) if ob.world == "single"
                        else z3.Not(t.finished))
        else:
            prem.append(z3.Or(t.kind == K_FINISH, t.kind == K_ABORT))
    viol = ob.bmc_violation(ctx, sts, trs) if ob.bmc_violation else z3.BoolVal(False)
    return Query(prem, viol), sts, trs


# --- issue 10: the load-side variant, and worlds (b) / (c) ------------------
# Appended as a block (OBLIGATIONS.update below) so the rows above keep their
# order. The lookup variant is ``spec.lookup.LOOKUP_VARIANTS``' "read-window"
# (docs/findings.md F7): set on the obligation's later request(s) before the
# queries are built, so the decoded counterexample (``decode``) records it and
# replays through the twin with the same variant.

READ_WINDOW = "read-window"


def _read_window(ctx: Ctx) -> None:
    ctx.lk.variant = READ_WINDOW


def _hit_step_read_window(ctx: Ctx, pre, tr, post):
    """``hit-preservation`` with the later request looking up under the
    variant (the dense reference too)."""
    _read_window(ctx)
    return _hit_step(ctx, pre, tr, post)


def _hit_bmc_read_window(ctx, sts, trs):
    return _hit_step_read_window(ctx, sts[-2], trs[-1], sts[-1])


def _hit_step_read_window_aligned(ctx: Ctx, pre, tr, post):
    """As ``hit-preservation-read-window``, for the later requests whose dense
    hit ends on an SWA chunk boundary (``load_window_size_in_chunks`` adds no
    right padding): not a repeated prompt of a whole number of alignments,
    whose hit ends at ``num_tokens - 1``."""
    _read_window(ctx)
    t = dense_lookup(ctx, tr.off)
    end = ctx.lk.local_hit_tokens + t.hit_tokens
    return z3.And(
        tr.finished, later_request(ctx, post.f), t.hit_tokens > 0, promised(ctx, t),
        end % ctx.lk.C == 0,
        t.swa_verified[0] <= ctx.c, ctx.c < t.swa_verified[1], z3.Not(post.stored),
    )


def _hit_bmc_read_window_aligned(ctx, sts, trs):
    return _hit_step_read_window_aligned(ctx, sts[-2], trs[-1], sts[-1])


def _no_waste_read_window(ctx: Ctx):
    """``no-waste`` with the witness later requests looking up under the variant."""
    _read_window(ctx)
    return _no_waste(ctx)


MONOTONE_BOUND_CHUNKS = 10  # lookup-monotone: later requests of at most this many SWA chunks


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
    for variant in ("vllm-0.33", READ_WINDOW):
        lk = ctx.lk if variant == "vllm-0.33" else LookupSym.fresh("mono_rw_", variant)
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
        out.append(Query(prem, more.hit_tokens < less.hit_tokens))
    return out  # one query per variant (one query for both is slower in Z3)


RUN_STORED_BOUND_CHUNKS = 10  # lookup-run-stored: later requests of at most this many SWA chunks


def _lookup_run_stored(ctx: Ctx, variant: str = "vllm-0.33"):
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
    if variant != "vllm-0.33":
        _read_window(ctx)
    lk = ctx.lk
    keys = bounded_keys(full, rule, K, "rs_rule")
    r = lookup(lk, keys)
    # the same full-attention answers: one prefix end (its symbols) for both lookups
    D = lookup(lk, replace(bounded_keys(full, dense, K, "rs_dense"), full_end=keys.full_end))
    v0, v1 = D.swa_verified
    run_stored = z3.Or(D.hit_tokens == 0, forall_in(v0 + short, v1, rule, K))
    prem = ctx.base() + [lk.well_formed(), link(ctx.s, lk), lk.num_tokens <= K * lk.C,
                         d >= 0, r.scope, D.scope] + r.side + D.side
    return [Query(prem, (r.hit_tokens != D.hit_tokens) == run_stored)]


def _hit_preserving_wastes(ctx: Ctx):
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
    if ctx.mutant.get("read_window_lookup"):
        _read_window(ctx)
    wk = LookupSym.fresh("hw_witness_", lk.variant)
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


OBLIGATIONS.update({
    o.name: o
    for o in [
        Obligation(
            "hit-preservation-read-window",
            "hit-preservation (single-request world) with the lookup variant "
            "'read-window': get_sliding_window_size_in_chunks returns "
            "max(1, ceil((W - 1 + extra_retained_tokens) / C)), the chunks the load "
            "reads (docs/findings.md F7), for the later request and the dense reference.",
            "lifecycle", step_violation=_hit_step_read_window,
            bmc_violation=_hit_bmc_read_window, model_specific=False, grid=_geometries(),
            rules=("vllm-0.33", "lookup-window"), replayable=_no_local_hit,
        ),
        Obligation(
            "hit-preservation-read-window-aligned",
            "hit-preservation-read-window for the later requests whose dense hit "
            "ends on an SWA chunk boundary (no right padding widens the first run: "
            "every later request but one of a whole number of alignments sharing all "
            "of it), in the geometries without EAGLE or a retention interval.",
            "lifecycle", step_violation=_hit_step_read_window_aligned,
            bmc_violation=_hit_bmc_read_window_aligned, model_specific=False,
            grid=_geometries_no_eagle_no_retention(), rules=("vllm-0.33",),
        ),
        Obligation(
            "no-waste-read-window",
            "no-waste (single-request world) with the witness later requests looking "
            "up under the lookup variant 'read-window'.",
            "static", queries=_no_waste_read_window, model_specific=False,
            grid=_geometries(), rules=("vllm-0.33", "lookup-window"),
            scope=("geometry fixed to each of the grid (proofs/geometries.py); prompt, "
                   "max_offload_tokens, offload_prompt_only and the chunk symbolic, the final "
                   "horizon symbolic up to 4096 offloadable tokens; the rule's keep decision "
                   "at the final horizon (one-shot); four witness later requests per chunk, "
                   "looking up under 'read-window' (a proof is for those witnesses; a "
                   "counterexample is confirmed against every later request sharing a prefix)"),
            split=False,
        ),
        *[Obligation(
            name,
            "Against a store whose SWA keys are a subset of a prefix of chunks (the "
            "rule's stores inside the dense ones), with the same full-attention "
            "answers, the lookup's hit equals the prefix's hit iff that hit is 0 or "
            "every chunk of the SWA run the prefix's lookup accepts is stored: the "
            "step hit-preservation and hit-preservation-neighbours reduce a lost hit "
            f"to; for {which}.",
            "static", queries=partial(_lookup_run_stored, variant=variant),
            rule_specific=False, model_specific=False, grid=_geometries_of_the_lookup(),
            scope=(f"bounded: later requests of at most {RUN_STORED_BOUND_CHUNKS} SWA chunks "
                   "(any length up to that, GPU-local hit, max_load_tokens), the dense store "
                   "any prefix of SWA chunks, the rule's any subset of it, the full-attention "
                   "answers any (the same for both); geometry fixed to each of the grid's 8 "
                   "without a retention interval (proofs/geometries.py); lookup variant "
                   f"{variant}; one pass of _lookup_complete_chunks"),
            split=False,
        ) for name, variant, which in (
            ("lookup-run-stored", "vllm-0.33", "vLLM 0.33.0's lookup"),
            ("lookup-run-stored-read-window", READ_WINDOW, "the lookup variant 'read-window'"))],
        Obligation(
            "hit-preserving-wastes",
            "Where W - 1 is a multiple of the SWA chunk, every hit-preserving rule "
            "stores a chunk no later request loads: the first chunk of the run the "
            "lookup accepts for the dense hit of a later request of A + 1 tokens is "
            "loaded by no later request's dense hit (so no rule is both hit-preserving "
            "and waste-free there, worlds (a) and (b): their dense stores are prefixes).",
            "static", queries=_hit_preserving_wastes, rule_specific=False,
            model_specific=False, grid=_geometries_window_one_past_chunks(),
            scope=("geometry fixed to each of the grid's geometries where W - 1 is a multiple "
                   "of the SWA chunk (issue-9 measurement, blocks_per_chunk 2); the later "
                   "request any length, shared prefix, GPU-local hit and max_load_tokens "
                   "(unbounded), the store dense (a prefix: one request's or a union's); "
                   "vLLM 0.33.0's lookup, one pass of _lookup_complete_chunks"),
            split=False,
        ),
        Obligation(
            "lookup-monotone",
            "The offload lookup is monotone in the store content: with more keys "
            "stored (any superset, both groups) no later request's hit is shorter; "
            "for vLLM 0.33.0's lookup and the variant 'read-window'.",
            "static", queries=_lookup_monotone, rule_specific=False, model_specific=False,
            grid=_geometries_of_the_lookup(),
            scope=(f"bounded: later requests of at most {MONOTONE_BOUND_CHUNKS} SWA chunks "
                   "(any length up to that, GPU-local hit, max_load_tokens), every HIT / MISS "
                   "answer per key and every superset of them (uninterpreted); geometry fixed "
                   "to each of the grid's 8 without a retention interval (proofs/geometries.py; "
                   "the lookup does not see the interval); both lookup variants; one pass "
                   "of _lookup_complete_chunks (one full-attention, one SWA group)"),
            split=False,
        ),
    ]
})


# world "vllm" (issue 11): restarts, preemption, the manager's answers; world
# (b), same-rule neighbours (issue 10). Each module registers its obligations
# itself (a plain import: no cycle whichever module is imported first).
import kvreach.proofs.restarts  # noqa: E402,F401
import kvreach.proofs.neighbours  # noqa: E402,F401
