"""Trace validation of the installed vLLM's real scheduler against the Z3 spec
(the model is etcd-io/raft's tla/Traceetcdraft.tla).

Many concurrent requests of random lengths run through the real ``Scheduler``
/ ``AsyncScheduler`` and ``OffloadingConnectorScheduler`` (the project's
harness): a GPU block pool small enough to preempt, chunked-prefill budgets,
aborts and error finishes at random points, decode, an EAGLE group, a retention interval,
on vLLM 0.34.0 failed store and load jobs (the worker's ``failed_jobs``, either
``kv_load_failure_policy``), and an offload manager (:class:`TierManager`) that stores keys, answers lookups from
them (so a request can hit its own or another request's earlier stores),
de-duplicates, sometimes drops keys or refuses, sometimes defers a lookup.

The recording and the trace format (one JSON line per step) are
:mod:`kvreach.vllm_harness.trace_record`, the validator
:mod:`kvreach.vllm_harness.trace` (``python -m kvreach.vllm_harness.trace
validate FILE``, which a maintainer runs on a recorded trace); this test
records a trace to a file and validates the file.

Every step of every request is recorded per SWA group as (kind, pre-state
(f, cursor), step size, post-state, chunks offered to ``prepare_store``,
chunks it accepted, the manager's outcome, chunks with a null block), from
wrappers around ``Scheduler._preempt_request``,
``OffloadingConnectorScheduler.get_num_new_matched_tokens``,
``update_state_after_alloc`` and ``_build_store_jobs``. Each step is checked
against ``spec.lifecycle.transition(..., world="restarts")`` with those values
pinned: (A) satisfiable; (B) no chunk whose offered / accepted status the
spec gives differently (unsat). Consecutive steps must chain (the post-state
of one is the pre-state observed at the next). A step that fails is printed
decoded with its request's trace.

CI: ``KVREACH_TRACE_RUNS`` runs (default 6). The slow run
(``-m slow``, ``KVREACH_TRACE_SLOW_RUNS``, default 40) must reach 1,000
lifecycles and 100,000 steps; its figures go in docs/conformance.md.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.spec import lifecycle as lc  # noqa: E402
from kvreach.vllm_harness import trace  # noqa: E402
from kvreach.vllm_harness.conform_run import failures_settable  # noqa: E402
from kvreach.vllm_harness.trace_record import record  # noqa: E402

import installed_release  # noqa: E402

pytestmark = pytest.mark.vllm


def _validate(model_dir, seeds, tmp_path):
    recorded = tmp_path / "trace.jsonl"
    trace.write(recorded, record(model_dir, seeds))
    totals = trace.validate(recorded)
    report = trace.report(totals)
    print(report)
    assert not totals.failures, "\n\n".join(totals.failures[:8]) + "\n\n" + report
    assert totals.sub[trace.REOFFERED], report
    # the kinds of the installed release's table (0.34.0: its failed
    # transfers, which the recorder injects as the worker's reports)
    kinds = [t.name for t in lc.table("restarts", installed_release.record())]
    missing = [k for k in kinds if totals.kinds[k] == 0]
    assert not missing, f"transition kinds never seen: {missing}\n{report}"
    if failures_settable():  # steps checked with load_failed set (no loaded start then)
        assert totals.sub[trace.AFTER_FAILED_LOAD], report
    return totals


RUNS = int(os.environ.get("KVREACH_TRACE_RUNS", "6"))


def test_trace_validation(offline_model_dir, tmp_path):
    _validate(offline_model_dir, range(RUNS), tmp_path)


@pytest.mark.slow
def test_trace_validation_slow(offline_model_dir, tmp_path):
    n = int(os.environ.get("KVREACH_TRACE_SLOW_RUNS", "40"))
    totals = _validate(offline_model_dir, range(1000, 1000 + n), tmp_path)
    assert totals.lifecycles >= 1000 and totals.steps >= 100_000, trace.report(totals)
