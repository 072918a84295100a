"""The queries of a lifecycle obligation: the induction step (one
transition from any state satisfying the invariant, with a world-"restarts"
obligation's step lemmas), the invariant's base case, and bounded model
checking (BMC) from the initial state, whose models are the concrete
counterexamples the runner reports.
"""

from __future__ import annotations

import z3

from kvreach.proofs.flatten import flat_query
from kvreach.proofs.framework import Ctx, Obligation, Query
from kvreach.spec.lifecycle import K_ABORT, K_DECODE, K_FINISH, K_PREFILL, State, init, invariant, transition


def lifecycle_step_query(ob: Obligation, ctx: Ctx) -> Query:
    """One transition from an arbitrary invariant state (induction step). In
    world "restarts" the invariant is the obligation's own, and its preservation
    by a running step is part of the violation."""
    if ob.world == "single":
        pre, tr, post, prem = _single_step(ob, ctx)
        lems = ob.lemmas(ctx, pre, tr, post) if ob.lemmas else []
        return Query(prem + lems, ob.step_violation(ctx, pre, tr, post))
    pre, tr, post, prem, lems = _restarts_step(ob, ctx)
    return _named(ob, Query(prem + lems, ob.step_violation(ctx, pre, tr, post)))


def _single_step(ob: Obligation, ctx: Ctx):
    """-> (pre, transition, post, premise) of a world-"single" step from a
    state satisfying the rule's invariant (the same symbol names every call,
    so the same terms)."""
    pre, post = State.fresh("pre", ob.world), State.fresh("post", ob.world)
    tr = transition(ctx.s, ctx.rule, pre, post, ctx.c, ctx.budget, "t", ctx.store_fn,
                    world=ob.world, release=ctx.release)
    prem = ctx.base() + [ctx.c >= 0, invariant(ctx.s, ctx.rule, pre, ctx.c), tr.constraints]
    return pre, tr, post, prem


def _fresh(tag: str, ob: Obligation, ctx: Ctx) -> State:
    """A state of the obligation's world; world "restarts" of a release with
    failed transfers has the ``load_failed`` ghost."""
    return State.fresh(tag, ob.world, ob.world == "restarts" and ctx.release.failed_transfers)


def _restarts_step(ob: Obligation, ctx: Ctx):
    """-> (pre, transition, post, premise, lemmas) of a world-"restarts" step:
    built once per context, obligation and pins, shared by the induction
    step and its lemma queries (the same symbol names, so the same terms
    either way)."""
    memo = ctx.built_steps
    key = (ob.name, tuple(p.get_id() for p in ctx.pins))
    if key not in memo:
        pre, post = _fresh("pre", ob, ctx), _fresh("post", ob, ctx)
        tr = transition(ctx.s, ctx.rule, pre, post, ctx.c, ctx.budget, "t", ctx.store_fn,
                        world=ob.world, release=ctx.release)
        prem = ctx.base() + [ctx.c >= 0, ob.invariant(ctx, pre), tr.constraints]
        # the pins are kept with the entry so that their ids in the key stay theirs
        memo[key] = (pre, tr, post, prem, _step_lemmas(ob, ctx, pre, tr, post), list(ctx.pins))
    return memo[key][:5]


def _named(ob: Obligation | None, q: Query) -> Query:
    """The query with its arithmetic if-then-else terms named
    (``proofs/flatten.py``: the same query) for the obligations of
    ``Obligation.named_ites``, as it is otherwise. Not :func:`bmc_query`'s: its
    models are the decoded counterexamples, which vLLM's scheduler replays
    (a named one of exactly-once-restarts found a trace with a step kind
    the replay cannot run); the runner's counterexample search names them
    where ``Obligation.named_bmc`` says, in a shape the replay runs first."""
    return flat_query(q) if ob is not None and ob.named_ites else q


def _step_lemmas(ob: Obligation, ctx: Ctx, pre, tr, post) -> list:
    """A world-"restarts" obligation's step facts, in order: a running step keeps
    its invariant (the induction step's second half, decided on its own:
    Z3 takes far longer on the disjunction of the two), then its own lemmas."""
    keeps = z3.Implies(z3.Not(tr.finished), ob.invariant(ctx, post))
    return [keeps] + (ob.lemmas(ctx, pre, tr, post) if ob.lemmas else [])


def lemma_queries(ob: Obligation, ctx: Ctx) -> list[Query]:
    """Each of a world-"restarts" obligation's step lemmas from the step's premise
    and the lemmas before it (the terms are those of
    :func:`lifecycle_step_query`: same names)."""
    if ob.world == "single":
        if not ob.lemmas:
            return []
        pre, tr, post, prem = _single_step(ob, ctx)
        lems = ob.lemmas(ctx, pre, tr, post)
        return [Query(prem + lems[:i], z3.Not(lem)) for i, lem in enumerate(lems)]
    _, _, _, prem, lems = _restarts_step(ob, ctx)
    return [_named(ob, Query(prem + lems[:i], z3.Not(lem))) for i, lem in enumerate(lems)]


def invariant_base_query(ctx: Ctx, ob: Obligation | None = None) -> Query:
    """The initial state satisfies the invariant (the rule's, or a world
    "restarts" obligation's own)."""
    world = "single" if ob is None else ob.world
    st = State.fresh("init", world) if ob is None else _fresh("init", ob, ctx)
    inv = invariant(ctx.s, ctx.rule, st, ctx.c) if world == "single" else ob.invariant(ctx, st)
    return _named(ob, Query(ctx.base() + [ctx.c >= 0, init(st)], z3.Not(inv)))


def bmc_query(ob: Obligation, ctx: Ctx, depth: int):
    """``depth`` transitions from the initial state, the last one an end; the
    steps before it run (world "single": prefill or decode; "restarts": any kind
    that does not end the request)."""
    sts = [_fresh(f"s{i}", ob, ctx) for i in range(depth + 1)]
    trs = [
        transition(ctx.s, ctx.rule, sts[i], sts[i + 1], ctx.c, ctx.budget, f"t{i + 1}",
                   ctx.store_fn, world=ob.world, release=ctx.release)
        for i in range(depth)
    ]
    prem = ctx.base() + [ctx.c >= 0, init(sts[0])]
    for i, t in enumerate(trs):
        prem.append(t.constraints)
        if i < depth - 1:
            prem.append(z3.Or(t.kind == K_PREFILL, t.kind == K_DECODE) if ob.world == "single"
                        else z3.Not(t.finished))
        elif ob.world == "single":
            prem.append(z3.Or(t.kind == K_FINISH, t.kind == K_ABORT))
        else:
            prem.append(t.finished)  # finish, abort or error
    viol = ob.bmc_violation(ctx, sts, trs) if ob.bmc_violation else z3.BoolVal(False)
    return Query(prem, viol), sts, trs  # as written: its models are the counterexamples
