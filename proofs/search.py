"""The counterexample search: BMC from the initial state (a lifecycle
obligation's), first pinned to PR #54362's worked example or a grid
geometry's example, in the shapes vLLM's real scheduler runs
(``Obligation.replayable``, ``named_shapes``) first; and a static query's
model in such a shape. Each counterexample found is decoded and replayed
through the executable rule (``kvreach.proofs.decode``).
"""

from __future__ import annotations

import z3

from kvreach.proofs import decode
from kvreach.proofs.config import BMC_DEPTHS, CHECK_RL, CONFIRM_RETRIES, LEAF_RL, ROW_RL
from kvreach.proofs.flatten import flat_terms
from kvreach.proofs.framework import Ctx, Query
from kvreach.proofs.induction import bmc_query
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.rows import PINNED_L, ctx_for, models_lookahead, release_for
from kvreach.proofs.solve import Meter, check_terms


def find_counterexample(name: str, rule: str, model: str, store_fn=None,
                        meter: Meter | None = None, geometry=None, shaped: bool | None = None,
                        vllm: str | None = None, named: bool | None = None):
    """BMC from the initial state; first pinned to PR #54362's worked example
    (so regressions decode to its numbers; a row with vLLM 0.34.0's
    lookahead hashes symbolic first to F14's, ``decode.lookahead_example_pins``),
    then over every configuration.
    With a ``geometry`` (grid obligations): its pins throughout, first at its
    example. Each query gets ``CHECK_RL`` resources (within what ``meter`` has left).
    ``shaped``: only (True) or never (False) in a shape the real scheduler
    runs (``Obligation.replayable``); None: that shape first, per query.
    ``named``: each query's if-then-else terms named (``proofs/flatten.py``;
    None: ``Obligation.named_bmc``), the row's own search
    first in the obligation's ``named_shapes``."""
    ob = OBLIGATIONS[name]
    if named is None:
        named = ob.named_bmc
    if geometry is None and ob.grid:
        return grid_counterexample(name, rule, model, ob.grid, store_fn, meter, vllm, named)[0]
    # (the example the pass pins, pinned): a lookahead row (L symbolic,
    # models_lookahead) first at F14's example (L = 1, a finished request:
    # the class the mode adds), then as every row
    passes = [(lambda ctx, trs: decode.pr_example_pins(ctx), True), (None, False)]
    release = release_for(name, rule, vllm)
    lookahead = models_lookahead(ob, release, rule)
    pinned_l = PINNED_L[-1] if lookahead and PINNED_L else None
    if lookahead and geometry is None and pinned_l in (None, 1):
        passes.insert(0, (decode.lookahead_example_pins, True))
    for example_pins, pinned in passes:
        if pinned and shaped is False:
            continue  # the shaped pass searched at the example (its shape is its own)
        for depth in (ob.bmc_depths or BMC_DEPTHS):
            ctx = ctx_for(rule, model, lookahead, store_fn=store_fn,
                          lookup_variant=ob.lookup_variant, release=release)
            if geometry is not None:
                ctx.pins = geometry.pins(ctx)
            q, sts, trs = bmc_query(ob, ctx, depth)
            if geometry is not None:
                extra = (geometry.example_pins(ctx) + decode.scheduler_cut(ctx, sts, trs)
                         if pinned else decode.readable_bounds(ctx, geometry))
                if pinned and not geometry.example:
                    continue
            else:
                extra = (
                    example_pins(ctx, trs) + decode.scheduler_cut(ctx, sts, trs)
                    if pinned else decode.readable_bounds(ctx)
                )
            shapes = _shapes(ob, ctx, pinned, shaped)
            if pinned_l is not None:
                shapes = [shape + [ctx.s.L == pinned_l] for shape in shapes]
            if named and store_fn is None and ob.named_shapes is not None:
                shapes = list(ob.named_shapes(ctx, sts, trs)) + shapes
            for shape in shapes:
                terms = q.premise + extra + shape + [q.violation]
                r, m = check_terms(flat_terms(terms) if named else terms, CHECK_RL, meter)
                if r == z3.sat:
                    break
            if r == z3.sat:
                dec = decode.decode_bmc if ob.world == "single" else decode.decode_bmc_restarts
                cex = dec(m, ctx, sts, trs, depth, replay=store_fn is None)
                if geometry is not None:
                    cex["geometry"] = geometry.name
                if store_fn is None:
                    trace = cex.pop("_trace")
                    cex["replayed_violation"] = decode.violation_in(trace, ob, model, cex)
                return depth, cex
    return None, None


