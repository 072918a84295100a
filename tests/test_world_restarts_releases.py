"""World "restarts" per vLLM release (``kvreach.releases``): the spec's
transition relation (``kvreach.spec.lifecycle.transition(world="restarts",
release=R)``) and the executable one (``kvreach.impl.lifecycle.run_vllm(...,
release=R)``) take the release's cursor on lookup and null-block filter, and
agree step by step for every distinct record; 0.33.0's relation is the table
as it is."""

from __future__ import annotations

import dataclasses

import pytest
import z3
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvreach import releases
from kvreach.impl.lifecycle import OUTCOMES, VllmStep, run_vllm
from kvreach.params import RULES, GroupConfig, ParamError, RequestConfig
from kvreach.proofs.decode import pr_example_pins, scheduler_cut
from kvreach.proofs.framework import Ctx
from kvreach.proofs.induction import bmc_query
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.obligations.restarts import incarnation_invariant
from kvreach.proofs.solve import check_terms
from kvreach.spec import lifecycle as lc
from kvreach.spec.config import SymConfig
from kvreach.spec.evaluate import StepChecker

from test_impl_equals_spec import configs
from test_impl_equals_spec_vllm import plans as _plans

BUDGET = 10**6  # the plans choose step sizes; the spec's budget guard is not in play
KEPT = releases.V0_30_0  # cursor kept, last-block filter (0.29.0 .. 0.32.0)
RESET = releases.V0_33_0
CLAMPED = releases.V0_34_0  # reset, every reachable block, finish_computed_clamp


def test_world_restarts_parts_per_release():
    """The parts this module is about, as the records have them (read from
    each release's get_num_new_matched_tokens and _build_store_jobs)."""
    parts = {r.name: (r.cursor_on_lookup, r.null_block_filter) for r in releases.RELEASES}
    assert parts == {
        "0.29.0": ("kept", "last block"), "0.30.0": ("kept", "last block"),
        "0.31.0/0.32.0": ("kept", "last block"),
        "0.33.0": ("reset to 0", "every reachable block"),
        "0.34.0": ("reset to 0", "every reachable block"),
    }


def test_the_default_release_is_the_table():
    """0.33.0's world-"restarts" table is TRANSITIONS' entries themselves
    without the failed transfers (so its queries are the ones built before
    releases were parameters); the kept cursor changes exactly the lookup
    and the two starts; 0.34.0's failed transfers add store-failed,
    load-failed and load-recompute and change the loaded start (not after a
    failed load)."""
    base = tuple(t for t in lc.TRANSITIONS if t.kind not in lc.FAILURE_KINDS)
    reset = lc.table("restarts", RESET)
    assert len(reset) == len(base) and all(t is u for t, u in zip(base, reset))
    kept = lc.table("restarts", KEPT)
    changed = {t.name for t, u in zip(lc.TRANSITIONS, kept) if t is not u}
    assert changed == {"lookup", "start", "loaded"}
    # 0.34.0 without its failed transfers: the error finish capped by the computed tokens
    clamped = lc.table("restarts", dataclasses.replace(CLAMPED, failed_transfers=False))
    assert {t.name for t, u in zip(lc.TRANSITIONS, clamped) if t is not u} == {"error"}
    failing = lc.table("restarts", CLAMPED)
    assert {t.name for t, u in zip(lc.TRANSITIONS, failing) if t is not u} == {"error", "loaded"}
    assert [t.name for t in failing][-3:] == ["store-failed", "load-failed", "load-recompute"]
    with pytest.raises(ValueError, match="cursor_on_lookup"):
        lc.table("restarts", dataclasses.replace(RESET, cursor_on_lookup="halved"))


def plans(rule, g, r, release):
    """The world-"restarts" plans of tests/test_impl_equals_spec_vllm.py under
    ``release``, with restarts and null blocks."""
    return _plans(rule, g, r, release, restarts=True, null_blocks=True)


