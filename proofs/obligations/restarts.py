"""Obligations of world "restarts": the lifecycle a vLLM release really runs
(``Ctx.release``, default 0.33.0: its ``cursor_on_lookup`` and
``null_block_filter`` through ``kvreach.spec.lifecycle.transition``), with
preemption (``Scheduler._preempt_request``), the offload lookup at every
``get_num_new_matched_tokens`` (a new request, a resumed one, a retried
deferred lookup; 0.33.0 resets the cursor there, earlier releases keep it),
starts with a GPU-local or offload hit under either ``OffloadPolicy``,
recompute past the prompt, decode under ``AsyncScheduler`` (F9),
``Request.shared_prefix_boundary`` (F8), null blocks, and ``prepare_store``
accepting every key, some of them, or refusing
(``kvreach.spec.lifecycle.TRANSITIONS``, world "restarts").

An *incarnation* is the stretch between two lookups (with the cursor kept,
a preemption also ends one: the request's next step is its lookup).
``stored`` is "the tracked chunk was submitted (accepted by the manager) at
some step", ``stored_inc`` "in this incarnation". Each obligation carries
its own inductive invariant, proved in the same row (base case and step).
"""

from __future__ import annotations

import functools

import z3

from kvreach.params import GroupConfig, RetentionMode
from kvreach.proofs import mutants
from kvreach.proofs.config import SCOPE_WORLD_RESTARTS
from kvreach.proofs.framework import Ctx, Obligation, Replay
from kvreach.proofs.matrix import WORLD_RESTARTS_PARTS
from kvreach.proofs.obligations.store import (  # the world-single forms, restated over world "restarts"
    computed_bmc, computed_step, once_bmc, once_step,
)
from kvreach.spec import mask
from kvreach.spec.lifecycle import (
    K_ABORT, K_DECODE, K_FINISH, K_LOOKUP, K_PREEMPT, K_PREFILL, K_RECOMPUTE, K_START_LOADED,
    O_REFUSED,
)

WORLD_SCOPE = (
    "world: restarts (kvreach.spec.lifecycle.TRANSITIONS, every kind: prefill, decode, "
    "decode-async, recompute, preempt, lookup, start, loaded, finish, abort, error "
    "(FINISHED_ERROR at any point); the "
    "manager accepts, takes a subset or refuses; any chunk's block may be null; "
    "shared_prefix_boundary any value >= 0 at every step, any number of "
    "incarnations)"
)
RULES = ("vllm-0.29", "vllm-0.33", "lookup-window")


def running(ctx: Ctx, st) -> z3.BoolRef:
    """What every world-"restarts" invariant says: a running state."""
    return z3.And(z3.Not(st.ended), st.f >= 0, st.cursor >= 0)


def incarnation_invariant(ctx: Ctx, st) -> z3.BoolRef:
    """A chunk submitted in this incarnation lies below the cursor, and where
    vllm-0.33 reconsiders the final tail at the end (no retention interval,
    an alignment, not EAGLE) the prompt-horizon mask keeps it, so the
    reconsideration's skip (``abs_chunk_idx < next_stored_chunk_idx`` and the
    prompt-horizon mask) leaves it out.

    With the cursor kept on lookup (before 0.33.0) a start does not need
    cursor 0, and a loaded start may move the cursor back: there the
    invariant also says that no chunk was submitted in the incarnation while
    nothing is computed (an incarnation ends at a preemption or a lookup, and
    every storing step leaves tokens computed)."""
    s, c = ctx.s, ctx.c
    kept = z3.BoolVal(True)
    if ctx.rule == "vllm-0.33":
        kept = z3.Implies(z3.And(s.retention_mode == RetentionMode.NONE, s.has_align, z3.Not(s.eagle)),
                          mask.chunk_reachable(s, c, s.prompt_horizon * s.bpc))
    inv = z3.And(running(ctx, st), z3.Implies(st.stored_inc, z3.And(c < st.cursor, kept)))
    if ctx.release.cursor_on_lookup == "kept":
        inv = z3.And(inv, z3.Implies(st.f == 0, z3.Not(st.stored_inc)))
    return inv


