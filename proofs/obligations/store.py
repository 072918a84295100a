"""The store rule's obligations in the single-request world: what each
chunk submitted is (wanted by the load model, computed, submitted once), what
is submitted by the end (complete), the rule's inductive invariant, and the
closed forms the queries stand on (the mask, the load witness, the window's
blocks).

Lifecycle obligations are checked by induction over the number of scheduler
steps (``kvreach.proofs.induction``; the invariant of
``kvreach.spec.lifecycle.invariant`` is itself the obligation ``invariant``):
a violation must occur in one transition from an arbitrary state satisfying
the invariant. When that query is satisfiable the runner searches a concrete
counterexample from the initial state by bounded model checking (BMC), so
every reported counterexample is a real trace.
"""

from __future__ import annotations

from dataclasses import replace

import z3

from kvreach.proofs import mutants
from kvreach.proofs.config import SCOPE_STATIC, SCOPE_SYMBOLIC
from kvreach.proofs.flatten import flat_query
from kvreach.proofs.framework import Ctx, Obligation, Query, Replay, Role
from kvreach.proofs.keep import one_shot_mask
from kvreach.proofs.matrix import RELEASE_RULES
from kvreach.spec import load, mask
from kvreach.spec.lifecycle import K_DECODE, invariant


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


def once_step(ctx: Ctx, pre, tr, post):
    return z3.And(pre.stored, tr.submitted)


def computed_step(ctx: Ctx, pre, tr, post):
    return z3.And(tr.submitted, (ctx.c + 1) * ctx.s.C > post.f)


# BMC forms: a whole trace st[0..d] with transitions trs[1..d], trs[d] an end.
def _sound_bmc(ctx, sts, trs):
    H = trs[-1].n
    return z3.Or([z3.And(t.submitted, z3.Not(load.wanted(ctx.s, ctx.model, ctx.c, H))) for t in trs])


def _complete_bmc(ctx, sts, trs):
    return _complete_step(ctx, sts[-2], trs[-1], sts[-1])


def once_bmc(ctx, sts, trs):
    return z3.Or([z3.And(sts[i].stored, trs[i].submitted) for i in range(len(trs))])


def computed_bmc(ctx, sts, trs):
    return z3.Or([computed_step(ctx, sts[i], trs[i], sts[i + 1]) for i in range(len(trs))])


def _invariant_step(ctx: Ctx, pre, tr, post):
    """Running transitions preserve the invariant (and init establishes it)."""
    return z3.And(z3.Not(tr.finished), z3.Not(invariant(ctx.s, ctx.rule, post, ctx.c)))


# --- static obligations ----------------------------------------------------


def _mask_eq(ctx: Ctx):
    s, c, H, L = ctx.s, ctx.c, ctx.final_horizon_chunks, ctx.boundary_block
    rng = [c >= 0, c < H]
    keep = one_shot_mask(ctx, c, H)
    if "config" in ctx.mutant:  # the keep decision under a mutated configuration
        sm, side = ctx.mutant["config"](s)
        keep = z3.And(side, one_shot_mask(Ctx(sm, ctx.rule, ctx.model), c, H))
    return [flat_query(q) for q in (  # proofs/flatten.py: 77 M -> 2 M units
        Query(ctx.base() + rng + [keep], z3.Not(load.wanted(s, ctx.model, c, H))),
        Query(
            ctx.base() + rng + [load.is_boundary(s, ctx.model, L, H), load.chunk_requested(s, c, L)],
            z3.Not(keep),
        ),
    )]


def _load_witness(ctx: Ctx):
    s, c, H, L = ctx.s, ctx.c, ctx.final_horizon_chunks, ctx.boundary_block
    return [flat_query(Query(
        ctx.base() + [c >= 0, c < H, load.is_boundary(s, ctx.model, L, H), load.chunk_requested(s, c, L)],
        z3.Not(load.wanted(s, ctx.model, c, H, ctx.mutant.get("witness_early", 0))),
    ))]


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


# vLLM 0.34.0's lookahead hashes for the single-request lifecycle rows of
# vLLM's own rules (L symbolic: rows.models_lookahead): the spec's
# transition caps the step by its hashed tokens and the vllm-0.33 mask reads
# the step's hashed prompt horizon (spec.lifecycle.lookahead_keep in the
# invariant). kvreach's lookup-window is left at L = 0: the spec's keep
# decision reads the prompt's offloadable tokens without the mode
# (impl reads the step's hashed end). Set on the deep companions only
# (with_lookahead): the invariant's 0.34.0 row with it costs 65.8 M units,
# exactly-once's 143.7 M, over the default run's budget (docs/proofs-cost.md).
LIFECYCLE_LOOKAHEAD = dict(reads=frozenset({"lookahead_hashes"}), lookahead_rules=RELEASE_RULES)
INVARIANT_LOOKAHEAD_SCOPE = (
    "; with L >= 1 vllm-0.33's invariant keeps a chunk by the mask at the horizon of the step "
    "that passed it (the prompt's hashed end, then c + 1 up to the prompt horizon); "
    "step lemmas proved first (a decode step's storable count exceeds the cursor by at "
    "most one chunk)"
)


