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
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from importlib import resources

import z3

from kvreach.params import LOAD_MODELS, RULES, check_load_model, check_rule
from kvreach.proofs import cache, decode
from kvreach.proofs.framework import Ctx, Query, Role
from kvreach.proofs.induction import (
    bmc_query, invariant_base_query, lemma_queries, lifecycle_step_query,
)
from kvreach.proofs.obligations import INVARIANTS, OBLIGATIONS, run_order
from kvreach.spec.config import SymConfig

# The budgets, bounds, scope, splits and scheduling hints: proofs/config.py.
from kvreach.proofs.config import (  # noqa: E402  (names the tests patch here)
    BMC_DEPTHS, CASES_RL, CHECK_RL, EXPECTED, LEAF_RL, NODE_RL, ROOT_RL, ROW_RL, VACUITY_RL,
    measured_rlimits,
)
from kvreach.proofs.config import cube as _cube  # noqa: E402
from kvreach.proofs.config import splits as _splits  # noqa: E402


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
            "load_model": self.load_model, "verdict": self.verdict,
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


def expected_table() -> dict[tuple[str, str, str], str]:
    out = {}
    for row in expected_rows():
        out[(row["obligation"], row["rule"], row["load_model"])] = row["verdict"]
    return out


class Meter:
    """The Z3 resources (``rlimit`` units) a row has spent, and, with a
    ``total``, the most it may spend: each check gets at most what is left."""

    def __init__(self, total: int | None = None):
        self.total = total
        self.used = 0
        self.checks = 0
        self.exhausted = 0  # checks stopped by their resource limit

    def left(self) -> int | None:
        return None if self.total is None else self.total - self.used


# Optional hook (calibration, bench): called with (limit, used, result) per check.
CHECK_HOOK = None

# CPU seconds spent inside ``check()`` in this process so far (each row
# reports the difference over its run: its solver time beside its total).
_solver_seconds = 0.0
# Checks of this process answered from the result cache (proofs/cache.py) and
# unsat / unknown checks solved (a sat check is always solved: not counted).
_cache_counts = {"hit": 0, "solved": 0}
# With the cache on, (SMT-LIB text, rlimit, the model as SMT-LIB assertions)
# of every sat check of this process, in order: a row kept whole
# (cache.row_store) keeps its own, to check them again.
_sat_log: list[tuple[str, int, str]] = []


def _new_solver(c: z3.Context):
    """The solver every verdict uses: Z3's QF_NIA preprocessing, then its
    SMT core. Not ``z3.Solver()``: for these (nonlinear integer) queries its
    default strategy is the qfnia tactic, which runs the SMT core under a 2 s
    wall-clock ``try_for`` and nlsat under a 3 s one, so what a check finds
    (and spends) would depend on machine load. Nothing here has a wall-clock
    limit; the seed is fixed."""
    t = z3.Then(
        z3.Tactic("simplify", ctx=c), z3.Tactic("propagate-values", ctx=c),
        z3.Tactic("solve-eqs", ctx=c),
        z3.With(z3.Tactic("ctx-simplify", ctx=c), max_depth=30, max_steps=5_000_000),
        z3.With(z3.Tactic("simplify", ctx=c), pull_cheap_ite=True, local_ctx=True,
                local_ctx_limit=10_000_000),
        z3.Tactic("elim-uncnstr", ctx=c),
        z3.With(z3.Tactic("simplify", ctx=c), som=True),
        z3.With(z3.Tactic("smt", ctx=c), random_seed=0), ctx=c)
    return t.solver()


def _smtlib(assertions: list) -> str:
    """The query as SMT-LIB text: a function of the query alone."""
    s = z3.Solver()
    s.add(*assertions)
    return s.sexpr()


