"""Runs obligations with Z3 and reports honest verdicts.

Verdicts: ``proved`` (every query unsat; lifecycle rows also need the rule's
``invariant`` proved), ``counterexample`` (a concrete model, decoded and
replayed through the executable rule), ``unknown`` (a solver ``unknown`` or
timeout, or an induction step that fails with no counterexample within the
BMC bound). Each row also reports non-vacuity (the premises are satisfiable)
and its mutant (must be rejected).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from importlib import resources

import z3

from kvreach.params import LOAD_MODELS, RULES, check_load_model, check_rule
from kvreach.proofs import decode
from kvreach.proofs.mutants import MUTANTS
from kvreach.proofs.obligations import (
    OBLIGATIONS, Ctx, Query, bmc_query, invariant_base_query, lifecycle_step_query,
)
from kvreach.spec.config import R_NONE, R_ZERO, SymConfig
from kvreach.spec.lifecycle import K_FINISH

TIMEOUT_MS = 15_000
BMC_DEPTHS = (1, 2, 3)
SCOPE_SYMBOLIC = (
    "symbolic, unbounded: B = block_size*dcp_world_size >= 1, window >= 2, "
    "blocks_per_chunk >= 1, alignment (none or A = psA*B), retention (None, 0, "
    "R = k*chunk), eagle, prompt_tokens >= 1, max_offload_tokens, "
    "offload_prompt_only, budget >= 1, step sizes, chunk index; excluded: alignment_tokens % B != 0 "
    "(vLLM's dense fallback), window 1, null blocks, prepare_store refusals, preemption"
)


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
    non_vacuous: bool | None = None
    mutant: str = ""
    mutant_rejected: bool | None = None
    detail: str = ""
    counterexample: dict | None = field(default=None, repr=False)

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
            "seconds": round(self.seconds, 3), "non_vacuous": self.non_vacuous,
            "mutant": self.mutant, "mutant_rejected": self.mutant_rejected,
            "detail": self.detail, "counterexample": self.counterexample,
        }


def expected_rows() -> list[dict]:
    """The rows of ``proofs/expected.toml`` as written."""
    text = resources.files("kvreach.proofs").joinpath("expected.toml").read_text()
    return tomllib.loads(text)["row"]


def expected_table() -> dict[tuple[str, str, str], str]:
    out = {}
    for row in expected_rows():
        out[(row["obligation"], row["rule"], row["load_model"])] = row["verdict"]
    return out


def _solve(assertions: list, timeout_ms: int = TIMEOUT_MS):
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    s.add(*assertions)
    r = s.check()
    return r, (s.model() if r == z3.sat else None)


def _cube(ctx: Ctx, lifecycle: bool) -> list[list]:
    """The case split made up front when the whole query is not decided
    quickly: every combination of the step kind (finish or not; lifecycle
    queries only), EAGLE or not, and the retention mode (None / 0 / > 0).
    Each dimension's cases are exhaustive and disjoint whatever the other
    constraints say, so the leaves partition the query."""
    s = ctx.s
    dims = [
        [s.eagle, z3.Not(s.eagle)],
        [s.rmode == R_NONE, s.rmode == R_ZERO, z3.And(s.rmode != R_NONE, s.rmode != R_ZERO)],
    ]
    if lifecycle:
        kind = z3.Int("kind_t")
        dims.insert(0, [kind == K_FINISH, kind != K_FINISH])
    return [list(case) for case in itertools.product(*dims)]


def _splits(ctx: Ctx, lifecycle: bool) -> list:
    """Further case splits tried, in order, inside a cube leaf when Z3
    answers ``unknown`` on it: the nonlinear integer queries are decided far
    more often per case. A split only partitions the query; every leaf must
    be unsat for a proof."""
    s = ctx.s
    out = [s.has_align, s.dense, s.prompt_only, ctx.L % s.seg == 0]
    if lifecycle:
        out.append(ctx.c < z3.Int("cursor_pre"))
    return out + [s.has_max, s.bpc == 1, ctx.c < s.prompt_horizon, ctx.H % s.seg == 0]


ROOT_MS, NODE_MS, LEAF_MS = 500, 2_000, 30_000


def _solve_split(assertions: list, splits: list, deadline: float):
    """-> (z3.sat|z3.unsat|z3.unknown, model). Depth-first case splitting:
    a short try at each inner node (a split is cheaper than waiting), a long
    one where no split is left."""
    left_ms = int((deadline - time.perf_counter()) * 1000)
    if left_ms <= 0:
        return z3.unknown, None
    r, m = _solve(assertions, min(NODE_MS if splits else LEAF_MS, left_ms))
    if r != z3.unknown or not splits:
        return r, m
    head, rest = splits[0], splits[1:]
    for case in (head, z3.Not(head)):
        r, m = _solve_split(assertions + [case], rest, deadline)
        if r != z3.unsat:
            return r, m
    return z3.unsat, None


def _solve_cases(assertions: list, ctx: Ctx, lifecycle: bool, deadline: float):
    """-> (z3.sat|z3.unsat|z3.unknown, model): a short try of the whole query,
    then every leaf of :func:`_cube` (with :func:`_splits` below it). unsat
    only if every leaf is unsat; the first sat leaf's model otherwise."""
    r, m = _solve(assertions, ROOT_MS)
    if r != z3.unknown:
        return r, m
    verdict = z3.unsat
    for case in _cube(ctx, lifecycle):
        r, m = _solve_split(assertions + case, _splits(ctx, lifecycle), deadline)
        if r == z3.sat:
            return r, m
        if r == z3.unknown:
            verdict = z3.unknown
    return verdict, None


