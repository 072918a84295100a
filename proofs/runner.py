"""Runs obligations with Z3 and reports honest verdicts.

Verdicts: ``proved`` (every query unsat; lifecycle rows also need the rule's
``invariant`` proved), ``counterexample`` (a concrete model, decoded and
replayed through the executable rule), ``unknown`` (a solver ``unknown``,
a resource budget exhausted, or an induction step that fails with no
counterexample within the BMC bound). Every check is bounded by a Z3
resource limit (``rlimit``), never by wall time, so a verdict is a function
of the query and the Z3 version; each row reports the resources it spent.
Each row also reports non-vacuity (the premises are satisfiable) and its
mutant (must be rejected).

One row at a time: the checks and case splits are :mod:`kvreach.proofs.solve`'s,
the row list and expected table :mod:`kvreach.proofs.rows`', the
counterexample search :mod:`kvreach.proofs.search`'s, the mutant check
:mod:`kvreach.proofs.mutant_check`'s, a whole run (the pool, its order, the
result cache's rows) :mod:`kvreach.proofs.pool`'s.
"""

from __future__ import annotations

import time

import z3

from kvreach.proofs import cache, decode, matrix, solve
# The budgets, bounds and scope: proofs/config.py (each module patched where it reads them).
from kvreach.proofs.config import (
    BMC_DEPTHS, LEAF_RL, NODE_RL, ROW_RL, SCOPE_LOOKAHEAD_OFF,
    SCOPE_LOOKAHEAD_SYMBOLIC, SCOPE_WORLD_RESTARTS_034, VACUITY_RL,
)
from kvreach.proofs.framework import Ctx, Query, Role
from kvreach.proofs.induction import invariant_base_query, lemma_queries, lifecycle_step_query
from kvreach.proofs import mutant_check
from kvreach.proofs.mutant_check import run_mutant
from kvreach.proofs.obligations import INVARIANTS, OBLIGATIONS
from kvreach.proofs.rows import (
    PINNED_L, Row, ctx_for, default_vllm, invariant_holds, models_lookahead,
)
from kvreach.proofs.search import (
    confirmed_static_cex, find_counterexample, grid_counterexample, static_cex,
)
from kvreach.proofs.solve import Meter, charge, check_terms, decide, solve_cases, still_sat
from kvreach.releases import release as release_of


class ProofRunError(RuntimeError):
    pass


def _non_vacuous(q: Query, ctx: Ctx, r, lifecycle: bool, meter: Meter) -> bool:
    """The premises are satisfiable (a model of the violation shows it).
    Small parameter values are tried first (a model within bounds is a model),
    then the premises alone, split as the query was."""
    if r == z3.sat:
        return True
    if check_terms(q.premise + decode.readable_bounds(ctx), NODE_RL, meter)[0] == z3.sat:
        return True
    sub = Meter(VACUITY_RL if meter.left() is None else min(VACUITY_RL, meter.left()))
    rv, _ = solve_cases(q.premise, ctx, lifecycle, sub)
    charge(meter, sub)
    return rv == z3.sat


def _static(q: Query, ctx: Ctx, meter: Meter, split: bool = True, cases: list | None = None):
    """-> ('unsat'|'sat'|'unknown', model, vacuity_ok). ``split=False``: one
    check (the query holds none of the store configuration's symbols the case
    split is on), or, with ``cases`` (the obligation's ``static_splits`` for a
    geometry that asks for them), the case split over those
    (``solve.solve_split``)."""
    if not split:
        if cases:
            r, m = solve.solve_split(q.premise + [q.violation], cases, meter)
        else:
            r, m = check_terms(q.premise + [q.violation], LEAF_RL, meter)
        return str(r), m, r == z3.sat or any(
            check_terms(q.premise + small, rl, meter)[0] == z3.sat
            for small, rl in ((_small_lookup(ctx), NODE_RL), ([], LEAF_RL)))
    r, m = decide(q, ctx, False, meter)
    return str(r), m, _non_vacuous(q, ctx, r, False, meter)


def _small_lookup(ctx: Ctx) -> list:
    """Small numbers tried first for a static query's non-vacuity (a model
    within them is a model of the premise): the configuration's readable
    bounds, a later request of at most two SWA chunks, no GPU-local hit, no
    ``max_load_tokens``."""
    lk = ctx.lk
    return decode.readable_bounds(ctx) + [
        lk.num_tokens <= 2 * lk.C, lk.local_hit_tokens == 0, z3.Not(lk.has_max_load)]