def lookahead_lemmas(ctx: Ctx, pre, tr, post) -> list:
    """World "single" step facts with L symbolic (none without it: the
    rows' queries are as before), each proved from the step and the ones
    before it (``induction.lemma_queries``), then assumed: under lookahead
    hashes (L >= 1) a decode step's storable count grows by at most one
    chunk over the cursor (the hashed tokens grow by at most
    ``tokens_per_hash``, which is at most the chunk). Z3 decides each in
    well under 1 M units; the invariant's step without them it does not
    decide within the row's 200 M."""
    s, f = ctx.s, pre.f
    if s.L is None:
        return []
    dec = z3.And(tr.kind == K_DECODE, s.lookahead)
    return [
        z3.Implies(dec, s.hashed_tokens(f + 1) <= s.hashed_tokens(f) + s.tokens_per_hash),
        s.tokens_per_hash <= s.C,
        z3.Implies(dec, s.offloadable(f + 1, f + 1) <= s.offloadable(f, f) + s.tokens_per_hash),
        z3.Implies(dec, tr.n <= s.offloadable(f, f) / s.C + 1),
        z3.Implies(dec, tr.n <= pre.cursor + 1),
    ]


def _real_alignment(ctx: Ctx) -> list[list]:
    """A configuration vLLM builds: an alignment that is a full-attention
    group's tokens per chunk (block times ``blocks_per_chunk``,
    ``SchedulerOffloadConfig.from_spec``); kvreach/vllm_harness/replay_lifecycle.py
    replays only those."""
    s = ctx.s
    return [[s.has_align, s.A % s.bpc == 0]]


# --- the witnesses in a replayed trace (impl.lifecycle.run) ---------------

def _unwanted_stored(trace, model: str, cex: dict) -> list[int]:
    return sorted(set(trace.stored) - trace.wanted(model))


def _computed_not_stored(trace, model: str, cex: dict) -> list[int]:
    computed = trace.computed_tokens // trace.group.chunk_tokens
    return sorted(c for c in trace.needed(model) - set(trace.stored) if c < computed)


def _stored_twice(trace, model: str, cex: dict) -> list[int]:
    stored = list(trace.stored)
    return sorted({c for c in stored if stored.count(c) > 1})


def _stored_uncomputed(trace, model: str, cex: dict) -> list[int]:
    C = trace.group.chunk_tokens
    return sorted(c for st in trace.steps for c in st.submitted if (c + 1) * C > st.num_computed_tokens)


# --- the obligations ------------------------------------------------------

