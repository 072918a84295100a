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
a whole run (the pool, its order, the result cache's rows) is
:mod:`kvreach.proofs.pool`'s.
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass, field
from importlib import resources

import z3

from kvreach.params import LOAD_MODELS, RULES
from kvreach.proofs import cache, decode, matrix, solve
# The budgets, bounds and scope: proofs/config.py (the tests patch the budgets here).
from kvreach.proofs.config import (
    BMC_DEPTHS, CHECK_RL, EXPECTED, LEAF_RL, NAMED_BMC, NAMED_MUTANTS, NODE_RL, ROW_RL,
    SCOPE_LOOKAHEAD_OFF, SCOPE_WORLD_VLLM_034, VACUITY_RL,
)
from kvreach.proofs.flatten import flat_terms
from kvreach.proofs.framework import Ctx, Query, Role
from kvreach.proofs.induction import (
    bmc_query, invariant_base_query, lemma_queries, lifecycle_step_query,
)
from kvreach.proofs.obligations import INVARIANTS, OBLIGATIONS
from kvreach.proofs.solve import Meter, _charge, _decide, _solve, _solve_cases, _still_sat
from kvreach.releases import DEFAULT as DEFAULT_RELEASE, Release, release as release_of
from kvreach.spec.config import SymConfig


class ProofRunError(RuntimeError):
    pass


@dataclass
class Row:
    obligation: str
    rule: str
    load_model: str
    verdict: str
    scope: str
    seconds: float
    expected: str = ""
    rlimit: int = 0  # Z3 resource units spent by the row's checks (mutant included)
    solver_seconds: float = 0.0  # CPU seconds inside the solver's check() calls of the row
    # every unsat / unknown check of the row was answered by the result cache
    # (proofs/cache.py; its sat checks, if any, were solved again)
    cached: bool = False
    non_vacuous: bool | None = None
    mutant: str = ""
    mutant_rejected: bool | None = None
    detail: str = ""
    counterexample: dict | None = field(default=None, repr=False)
    # the vLLM releases the row is about (``kvreach.proofs.matrix``)
    vllm: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.obligation, self.rule, self.load_model, self.vllm)

    def ok_apart_from_expected(self) -> bool:
        """Proved, or a counterexample that replays; non-vacuous, its mutant
        rejected (what a kept row must be)."""
        return (self.verdict in ("proved", "counterexample") and not self.detail
                and self.non_vacuous is True and self.mutant_rejected is True)

    @property
    def ok(self) -> bool:
        return (
            self.verdict == self.expected
            and self.verdict != "unknown"
            and "NOT replay" not in self.detail
            and self.non_vacuous is not False
            and self.mutant_rejected is not False
        )

    def to_json(self) -> dict:
        return {
            "obligation": self.obligation, "rule": self.rule,
            "load_model": self.load_model, "vllm": self.vllm, "verdict": self.verdict,
            "expected": self.expected, "scope": self.scope,
            "seconds": round(self.seconds, 3), "solver_seconds": round(self.solver_seconds, 3),
            "rlimit": self.rlimit, "cached": self.cached,
            "non_vacuous": self.non_vacuous,
            "mutant": self.mutant, "mutant_rejected": self.mutant_rejected,
            "detail": self.detail, "counterexample": self.counterexample,
        }


def expected_rows() -> list[dict]:
    """The rows of ``proofs/expected.toml`` as written."""
    text = resources.files("kvreach.proofs").joinpath(EXPECTED).read_text()
    return tomllib.loads(text)["row"]


def expected_table() -> dict[tuple[str, str, str, str], str]:
    """(obligation, rule, load model, vllm) -> the expected verdict."""
    out = {}
    for row in expected_rows():
        out[(row["obligation"], row["rule"], row["load_model"], row["vllm"])] = row["verdict"]
    return out


def _non_vacuous(q: Query, ctx: Ctx, r, lifecycle: bool, meter: Meter) -> bool:
    """The premises are satisfiable (a model of the violation shows it).
    Small parameter values are tried first (a model within bounds is a model),
    then the premises alone, split as the query was."""
    if r == z3.sat:
        return True
    if _solve(q.premise + decode.readable_bounds(ctx), NODE_RL, meter)[0] == z3.sat:
        return True
    sub = Meter(VACUITY_RL if meter.left() is None else min(VACUITY_RL, meter.left()))
    rv, _ = _solve_cases(q.premise, ctx, lifecycle, sub)
    _charge(meter, sub)
    return rv == z3.sat