def _solve(assertions: list, rlimit: int = CHECK_RL, meter: Meter | None = None):
    """-> (z3.sat|z3.unsat|z3.unknown, model or None). One check bounded by
    ``rlimit`` Z3 resource units (less if ``meter`` has less left).

    Z3's ``rlimit`` is per check (the limit counts from the context's count
    when the check starts) but its counter, the statistic ``rlimit count``,
    is cumulative per context. Each check therefore runs in a fresh
    ``z3.Context`` (its count starts at 0: the statistic is what the check
    spent), and the query goes there as SMT-LIB text, not by
    ``ExprRef.translate``: translated terms depend on what the main context
    already holds, so the same query spent different resources (and one node
    of the case split changed answer) after other queries in the process.
    Parsed from text, the answer and the resources spent depend on the query
    and the Z3 version only. A model is translated back to the main context."""
    left = meter.left() if meter is not None else None
    limit = rlimit if left is None else min(rlimit, left)
    if limit <= 0:  # the meter's total is spent
        meter.exhausted += 1
        return z3.unknown, None
    text = _smtlib(assertions)
    global _solver_seconds
    hit = cache.lookup(text, limit) if cache.enabled() else None
    if hit is not None:  # an unsat / unknown answer to this exact query and limit
        r, used, m = {"unsat": z3.unsat, "unknown": z3.unknown}[hit[0]], hit[1], None
        _cache_counts["hit"] += 1
    else:
        c = z3.Context()
        s = _new_solver(c)
        s.set("rlimit", limit)
        s.from_string(text)
        t = time.thread_time()
        r = s.check()
        _solver_seconds += time.thread_time() - t
        st = s.statistics()
        used = int(st.get_key_value("rlimit count")) if "rlimit count" in st.keys() else 0
        m = s.model().translate(z3.main_ctx()) if r == z3.sat else None
        if r != z3.sat:
            _cache_counts["solved"] += 1
        if cache.enabled():
            if r == z3.sat:
                _sat_log.append((text, limit, _model_pins(s.model())))
            else:
                cache.store(text, limit, str(r), used)
    if meter is not None:
        meter.used += used
        meter.checks += 1
        meter.exhausted += r == z3.unknown and used >= limit
    if CHECK_HOOK is not None:
        CHECK_HOOK(limit, used, str(r))
    return r, m


def _model_pins(m) -> str:
    """A model's constants as SMT-LIB assertions ``(assert (= x 3))``: with
    them added to the query, the model is checked by evaluation (every
    symbol of the query that the model fixes is fixed; the solver only
    propagates)."""
    out = []
    for d in m.decls():
        if d.arity() == 0:
            out.append(f"(assert (= {z3.Const(d.name(), d.range()).sexpr()} {m[d].sexpr()}))")
    return "\n".join(out)


def _still_sat(text: str, limit: int, pins: str) -> bool:
    """The kept model (``pins``) still satisfies the query: checked with its
    values fixed (cheap), else the query is solved again."""
    global _solver_seconds
    for query in ((text + "\n" + pins) if pins else None, text):
        if query is None:
            continue
        c = z3.Context()
        s = _new_solver(c)
        s.set("rlimit", limit)
        s.from_string(query)
        t = time.thread_time()
        r = s.check()
        _solver_seconds += time.thread_time() - t
        if r == z3.sat:
            return True
    return False


def _solve_split(assertions: list, splits: list, meter: Meter):
    """-> (z3.sat|z3.unsat|z3.unknown, model). Depth-first case splitting:
    a short try at each inner node (``NODE_RL``: a split is cheaper than
    waiting), a long one where no split is left (``LEAF_RL``), all within
    what is left of the ``meter``'s total."""
    r, m = _solve(assertions, NODE_RL if splits else LEAF_RL, meter)
    if r != z3.unknown or not splits:
        return r, m
    head, rest = splits[0], splits[1:]
    for case in (head, z3.Not(head)):
        r, m = _solve_split(assertions + [case], rest, meter)
        if r != z3.unsat:
            return r, m
    return z3.unsat, None


def _solve_cases(assertions: list, ctx: Ctx, lifecycle: bool, meter: Meter):
    """-> (z3.sat|z3.unsat|z3.unknown, model): a short try of the whole query
    (``ROOT_RL``), then every leaf of :func:`_cube` (with :func:`_splits`
    below it). unsat only if every leaf is unsat; the first sat leaf's model
    otherwise. Every check draws on ``meter`` (an exhausted total leaves the
    remaining leaves ``unknown``)."""
    r, m = _solve(assertions, ROOT_RL, meter)
    if r != z3.unknown:
        return r, m
    verdict = z3.unsat
    for case in _cube(ctx, lifecycle):
        r, m = _solve_split(assertions + case, _splits(ctx, lifecycle), meter)
        if r == z3.sat:
            return r, m
        if r == z3.unknown:
            verdict = z3.unknown
    return verdict, None




