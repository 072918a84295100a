"""impl == spec in world "restarts": every step of
``kvreach.impl.lifecycle.run_vllm`` (preempt, lookup, start / loaded with a
hit, recompute, decode and decode-async, finish, abort; prepare_store
accepting, taking a subset or refusing; null blocks; a shared-prefix boundary;
the allocated-chunk cap) is a transition of
``kvreach.spec.lifecycle.transition(world="restarts")`` with its values pinned,
and the spec offers and submits exactly the chunks the impl does."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvreach.impl.lifecycle import OUTCOMES, VllmStep, load_failed_after, run_vllm, vllm_step
from kvreach.params import RULES, ParamError
from kvreach.proofs.scenarios import PR_54362
from kvreach.releases import DEFAULT
from kvreach.spec.evaluate import StepChecker

from test_impl_equals_spec import configs

BUDGET = 10**6  # the plans below choose step sizes; the spec's budget guard is not in play


class Checker:
    """``kvreach.spec.evaluate.StepChecker`` for ``run_vllm``'s steps."""

    def __init__(self, rule, g, r):
        self.step = StepChecker(g, r, rule, BUDGET)

    def check(self, st: VllmStep, f, cursor, f2, cursor2, offered, submitted,
              load_failed: tuple[bool, bool] | None = None) -> str | None:
        return self.step.explain(st.kind, st.scheduled_tokens, OUTCOMES.index(st.outcome),
                                 (f, cursor), (f2, cursor2), frozenset(offered), st.accepted,
                                 st.null, st.shared_prefix_boundary, st.allocated_chunks,
                                 frozenset(submitted), load_failed)


