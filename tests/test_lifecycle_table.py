"""``spec.lifecycle.transition`` is built from the table ``TRANSITIONS``; it
must mean exactly what the hand-written transition it replaced meant.

``_transition_before_table`` is a verbatim copy of ``transition()`` as it was
before the table (commit 900d5dd), kept here only. For both rules (with an
arbitrary store decision, and with the rule's own), Z3 shows that the constraints, the
``num_tokens_after_batch``, the storable count, the submitted decision and
``finished`` of the two agree under ``SymConfig.well_formed()`` (unsat of the
difference; same symbols, same tag). The terms are moreover structurally
identical (``ExprRef.eq``), so the proofs see exactly the queries they saw
before the table.
"""

from __future__ import annotations

import dataclasses

import pytest
import z3

from kvreach.proofs.solve import check_terms
from kvreach.params import RULES as RULE_NAMES
from kvreach.spec import lifecycle as lc
from kvreach.spec.config import SymConfig
from kvreach.spec.lifecycle import K_ABORT, K_DECODE, K_FINISH, K_PREFILL, State, Transition
from kvreach.spec.rules import RULES, finish_tokens, storable_chunks


def _transition_before_table(s, rule, pre, post, c, budget, tag, store_fn=None):
    kind = z3.Int(f"kind_{tag}")
    sched = z3.Int(f"sched_{tag}")
    aux = {"wc": z3.Int(f"wc_{tag}")}
    finished = z3.Or(kind == K_FINISH, kind == K_ABORT)
    nt = lc.num_tokens(s, pre.f)
    tokens_after = z3.If(
        kind == K_PREFILL, pre.f + sched,
        z3.If(kind == K_DECODE, pre.f + 1,
              z3.If(kind == K_FINISH, finish_tokens(s, rule, nt), pre.f)),
    )
    nt_step = z3.If(kind == K_DECODE, pre.f + 1, nt)
    off = s.offloadable(tokens_after, nt_step)
    n = storable_chunks(s, rule, off, finished)
    step = (store_fn or RULES[rule])(s, pre.cursor, n, finished, c, aux)
    new_f = z3.If(kind == K_PREFILL, pre.f + sched, z3.If(kind == K_DECODE, pre.f + 1, pre.f))
    cons = z3.And(
        z3.Not(pre.ended),
        z3.Or(kind == K_PREFILL, kind == K_DECODE, kind == K_FINISH, kind == K_ABORT),
        z3.Implies(kind == K_PREFILL, z3.And(1 <= sched, sched <= budget, pre.f + sched <= s.P)),
        z3.Implies(kind != K_PREFILL, sched == z3.If(kind == K_DECODE, 1, 0)),
        z3.Implies(z3.Or(kind == K_DECODE, kind == K_FINISH), pre.f >= s.P),
        post.f == new_f,
        post.cursor == step.next_cursor,
        post.stored == z3.Or(pre.stored, step.submitted),
        post.ended == finished,
        step.side,
    )
    return Transition(kind, sched, tokens_after, n, step.submitted, finished, cons)


def _any_store(s, cursor, n, finished, c, aux):
    """An arbitrary store decision (uninterpreted functions of the step's
    inputs): equivalence for it holds for every rule and every mutant."""
    from kvreach.spec.rules import StoreStep

    sub = z3.Function("any_submitted", z3.IntSort(), z3.IntSort(), z3.BoolSort(),
                      z3.IntSort(), z3.BoolSort())
    nxt = z3.Function("any_next_cursor", z3.IntSort(), z3.IntSort(), z3.BoolSort(),
                      z3.IntSort())
    side = z3.Function("any_side", z3.IntSort(), z3.BoolSort())
    return StoreStep(sub(cursor, n, finished, c), nxt(cursor, n, finished), side(aux["wc"]))


# Each rule's own store step, and an arbitrary one (every mutant, by congruence).
CASES = [pytest.param(rule, None, id=f"{rule}-rule") for rule in RULE_NAMES] + [
    pytest.param(rule, _any_store, id=f"{rule}-any-store") for rule in RULE_NAMES
]


@pytest.mark.parametrize("rule,store_fn", CASES)
def test_table_transition_equals_hand_written(rule, store_fn):
    s = SymConfig.fresh()
    pre, post = State.fresh("pre"), State.fresh("post")
    c, budget = z3.Int("chunk"), z3.Int("budget")
    old = _transition_before_table(s, rule, pre, post, c, budget, "t", store_fn)
    new = lc.transition(s, rule, pre, post, c, budget, "t", store_fn)
    assert old.kind.eq(new.kind) and old.sched.eq(new.sched)
    # The table builds the very same terms (so proof times cannot move) ...
    for a, b in [(old.constraints, new.constraints), (old.tokens_after, new.tokens_after),
                 (old.n, new.n), (old.submitted, new.submitted), (old.finished, new.finished)]:
        assert a.eq(b), (a.sexpr()[:300], b.sexpr()[:300])
    # ... and, independently of term shape, the same constraints (Z3).
    assert _semantic_difference(s, old, new) == z3.unsat


def _semantic_difference(s, old, new):
    differ = z3.Or(
        old.constraints != new.constraints,
        z3.And(old.constraints, z3.Or(
            old.tokens_after != new.tokens_after, old.n != new.n,
            old.submitted != new.submitted, old.finished != new.finished,
        )),
    )
    # as the proof run checks (a resource limit, never a wall-clock one)
    return check_terms([s.well_formed(), differ], 60_000_000)[0]


def test_semantic_check_can_fail(monkeypatch):
    """A table whose decode guard forgets ``f >= P`` is caught by the Z3 check
    alone (not only by the structural one)."""
    bad = tuple(
        dataclasses.replace(t, guard=lambda s, pre, sched, budget: z3.BoolVal(True))
        if t.name == "decode" else t for t in lc.TRANSITIONS
    )
    monkeypatch.setattr(lc, "TRANSITIONS", bad)
    s = SymConfig.fresh()
    pre, post = State.fresh("pre"), State.fresh("post")
    c, budget = z3.Int("chunk"), z3.Int("budget")
    for rule in RULE_NAMES:
        old = _transition_before_table(s, rule, pre, post, c, budget, "t")
        new = lc.transition(s, rule, pre, post, c, budget, "t")
        assert not old.constraints.eq(new.constraints)
        assert _semantic_difference(s, old, new) == z3.sat, rule


def test_table_shape():
    assert [t.kind for t in lc.table()] == [K_PREFILL, K_DECODE, K_FINISH, K_ABORT]
    assert [t.kind for t in lc.TRANSITIONS] == list(range(14))  # world restarts' kinds after the four
    # the failed transfers (store-failed, load-failed, load-recompute) are 0.34.0's steps only
    from kvreach import releases

    failures = {"store-failed", "load-failed", "load-recompute"}
    assert failures <= {t.name for t in lc.table("restarts", releases.V0_34_0)}
    assert not failures & {t.name for t in lc.table("restarts", releases.V0_33_0)}
    assert lc.KINDS[:4] == ("prefill", "decode", "finish", "abort")
    assert {t.name for t in lc.TRANSITIONS if t.ends} == {"finish", "abort", "error"}
    assert {t.name for t in lc.table() if t.ends} == {"finish", "abort"}