def _decide(q: Query, ctx: Ctx, lifecycle: bool, meter: Meter):
    """The query's verdict, case split, within ``CASES_RL`` resources (and
    what the row's ``meter`` has left)."""
    sub = Meter(CASES_RL if meter.left() is None else min(CASES_RL, meter.left()))
    try:
        return _solve_cases(q.premise + [q.violation], ctx, lifecycle, sub)
    finally:
        _charge(meter, sub)


def _charge(meter: Meter, sub: Meter) -> None:
    meter.used += sub.used
    meter.checks += sub.checks
    meter.exhausted += sub.exhausted


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


def rows_for(obligation: str | None, rule: str | None, model: str | None):
    for name, ob in OBLIGATIONS.items():
        if obligation and name != obligation:
            continue
        for r in ((ob.rules or RULES) if ob.rule_specific else ("any",)):
            if rule and ob.rule_specific and r != rule:
                continue
            for m in (LOAD_MODELS if ob.model_specific else ("any",)):
                if model and ob.model_specific and m != model:
                    continue
                yield name, r, m


# what a 1-step induction proof in the single-request world rests on (its scope says so)
_RESTS_ON = "".join(f", invariant obligation '{inv.name}'" for inv in INVARIANTS)


def _ctx(rule: str, model: str, **kw) -> Ctx:
    return Ctx(SymConfig.fresh(), "vllm-0.33" if rule == "any" else rule,
               "intended" if model == "any" else model, **kw)


def find_counterexample(name: str, rule: str, model: str, store_fn=None,
                        meter: Meter | None = None, geometry=None, shaped: bool | None = None):
    """BMC from the initial state; first pinned to PR #54362's worked example
    (so regressions decode to its numbers), then over every configuration.
    With a ``geometry`` (grid obligations): its pins throughout, first at its
    example. Each query gets ``CHECK_RL`` resources (within what ``meter`` has left).
    ``shaped``: only (True) or never (False) in a shape the real scheduler
    runs (``Obligation.replayable``); None: that shape first, per query."""
    ob = OBLIGATIONS[name]
    if geometry is None and ob.grid:
        return _grid_counterexample(name, rule, model, ob.grid, store_fn, meter)[0]
    for pinned in (True, False):
        if pinned and shaped is False:
            continue  # the shaped pass searched at the example (its shape is its own)
        for depth in (ob.bmc_depths or BMC_DEPTHS):
            ctx = _ctx(rule, model, store_fn=store_fn, lookup_variant=ob.lookup_variant)
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
            for shape in _shapes(ob, ctx, pinned, shaped):
                r, m = _solve(q.premise + extra + shape + [q.violation], CHECK_RL, meter)
                if r == z3.sat:
                    break
            if r == z3.sat:
                dec = decode.decode_bmc if ob.world == "single" else decode.decode_bmc_vllm
                cex = dec(m, ctx, sts, trs, depth, replay=store_fn is None)
                if geometry is not None:
                    cex["geometry"] = geometry.name
                if store_fn is None:
                    trace = cex.pop("_trace")
                    cex["replayed_violation"] = decode.violation_in(trace, name, model, cex)
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
            None, ob.name, model, cex | {"rule": sctx.rule})
    return cex


def static_counterexample(name: str, rule: str, model: str, geometry) -> dict | None:
    """A grid static obligation's counterexample in one geometry (tests/vllm
    replays each), or None where its queries there are not sat."""
    ob, meter = OBLIGATIONS[name], Meter(ROW_RL)
    sctx = _ctx(rule, model, lookup_variant=ob.lookup_variant)
    sctx.pins = geometry.pins(sctx)
    for q in ob.queries(sctx):
        r, m = _solve(q.premise + [q.violation], LEAF_RL, meter)
        if r == z3.sat:
            return _static_cex(ob, sctx, q, m, model, geometry, meter)
    return None


def _grid_counterexample(name, rule, model, geometries, store_fn=None, meter=None):
    """The first geometry's counterexample in a shape the real scheduler runs
    (``Obligation.replayable``), else the first geometry's in any shape."""
    passes = (True, False) if OBLIGATIONS[name].replayable is not None else (None,)
    for shaped in passes:
        for g in geometries:
            found = find_counterexample(name, rule, model, store_fn, meter, g, shaped)
            if found[1] is not None:
                return found, g
    return (None, None), None


