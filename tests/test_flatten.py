"""proofs/flatten.py: a query with its arithmetic if-then-else terms named is
the same query (satisfiable exactly when the original is, its models are the
original's), the names are stable, and a lookup query loses every such term."""

from __future__ import annotations

import itertools

import z3

from kvreach.proofs.solve import check_terms
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
        r0 = check_terms([*q.premise, q.violation])[0]
        r1, m = check_terms([*f.premise, f.violation])
        assert r0 == r1 != z3.unknown, (premise, violation)
        if r1 == z3.sat:  # the named query's model satisfies the original terms
            assert z3.is_true(m.eval(z3.And(*q.premise, q.violation), model_completion=True))
        # the premise alone: definitions constrain nothing of the original symbols
        assert check_terms(q.premise)[0] == check_terms(f.premise)[0] != z3.unknown


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
    from kvreach.proofs import rows
    from kvreach.proofs.obligations import OBLIGATIONS

    for name in ("lookup-monotone", "lookup-run-stored"):
        ob = OBLIGATIONS[name]
        ctx = rows.ctx_for("vllm-0.33", "intended", lookup_variant=ob.lookup_variant)
        ctx.pins = ob.grid[0].pins(ctx)
        for q in ob.queries(ctx):
            assert not any(_has_arith_ite(t) for t in q.premise + [q.violation]), name


def test_flat_terms_is_the_conjunction_named():
    from kvreach.proofs.flatten import flat_terms

    for premise, violation in _cases():
        terms = premise + [violation]
        named = flat_terms(terms)
        assert not any(_has_arith_ite(t) for t in named)
        r_flat, m = check_terms(named)
        assert check_terms(terms)[0] == r_flat != z3.unknown, terms
        if r_flat == z3.sat:
            assert z3.is_true(m.eval(z3.And(*terms), model_completion=True))


def _checked_terms(monkeypatch):
    """Every check's assertions the counterexample search and the mutant
    check send to the solver, in order."""
    from kvreach.proofs import mutant_check, search, solve

    seen, real = [], solve.check_terms

    def spy(terms, *a, **kw):
        seen.append(terms)
        return real(terms, *a, **kw)

    for module in (search, mutant_check):
        monkeypatch.setattr(module, "check_terms", spy)
    return seen


def test_named_mutant_checks_and_counterexample_search(monkeypatch):
    """The mutant checks of the obligations with ``named_mutant`` and the
    counterexample search of those with ``named_bmc`` are named (no arithmetic if-then-else
    reaches the solver), the others as written; exactly-once-restarts'
    named search finds a trace of the step kinds vLLM's scheduler replays."""
    from kvreach.proofs import mutant_check, runner
    from kvreach.proofs.obligations import OBLIGATIONS
    from kvreach.proofs.obligations.restarts import REPLAYED_KINDS
    from kvreach.spec.lifecycle import KINDS

    assert OBLIGATIONS["exactly-once-restarts"].named_bmc
    assert not (OBLIGATIONS["completeness"].named_mutant or OBLIGATIONS["completeness"].named_bmc)
    monkeypatch.setattr(mutant_check, "mutant_cache", {})
    monkeypatch.setattr(mutant_check, "mutant_use_counts", {})
    monkeypatch.setattr(mutant_check, "_mutant_sats", {})
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


def _name_ites_by_term_objects(terms: list, prefix: str = "named_ite") -> tuple[list, list]:
    """The naming walk written with Python term objects (``children()``,
    ``decl()(*args)``): what :func:`name_ites` computes through the C API."""
    memo, defs = {}, []
    for root in terms:
        stack = [(root, False)]
        while stack:
            e, expanded = stack.pop()
            k = e.get_id()
            if k in memo:
                continue
            if not z3.is_app(e) or e.num_args() == 0:
                memo[k] = e
                continue
            kids = e.children()
            if not expanded:
                stack.append((e, True))
                stack.extend((a, False) for a in reversed(kids))
                continue
            args = [memo[a.get_id()] for a in kids]
            if z3.is_app_of(e, z3.Z3_OP_ITE) and z3.is_arith(e):
                v = z3.Const(f"{prefix}_{len(defs) // 2}", e.sort())
                c, a, b = args
                defs += [z3.Implies(c, v == a), z3.Implies(z3.Not(c), v == b)]
                memo[k] = v
            elif all(x.eq(y) for x, y in zip(args, kids)):
                memo[k] = e
            else:
                memo[k] = e.decl()(*args)
    return [memo[t.get_id()] for t in terms], defs


def _same_terms(xs: list, ys: list) -> bool:
    return len(xs) == len(ys) and all(x.eq(y) for x, y in zip(xs, ys))


def test_the_c_api_walk_builds_the_same_terms_as_the_term_object_walk():
    from kvreach.proofs.obligations import OBLIGATIONS
    from kvreach.proofs.rows import ctx_for as _ctx

    x, y, r = z3.Int("x"), z3.Int("y"), z3.Real("r")
    q = z3.ForAll([x], z3.If(x > y, x, y) >= 0)  # under a quantifier: left whole
    small = [z3.If(x > y, x, y) + z3.If(r > 1, r, r * 2) >= z3.ToReal(x), q,
             z3.If(z3.Bool("b"), x, 1) == z3.If(x < 0, -x, x), z3.IntVal(3) > 2]
    cases = [small]
    for name in ("lookup-monotone", "no-waste", "mask-equivalence"):
        ob = OBLIGATIONS[name]
        ctx = _ctx("vllm-0.33", "intended", lookup_variant=ob.lookup_variant)
        if ob.grid:
            ctx.pins = ob.grid[0].pins(ctx)
        # the queries as built (each already named): name them again from the
        # terms before naming, through the obligation's own premise + violation
        cases += [qq.premise + [qq.violation] for qq in ob.queries(ctx)]
    seen = 0
    for terms in cases:
        got, want = name_ites(terms), _name_ites_by_term_objects(terms)
        assert _same_terms(got[0], want[0]) and _same_terms(got[1], want[1])
        seen += len(want[1])
    assert seen > 0  # some if-then-else was named


def test_the_c_api_walk_names_each_spec_ite_of_a_lookup_query_as_before(monkeypatch):
    """The lookup obligations' queries before naming (the spy sees them), named
    both ways: identical terms and definitions."""
    from kvreach.proofs import flatten
    from kvreach.proofs.obligations import OBLIGATIONS
    from kvreach.proofs.obligations import lookup as lookup_obs
    from kvreach.proofs.rows import ctx_for as _ctx

    raw = []

    def spy(q, prefix=flatten.PREFIX):
        raw.append(q.premise + [q.violation])
        return flatten.flat_query(q, prefix)

    monkeypatch.setattr(lookup_obs, "flat_query", spy)
    for name in ("lookup-monotone", "lookup-run-stored", "load-reads-checked"):
        ob = OBLIGATIONS[name]
        ctx = _ctx("vllm-0.33", "intended", lookup_variant=ob.lookup_variant)
        if ob.grid:
            ctx.pins = ob.grid[0].pins(ctx)
        ob.queries(ctx)
    assert raw
    for terms in raw:
        got, want = name_ites(terms), _name_ites_by_term_objects(terms)
        assert len(want[1]) > 0
        assert _same_terms(got[0], want[0]) and _same_terms(got[1], want[1])