def at_some_step(step_violation):
    """The BMC form of a one-step violation: it happens at some step of the trace."""
    return lambda ctx, sts, trs: z3.Or([step_violation(ctx, sts[i], trs[i], sts[i + 1])
                                        for i in range(len(trs))])


def _once_inc_step(ctx, pre, tr, post):
    """A chunk the manager accepted in this incarnation is offered again in it
    (stronger than submitted twice: submitted implies offered)."""
    return z3.And(pre.stored_inc, tr.offered)


def _computed_lemmas(ctx, pre, tr, post):
    """Facts of one step, each proved from the step and the ones before it
    (after the invariant's preservation, ``induction._step_lemmas``): the
    step's storable count ends at or before the computed tokens; a submitted
    chunk lies below that count (each rule's ``c < n``), so every chunk below
    it is computed; steps that store nothing submit nothing. (Z3 decides each
    in well under a second; the property as one query it does not decide
    within the row's budget.)"""
    from kvreach.spec.lifecycle import table

    quiet = z3.Or([tr.kind == t.kind for t in table("restarts", ctx.release) if not t.stores])
    return [z3.Implies(z3.Not(quiet), tr.n * ctx.s.C <= post.f),
            z3.Implies(tr.submitted, ctx.c < tr.n),
            z3.Implies(z3.And(z3.Not(quiet), 0 <= ctx.c, ctx.c < tr.n),
                       (ctx.c + 1) * ctx.s.C <= post.f),
            z3.Implies(quiet, z3.Not(tr.submitted))]


# the step kinds kvreach.vllm_harness.replay_lifecycle.check_restart_plan runs
# (vLLM 0.33.0's scheduler, a lone request, the manager answering MISS; it
# reads them from here)
REPLAYED_KINDS = (K_PREFILL, K_DECODE, K_PREEMPT, K_LOOKUP, K_FINISH, K_ABORT)
# the plan kvreach.vllm_harness.release_replay.restarts runs on a release
# that keeps the cursor (0.29.0 .. 0.32.0): prefill steps, a preemption, a
# loaded start, the recompute, the finish (it reads them from here)
RELEASE_REPLAYED_KINDS = (K_PREFILL, K_PREEMPT, K_START_LOADED, K_RECOMPUTE, K_FINISH)


def _replayed_shapes(ctx, sts, trs) -> list[list]:
    """The traces vLLM's scheduler replays for a lone request, tried in
    order by the named counterexample search: every step of
    :data:`REPLAYED_KINDS` (no start, loaded start, recompute, async
    decode); else every step of :data:`RELEASE_REPLAYED_KINDS`, the last a
    finish, a loaded start's ``num_cached_tokens`` a whole number of
    full-attention chunks (``A * blocks_per_chunk`` tokens; the SWA chunk
    without an alignment): the granularity of an offload hit, so the
    decoded load is one the lookup can answer."""
    s = ctx.s
    unit = z3.If(s.has_align, s.A * s.bpc, s.C)
    plain = [z3.Or([t.kind == k for k in REPLAYED_KINDS]) for t in trs]
    loaded = [z3.Or([t.kind == k for k in RELEASE_REPLAYED_KINDS]) for t in trs] + [
        z3.Implies(t.kind == K_START_LOADED, t.sched % unit == 0) for t in trs] + [
        trs[-1].kind == K_FINISH]
    return [plain, loaded]


def _refused_step(ctx, pre, tr, post):
    """The manager refused a store that offered the chunk, the request runs
    on, and the cursor moved past the chunk (it would never be offered again
    in this incarnation)."""
    return z3.And(tr.offered, tr.outcome == O_REFUSED, z3.Not(tr.finished), post.cursor > ctx.c)


# --- the witnesses in a replayed plan (impl.lifecycle.run_vllm's steps) ---

def _accepted_offered_again(steps, model: str, cex: dict) -> list[int]:
    """Accepted, then offered again in the same incarnation."""
    accepted: set = set()
    out: set = set()
    inc = None
    for x in steps:
        if x.incarnation != inc:
            accepted, inc = set(), x.incarnation
        out |= set(x.offered) & accepted
        accepted |= set(x.submitted)
    return sorted(out)


def _submitted_twice(steps, model: str, cex: dict) -> list[int]:
    seen, twice = set(), set()
    for x in steps:
        for c in x.submitted:
            (twice if c in seen else seen).add(c)
    return sorted(twice)