def _static(q: Query, ctx: Ctx, meter: Meter, split: bool = True):
    """-> ('unsat'|'sat'|'unknown', model, vacuity_ok). ``split=False``: one
    check (the query holds none of the store configuration's symbols the case
    split is on)."""
    if not split:
        r, m = _solve(q.premise + [q.violation], LEAF_RL, meter)
        return str(r), m, r == z3.sat or any(
            _solve(q.premise + small, rl, meter)[0] == z3.sat
            for small, rl in ((_small_lookup(ctx), NODE_RL), ([], LEAF_RL)))
    r, m = _decide(q, ctx, False, meter)
    return str(r), m, _non_vacuous(q, ctx, r, False, meter)


def _small_lookup(ctx: Ctx) -> list:
    """Small numbers tried first for a static query's non-vacuity (a model
    within them is a model of the premise): the configuration's readable
    bounds, a later request of at most two SWA chunks, no GPU-local hit, no
    ``max_load_tokens``."""
    lk = ctx.lk
    return decode.readable_bounds(ctx) + [
        lk.num_tokens <= 2 * lk.C, lk.local_hit_tokens == 0, z3.Not(lk.has_max_load)]


def rows_for(obligation: str | None, rule: str | None, model: str | None,
             vllm: str | None = None):
    """Row keys (obligation, rule, load model, vllm group) of the selection;
    ``vllm``: a version, the rows about it."""
    for name, ob in OBLIGATIONS.items():
        if obligation and name != obligation:
            continue
        for r in ((ob.rules or RULES) if ob.rule_specific else ("any",)):
            if rule and ob.rule_specific and r != rule:
                continue
            for m in (LOAD_MODELS if ob.model_specific else ("any",)):
                if model and ob.model_specific and m != model:
                    continue
                for g in matrix.groups(ob.reads, r, ob.lookup_variant):
                    name_g = matrix.group_name(g)
                    if vllm is None or matrix.covers(name_g, vllm):
                        yield name, r, m, name_g


def selected_rows(obligation: str | None, rule: str | None, model: str | None,
                  vllm: str | None = None, deep: bool = False):
    """The rows a run makes: :func:`rows_for`'s, without the rows of the
    deep obligations (``Obligation.deep``) unless ``deep`` or the obligation
    is selected by name."""
    return [k for k in rows_for(obligation, rule, model, vllm)
            if deep or obligation or not OBLIGATIONS[k[0]].deep]


def default_vllm(name: str, rule: str) -> str:
    """The release group of ``name``'s row under ``rule`` that is about
    vLLM 0.33.0 (the rule's only group when none is: vllm-0.29's)."""
    ob = OBLIGATIONS[name]
    gs = matrix.groups(ob.reads, rule, ob.lookup_variant)
    return matrix.group_name(next((g for g in gs if DEFAULT_RELEASE in g), gs[-1]))


# what a 1-step induction proof in the single-request world rests on (its scope says so)
_RESTS_ON = "".join(f", invariant obligation '{inv.name}'" for inv in INVARIANTS)


def _ctx(rule: str, model: str, **kw) -> Ctx:
    return Ctx(SymConfig.fresh(), "vllm-0.33" if rule == "any" else rule,
               "intended" if model == "any" else model, **kw)


def _release(name: str, rule: str, vllm: str | None) -> Release:
    return matrix.representative(vllm or default_vllm(name, rule))


