"""proofs/flatten.py: a query with its arithmetic if-then-else terms named is
the same query (satisfiable exactly when the original is, its models are the
original's), the names are stable, and a lookup query loses every such term."""

from __future__ import annotations

import itertools

import z3

from kvreach.proofs.flatten import flat_query, name_ites
from kvreach.proofs.framework import Query


def _has_arith_ite(e) -> bool:
    seen, todo = set(), [e]
    while todo:
        t = todo.pop()
        if t.get_id() in seen or not z3.is_app(t):
            continue
        seen.add(t.get_id())
        if z3.is_app_of(t, z3.Z3_OP_ITE) and z3.is_arith(t):
            return True
        todo.extend(t.children())
    return False


def _cases():
    x, y, z = z3.Ints("x y z")
    b = z3.Bool("b")
    m = z3.If(x < y, x, y)  # shared below
    big = z3.If(b, m + 1, z3.If(m > z, z, m * 2))
    premises = [[x >= 0, y >= 0, z >= 0], [x >= 0, x <= 3, y == 2]]
    violations = [big == 7, big < m, z3.And(big != m, m == z, b), big > x + y + z + 1, big < 0]
    return itertools.product(premises, violations)


def test_named_query_is_satisfiable_exactly_when_the_original_is_and_its_model_is_one():
    for premise, violation in _cases():
        q = Query(premise, violation)
        f = flat_query(q)
        orig = z3.Solver()
        orig.add(*q.premise, q.violation)
        named = z3.Solver()
        named.add(*f.premise, f.violation)
        r0, r1 = orig.check(), named.check()
        assert r0 == r1, (premise, violation)
        if r1 == z3.sat:  # the named query's model satisfies the original terms
            m = named.model()
            assert z3.is_true(m.eval(z3.And(*q.premise, q.violation), model_completion=True))
        # the premise alone: definitions constrain nothing of the original symbols
        p0, p1 = z3.Solver(), z3.Solver()
        p0.add(*q.premise)
        p1.add(*f.premise)
        assert p0.check() == p1.check()


def test_names_are_shared_by_premise_and_violation_and_stable():
    x, y = z3.Ints("x y")
    m = z3.If(x < y, x, y)
    q = Query([m >= 0], m == 3)
    f, g = flat_query(q), flat_query(Query([m >= 0], m == 3))
    assert [t.sexpr() for t in f.premise] == [t.sexpr() for t in g.premise]
    assert f.violation.sexpr() == "(= named_ite_0 3)"
    assert len(f.premise) == 3  # the premise and one guarded definition pair
    assert not any(_has_arith_ite(t) for t in f.premise + [f.violation])


def test_boolean_ite_and_ite_free_terms_are_kept():
    x = z3.Int("x")
    b = z3.Bool("b")
    terms = [z3.If(b, x > 0, x < 0), x + 1 > 2]
    named, defs = name_ites(terms)
    assert defs == [] and [t.eq(u) for t, u in zip(named, terms)] == [True, True]


def test_lookup_row_queries_have_no_arithmetic_ite():
    from kvreach.proofs import runner
    from kvreach.proofs.obligations import OBLIGATIONS

    for name in ("lookup-monotone", "lookup-run-stored"):
        ob = OBLIGATIONS[name]
        ctx = runner._ctx("vllm-0.33", "intended", lookup_variant=ob.lookup_variant)
        ctx.pins = ob.grid[0].pins(ctx)
        for q in ob.queries(ctx):
            assert not any(_has_arith_ite(t) for t in q.premise + [q.violation]), name


def test_flat_terms_is_the_conjunction_named():
    from kvreach.proofs.flatten import flat_terms

    for premise, violation in _cases():
        terms = premise + [violation]
        named = flat_terms(terms)
        assert not any(_has_arith_ite(t) for t in named)
        orig, flat = z3.Solver(), z3.Solver()
        orig.add(*terms)
        flat.add(*named)
        assert orig.check() == flat.check(), terms
        if flat.check() == z3.sat:
            assert z3.is_true(flat.model().eval(z3.And(*terms), model_completion=True))


def _checked_terms(monkeypatch):
    """Every check's assertions the runner sends to the solver, in order."""
    from kvreach.proofs import runner

    seen, real = [], runner._solve

    def spy(terms, *a, **kw):
        seen.append(terms)
        return real(terms, *a, **kw)

    monkeypatch.setattr(runner, "_solve", spy)
    return seen


def test_named_mutant_checks_and_counterexample_search(monkeypatch):
    """The mutant checks of ``config.NAMED_MUTANTS`` and the counterexample
    search of ``config.NAMED_BMC`` are named (no arithmetic if-then-else
    reaches the solver), the others as written; exactly-once-restarts'
    named search finds a trace of the step kinds vLLM's scheduler replays."""
    from kvreach.proofs import config, runner
    from kvreach.proofs.obligations.restarts import REPLAYED_KINDS
    from kvreach.spec.lifecycle import KINDS

    assert "exactly-once-restarts" in config.NAMED_BMC
    assert "completeness" not in config.NAMED_MUTANTS | config.NAMED_BMC
    monkeypatch.setattr(runner, "_mutant_cache", {})
    monkeypatch.setattr(runner, "_mutant_used", {})
    monkeypatch.setattr(runner, "_mutant_sats", {})
    seen = _checked_terms(monkeypatch)
    for name, named in (("exactly-once-restarts", True), ("completeness", False)):
        seen.clear()
        assert runner.run_mutant(name, "vllm-0.33", "intended")[1] is True
        assert seen and all(any(_has_arith_ite(t) for t in terms) != named for terms in seen)
    seen.clear()
    _, cex = runner.find_counterexample("exactly-once-restarts", "vllm-0.33", "any")
    assert seen and not any(_has_arith_ite(t) for terms in seen for t in terms)
    assert cex["replayed_violation"]
    replayed = {KINDS[k] for k in REPLAYED_KINDS}
    assert {st["kind"] for st in cex["plan"]} <= replayed, cex["plan"]