@settings(deadline=None, max_examples=300,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cfg=configs(max_prompt=60), data=st.data(), release=st.sampled_from([KEPT, RESET, CLAMPED]))
def test_run_vllm_steps_are_spec_transitions_per_release(cfg, data, release):
    """Every step run_vllm takes under the release is a transition of the
    spec under the same release, and the spec offers and submits exactly the
    impl's chunks; a chunk the impl's block-level null filter drops is the
    spec's ``null`` (the filter drops it)."""
    g, r = cfg
    rule = data.draw(st.sampled_from(RULES), label="rule")
    plan = data.draw(plans(rule, g, r, release), label="plan")
    chk = StepChecker(g, r, rule, BUDGET, release=release)
    for x in run_vllm(rule, g, r, plan, release):
        st_ = x.step
        event(f"{release.name} {st_.kind}")
        dropped = {b // g.blocks_per_chunk for b in st_.null_blocks}
        if dropped - set(st_.null) - set(x.offered):
            event("a chunk dropped by the null-block filter")
        if release is KEPT and st_.kind == "loaded" and x.cursor_after < x.cursor_before:
            event("a loaded start moves the cursor back")
        why = chk.explain(st_.kind, st_.scheduled_tokens, OUTCOMES.index(st_.outcome),
                          (x.f_before, x.cursor_before), (x.f_after, x.cursor_after),
                          frozenset(x.offered), st_.accepted, st_.null | dropped,
                          st_.shared_prefix_boundary, st_.allocated_chunks,
                          frozenset(x.submitted))
        assert why is None, (release.name, rule, g, r, x, why)


DENSE = GroupConfig(block_size=4, window=16, alignment_tokens=None)


def test_kept_cursor_resumes_where_it_was():
    """0.29.0 .. 0.32.0: a preempted request's lookup keeps the cursor, so a
    restart with no load offers nothing stored before; 0.33.0 offers it all
    again."""
    r = RequestConfig(40, None, True)
    plan = [VllmStep("prefill", 40), VllmStep("preempt"), VllmStep("lookup"),
            VllmStep("start", 0), VllmStep("prefill", 40), VllmStep("abort")]
    kept = run_vllm("vllm-0.33", DENSE, r, plan, KEPT)
    reset = run_vllm("vllm-0.33", DENSE, r, plan, RESET)
    assert kept[0].submitted == tuple(range(10))
    assert kept[2].cursor_after == 10 and kept[4].submitted == ()
    assert reset[2].cursor_after == 0 and reset[4].submitted == tuple(range(10))
    # the incarnations: a lookup starts one, and with the cursor kept a preemption too
    assert [x.incarnation for x in kept] == [0, 1, 2, 2, 2, 2]
    assert [x.incarnation for x in reset] == [0, 0, 1, 1, 1, 1]
    with pytest.raises(ParamError, match="cursor 0"):
        run_vllm("vllm-0.33", DENSE, r, plan[:2] + [VllmStep("start", 0)], RESET)


def test_kept_cursor_moves_back_at_a_short_loaded_start():
    """update_state_after_alloc assigns the loaded chunks: after 10 chunks
    were stored, a hit of 3 chunks puts the cursor at 3 and chunks 3..9 are
    offered again (the kept release's exactly-once-restarts counterexample)."""
    r = RequestConfig(40, None, True)
    plan = [VllmStep("prefill", 40), VllmStep("preempt"), VllmStep("lookup"),
            VllmStep("loaded", 12), VllmStep("prefill", 28), VllmStep("abort")]
    x = run_vllm("vllm-0.33", DENSE, r, plan, KEPT)
    assert (x[3].cursor_before, x[3].cursor_after) == (10, 3)
    assert x[4].submitted == tuple(range(3, 10))
    for release in (KEPT, RESET):  # each step is the spec's, under its own release only
        chk = StepChecker(DENSE, r, "vllm-0.33", BUDGET, release=release)
        why = [chk.explain(s.step.kind, s.step.scheduled_tokens, 0, (s.f_before, s.cursor_before),
                           (s.f_after, s.cursor_after), frozenset(s.offered), frozenset(s.submitted))
               for s in x]
        if release is KEPT:
            assert why == [None] * len(x)
        else:  # 0.33.0's lookup resets the cursor: the kept one is not its transition
            assert why[2] is not None and why[2].startswith("(A)")


def test_null_block_filter_per_release():
    """A chunk whose first block (the mask keeps it: dense) is null and whose
    last is not: 0.33.0 drops it, the earlier releases offer it; a null last
    block drops it in every release."""
    g = GroupConfig(block_size=4, window=16, alignment_tokens=None, blocks_per_chunk=2)
    r = RequestConfig(40, None, True)
    first_of_1, last_of_2 = frozenset({2}), frozenset({5})
    for release, offered in ((KEPT, (0, 1, 2, 3, 4)), (RESET, (0, 2, 3, 4))):
        x = run_vllm("vllm-0.33", g, r, [VllmStep("prefill", 40, null_blocks=first_of_1)],
                     release)
        assert x[0].offered == offered, release.name
        x = run_vllm("vllm-0.33", g, r, [VllmStep("prefill", 40, null_blocks=last_of_2)],
                     release)
        assert x[0].offered == (0, 1, 3, 4), release.name


def _no_loaded(trs) -> list:
    return [t.kind != lc.K_START_LOADED for t in trs]


def _check(premise, violation, rlimit: int = 60_000_000):
    """One check as the proof run does it (``proofs.solve``: a fresh context
    from the query's text, so the answer and its cost depend on the query
    alone)."""
    return check_terms([*premise, violation], rlimit)[0]


def _stored_below_cursor(ctx: Ctx, st) -> z3.BoolRef:
    """exactly-once-incarnation's invariant (0.33.0's form) over ``stored``
    (every incarnation) instead of ``stored_inc``."""
    as_033 = dataclasses.replace(ctx, release=RESET)
    return incarnation_invariant(as_033, lc.State(st.f, st.cursor, st.stored, st.ended, st.stored))


@pytest.mark.parametrize("rule", RULES)
def test_kept_cursor_submits_twice_only_through_a_loaded_start(rule):
    """With the cursor kept (0.29.0 .. 0.32.0), a chunk is submitted twice
    only after a loaded start moved the cursor back: with no loaded start,
    "submitted before => below the cursor (and kept by the prompt-horizon
    mask)" holds at the initial state and is kept by every step, which then
    never submits a stored chunk (1-step induction, any number of steps and
    incarnations). With 0.33.0's reset the lookup breaks it, and 5 steps
    with no loaded start reach a second submission."""
    ctx = Ctx(SymConfig.fresh(), rule, "intended", release=KEPT)
    pre, post = lc.State.fresh("pre", "restarts"), lc.State.fresh("post", "restarts")
    tr = lc.transition(ctx.s, rule, pre, post, ctx.c, ctx.budget, "t", world="restarts",
                       release=KEPT)
    prem = ctx.base() + [ctx.c >= 0, _stored_below_cursor(ctx, pre), tr.constraints,
                         *_no_loaded([tr])]
    assert _check(prem, z3.BoolVal(True)) == z3.sat  # non-vacuous
    assert _check(prem, z3.And(pre.stored, tr.submitted)) == z3.unsat
    assert _check(prem, z3.And(z3.Not(tr.finished), z3.Not(_stored_below_cursor(ctx, post)))) \
        == z3.unsat
    init = lc.State.fresh("init", "restarts")
    assert _check(ctx.base() + [ctx.c >= 0, lc.init(init)],
                  z3.Not(_stored_below_cursor(ctx, init))) == z3.unsat
    # 0.33.0: a real trace of 5 steps, none of them a loaded start (at PR
    # #54362's example, as the counterexample search starts)
    ob = OBLIGATIONS["exactly-once-restarts"]
    rctx = Ctx(SymConfig.fresh(), rule, "intended", release=RESET)
    q, sts, trs = bmc_query(ob, rctx, 5)
    pins = pr_example_pins(rctx) + scheduler_cut(rctx, sts, trs)
    assert _check(q.premise + pins + _no_loaded(trs), q.violation) == z3.sat
    # and the same with the cursor kept is none
    kctx = Ctx(SymConfig.fresh(), rule, "intended", release=KEPT)
    q, sts, trs = bmc_query(ob, kctx, 5)
    pins = pr_example_pins(kctx) + scheduler_cut(kctx, sts, trs)
    assert _check(q.premise + pins + _no_loaded(trs), q.violation) == z3.unsat