def run_row(name: str, rule: str, model: str, invariant_ok: dict) -> Row:
    ob = OBLIGATIONS[name]
    t0 = time.perf_counter()  # reported only: no verdict depends on it
    solver0, counts0, sats0 = _solver_seconds, dict(_cache_counts), len(_sat_log)
    meter = Meter(ROW_RL)
    scope = ob.scope
    detail = ""
    cex = None
    if ob.kind == "static":
        sctx = _ctx(rule, model, lookup_variant=ob.lookup_variant)
        for g in (ob.grid or (None,)):
            if g is not None:
                sctx = _ctx(rule, model, lookup_variant=ob.lookup_variant)
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
        verdict, scope, detail, cex, non_vacuous = _grid_row(name, rule, model, invariant_ok, meter)
    else:
        ctx = _ctx(rule, model, lookup_variant=ob.lookup_variant)
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
                depth, cex = find_counterexample(name, ctx.rule, ctx.model, meter=meter)
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
    row_sats = _sat_log[sats0:]
    mutant, rejected = run_mutant(name, rule, model)
    # The mutant's checks count whether they ran now or were cached: the
    # row's resources do not depend on which rows ran before in the process.
    used = meter.used + _mutant_used.get(name, 0)
    row = Row(name, rule, model, verdict, scope, time.perf_counter() - t0,
              non_vacuous=non_vacuous, mutant=mutant, mutant_rejected=rejected,
              detail=detail, counterexample=cex, rlimit=used,
              solver_seconds=_solver_seconds - solver0,
              cached=(_cache_counts["solved"] == counts0["solved"]
                      and _cache_counts["hit"] > counts0["hit"]))
    if cache.enabled() and row.ok_apart_from_expected():
        cache.row_store((name, rule, model), {k: getattr(row, k) for k in _KEPT},
                        row_sats + _mutant_sats.get(name, []))
    return row


# The fields of a proved row kept whole by the cache.
_KEPT = ("verdict", "scope", "rlimit", "non_vacuous", "mutant", "mutant_rejected", "detail",
         "counterexample")


def cached_row(name: str, rule: str, model: str) -> Row | None:
    """The row from the cache (:func:`kvreach.proofs.cache.row_lookup`: a
    proved row of this exact source), its sat checks (non-vacuity, mutant)
    solved again, each of which must still be sat; None otherwise."""
    entry = cache.row_lookup((name, rule, model))
    if entry is None:
        return None
    t0, solver0 = time.perf_counter(), _solver_seconds
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
                   solver_seconds=_solver_seconds - solver0, cached=True)
    except (KeyError, TypeError, ValueError):
        return None


def _grid_row(name, rule, model, invariant_ok, meter):
    """A lifecycle obligation proved per geometry (``Obligation.grid``): the
    1-step induction with the geometry's pins; the first geometry where it
    fails gets a BMC counterexample search."""
    ob = OBLIGATIONS[name]
    scope = ob.scope
    non_vacuous = True
    failed = []
    for g in ob.grid:
        ctx = _ctx(rule, model, lookup_variant=ob.lookup_variant)
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
                                           meter=meter)
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
    sats0 = len(_sat_log)
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
            rejected = any(_solve(q.premise + [q.violation], CHECK_RL, meter)[0] == z3.sat
                           for q in qs)
            if rejected:
                break
    elif ob.role is Role.INVARIANT:
        q = lifecycle_step_query(ob, _ctx("vllm-0.33", "intended", store_fn=store_fn))
        rejected = _solve(q.premise + [q.violation], CHECK_RL, meter)[0] == z3.sat
    else:
        depth, _ = find_counterexample(name, "vllm-0.33", "intended", store_fn=store_fn,
                                       meter=meter)
        rejected = depth is not None
    _mutant_cache[name] = (mname, rejected)
    _mutant_used[name] = meter.used
    _mutant_sats[name] = _sat_log[sats0:]
    return _mutant_cache[name]