SOUNDNESS = Obligation(
    "soundness",
    "Every chunk submitted, at every step, is wanted by the load model "
    "under the request's final horizon (requested by some hit boundary).",
    "lifecycle", mutant=mutants.PREFIX_HORIZON, scope=SCOPE_SYMBOLIC,
    step_violation=_sound_step, bmc_violation=_sound_bmc,
    rules=("vllm-0.29", "vllm-0.33"),
    vllm_replay=Replay("lifecycle", "violating"), trace_witness=_unwanted_stored,
    named_mutant=True,  # the mutant 0.72 M -> 0.10 M units named
    # vLLM 0.34.0's lookahead hashes (L symbolic: rows.models_lookahead):
    # the step's hashed prompt horizon, F14
    reads=frozenset({"lookahead_hashes"}),
)
COMPLETENESS = Obligation(
    "completeness",
    "At the end, every chunk requested by a hit this request can serve "
    "(all requested chunks below the final horizon) whose tokens were "
    "computed has been submitted.",
    "lifecycle", mutant=mutants.NO_FINAL_TAIL, scope=SCOPE_SYMBOLIC,
    step_violation=_complete_step, bmc_violation=_complete_bmc,
    rules=("vllm-0.29", "vllm-0.33"),
    vllm_replay=Replay("lifecycle", "missing"), trace_witness=_computed_not_stored,
)
EXACTLY_ONCE = Obligation(
    "exactly-once",
    "No chunk is submitted twice, abort reconsideration included.",
    "lifecycle", mutant=mutants.RECONSIDER_RESUBMITS, scope=SCOPE_SYMBOLIC,
    step_violation=once_step, bmc_violation=once_bmc, model_specific=False,
    trace_witness=_stored_twice,
)
COMPUTED_BEFORE_STORED = Obligation(
    "computed-before-stored",
    "No chunk is submitted before all of its tokens are computed "
    "((c + 1) * chunk_tokens <= num_computed_tokens).",
    "lifecycle", mutant=mutants.STORE_AHEAD, scope=SCOPE_SYMBOLIC,
    step_violation=computed_step, bmc_violation=computed_bmc, model_specific=False,
    vllm_replay=Replay("lifecycle", "uncomputed"), trace_witness=_stored_uncomputed,
)
MASK_EQUIVALENCE = Obligation(
    "mask-equivalence",
    "The rule's closed-form mask at the final horizon keeps exactly the "
    "chunks of the union, over the load model's hit boundaries, of each "
    "boundary's need-window.",
    "static", mutant=mutants.NEED_CEIL_W, scope=SCOPE_STATIC, queries=_mask_eq,
    rules=("vllm-0.29", "vllm-0.33"), replayable=_real_alignment,
    vllm_replay=Replay("mask", "mask_violation"), chunk_map=True,
)
INVARIANT = Obligation(
    "invariant",
    "Running steps (prefill, decode) preserve the rule's inductive "
    "invariant, which the initial state satisfies.",
    "lifecycle", mutant=mutants.STUCK_CURSOR, scope=SCOPE_SYMBOLIC, role=Role.INVARIANT,
    step_violation=_invariant_step, model_specific=False,
    # its lemmas and cube serve its companion with L symbolic (INVARIANT_LOOKAHEAD)
    lookahead_scope=INVARIANT_LOOKAHEAD_SCOPE, lemmas=lookahead_lemmas, lookahead_cube=True,
)


def with_lookahead(ob: Obligation, lemmas: bool = False) -> Obligation:
    """``ob``'s deep companion about the releases with lookahead block hashes
    (vLLM 0.34.0 on), L symbolic (:data:`LIFECYCLE_LOOKAHEAD`: vLLM's own
    rule; kvreach's ``lookup-window`` does not read the hashed prompt end in
    the spec), split by the lookahead cube (the invariant on its step
    lemmas: ``lemmas``; the properties without, as measured); ``ob``'s own
    rows stay every release's at L = 0. Deep: with L the rows cost 65 M to
    144 M units each (docs/proofs-cost.md)."""
    return replace(
        ob, name=ob.name + "-lookahead",
        statement=ob.statement + " With vLLM 0.34.0's lookahead block hashes "
        "(num_hash_lookahead_tokens L >= 0 symbolic).",
        rules=("vllm-0.33",), lemmas=lookahead_lemmas if lemmas else None, lookahead_cube=True,
        lookahead_only=True, deep=True, **LIFECYCLE_LOOKAHEAD,
        # proved rows only: no counterexample to replay on vLLM (an
        # obligation with a replay has an expected counterexample row)
        vllm_replay=None)


# with L symbolic (the rows ``rows.models_lookahead``): the invariant the
# other two rest on, and the two properties Z3 proves with it
INVARIANT_LOOKAHEAD = with_lookahead(INVARIANT, lemmas=True)
EXACTLY_ONCE_LOOKAHEAD = with_lookahead(EXACTLY_ONCE)
COMPUTED_BEFORE_STORED_LOOKAHEAD = with_lookahead(COMPUTED_BEFORE_STORED)
LOAD_WITNESS = Obligation(
    "load-witness",
    "Any hit boundary that requests a chunk implies the named witness "
    "boundary requests it (justifies the quantifier-free 'wanted').",
    "static", mutant=mutants.WITNESS_EARLY, scope=SCOPE_STATIC, queries=_load_witness,
    rule_specific=False,
)
CHUNK_MASK_CLOSED_FORM = Obligation(
    "chunk-mask-closed-form",
    "The closed-form chunk mask equals 'some block of the chunk is "
    "reachable' (vLLM's any() over the chunk's blocks).",
    "static", mutant=mutants.TAIL_OFF_BY_ONE, scope=SCOPE_STATIC, queries=_chunk_closed_form,
    rule_specific=False, model_specific=False,
)
LOAD_WINDOW_BLOCKS = Obligation(
    "load-window-blocks",
    "For a block-aligned hit L, the window tokens [L*B-(W-1), L*B) start "
    "in block L - ceil((W-1)/B).",
    "static", mutant=mutants.NEED_CEIL_W, scope=SCOPE_STATIC, queries=_load_window_blocks,
    rule_specific=False, model_specific=False,
)