def _static_passes(ob, lookahead: bool) -> list:
    """A static row's passes, (geometry or None, search pins or None): a row
    with L symbolic first searches F14's example (``Obligation.lookahead_example``;
    ``kvreach counterexample --hash-lookahead-tokens N``: only for N = 1, and
    then every geometry with L = N), each a search only (the loop stops at a
    sat one; the verdict of an unsat one is overwritten by the next); then
    each geometry of the grid (None: one pass), which decide the row."""
    grid = [(g, None) for g in (ob.grid or (None,))]
    if not lookahead:
        return grid
    pinned = PINNED_L[-1] if PINNED_L else None
    first = []
    if ob.lookahead_example is not None and pinned in (None, 1):
        first.append(ob.lookahead_example)
    if pinned is not None:
        first += [(g, lambda ctx, n=pinned: [ctx.s.L == n]) for g, _ in grid]
    return first + grid


# what a 1-step induction proof in the single-request world rests on (its scope says so)
RESTS_ON = "".join(f", invariant obligation '{inv.name}'" for inv in INVARIANTS)


def run_row(name: str, rule: str, model: str, invariant_ok: dict,
            vllm: str | None = None) -> Row:
    """The row (obligation, rule, load model, vllm group; None: the group
    about 0.33.0, :func:`default_vllm`)."""
    ob = OBLIGATIONS[name]
    vllm = vllm or default_vllm(name, rule)
    release = matrix.representative(vllm)
    t0 = time.perf_counter()  # reported only: no verdict depends on it
    solver0, counts0, sats0 = solve.solver_seconds_spent, dict(solve.cache_counts), len(solve.sat_log)
    meter = Meter(ROW_RL)
    scope = ob.scope
    if models_lookahead(ob, release, rule):
        scope += SCOPE_LOOKAHEAD_SYMBOLIC + ob.lookahead_scope
        if PINNED_L:  # kvreach counterexample --hash-lookahead-tokens
            scope += f"; a counterexample searched with L = {PINNED_L[-1]}"
    elif any(release_of(v).lookahead_hashes for v in matrix.versions(vllm)):
        scope += SCOPE_LOOKAHEAD_OFF
    if any(release_of(v).lookahead_hashes for v in matrix.versions(vllm)) and ob.world == "restarts":
        scope += SCOPE_WORLD_RESTARTS_034
    detail = ""
    cex = None
    if ob.kind == "static" and ob.confirm_each:
        verdict, scope, detail, cex, non_vacuous = _static_confirm_each(
            ob, rule, model, release, scope, meter)
    elif ob.kind == "static":
        la = models_lookahead(ob, release, rule)
        sctx = ctx_for(rule, model, la, lookup_variant=ob.lookup_variant, release=release)
        for g, search_pins in _static_passes(ob, la):
            if g is not None or search_pins is not None:
                sctx = ctx_for(rule, model, la, lookup_variant=ob.lookup_variant, release=release)
                sctx.pins = (g.pins(sctx) if g is not None else []) + (
                    search_pins(sctx) if search_pins is not None else [])
            cases = (ob.static_splits(sctx) if ob.static_splits is not None
                     and getattr(g, "split", False) else None)
            results = [_static(q, sctx, meter, ob.split, cases) for q in ob.queries(sctx)]
            if "sat" in [r for r, _, _ in results]:
                break
        non_vacuous = all(v for _, _, v in results)
        verdicts = [r for r, _, _ in results]
        if "sat" in verdicts:
            verdict = "counterexample"
            i = verdicts.index("sat")
            q = ob.queries(sctx)[i]
            if g is None:
                cex = static_cex(ob, sctx, q, results[i][1], model, g, meter)
            else:  # a model the replay refutes is excluded (search.confirmed_static_cex)
                _, cex, excluded = confirmed_static_cex(ob, sctx, q, "sat", results[i][1], model,
                                                        g, meter)
                if excluded:
                    cex["models_excluded"] = excluded
            if ob.grid and not cex["replayed_violation"]:
                detail = "counterexample did NOT replay through the executable rule"
        elif "unknown" in verdicts:
            verdict, detail = "unknown", _unknown_detail(meter)
        else:
            verdict = "proved"
    elif ob.grid:
        verdict, scope, detail, cex, non_vacuous = _grid_row(name, rule, model, invariant_ok, meter,
                                                             vllm)
    else:
        ctx = ctx_for(rule, model, models_lookahead(ob, release, rule), lookup_variant=ob.lookup_variant,
                      release=release, lookahead_cube=ob.lookahead_cube)
        q = lifecycle_step_query(ob, ctx)
        r = rq = z3.unsat
        for lq in lemma_queries(ob, ctx):  # world "restarts": proved first, then assumed
            r, _ = decide(lq, ctx, True, meter)
            if r != z3.unsat:
                rq = None  # a lemma fails: the main query is not run
                break
        if rq is not None:
            r, _ = decide(q, ctx, True, meter)
            rq = r
        # non-vacuity is the main query's premise's (a lemma's model is not one)
        non_vacuous = _non_vacuous(q, ctx, rq, True, meter)
        if ob.role is Role.INVARIANT or ob.world != "single":
            bq = invariant_base_query(ctx, None if ob.role is Role.INVARIANT else ob)
            rb, _ = decide(bq, ctx, True, meter)
            if rb == z3.sat:
                r = z3.sat  # the initial state breaks the invariant
            elif rb != z3.unsat and r == z3.unsat:
                r = rb  # an undecided base case is no proof
        if r == z3.unsat:
            verdict = "proved"
            scope += "; any number of steps (1-step induction"
            if ob.world != "single":
                scope += " on the obligation's own invariant, base case included"
            elif ob.rests_on_invariant:
                inv_rule = ctx.rule
                if not invariant_holds(invariant_ok, inv_rule, False):
                    verdict, detail = "unknown", f"invariant of {inv_rule} not proved"
                elif ctx.s.L is not None and not invariant_holds(invariant_ok, inv_rule, True):
                    verdict, detail = "unknown", (f"invariant of {inv_rule} not proved with "
                                                  "lookahead block hashes (L >= 1)")
                scope += RESTS_ON
            scope += ")"
        else:
            depth, cex = (None, None)
            if ob.role is not Role.INVARIANT:
                depth, cex = find_counterexample(name, ctx.rule, ctx.model, meter=meter, vllm=vllm)
            if cex is not None:
                verdict = "counterexample"
                scope += f"; counterexample by BMC, {depth} step(s) from the initial state"
                if not cex.get("replayed_violation"):
                    detail = "counterexample did NOT replay through the executable rule"
            else:
                verdict = "unknown"
                detail = (
                    _unknown_detail(meter) if r == z3.unknown else
                    f"induction step fails and BMC finds no counterexample within {max(BMC_DEPTHS)} steps"
                )
    row_sats = solve.sat_log[sats0:]
    mutant, rejected = run_mutant(name, rule, model)
    # The mutant's checks count whether they ran now or were cached: the
    # row's resources do not depend on which rows ran before in the process.
    mutant_used, mutant_sats = mutant_check.spent(name)
    used = meter.used + mutant_used
    row = Row(name, rule, model, verdict, scope, time.perf_counter() - t0,
              non_vacuous=non_vacuous, mutant=mutant, mutant_rejected=rejected,
              detail=detail, counterexample=cex, rlimit=used,
              solver_seconds=solve.solver_seconds_spent - solver0,
              cached=(solve.cache_counts["solved"] == counts0["solved"]
                      and solve.cache_counts["hit"] > counts0["hit"]), vllm=vllm)
    if cache.enabled() and row.ok_apart_from_expected() and not PINNED_L:  # a pinned L is no row
        cache.row_store(row.key, {k: getattr(row, k) for k in _KEPT},
                        row_sats + mutant_sats)
    return row