ROW_BUDGET_S = 150.0
# Rough seconds per row on this machine, for scheduling only.
SLOW = {"completeness": 25, "lookup-scan-closed-form": 5, "load-witness": 20, "chunk-mask-closed-form": 17,
        "mask-equivalence": 8, "soundness": 6}


def _decide(q: Query, ctx: Ctx, lifecycle: bool):
    return _solve_cases(q.premise + [q.violation], ctx, lifecycle, time.perf_counter() + ROW_BUDGET_S)


def _non_vacuous(q: Query, ctx: Ctx, r, lifecycle: bool) -> bool:
    """The premises are satisfiable (a model of the violation shows it).
    Small parameter values are tried first (a model within bounds is a model),
    then the premises alone, split as the query was."""
    if r == z3.sat:
        return True
    if _solve(q.premise + decode.readable_bounds(ctx), NODE_MS)[0] == z3.sat:
        return True
    rv, _ = _solve_cases(q.premise, ctx, lifecycle, time.perf_counter() + 60)
    return rv == z3.sat


def _static(q: Query, ctx: Ctx, split: bool = True):
    """-> ('unsat'|'sat'|'unknown', model, vacuity_ok). ``split=False``: one
    solver call (the query holds none of the store configuration's symbols
    the case split is on)."""
    if not split:
        r, m = _solve(q.premise + [q.violation], LEAF_MS)
        return str(r), m, r == z3.sat or _solve(q.premise, LEAF_MS)[0] == z3.sat
    r, m = _decide(q, ctx, False)
    return str(r), m, _non_vacuous(q, ctx, r, False)


def rows_for(obligation: str | None, rule: str | None, model: str | None):
    for name, ob in OBLIGATIONS.items():
        if obligation and name != obligation:
            continue
        for r in (RULES if ob.rule_specific else ("any",)):
            if rule and ob.rule_specific and r != rule:
                continue
            for m in (LOAD_MODELS if ob.model_specific else ("any",)):
                if model and ob.model_specific and m != model:
                    continue
                yield name, r, m


def _ctx(rule: str, model: str, **kw) -> Ctx:
    return Ctx(SymConfig.fresh(), "vllm-0.33" if rule == "any" else rule,
               "intended" if model == "any" else model, **kw)


def find_counterexample(name: str, rule: str, model: str, store_fn=None):
    """BMC from the initial state; first pinned to PR #54362's worked example
    (so regressions decode to its numbers), then over every configuration."""
    ob = OBLIGATIONS[name]
    for pinned in (True, False):
        for depth in BMC_DEPTHS:
            ctx = _ctx(rule, model, store_fn=store_fn)
            q, sts, trs = bmc_query(ob, ctx, depth)
            extra = (
                decode.pr_example_pins(ctx) + decode.scheduler_cut(ctx, sts, trs)
                if pinned else decode.readable_bounds(ctx)
            )
            r, m = _solve(q.premise + extra + [q.violation])
            if r == z3.sat:
                cex = decode.decode_bmc(m, ctx, sts, trs, depth, replay=store_fn is None)
                if store_fn is None:
                    trace = cex.pop("_trace")
                    cex["replayed_violation"] = decode.violation_in(trace, name, model)
                return depth, cex
    return None, None