def find_counterexample(name: str, rule: str, model: str, store_fn=None,
                        meter: Meter | None = None, geometry=None, shaped: bool | None = None,
                        vllm: str | None = None, named: bool | None = None):
    """BMC from the initial state; first pinned to PR #54362's worked example
    (so regressions decode to its numbers), then over every configuration.
    With a ``geometry`` (grid obligations): its pins throughout, first at its
    example. Each query gets ``CHECK_RL`` resources (within what ``meter`` has left).
    ``shaped``: only (True) or never (False) in a shape the real scheduler
    runs (``Obligation.replayable``); None: that shape first, per query.
    ``named``: each query's if-then-else terms named (``proofs/flatten.py``;
    None: for the obligations of ``config.NAMED_BMC``), the row's own search
    first in the obligation's ``named_shapes``."""
    ob = OBLIGATIONS[name]
    if named is None:
        named = name in NAMED_BMC
    if geometry is None and ob.grid:
        return _grid_counterexample(name, rule, model, ob.grid, store_fn, meter, vllm, named)[0]
    for pinned in (True, False):
        if pinned and shaped is False:
            continue  # the shaped pass searched at the example (its shape is its own)
        for depth in (ob.bmc_depths or BMC_DEPTHS):
            ctx = _ctx(rule, model, store_fn=store_fn, lookup_variant=ob.lookup_variant,
                       release=_release(name, rule, vllm))
            if geometry is not None:
                ctx.pins = geometry.pins(ctx)
            q, sts, trs = bmc_query(ob, ctx, depth)
            if geometry is not None:
                extra = (geometry.example_pins(ctx) + decode.scheduler_cut(ctx, sts, trs)
                         if pinned else decode.readable_bounds(ctx))
                if pinned and not geometry.example:
                    continue
            else:
                extra = (
                    decode.pr_example_pins(ctx) + decode.scheduler_cut(ctx, sts, trs)
                    if pinned else decode.readable_bounds(ctx)
                )
            shapes = _shapes(ob, ctx, pinned, shaped)
            if named and store_fn is None and ob.named_shapes is not None:
                shapes = list(ob.named_shapes(ctx, sts, trs)) + shapes
            for shape in shapes:
                terms = q.premise + extra + shape + [q.violation]
                r, m = _solve(flat_terms(terms) if named else terms, CHECK_RL, meter)
                if r == z3.sat:
                    break
            if r == z3.sat:
                dec = decode.decode_bmc if ob.world == "single" else decode.decode_bmc_vllm
                cex = dec(m, ctx, sts, trs, depth, replay=store_fn is None)
                if geometry is not None:
                    cex["geometry"] = geometry.name
                if store_fn is None:
                    trace = cex.pop("_trace")
                    cex["replayed_violation"] = decode.violation_in(trace, name, model, cex, ob.witness)
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


def _static_cex(ob, sctx: Ctx, q: Query, m, model: str, geometry, meter: Meter) -> dict:
    """Decode a static query's model; with ``Obligation.replayable``, the
    same violation in a shape vLLM's scheduler can run, if there is one
    (the first of its alternatives the solver satisfies)."""
    for pins in (ob.replayable(sctx) if ob.replayable is not None else ()):
        if z3.is_true(m.eval(z3.And(pins), model_completion=True)):
            break  # the model is in this shape already
        rp, mp = _solve(q.premise + pins + [q.violation], LEAF_RL, meter)
        if rp == z3.sat:
            m = mp
            break
    cex = decode.decode_static(m, sctx)
    if geometry is not None:
        cex["geometry"] = geometry.name
        cex["replayed_violation"] = decode.violation_in(
            None, ob.name, model, cex | {"rule": sctx.rule}, ob.witness)
    return cex


def static_counterexample(name: str, rule: str, model: str, geometry,
                          vllm: str | None = None) -> dict | None:
    """A grid static obligation's counterexample in one geometry (tests/vllm
    replays each), or None where its queries there are not sat."""
    ob, meter = OBLIGATIONS[name], Meter(ROW_RL)
    sctx = _ctx(rule, model, lookup_variant=ob.lookup_variant, release=_release(name, rule, vllm))
    sctx.pins = geometry.pins(sctx)
    for q in ob.queries(sctx):
        r, m = _solve(q.premise + [q.violation], LEAF_RL, meter)
        if r == z3.sat:
            return _static_cex(ob, sctx, q, m, model, geometry, meter)
    return None


