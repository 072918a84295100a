"""The solver layer of the proofs: one Z3 check bounded by a resource limit,
and the case splits of a query.

Every check is bounded by a Z3 resource limit (``rlimit``), never by wall
time, and runs in a fresh context from the query's SMT-LIB text, so its
answer and the resources it spends are a function of the query and the Z3
version (:func:`check_terms`). A :class:`Meter` holds what a row has spent and may
still spend. This module keeps the process's solver time and the result
cache's counts (``proofs/cache.py``); the row verdicts built on it are
:mod:`kvreach.proofs.runner`'s.
"""

from __future__ import annotations

import time

import z3

from kvreach.proofs import cache
# The budgets and splits: proofs/config.py (the tests patch the budgets here).
from kvreach.proofs.config import CASES_RL, CHECK_RL, LEAF_RL, NODE_RL, ROOT_RL
from kvreach.proofs.config import cube as _cube
from kvreach.proofs.config import splits as _splits
from kvreach.proofs.framework import Ctx, Query


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
solver_seconds_spent = 0.0
# Checks of this process answered from the result cache (proofs/cache.py) and
# unsat / unknown checks solved (a sat check is always solved: not counted).
cache_counts = {"hit": 0, "solved": 0}
# With the cache on, (SMT-LIB text, rlimit, the model as SMT-LIB assertions)
# of every sat check of this process, in order: a row kept whole
# (cache.row_store) keeps its own, to check them again.
sat_log: list[tuple[str, int, str]] = []


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


def smtlib_text(assertions: list) -> str:
    """The query as SMT-LIB text: a function of the query alone.

    The text of a solver holding ``assertions`` (``Solver.sexpr``), composed
    from the text of each assertion alone: Z3 prints the declarations of
    every symbol in the order its walk over the assertions first meets them,
    then one ``(assert ...)`` per assertion, each with its own ``let``
    names, so the whole is the declarations of the assertions' texts in
    order (each once) followed by their ``assert`` parts. An assertion's text
    is kept (:data:`_assertion_text`, by term id, the term held so the id is
    not reused) and printed once however many checks share it: the premise
    of a query is in every check of its case split, its non-vacuity checks
    and its counterexample searches. ``tests/test_proof_cache.py`` compares
    the composed text with the solver's own."""
    if not all(isinstance(a, z3.BoolRef) and a.ctx is _MAIN for a in assertions):
        return smtlib_text_whole(assertions)
    decls: dict[str, None] = {}
    body = []
    for a in assertions:
        k = a.get_id()
        hit = _assertion_text.get(k)
        if hit is None or not hit[0].eq(a):
            if len(_assertion_text) >= _ASSERTION_TEXTS:
                _assertion_text.clear()
            text = smtlib_text_whole([a])
            i = 0 if text.startswith("(assert") else text.index("\n(assert") + 1
            hit = _assertion_text[k] = (a, text[:i].splitlines(keepends=True), text[i:])
        decls.update(dict.fromkeys(hit[1]))
        body.append(hit[2])
    return "".join(decls) + "".join(body)


def smtlib_text_whole(assertions: list) -> str:
    """The SMT-LIB text of a solver holding ``assertions``, printed by Z3."""
    s = z3.Solver()
    s.add(*assertions)
    return s.sexpr()


_MAIN = z3.main_ctx()
# term id -> (the term, its declaration lines, its assert text); cleared when full
_assertion_text: dict[int, tuple] = {}
_ASSERTION_TEXTS = 20_000


def check_terms(assertions: list, rlimit: int = CHECK_RL, meter: Meter | None = None):
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
    text = smtlib_text(assertions)
    hit = cache.lookup(text, limit) if cache.enabled() else None
    if hit is not None:  # an unsat / unknown answer to this exact query and limit
        r, used, m = {"unsat": z3.unsat, "unknown": z3.unknown}[hit[0]], hit[1], None
        cache_counts["hit"] += 1
    else:
        r, s = _check_text(text, limit)
        st = s.statistics()
        used = int(st.get_key_value("rlimit count")) if "rlimit count" in st.keys() else 0
        m = s.model().translate(z3.main_ctx()) if r == z3.sat else None
        if r != z3.sat:
            cache_counts["solved"] += 1
        if cache.enabled():
            if r == z3.sat:
                sat_log.append((text, limit, _model_pins(s.model())))
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


def still_sat(text: str, limit: int, pins: str) -> bool:
    """The kept model (``pins``) still satisfies the query: checked with its
    values fixed (cheap), else the query is solved again."""
    for query in ((text + "\n" + pins) if pins else None, text):
        if query is not None and _check_text(query, limit)[0] == z3.sat:
            return True
    return False


def _check_text(text: str, limit: int):
    """-> (result, solver): one check of the SMT-LIB ``text`` in a fresh
    context within ``limit`` resource units; its CPU time is added to
    ``solver_seconds_spent``."""
    global solver_seconds_spent
    s = _new_solver(z3.Context())
    s.set("rlimit", limit)
    s.from_string(text)
    t = time.thread_time()
    r = s.check()
    solver_seconds_spent += time.thread_time() - t
    return r, s


def solve_split(assertions: list, splits: list, meter: Meter):
    """-> (z3.sat|z3.unsat|z3.unknown, model). Depth-first case splitting:
    a short try at each inner node (``NODE_RL``: a split is cheaper than
    waiting), a long one where no split is left (``LEAF_RL``), all within
    what is left of the ``meter``'s total."""
    r, m = check_terms(assertions, NODE_RL if splits else LEAF_RL, meter)
    if r != z3.unknown or not splits:
        return r, m
    head, rest = splits[0], splits[1:]
    for case in (head, z3.Not(head)):
        r, m = solve_split(assertions + [case], rest, meter)
        if r != z3.unsat:
            return r, m
    return z3.unsat, None


def solve_cases(assertions: list, ctx: Ctx, lifecycle: bool, meter: Meter,
                inner_splits: bool = True):
    """-> (z3.sat|z3.unsat|z3.unknown, model): a short try of the whole query
    (``ROOT_RL``), then every leaf of :func:`_cube` (with :func:`_splits`
    below it; ``inner_splits=False``: none, each leaf one check of
    ``LEAF_RL``). unsat only if every leaf is unsat; the first sat leaf's model
    otherwise. Every check draws on ``meter`` (an exhausted total leaves the
    remaining leaves ``unknown``)."""
    r, m = check_terms(assertions, ROOT_RL, meter)
    if r != z3.unknown:
        return r, m
    verdict = z3.unsat
    for case in _cube(ctx, lifecycle):
        r, m = solve_split(assertions + case, _splits(ctx, lifecycle) if inner_splits else [],
                           meter)
        if r == z3.sat:
            return r, m
        if r == z3.unknown:
            verdict = z3.unknown
    return verdict, None


def decide(q: Query, ctx: Ctx, lifecycle: bool, meter: Meter, inner_splits: bool = True):
    """The query's verdict, case split, within ``CASES_RL`` resources (and
    what the row's ``meter`` has left); ``inner_splits``: :func:`solve_cases`'."""
    sub = Meter(CASES_RL if meter.left() is None else min(CASES_RL, meter.left()))
    try:
        return solve_cases(q.premise + [q.violation], ctx, lifecycle, sub, inner_splits)
    finally:
        charge(meter, sub)


def charge(meter: Meter, sub: Meter) -> None:
    meter.used += sub.used
    meter.checks += sub.checks
    meter.exhausted += sub.exhausted