# The fields of a proved row kept whole by the cache.
_KEPT = ("verdict", "scope", "rlimit", "non_vacuous", "mutant", "mutant_rejected", "detail",
         "counterexample")


def cached_row(name: str, rule: str, model: str, vllm: str | None = None) -> Row | None:
    """The row from the cache (:func:`kvreach.proofs.cache.row_lookup`: a
    proved row of this exact source), its sat checks (non-vacuity, mutant)
    solved again, each of which must still be sat; None otherwise."""
    vllm = vllm or default_vllm(name, rule)
    entry = cache.row_lookup((name, rule, model, vllm))
    if entry is None:
        return None
    t0, solver0 = time.perf_counter(), solve.solver_seconds_spent
    try:
        if not all(still_sat(text, int(limit), str(pins)) for text, limit, pins in entry["sat"]):
            return None
    except (TypeError, ValueError, z3.Z3Exception):  # a kept check of the wrong shape
        return None
    f = entry["fields"]
    try:
        return Row(name, rule, model, f["verdict"], f["scope"], time.perf_counter() - t0,
                   rlimit=int(f["rlimit"]), non_vacuous=f["non_vacuous"], mutant=f["mutant"],
                   mutant_rejected=f["mutant_rejected"], detail=f["detail"],
                   counterexample=f["counterexample"],
                   solver_seconds=solve.solver_seconds_spent - solver0, cached=True, vllm=vllm)
    except (KeyError, TypeError, ValueError):
        return None