def _worker_init(parent_pid: int) -> None:
    """A pool worker's start-up. SIGINT, SIGTERM and SIGHUP are the parent's
    to handle (``kvreach prove`` kills the workers and writes one line; no
    traceback per worker, no worker dying first and breaking the pool under
    the parent's feet), and on Linux the worker is killed when the parent
    dies however it dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so no worker
    outlives the run."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's kill only
        return
    if os.getppid() != parent_pid:  # the parent died before the prctl
        os._exit(1)


def run(obligation=None, rule=None, model=None, progress=None, jobs: int | None = None):
    """Yield one Row per (obligation, rule, load model), invariants first."""
    if obligation is not None and obligation not in OBLIGATIONS:
        from kvreach.params import ParamError

        raise ParamError("obligation", obligation, "one of " + ", ".join(OBLIGATIONS))
    if rule is not None:
        check_rule(rule)
    if model is not None:
        check_load_model(model)
    table = expected_table()
    todo = list(rows_for(obligation, rule, model))
    rules = RULES if rule is None else (rule,)
    # Lifecycle proofs rest on their rule's invariant. Every row runs at once,
    # as if each invariant held; a proof whose invariant then fails is
    # reported unknown (_rest_on), so no row waits for the invariant rows.
    # only the invariants a selected row needs (or that are selected)
    needed = {r for name, r, _ in todo
              if (OBLIGATIONS[name].rests_on_invariant or OBLIGATIONS[name].role is Role.INVARIANT)
              and r in rules}
    invs = [(inv.name, r, "any") for inv in INVARIANTS for r in rules if r in needed]
    rest = [key for key in run_order(todo) if key not in invs]
    assume = {r: True for r in rules}
    keys = invs + rest
    # proved rows of an unchanged source, their sat checks solved again
    hits = {i: row for i, key in enumerate(keys)
            if (row := cached_row(*key) if cache.enabled() else None) is not None}
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(keys) - len(hits)))
    pool = None
    if jobs == 1:
        def get(i: int) -> Row:
            return hits[i] if i in hits else run_row(*keys[i], {} if i < len(invs) else assume)
    else:
        # One solver process per core; largest first (longest-processing-time
        # order, :func:`schedule`), results still reported in table order.
        # Processes are reused: a fresh process per row (max_tasks_per_child=1)
        # made the resources schedule-independent (docs/conformance.md) but a
        # child spawned during Ctrl-C does not ignore SIGINT yet and breaks
        # the pool, so it is not used.
        # The workers are spawned (by the submits) with SIGINT, SIGTERM and
        # SIGHUP blocked, a mask they inherit: a signal during a worker's
        # start-up (before its initializer) is not a traceback in it. Here the
        # signals stay pending (or go to another thread, ``kvreach prove``'s
        # watcher) until the mask is restored.
        # The resource tracker is started first: starting it unblocks SIGINT
        # and SIGTERM (multiprocessing.resource_tracker.ensure_running).
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_worker_init, initargs=(os.getpid(),))
            futs = {i: pool.submit(run_row, *keys[i], {} if i < len(invs) else assume)
                    for i in schedule(keys) if i not in hits}
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

        def get(i: int) -> Row:
            return hits[i] if i in hits else futs[i].result()
    inv_rows = [get(i) for i in range(len(invs))]
    results = (get(len(invs) + i) for i in range(len(rest)))
    try:
        invariant_ok = {row.rule: row.verdict == "proved" for row in inv_rows}
        for row in inv_rows:
            key = (row.obligation, row.rule, row.load_model)
            if key in todo:
                row.expected = table.get(key, "?")
                if progress:
                    progress(row)
                yield row
        for row in results:
            _rest_on(row, invariant_ok)
            row.expected = table.get((row.obligation, row.rule, row.load_model), "?")
            if progress:
                progress(row)
            yield row
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def schedule(keys: list[tuple[str, str, str]], measured: dict | None = None) -> list[int]:
    """The order the pool starts ``keys`` in (indices): the invariant rows
    first (every lifecycle row's report waits for them), then the rows the
    committed run (:func:`kvreach.proofs.config.measured_rlimits`) does not
    have (new: their cost is unknown), then the largest ``rlimit`` first;
    ties in table order."""
    measured = measured_rlimits() if measured is None else measured

    def rank(i: int):
        key = keys[i]
        ob = OBLIGATIONS.get(key[0])
        return (ob is None or ob.role is not Role.INVARIANT, key in measured,
                -measured.get(key, 0), i)
    return sorted(range(len(keys)), key=rank)


def _rest_on(row: Row, invariant_ok: dict) -> None:
    """A lifecycle proof by induction rests on its rule's invariant: if that
    was not proved, the row's proof is not one."""
    if (row.verdict == "proved" and OBLIGATIONS[row.obligation].rests_on_invariant
            and not invariant_ok.get(row.rule, False)):
        row.verdict, row.detail = "unknown", f"invariant of {row.rule} not proved"
