"""Fault injection through vLLM's real scheduler: kvreach's decision
(``rules.store_step``) raises, returns out-of-range chunks, or takes 100 ms,
on a random schedule, with ``kvreach.monitor=log``. Over random lifecycles no
scheduler step fails, every fault is counted, and the stores and store jobs
equal stock vLLM 0.33.0's at every step (a fallback uses stock's selection; a
slow decision is used, and equals stock's because kvreach's rule does).

Counting: a raise is one ``kvreach_fallbacks['error']``, an out-of-range
decision one ``kvreach_fallbacks['monitor']`` (and one monitor violation); a
request-step with a slow decision one ``kvreach_slow_decisions`` (at least:
on a busy machine a real decision may also pass 10 ms).

CI runs ``KVREACH_FAULT_EXAMPLES`` (default 40) fixed lifecycles; the
slow-marked test runs 1,000 random ones (``pytest -m slow``)."""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvreach.vllm_harness.runner import KVREACH, STOCK, SchedulerRun, drive  # noqa: E402
from test_vllm_connector_random import lifecycles  # noqa: E402

from kvreach.impl import rules  # noqa: E402
from kvreach.impl.vllm_connector import (  # noqa: E402
    FALLBACKS_METRIC,
    MONITOR_VIOLATIONS_METRIC,
    SLOW_DECISIONS_METRIC,
)

pytestmark = pytest.mark.vllm

# per store_step call: weights none 6, raise 2, out-of-range 2 (three shapes), slow 1
KINDS = ["none"] * 6 + ["raise"] * 2 + ["past_frontier", "negative_or_dup"] + ["slow"]
DELAY_S = 0.1


class InjectedFault(RuntimeError):
    pass


def faulty_store_step(plan, applied, step_no):
    real = rules.store_step
    calls = iter(range(1 << 30))

    def store_step(rule, g, req, cursor, num_chunks, finished):
        kind = plan[next(calls) % len(plan)]
        w = real(rule, g, req, cursor, num_chunks, finished)
        if kind == "none":
            return w
        applied.append((step_no[0], kind))
        if kind == "raise":
            raise InjectedFault("injected")
        if kind == "slow":
            time.sleep(DELAY_S)
            return w
        if kind == "past_frontier" or not w.chunks and num_chunks == 0:
            bad = (*w.chunks, num_chunks + len(w.chunks) % 3)
        elif w.chunks:
            bad = (*w.chunks, w.chunks[0])  # the same chunk twice
        else:
            bad = (-1,)
        return dataclasses.replace(w, chunks=bad)

    return store_step


def run_with_faults(model_dir, case, plan, monkeypatch):
    setup, prompt, decode, abort = case
    applied: list[tuple[int, str]] = []
    step_no = [0]
    k = SchedulerRun(setup, KVREACH, model_dir, {"kvreach.monitor": "log",
                                                 "kvreach.check_contracts": "off"},
                     spy=False)
    inner = k.offload._build_store_jobs

    def counted(out):
        step_no[0] += 1
        return inner(out)

    k.offload._build_store_jobs = counted
    with monkeypatch.context() as mp:
        mp.setattr(rules, "store_step", faulty_store_step(plan, applied, step_no))
        drive(k, "r", prompt, decode=decode, abort_after_step=abort)
    s = drive(SchedulerRun(setup, STOCK, model_dir), "r", prompt, decode=decode,
              abort_after_step=abort)
    return k, s, applied


def check(k, s, applied):
    assert [st_.stores for st_ in k.steps] == [st_.stores for st_ in s.steps]
    assert [st_.jobs for st_ in k.steps] == [st_.jobs for st_ in s.steps]
    off = k.offload
    n_raise = sum(kind == "raise" for _, kind in applied)
    n_oor = sum(kind in ("past_frontier", "negative_or_dup") for _, kind in applied)
    slow_steps = {n for n, kind in applied if kind == "slow"}
    assert off.kvreach_fallbacks.get("error", 0) == n_raise
    assert off.kvreach_fallbacks.get("monitor", 0) == n_oor
    assert sum(off.kvreach_monitor_violations.values()) == n_oor
    assert off.kvreach_slow_decisions >= len(slow_steps)
    assert off.kvreach_contract_violations == 0
    # the counters ride on the connector stats the scheduler reports
    k.flush()
    stats = off.get_stats()
    if stats is not None:
        k.connector_stats.append(stats)
    assert k.counter_total(FALLBACKS_METRIC) == n_raise + n_oor
    assert k.counter_total(MONITOR_VIOLATIONS_METRIC) == n_oor
    assert k.counter_total(SLOW_DECISIONS_METRIC) == off.kvreach_slow_decisions
    return n_raise + n_oor + len(slow_steps)


plans = st.lists(st.sampled_from(KINDS), min_size=1, max_size=8)
EXAMPLES = int(os.environ.get("KVREACH_FAULT_EXAMPLES", "40"))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                      HealthCheck.too_slow])


@settings(max_examples=EXAMPLES, derandomize=True, **SETTINGS)
@given(case=lifecycles(), plan=plans)
def test_faults_fall_back_to_stock_and_are_counted(offline_model_dir, monkeypatch, case, plan):
    check(*run_with_faults(offline_model_dir, case, plan, monkeypatch))


@pytest.mark.slow
def test_faults_over_1000_random_lifecycles(offline_model_dir, monkeypatch):
    totals: Counter = Counter()

    @settings(max_examples=1000, derandomize=False, **SETTINGS)
    @given(case=lifecycles(), plan=plans)
    def one(case, plan):
        k, s, applied = run_with_faults(offline_model_dir, case, plan, monkeypatch)
        check(k, s, applied)
        totals["lifecycles"] += 1
        totals["steps"] += len(k.steps)
        totals.update(kind for _, kind in applied)
        totals["slow counted"] += k.offload.kvreach_slow_decisions
        totals["chunks checked"] += k.offload.kvreach_monitor_chunks

    one()
    print("fault injection totals:", dict(totals))
    assert totals["lifecycles"] >= 1000
    assert all(totals[kind] for kind in set(KINDS) - {"none"})


def test_every_fault_kind_is_injected_and_counted(offline_model_dir, monkeypatch):
    """One lifecycle with each kind of fault on its own steps."""
    from kvreach.proofs.scenarios import PR_54362 as ex
    from kvreach.vllm_harness.runner import Setup, full, swa

    pr = (full(ex.full_block_size), swa(ex.swa_block_size, ex.window))
    case = (Setup(pr, budget=300), ex.prompt, 2, None)
    plan = ["raise", "past_frontier", "negative_or_dup", "slow", "none", "none", "none"]
    k, s, applied = run_with_faults(offline_model_dir, case, plan, monkeypatch)
    assert {kind for _, kind in applied} == {"raise", "past_frontier", "negative_or_dup", "slow"}
    assert check(k, s, applied) == 4