def _grid_row(name, rule, model, invariant_ok, meter, vllm):
    """A lifecycle obligation proved per geometry (``Obligation.grid``): the
    1-step induction with the geometry's pins; the first geometry where it
    fails gets a BMC counterexample search."""
    ob = OBLIGATIONS[name]
    scope = ob.scope
    non_vacuous = True
    failed = []
    for g in ob.grid:
        release = matrix.representative(vllm)
        ctx = ctx_for(rule, model, models_lookahead(ob, release, rule), lookup_variant=ob.lookup_variant,
                      release=release)
        ctx.pins = g.pins(ctx)
        q = lifecycle_step_query(ob, ctx)
        r, _ = decide(q, ctx, True, meter, not getattr(g, "cube_only", False))
        non_vacuous &= _non_vacuous(q, ctx, r, True, meter)
        if r != z3.unsat:
            failed.append((g, r))
    if not failed:
        ok = invariant_holds(invariant_ok, rule, models_lookahead(ob, matrix.representative(vllm), rule))
        return ("proved" if ok else "unknown"), scope + "; any number of steps (1-step induction" \
            + RESTS_ON + ")", ("" if ok else f"invariant of {rule} not proved"), None, non_vacuous
    if ob.confirm_each:
        ok = invariant_holds(invariant_ok, rule, models_lookahead(ob, matrix.representative(vllm), rule))
        return _confirm_each(name, rule, model, meter, vllm, scope, failed, non_vacuous, ok)
    (depth, cex), _ = grid_counterexample(name, rule, model, [g for g, _ in failed],
                                           meter=meter, vllm=vllm)
    if cex is not None:
        detail = "" if cex.get("replayed_violation") else \
            "counterexample did NOT replay through the executable rule"
        cex["geometries_failing"] = [x.name for x, _ in failed]
        return "counterexample", scope + f"; counterexample by BMC, {depth} step(s) from " \
            "the initial state", detail, cex, non_vacuous
    return "unknown", scope, (_unknown_detail(meter) + "; geometries: " +
                              ", ".join(f"{g.name} ({r})" for g, r in failed)), None, non_vacuous


def _witness(cex: dict, **after_chunk) -> dict:
    """A confirmed member's record in a family row (``witnesses``): its
    counterexample's chunk (then ``after_chunk``) and the group sizes the
    member leaves symbolic."""
    group = cex["config"]["group"]
    return {"chunk": cex["chunk"], **after_chunk, **{k: group[k] for k in (
        "window", "extra_retained_tokens", "eagle", "retention_interval")}}


def _confirm_each(name, rule, model, meter, vllm, scope, failed, non_vacuous, invariant_ok):
    """``Obligation.confirm_each``: a BMC counterexample at each geometry
    whose step fails (``failed``, in grid order), each replayed through the
    executable rule. The row's counterexample is the first geometry's, with
    ``geometries_failing`` (the step fails), ``geometries_confirmed`` (a
    replayed counterexample) and ``witnesses`` (geometry name -> its
    counterexample's BMC steps, chunk, window, extra_retained_tokens, EAGLE
    and retention interval).
    A failing geometry without one makes the row unknown. ``invariant_ok``:
    the rule's invariant is proved, which the other geometries' induction
    proofs rest on (else the scope says they are not proofs)."""
    first, missing, witnesses = None, [], {}
    for g, _ in failed:
        (depth, cex), _ = grid_counterexample(name, rule, model, [g], meter=meter, vllm=vllm)
        if cex is not None and cex.get("replayed_violation"):
            witnesses[g.name] = {"steps": depth, **_witness(cex)}
            first = first or cex
        else:
            missing.append(g.name + (" (BMC found none)" if cex is None else " (did NOT replay)"))
    if missing or first is None:
        return "unknown", scope, ("the step fails and no replayed counterexample was found at: "
                                  + "; ".join(missing) + ". " + _unknown_detail(meter)), \
            None, non_vacuous
    first["geometries_failing"] = [g.name for g, _ in failed]
    first["geometries_confirmed"] = list(witnesses)
    first["witnesses"] = witnesses
    n_grid = len(OBLIGATIONS[name].grid)
    others = ("" if len(failed) == n_grid else
              f"; at the other {n_grid - len(failed)} the step holds: " + (
                  "proved, any number of steps (1-step induction" + RESTS_ON + ")"
                  if invariant_ok else f"no proof (the invariant of {rule} is not proved)"))
    lo, hi = min(w["steps"] for w in witnesses.values()), max(w["steps"] for w in witnesses.values())
    steps = f"{lo}" if lo == hi else f"{lo} to {hi}"
    return "counterexample", scope + (
        f"; a counterexample by BMC at each of the {len(witnesses)} geometries where the step "
        f"fails ({steps} step(s) from the initial state; the first is this row's), each "
        "replayed through the executable rule" + others), "", first, non_vacuous