def _shapes(ob, ctx: Ctx, pinned: bool, shaped: bool | None) -> list[list]:
    """The extra constraints a counterexample search tries, in order: the
    shapes the real scheduler runs (``Obligation.replayable``) and/or none.
    The pinned example is one shape already."""
    if pinned or ob.replayable is None:
        return [[]]
    replayable = ob.replayable(ctx)
    return {None: replayable + [[]], True: replayable, False: [[]]}[shaped]


def static_cex(ob, sctx: Ctx, q: Query, m, model: str, geometry, meter: Meter) -> dict:
    """Decode a static query's model; with ``Obligation.replayable``, the
    same violation in a shape vLLM's scheduler can run, if there is one
    (the first of its alternatives the solver satisfies)."""
    for pins in (ob.replayable(sctx) if ob.replayable is not None else ()):
        if z3.is_true(m.eval(z3.And(pins), model_completion=True)):
            break  # the model is in this shape already
        rp, mp = check_terms(q.premise + pins + [q.violation], LEAF_RL, meter)
        if rp == z3.sat:
            m = mp
            break
    cex = decode.decode_static(m, sctx, ob)
    if geometry is not None:
        cex["geometry"] = geometry.name
        full = cex | {"rule": sctx.rule}
        cex["replayed_violation"] = decode.violation_in(None, ob, model, full)
        cex.update({k: v for k, v in full.items() if k not in cex and k != "rule"})  # its replay's record
    return cex


def confirmed_static_cex(ob, sctx: Ctx, q: Query, r: str, m, model: str, geometry,
                         meter: Meter) -> tuple[str, dict | None, int]:
    """A static query's result ``r`` / model ``m`` at ``geometry``, its
    counterexample confirmed: a model the executable replay refutes (a later
    request outside the query's witnesses loads the chunk) is excluded (its
    chunk, final horizon and window) and the query solved again, up to
    ``CONFIRM_RETRIES`` times. -> (the last result, its counterexample or
    None, how many models were excluded)."""
    blocked, cex = [], None
    while r == "sat":
        # the shaped re-solve (Obligation.replayable) keeps the exclusions
        cex = static_cex(ob, sctx, Query(q.premise + blocked, q.violation), m, model, geometry,
                         meter)
        if cex["replayed_violation"] or len(blocked) == CONFIRM_RETRIES:
            break
        blocked.append(z3.Not(z3.And(sctx.c == cex["chunk"],
                                     sctx.final_horizon_chunks == cex["final_horizon_chunks"],
                                     sctx.s.W == cex["config"]["group"]["window"])))
        rb, m = check_terms(q.premise + blocked + [q.violation], LEAF_RL, meter)
        r = str(rb)
    return r, cex, len(blocked)


def static_counterexample(name: str, rule: str, model: str, geometry,
                          vllm: str | None = None) -> dict | None:
    """A grid static obligation's counterexample in one geometry (tests/vllm
    replays each), or None where its queries there are not sat."""
    ob, meter = OBLIGATIONS[name], Meter(ROW_RL)
    release = release_for(name, rule, vllm)
    sctx = ctx_for(rule, model, models_lookahead(ob, release, rule), lookup_variant=ob.lookup_variant,
                   release=release)
    sctx.pins = geometry.pins(sctx)
    for q in ob.queries(sctx):
        r, m = check_terms(q.premise + [q.violation], LEAF_RL, meter)
        if r == z3.sat:  # confirmed as the row's is (runner.run_row, _static_confirm_each)
            return confirmed_static_cex(ob, sctx, q, "sat", m, model, geometry, meter)[1]
    return None


def grid_counterexample(name, rule, model, geometries, store_fn=None, meter=None, vllm=None,
                         named=None):
    """The first geometry's counterexample in a shape the real scheduler runs
    (``Obligation.replayable``), else the first geometry's in any shape."""
    passes = (True, False) if OBLIGATIONS[name].replayable is not None else (None,)
    for shaped in passes:
        for g in geometries:
            found = find_counterexample(name, rule, model, store_fn, meter, g, shaped, vllm, named)
            if found[1] is not None:
                return found, g
    return (None, None), None