def run_row(name: str, rule: str, model: str, invariant_ok: dict) -> Row:
    ob = OBLIGATIONS[name]
    t0 = time.perf_counter()
    scope = SCOPE_SYMBOLIC
    detail = ""
    cex = None
    if ob.kind == "static":
        sctx = _ctx(rule, model)
        results = [_static(q, sctx, ob.split) for q in ob.queries(sctx)]
        non_vacuous = all(v for _, _, v in results)
        verdicts = [r for r, _, _ in results]
        if "sat" in verdicts:
            verdict = "counterexample"
            m = results[verdicts.index("sat")][1]
            cex = decode.decode_static(m, _ctx(rule, model))
        elif "unknown" in verdicts:
            verdict, detail = "unknown", "solver returned unknown / timeout"
        else:
            verdict = "proved"
        scope = ob.scope or scope + "; a single symbolic chunk / boundary / horizon (no steps)"
    else:
        ctx = _ctx(rule, model)
        q = lifecycle_step_query(ob, ctx)
        r, _ = _decide(q, ctx, True)
        non_vacuous = _non_vacuous(q, ctx, r, True)
        if name == "invariant":
            bq = invariant_base_query(ctx)
            rb, _ = _decide(bq, ctx, True)
            r = z3.sat if rb == z3.sat else r
        if r == z3.unsat:
            verdict = "proved"
            scope += "; any number of steps (1-step induction"
            if name != "invariant":
                inv_rule = ctx.rule
                if not invariant_ok.get(inv_rule, False):
                    verdict, detail = "unknown", f"invariant of {inv_rule} not proved"
                scope += ", invariant obligation 'invariant'"
            scope += ")"
        else:
            depth, cex = (None, None)
            if name != "invariant":
                depth, cex = find_counterexample(name, ctx.rule, ctx.model)
            if cex is not None:
                verdict = "counterexample"
                scope += f"; counterexample by BMC, {depth} step(s) from the initial state"
                if not cex.get("replayed_violation"):
                    detail = "counterexample did NOT replay through the executable rule"
            else:
                verdict = "unknown"
                detail = (
                    "solver returned unknown / timeout" if r == z3.unknown else
                    f"induction step fails and BMC finds no counterexample within {max(BMC_DEPTHS)} steps"
                )
    mutant, rejected = run_mutant(name, rule, model)
    return Row(name, rule, model, verdict, scope, time.perf_counter() - t0,
               non_vacuous=non_vacuous, mutant=mutant, mutant_rejected=rejected,
               detail=detail, counterexample=cex)


_mutant_cache: dict[str, tuple[str, bool]] = {}


def run_mutant(name: str, rule: str, model: str) -> tuple[str, bool]:
    """The obligation's mutant (of vllm-0.33 under intended) must be rejected."""
    if name in _mutant_cache:
        return _mutant_cache[name]
    mname, store_fn, variant = MUTANTS[name]
    ob = OBLIGATIONS[name]
    if variant is not None:
        qs = ob.queries(_ctx("vllm-0.33", "intended", variant=variant))
        rejected = any(_solve(q.premise + [q.violation])[0] == z3.sat for q in qs)
    elif name == "invariant":
        q = lifecycle_step_query(ob, _ctx("vllm-0.33", "intended", store_fn=store_fn))
        rejected = _solve(q.premise + [q.violation])[0] == z3.sat
    else:
        depth, _ = find_counterexample(name, "vllm-0.33", "intended", store_fn=store_fn)
        rejected = depth is not None
    _mutant_cache[name] = (mname, rejected)
    return _mutant_cache[name]


def _ignore_sigint() -> None:
    """Worker start-up: Ctrl-C is the parent's to handle (``kvreach prove``
    kills the workers), not one traceback per worker."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
    # The invariant rows first: lifecycle proofs rest on them.
    invariant_ok: dict[str, bool] = {}
    for r in (RULES if rule is None else (rule,)):
        row = run_row("invariant", r, "any", {})
        invariant_ok[r] = row.verdict == "proved"
        if ("invariant", r, "any") in todo:
            todo.remove(("invariant", r, "any"))
            row.expected = table.get(("invariant", r, "any"), "?")
            if progress:
                progress(row)
            yield row
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
    if jobs == 1:
        results = (run_row(name, r, m, invariant_ok) for name, r, m in todo)
    else:
        # Rows are independent: one solver process per core.
        # Slowest obligations first (longest-processing-time order), results
        # still reported in table order.
        pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_ignore_sigint)
        order = sorted(range(len(todo)), key=lambda i: -SLOW.get(todo[i][0], 0))
        by_index = {i: pool.submit(run_row, *todo[i], invariant_ok) for i in order}
        results = (by_index[i].result() for i in range(len(todo)))
    try:
        for row in results:
            row.expected = table.get((row.obligation, row.rule, row.load_model), "?")
            if progress:
                progress(row)
            yield row
    finally:
        if jobs > 1:
            pool.shutdown(cancel_futures=True)