def _submitted_uncomputed(steps, model: str, cex: dict) -> list[int]:
    C = GroupConfig(**cex["config"]["group"]).chunk_tokens
    return sorted({c for x in steps for c in x.submitted if (c + 1) * C > x.f_after})


def _refused_passed(steps, model: str, cex: dict) -> list[int]:
    return sorted({c for x in steps if x.step.outcome == "refused"
                   and x.step.kind not in ("finish", "abort")
                   for c in x.offered if x.cursor_after > c})


world_restarts = functools.partial(Obligation, kind="lifecycle", model_specific=False,
                                   scope=SCOPE_WORLD_RESTARTS + WORLD_SCOPE, rules=RULES,
                                   world="restarts", bmc_depths=(1, 2, 3),
                                   reads=WORLD_RESTARTS_PARTS)

EXACTLY_ONCE_INCARNATION = world_restarts(
    "exactly-once-incarnation",
    "Within one incarnation (between two offload lookups) no chunk the "
    "manager accepted is offered to prepare_store again (so none is "
    "submitted twice), abort reconsideration, loads, refusals and partial "
    "stores included.",
    step_violation=_once_inc_step, bmc_violation=at_some_step(_once_inc_step),
    invariant=incarnation_invariant, mutant=mutants.RECONSIDER_RESUBMITS,
    trace_witness=_accepted_offered_again,
    # named: the lemma's preprocessing 9.1 M -> 0.05 M units (vllm-0.29);
    # the mutant 76 K -> 56 K
    named_ites=True, named_mutant=True,
)
EXACTLY_ONCE_RESTARTS = world_restarts(
    "exactly-once-restarts",
    "No chunk is submitted twice over the request's incarnations (expected "
    "to fail in every release: 0.33.0's lookup resets next_stored_chunk_idx "
    "to 0, and 0.29.0 .. 0.32.0 keep it but a loaded start assigns it the "
    "hit's chunk count, which can move it back; either way computed chunks "
    "are offered again, and prepare_store's de-duplication is what keeps "
    "them from being transferred twice).",
    step_violation=once_step, bmc_violation=once_bmc, invariant=running,
    bmc_depths=(5,), mutant=mutants.RECONSIDER_RESUBMITS,
    named_shapes=_replayed_shapes,
    vllm_replay=Replay("restarts", "offered_again", on_releases=True), trace_witness=_submitted_twice,
    # named: 13.7 M -> 1.5 M units (vllm-0.33); the counterexample search
    # 4.1 M -> 0.52 M (vllm-0.29), 6.5 M -> 1.1 M (0.30.0-0.32.0), 5.4 M ->
    # 0.55 M (vllm-0.33), 5.7 M -> 0.19 M (lookup-window) per search, its
    # kept-cursor rows (vllm-0.29, 0.30.0-0.32.0) still finding the loaded
    # start the kept cursor needs; the mutant 6.2 M -> 0.32 M
    named_ites=True, named_bmc=True, named_mutant=True,
)
COMPUTED_BEFORE_STORED_RESTARTS = world_restarts(
    "computed-before-stored-restarts",
    "No chunk is submitted before all of its tokens are computed in the "
    "step's incarnation ((c + 1) * chunk_tokens <= num_computed_tokens), "
    "over any number of incarnations.",
    step_violation=computed_step, bmc_violation=computed_bmc, invariant=running,
    lemmas=_computed_lemmas, mutant=mutants.STORE_AHEAD, trace_witness=_submitted_uncomputed,
)
REFUSED_RETRIED = world_restarts(
    "refused-retried",
    "A chunk offered to a prepare_store that returns None (refused) is not "
    "passed by the cursor while the request runs (next_stored_chunk_idx "
    "stays at or below it), so the next store step of the incarnation whose "
    "mask keeps it offers it again.",
    step_violation=_refused_step, bmc_violation=at_some_step(_refused_step),
    invariant=running, mutant=mutants.OFFERS_BEFORE_CURSOR, trace_witness=_refused_passed,
    # named: the mutant 8.9 M -> 4.8 M units
    named_ites=True, named_mutant=True,
)