def _static_confirm_each(ob, rule, model, release, scope, meter):
    """A static obligation with ``Obligation.confirm_each`` (its deep family
    rows): every geometry of the grid decided, and each one where the query
    is sat needs its own counterexample replayed through the executable rule
    (``static_cex``); a sat one that does not replay, or an undecided one,
    makes the row unknown. The row's counterexample is the first geometry's,
    with ``geometries_confirmed`` and ``witnesses`` (geometry name -> its
    chunk, final horizon, window, extra_retained_tokens, EAGLE, retention
    interval, L and how many of its models the replay refuted first,
    ``search.confirmed_static_cex``); ``geometries_unsat``: where the query
    is unsat (for a query over witnesses, no proof beyond them: the scope
    says so)."""
    la = models_lookahead(ob, release, rule)
    first, missing, unsat, witnesses, non_vacuous = None, [], [], {}, True
    for g in ob.grid:
        sctx = ctx_for(rule, model, la, lookup_variant=ob.lookup_variant, release=release)
        sctx.pins = g.pins(sctx)
        for q in ob.queries(sctx):
            r, m, nv = _static(q, sctx, meter, ob.split)
            non_vacuous &= nv
            r, cex, excluded = confirmed_static_cex(ob, sctx, q, r, m, model, g, meter)
            if r == "sat" and cex["replayed_violation"]:
                witnesses[g.name] = {
                    **_witness(cex, final_horizon_chunks=cex["final_horizon_chunks"]),
                    "hash_lookahead_tokens": cex["config"]["request"].get(
                        "hash_lookahead_tokens", 0),
                    "models_excluded": excluded}
                first = first or cex
                break
            if r == "sat" or excluded:
                missing.append(f"{g.name} (did NOT replay; {excluded} model(s) excluded"
                               + ("" if r == "sat" else f", then {r}") + ")")
                break
            if r != "unsat":
                missing.append(g.name + f" ({r})")
                break
        else:
            unsat.append(g.name)
    if missing:
        return "unknown", scope, ("undecided or not replayed at: " + "; ".join(missing) + ". "
                                  + _unknown_detail(meter)), None, non_vacuous
    if first is None:
        return "proved", scope, "", None, non_vacuous
    first["geometries_confirmed"] = list(witnesses)
    first["geometries_unsat"] = unsat
    first["witnesses"] = witnesses
    rest = "" if not unsat else f"; at the other {len(unsat)} none (unsat)"
    return "counterexample", scope + (
        f"; a counterexample at each of {len(witnesses)} of the {len(ob.grid)} geometries "
        "(the first is this row's), each replayed through the executable rule "
        "(counterexample.witnesses' models_excluded: the models its replay refuted first)"
        + rest), \
        "", first, non_vacuous


def _unknown_detail(meter: Meter) -> str:
    if meter.exhausted:
        return (f"resource budget exhausted ({meter.exhausted} of {meter.checks} checks "
                f"stopped by their rlimit; {meter.used} of {meter.total} units spent)")
    return "solver returned unknown"



def rest_on(row: Row, invariant_ok: dict) -> None:
    """A lifecycle proof by induction rests on its rule's invariant: if that
    was not proved, the row's proof is not one."""
    ob = OBLIGATIONS[row.obligation]
    if row.verdict != "proved" or not ob.rests_on_invariant:
        return
    vllm = row.vllm or default_vllm(row.obligation, row.rule)
    la = models_lookahead(ob, matrix.representative(vllm), row.rule)
    if not invariant_holds(invariant_ok, row.rule, False):
        row.verdict, row.detail = "unknown", f"invariant of {row.rule} not proved"
    elif la and not invariant_holds(invariant_ok, row.rule, True):
        row.verdict, row.detail = "unknown", (f"invariant of {row.rule} not proved with "
                                              "lookahead block hashes (L >= 1)")