@st.composite
def plans(draw, rule, g, r, release=DEFAULT, restarts: bool = False, null_blocks: bool = False):
    """A plan of steps enabled in the state the impl reaches under
    ``release`` (the spec's guards), from frontier 0 and cursor 0.
    ``restarts``: half the plans begin with a restart (store, preempt, look
    up); ``null_blocks``: null blocks placed by block index (the release's
    filter drops their chunks). With the cursor kept (before 0.33.0) a start
    can follow a restart, often loaded, its hit below the cursor's tokens
    half the time (the cursor moves back)."""
    P, C = r.prompt_tokens, g.chunk_tokens
    reset = release.cursor_on_lookup == "reset to 0"
    nblocks = (P + 40) // g.block_tokens + 2
    f = cursor = 0
    load_failed = False
    out = []
    chunks = st.frozensets(st.integers(0, (P + 40) // C + 2), max_size=3 if null_blocks else 4)
    blocks = st.frozensets(st.integers(0, nblocks), max_size=4)
    forced = ["recompute", "preempt", "lookup"] if restarts and draw(st.booleans()) else []
    for i in range(draw(st.integers(1, 7))):
        kinds = ["preempt", "abort", "error", "recompute"]
        if f < P:
            kinds.append("prefill")
        if f >= P:
            kinds += ["decode", "decode-async", "finish"]
        if release.failed_transfers:  # the worker reports a failed store / load job
            kinds += ["store-failed", "load-failed"] + (["load-recompute"] if load_failed else [])
        if f == 0:
            kinds.append("lookup")
            if cursor == 0 or not reset:
                kinds += ["start"] + ([] if load_failed else ["loaded"])
            if cursor > 0 and not reset and not load_failed:  # a kept cursor, often loaded
                kinds += ["loaded", "loaded"]
        k = forced[i] if i < len(forced) else draw(st.sampled_from(kinds))
        s = 0
        if k == "prefill":
            s = draw(st.integers(1, P - f))
        elif k == "recompute":
            s = draw(st.integers(max(1, P - f + 1), max(1, P - f + 1) + 40))
        elif k in ("start", "loaded"):
            hi = P + 8 if cursor == 0 or draw(st.booleans()) else max(1, cursor * C - 1)
            s = draw(st.integers(1 if k == "loaded" else 0, hi))
        elif k in ("decode", "decode-async"):
            s = 1
        quiet = k in ("preempt", "lookup", "start", "loaded", "store-failed",
                      "load-failed", "load-recompute")  # no prepare_store call
        fields = [k, s, "accept" if quiet else draw(st.sampled_from(OUTCOMES)),
                  draw(chunks), draw(chunks),
                  draw(st.sampled_from([0, 0, P // 2 + 1, P + 3])),
                  draw(st.one_of(st.none(), st.integers(0, (P + 40) // C + 2)))]
        if null_blocks:
            fields.append(frozenset() if quiet else draw(blocks))
        step = VllmStep(*fields)
        out.append(step)
        f, cursor, _, _, ends = vllm_step(rule, g, r, f, cursor, step, release, load_failed)
        load_failed = load_failed_after(k, load_failed)
        if ends:
            break
    return out


SETTINGS = dict(deadline=None, max_examples=300,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@settings(**SETTINGS)
@given(cfg=configs(max_prompt=60), data=st.data())
def test_run_vllm_steps_are_spec_transitions(cfg, data):
    g, r = cfg
    for rule in RULES:
        plan = data.draw(plans(rule, g, r), label=f"plan {rule}")
        chk = Checker(rule, g, r)
        before = False
        for x in run_vllm(rule, g, r, plan):
            event(x.step.kind)
            if x.submitted != x.offered:
                event("store outcome " + x.step.outcome)
            if x.step.shared_prefix_boundary and x.offered:
                event("a shared-prefix boundary")
            if before:
                event("a step after a failed load")
            why = chk.check(x.step, x.f_before, x.cursor_before, x.f_after, x.cursor_after,
                            set(x.offered), set(x.submitted), (before, x.load_failed))
            assert why is None, (rule, g, r, x, why)
            before = x.load_failed


def test_a_refused_store_keeps_the_cursor():
    """The concrete F10 / refused-retried picture, by hand."""
    from kvreach.params import GroupConfig, RequestConfig

    ex = PR_54362
    g = GroupConfig(block_size=ex.swa_block_size, window=ex.window,
                    alignment_tokens=ex.alignment_tokens)
    r = RequestConfig(ex.prompt, None, True)
    steps = run_vllm("vllm-0.33", g, r, [
        VllmStep("prefill", ex.budget, "refused"), VllmStep("prefill", ex.prompt - ex.budget),
        VllmStep("preempt"), VllmStep("lookup"), VllmStep("prefill", ex.budget),
        VllmStep("abort")])
    assert steps[0].offered and not steps[0].submitted and steps[0].cursor_after == 0
    assert set(steps[0].offered) <= set(steps[1].submitted)  # retried next step
    assert steps[3].cursor_after == 0 and steps[3].incarnation == steps[0].incarnation + 1
    assert set(steps[4].submitted) & set(steps[1].submitted)  # offered again (F10)
    with pytest.raises(ParamError, match="lookup"):
        run_vllm("vllm-0.33", g, r, [VllmStep("prefill", 10), VllmStep("lookup")])


def _plan_cases():
    from kvreach.params import GroupConfig, RequestConfig

    ex = PR_54362
    pr = GroupConfig(block_size=ex.swa_block_size, window=ex.window,
                     alignment_tokens=ex.alignment_tokens)
    dense = GroupConfig(block_size=4, window=16, alignment_tokens=None)
    ret0 = GroupConfig(block_size=8, window=6, alignment_tokens=24, blocks_per_chunk=2,
                       retention_interval=0)
    return {
        # F9: at frontier 7 -> 8 the async step sees num_tokens 7: chunk 1 waits
        "decode-async crossing a chunk": (dense, RequestConfig(5, None, False), [
            VllmStep("prefill", 5), VllmStep("decode", 1), VllmStep("decode", 1),
            VllmStep("decode-async", 1), VllmStep("decode-async", 1)], [(3, ()), (4, (1,))]),
        # F8: seed 0, r0-22's first prefill step offers chunk 1 (boundary 24)
        "shared_prefix_boundary tail": (ret0, RequestConfig(120, None, True), [
            VllmStep("prefill", 74, shared_prefix_boundary=24)], [(0, (1,))]),
        "allocated-chunk cap": (dense, RequestConfig(40, None, True), [
            VllmStep("prefill", 40, allocated_chunks=3)], [(0, (0, 1, 2))]),
        "null block and partial store": (dense, RequestConfig(40, None, True), [
            VllmStep("prefill", 40, "partial", accepted=frozenset({0, 2}), null=frozenset({1}))],
            [(0, (0, 2, 3, 4, 5, 6, 7, 8, 9))]),
        "loaded start moves the cursor": (pr, RequestConfig(ex.prompt, None, True), [
            VllmStep("lookup"), VllmStep("loaded", 72), VllmStep("prefill", ex.budget)], []),
        "refused, then retried": (pr, RequestConfig(ex.prompt, None, True), [
            VllmStep("prefill", ex.budget, "refused"), VllmStep("prefill", ex.prompt - ex.budget)],
            [(0, (5, 6, 7, 8))]),
    }


@pytest.mark.parametrize("case", list(_plan_cases()))
def test_directed_plans_equal_spec(case):
    g, r, plan, offered = _plan_cases()[case]
    for rule in RULES:
        steps = run_vllm(rule, g, r, plan)
        chk = Checker(rule, g, r)
        for x in steps:
            why = chk.check(x.step, x.f_before, x.cursor_before, x.f_after, x.cursor_after,
                            set(x.offered), set(x.submitted))
            assert why is None, (rule, x, why)
        if rule == "vllm-0.33":
            for i, first in offered:
                assert steps[i].offered[:len(first)] == first, (i, steps[i])
        if rule == "vllm-0.33" and case == "null block and partial store":
            assert steps[0].submitted == (0, 2)
        if rule == "vllm-0.33" and case == "allocated-chunk cap":
            assert steps[0].offered == (0, 1, 2) and steps[0].cursor_after == 3
    if case == "loaded start moves the cursor":
        assert steps[1].cursor_after == 18  # cdiv(72, 4)


def test_failed_transfers_on_both_sides():
    """vLLM 0.34.0's failed transfers, by hand, on both sides: a failed
    store changes nothing of the request (its chunks stay submitted, the
    cursor past them, so the next step of the incarnation does not offer
    them again); a failed load keeps the frontier and, under
    ``kv_load_failure_policy="recompute"``, the reset after it sets it to 0;
    after it no start loads (impl refuses the
    plan, the spec has no such transition) while a start with a GPU-local
    hit, or none, still runs; 0.33.0 has neither kind on either side."""
    from kvreach import releases
    from kvreach.params import GroupConfig, RequestConfig

    ex = PR_54362
    g = GroupConfig(block_size=ex.swa_block_size, window=ex.window,
                    alignment_tokens=ex.alignment_tokens)
    r = RequestConfig(ex.prompt, None, True)
    v34, v33 = releases.V0_34_0, releases.V0_33_0
    plan = [VllmStep("prefill", ex.budget), VllmStep("store-failed"),
            VllmStep("prefill", ex.prompt - ex.budget), VllmStep("load-failed"),
            VllmStep("load-recompute"),
            VllmStep("lookup"), VllmStep("start", 72), VllmStep("abort")]
    steps = run_vllm("vllm-0.33", g, r, plan, v34)
    assert steps[1].f_after == ex.budget and steps[1].cursor_after == steps[0].cursor_after
    assert not set(steps[2].offered) & set(steps[0].submitted)  # not offered again
    assert steps[3].f_after == ex.prompt and steps[3].cursor_after == steps[2].cursor_after
    assert steps[4].f_after == 0 and steps[4].cursor_after == steps[2].cursor_after
    assert [x.load_failed for x in steps] == [False, False, False, True, True, True, True, True]
    chk, before = Checker("vllm-0.33", g, r), False
    for x in steps:
        assert chk.check(x.step, x.f_before, x.cursor_before, x.f_after, x.cursor_after,
                         set(x.offered), set(x.submitted), (before, x.load_failed)) is None, x
        before = x.load_failed
    with pytest.raises(ParamError, match="after a failed load"):
        run_vllm("vllm-0.33", g, r, plan[:6] + [VllmStep("loaded", 72)], v34)
    with pytest.raises(ParamError, match="recompute after a failed load"):
        run_vllm("vllm-0.33", g, r, [VllmStep("prefill", 10), VllmStep("load-recompute")], v34)
    why = chk.check(VllmStep("load-recompute"), 10, 0, 0, 0, set(), set(), (False, False))
    assert why is not None and why.startswith("(A)")
    why = chk.check(VllmStep("loaded", 72), 0, 0, 72, 18, set(), set(), (True, True))
    assert why is not None and why.startswith("(A)")
    assert chk.check(VllmStep("loaded", 72), 0, 0, 72, 18, set(), set(), (False, False)) is None
    for kind in ("store-failed", "load-failed", "load-recompute"):
        with pytest.raises(ParamError, match="failed transfer"):
            run_vllm("vllm-0.33", g, r, [VllmStep("prefill", 10), VllmStep(kind)], v33)
        old = StepChecker(g, r, "vllm-0.33", BUDGET, release=v33)
        why = old.explain(kind, 0, 0, (10, 0), (10, 0), frozenset(), frozenset())
        assert why is not None and why.startswith("(A)")