def _grid_counterexample(name, rule, model, geometries, store_fn=None, meter=None, vllm=None,
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


def run_row(name: str, rule: str, model: str, invariant_ok: dict,
            vllm: str | None = None) -> Row:
    """The row (obligation, rule, load model, vllm group; None: the group
    about 0.33.0, :func:`default_vllm`)."""
    ob = OBLIGATIONS[name]
    vllm = vllm or default_vllm(name, rule)
    release = matrix.representative(vllm)
    t0 = time.perf_counter()  # reported only: no verdict depends on it
    solver0, counts0, sats0 = solve._solver_seconds, dict(solve._cache_counts), len(solve._sat_log)
    meter = Meter(ROW_RL)
    scope = ob.scope
    if any(release_of(v).lookahead_hashes for v in matrix.versions(vllm)):
        scope += SCOPE_LOOKAHEAD_OFF + (SCOPE_WORLD_VLLM_034 if ob.world == "vllm" else "")
    detail = ""
    cex = None
    if ob.kind == "static":
        sctx = _ctx(rule, model, lookup_variant=ob.lookup_variant, release=release)
        for g in (ob.grid or (None,)):
            if g is not None:
                sctx = _ctx(rule, model, lookup_variant=ob.lookup_variant, release=release)
                sctx.pins = g.pins(sctx)
            results = [_static(q, sctx, meter, ob.split) for q in ob.queries(sctx)]
            if "sat" in [r for r, _, _ in results]:
                break
        non_vacuous = all(v for _, _, v in results)
        verdicts = [r for r, _, _ in results]
        if "sat" in verdicts:
            verdict = "counterexample"
            i = verdicts.index("sat")
            cex = _static_cex(ob, sctx, ob.queries(sctx)[i], results[i][1], model, g, meter)
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
        ctx = _ctx(rule, model, lookup_variant=ob.lookup_variant, release=release)
        q = lifecycle_step_query(ob, ctx)
        r = rq = z3.unsat
        for lq in lemma_queries(ob, ctx):  # world "vllm": proved first, then assumed
            r, _ = _decide(lq, ctx, True, meter)
            if r != z3.unsat:
                rq = None  # a lemma fails: the main query is not run
                break
        if rq is not None:
            r, _ = _decide(q, ctx, True, meter)
            rq = r
        # non-vacuity is the main query's premise's (a lemma's model is not one)
        non_vacuous = _non_vacuous(q, ctx, rq, True, meter)
        if ob.role is Role.INVARIANT or ob.world != "single":
            bq = invariant_base_query(ctx, None if ob.role is Role.INVARIANT else ob)
            rb, _ = _decide(bq, ctx, True, meter)
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
                if not invariant_ok.get(inv_rule, False):
                    verdict, detail = "unknown", f"invariant of {inv_rule} not proved"
                scope += _RESTS_ON
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
    row_sats = solve._sat_log[sats0:]
    mutant, rejected = run_mutant(name, rule, model)
    # The mutant's checks count whether they ran now or were cached: the
    # row's resources do not depend on which rows ran before in the process.
    used = meter.used + _mutant_used.get(name, 0)
    row = Row(name, rule, model, verdict, scope, time.perf_counter() - t0,
              non_vacuous=non_vacuous, mutant=mutant, mutant_rejected=rejected,
              detail=detail, counterexample=cex, rlimit=used,
              solver_seconds=solve._solver_seconds - solver0,
              cached=(solve._cache_counts["solved"] == counts0["solved"]
                      and solve._cache_counts["hit"] > counts0["hit"]), vllm=vllm)
    if cache.enabled() and row.ok_apart_from_expected():
        cache.row_store(row.key, {k: getattr(row, k) for k in _KEPT},
                        row_sats + _mutant_sats.get(name, []))
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
    t0, solver0 = time.perf_counter(), solve._solver_seconds
    try:
        if not all(_still_sat(text, int(limit), str(pins)) for text, limit, pins in entry["sat"]):
            return None
    except (TypeError, ValueError, z3.Z3Exception):  # a kept check of the wrong shape
        return None
    f = entry["fields"]
    try:
        return Row(name, rule, model, f["verdict"], f["scope"], time.perf_counter() - t0,
                   rlimit=int(f["rlimit"]), non_vacuous=f["non_vacuous"], mutant=f["mutant"],
                   mutant_rejected=f["mutant_rejected"], detail=f["detail"],
                   counterexample=f["counterexample"],
                   solver_seconds=solve._solver_seconds - solver0, cached=True, vllm=vllm)
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
        ctx = _ctx(rule, model, lookup_variant=ob.lookup_variant,
                   release=matrix.representative(vllm))
        ctx.pins = g.pins(ctx)
        q = lifecycle_step_query(ob, ctx)
        r, _ = _decide(q, ctx, True, meter)
        non_vacuous &= _non_vacuous(q, ctx, r, True, meter)
        if r != z3.unsat:
            failed.append((g, r))
    if not failed:
        ok = invariant_ok.get(rule, False)
        return ("proved" if ok else "unknown"), scope + "; any number of steps (1-step induction" \
            + _RESTS_ON + ")", ("" if ok else f"invariant of {rule} not proved"), None, non_vacuous
    (depth, cex), _ = _grid_counterexample(name, rule, model, [g for g, _ in failed],
                                           meter=meter, vllm=vllm)
    if cex is not None:
        detail = "" if cex.get("replayed_violation") else \
            "counterexample did NOT replay through the executable rule"
        cex["geometries_failing"] = [x.name for x, _ in failed]
        return "counterexample", scope + f"; counterexample by BMC, {depth} step(s) from " \
            "the initial state", detail, cex, non_vacuous
    return "unknown", scope, (_unknown_detail(meter) + "; geometries: " +
                              ", ".join(f"{g.name} ({r})" for g, r in failed)), None, non_vacuous


def _unknown_detail(meter: Meter) -> str:
    if meter.exhausted:
        return (f"resource budget exhausted ({meter.exhausted} of {meter.checks} checks "
                f"stopped by their rlimit; {meter.used} of {meter.total} units spent)")
    return "solver returned unknown"


_mutant_cache: dict[str, tuple[str, bool]] = {}
_mutant_used: dict[str, int] = {}
_mutant_sats: dict[str, list[tuple[str, int, str]]] = {}


def run_mutant(name: str, rule: str, model: str) -> tuple[str, bool]:
    """The obligation's mutant (of vllm-0.33 under intended) must be rejected.
    Its checks share one ``ROW_RL`` total; the resources spent are kept in
    ``_mutant_used``."""
    if name in _mutant_cache:
        return _mutant_cache[name]
    sats0 = len(solve._sat_log)
    ob = OBLIGATIONS[name]
    mname, store_fn, params = ob.mutant.name, ob.mutant.store_fn, ob.mutant.params
    meter = Meter(ROW_RL)
    if params is not None:
        rejected = False
        for g in (ob.grid or (None,)):
            mctx = _ctx("vllm-0.33", "intended", mutant=params,
                        lookup_variant=params.get("lookup_variant", ob.lookup_variant))
            if g is not None:
                mctx.pins = g.pins(mctx)
            qs = ob.queries(mctx)
            rejected = any(_solve(_mutant_terms(name, q.premise + [q.violation]), CHECK_RL,
                                  meter)[0] == z3.sat for q in qs)
            if rejected:
                break
    elif ob.role is Role.INVARIANT:
        q = lifecycle_step_query(ob, _ctx("vllm-0.33", "intended", store_fn=store_fn))
        rejected = _solve(_mutant_terms(name, q.premise + [q.violation]), CHECK_RL,
                          meter)[0] == z3.sat
    else:
        depth, _ = find_counterexample(name, "vllm-0.33", "intended", store_fn=store_fn,
                                       meter=meter, named=name in NAMED_MUTANTS)
        rejected = depth is not None
    _mutant_cache[name] = (mname, rejected)
    _mutant_used[name] = meter.used
    _mutant_sats[name] = solve._sat_log[sats0:]
    return _mutant_cache[name]


def _mutant_terms(name: str, terms: list) -> list:
    """A mutant check's assertions, named (``proofs/flatten.py``) for the
    obligations of :data:`NAMED_MUTANTS`."""
    return flat_terms(terms) if name in NAMED_MUTANTS else terms


def _rest_on(row: Row, invariant_ok: dict) -> None:
    """A lifecycle proof by induction rests on its rule's invariant: if that
    was not proved, the row's proof is not one."""
    if (row.verdict == "proved" and OBLIGATIONS[row.obligation].rests_on_invariant
            and not invariant_ok.get(row.rule, False)):
        row.verdict, row.detail = "unknown", f"invariant of {row.rule} not proved"
