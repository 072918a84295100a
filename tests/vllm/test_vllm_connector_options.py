"""Loading through kv_connector_module_path, kvreach.* options, and the
contract-violation paths (log: one warning line, counted, stock fallback;
raise: KvReachContractViolation)."""

from __future__ import annotations

import dataclasses
import logging

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness.runner import KVREACH, STOCK, SchedulerRun, Setup, drive, full, swa  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: E402

from kvreach.impl import contracts, rules  # noqa: E402
from kvreach.proofs.scenarios import PR_54362, PR_54362_WASTED  # noqa: E402
from kvreach.impl.vllm_connector import (  # noqa: E402
    CONTRACT_VIOLATIONS_METRIC,
    KvReachContractViolation,
    KvReachOffloadingConnector,
    KvReachOffloadingConnectorScheduler,
    KvReachOptions,
)

pytestmark = pytest.mark.vllm

EX = PR_54362
PR = Setup((full(EX.full_block_size), swa(EX.swa_block_size, EX.window)), budget=EX.budget)


def test_vllm_loads_the_connector_through_module_path(offline_model_dir):
    run = SchedulerRun(PR, KVREACH, offline_model_dir)
    ktc = run.vllm_config.kv_transfer_config
    assert ktc.kv_connector == "KvReachOffloadingConnector"
    assert ktc.kv_connector_module_path == "kvreach.impl.vllm_connector"
    assert KVConnectorFactory.get_connector_class(ktc) is KvReachOffloadingConnector
    assert type(run.connector) is KvReachOffloadingConnector
    assert type(run.offload) is KvReachOffloadingConnectorScheduler
    assert run.offload.kvreach_options == KvReachOptions("vllm-0.33", None)
    stock = SchedulerRun(PR, STOCK, offline_model_dir)
    assert not isinstance(stock.offload, KvReachOffloadingConnectorScheduler)


@pytest.mark.parametrize(
    "extra,option,value",
    [
        ({"kvreach.rule": "vllm-0.31"}, "kvreach.rule", "vllm-0.31"),
        ({"kvreach.check_contracts": "yes"}, "kvreach.check_contracts", "yes"),
        ({"kvreach.colour": "blue"}, "kvreach.colour", "blue"),
    ],
)
def test_bad_option_fails_at_startup(offline_model_dir, extra, option, value):
    with pytest.raises(ValueError) as err:
        SchedulerRun(PR, KVREACH, offline_model_dir, extra)
    msg = str(err.value)
    assert option in msg and repr(value) in msg and "expected" in msg


def test_options_parse():
    assert KvReachOptions.from_extra_config({"kvreach.rule": "vllm-0.29",
                                             "kvreach.check_contracts": "log",
                                             "offload_prompt_only": False}) == \
        KvReachOptions("vllm-0.29", "log")
    assert KvReachOptions.from_extra_config(None) == KvReachOptions()


def test_rule_029_reproduces_the_pre_fix_stores(offline_model_dir):
    """With kvreach.rule=vllm-0.29 the intermediate 1000-token frontier is
    treated as final: 246 and 247 are stored too (the PR's regression)."""
    run = drive(SchedulerRun(PR, KVREACH, offline_model_dir, {"kvreach.rule": "vllm-0.29"}),
                "r", EX.prompt)
    stock = drive(SchedulerRun(PR, STOCK, offline_model_dir), "r", EX.prompt)
    extra = sorted(set(run.stored(1)) - set(stock.stored(1)))
    assert set(PR_54362_WASTED) <= set(extra)
    assert run.stored(0) == stock.stored(0)  # full attention keeps vLLM's path


@dataclasses.dataclass(frozen=True)
class _BrokenWindow(rules.StoreStep):
    """A faulty rule: moves the cursor one chunk too far."""

    def __post_init__(self):
        object.__setattr__(self, "next_cursor", self.next_cursor + 1)


def test_log_mode_warns_counts_and_falls_back(offline_model_dir, monkeypatch, caplog):
    monkeypatch.setattr(rules, "StoreStep", _BrokenWindow)
    caplog.set_level(logging.WARNING, logger="kvreach.impl.vllm_connector")
    run = drive(SchedulerRun(PR, KVREACH, offline_model_dir,
                             {"kvreach.check_contracts": "log"}), "r", EX.prompt)
    stock = drive(SchedulerRun(PR, STOCK, offline_model_dir), "r", EX.prompt)
    assert contracts.mode() == "log"
    # every request-step fell back to stock vLLM's decision
    assert [s.stores for s in run.steps] == [s.stores for s in stock.steps]
    n = run.offload.kvreach_contract_violations
    assert n == 3  # two prefill steps and the finish
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("kvreach contract violation:")]
    assert len(lines) == n
    for line in lines:
        assert "\n" not in line
        assert "function=store_step" in line and "rule=vllm-0.33" in line
        assert "req=r" in line and "group=1" in line
    # the counter rides on the connector stats the scheduler reports
    assert run.counter_total(CONTRACT_VIOLATIONS_METRIC) == n


def test_raise_mode_raises_typed_error(offline_model_dir, monkeypatch):
    monkeypatch.setattr(rules, "StoreStep", _BrokenWindow)
    run = SchedulerRun(PR, KVREACH, offline_model_dir, {"kvreach.check_contracts": "raise"})
    run.add_request("r", EX.prompt)
    with pytest.raises(KvReachContractViolation) as err:
        run.step()
    assert isinstance(err.value, RuntimeError)
    assert str(err.value).startswith("kvreach contract violation: function=store_step")


def test_off_mode_runs_no_contract(offline_model_dir, monkeypatch):
    monkeypatch.setattr(rules, "StoreStep", _BrokenWindow)
    run = drive(SchedulerRun(PR, KVREACH, offline_model_dir,
                             {"kvreach.check_contracts": "off"}), "r", EX.prompt)
    assert run.offload.kvreach_contract_violations == 0
    assert run.stored(1)  # the broken cursor is not used by the connector


def test_shared_prefix_junction_under_retention_falls_back(offline_model_dir):
    setup = dataclasses.replace(PR, retention_interval=72, budget=300)
    runs = {}
    for w in (KVREACH, STOCK):
        r = SchedulerRun(setup, w, offline_model_dir)
        req = r.add_request("r", 1000)
        r.step()  # the scheduler sets the junction when it admits the request
        req.shared_prefix_boundary = 400
        r.run_to_completion()
        runs[w] = r
    assert runs[KVREACH].offload.kvreach_unmodeled_fallbacks > 0
    assert [s.stores for s in runs[KVREACH].steps] == [s.stores for s in runs[STOCK].steps]


class _FakeMetric:
    """A Prometheus metric stand-in: records its constructor arguments, the
    label values it is bound to and what it is incremented by."""

    def __init__(self, **kw):
        self.kw, self.incs, self.labelled = kw, [], []

    def labels(self, *values):
        self.labelled.append(values)
        return self

    def inc(self, v):
        self.incs.append(v)

    observe = set = inc


def _fake_prom_metrics(connector=KvReachOffloadingConnector):
    """``connector.build_prom_metrics`` with fake metrics."""
    from prometheus_client import Counter, Gauge, Histogram

    class Cfg:
        class kv_transfer_config:  # noqa: N801
            kv_connector_extra_config = {"spec_name": "CPUOffloadingSpec"}

    fake = {Counter: _FakeMetric, Gauge: _FakeMetric, Histogram: _FakeMetric}
    return connector.build_prom_metrics(Cfg(), fake, ["engine"], {0: ["0"]})


def test_prometheus_counter_is_registered():
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
        _MetricType,
        _StatsKey,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
        OffloadingConnector,
    )

    prom = _fake_prom_metrics()
    assert isinstance(prom, type(_fake_prom_metrics(OffloadingConnector)))
    prom.observe({_StatsKey.TYPES: {CONTRACT_VIOLATIONS_METRIC: _MetricType.COUNTER},
                  _StatsKey.DATA: {CONTRACT_VIOLATIONS_METRIC: {(): 2}}})
    assert prom._offloading_metric_defs[CONTRACT_VIOLATIONS_METRIC].incs == [2]


# --- kvreach.monitor ------------------------------------------------------------

from kvreach.impl.vllm_connector import (  # noqa: E402
    FALLBACKS_METRIC,
    MONITOR_CHUNKS_METRIC,
    MONITOR_UNLOADABLE_METRIC,
    MONITOR_VIOLATIONS_METRIC,
    SLOW_DECISIONS_METRIC,
    KvReachMonitorViolation,
)


def test_monitor_option_parses_and_rejects_bad_values(offline_model_dir):
    assert KvReachOptions.from_extra_config({"kvreach.monitor": "log"}).monitor == "log"
    assert KvReachOptions().monitor == "off"
    with pytest.raises(ValueError) as err:
        SchedulerRun(PR, KVREACH, offline_model_dir, {"kvreach.monitor": "on"})
    assert "kvreach.monitor" in str(err.value) and "'on'" in str(err.value)


def test_monitor_counts_vllm_033s_unloadable_final_tail(offline_model_dir):
    """The PR's completed lifecycle: 135 chunks checked, no violation; the
    final partial-segment tail 297..299 lies past the last full-attention
    chunk (1188 tokens), so no later request loads it (docs/findings.md, F4)."""
    run = drive(SchedulerRun(PR, KVREACH, offline_model_dir, {"kvreach.monitor": "log"}),
                "r", EX.prompt)
    off = run.offload
    assert off.kvreach_monitor_chunks == 135
    assert off.kvreach_monitor_violations == {} and off.kvreach_fallbacks == {}
    assert off.kvreach_monitor_unloadable == 3
    assert run.counter_total(MONITOR_CHUNKS_METRIC) == 135
    assert run.counter_total(MONITOR_UNLOADABLE_METRIC) == 3


def test_monitor_flags_the_pre_fix_horizon_and_falls_back(offline_model_dir):
    """vllm-0.29 takes the 1000-token frontier as final: horizon_final; that
    step uses stock's stores, so 246 and 247 are not stored."""
    run = drive(SchedulerRun(PR, KVREACH, offline_model_dir,
                             {"kvreach.rule": "vllm-0.29", "kvreach.monitor": "log"}), "r", EX.prompt)
    stock = drive(SchedulerRun(PR, STOCK, offline_model_dir), "r", EX.prompt)
    assert run.offload.kvreach_monitor_violations == {"horizon_final": 1}
    assert run.offload.kvreach_fallbacks == {"monitor": 1}
    assert [s.stores for s in run.steps] == [s.stores for s in stock.steps]
    assert run.counter_total(MONITOR_VIOLATIONS_METRIC) == 1
    assert run.counter_total(FALLBACKS_METRIC) == 1


def _out_of_range(real):
    def store_step(*a):
        w = real(*a)
        return dataclasses.replace(w, chunks=(*w.chunks, w.end_chunk))
    return store_step


def test_monitor_raise_mode_raises_typed_error(offline_model_dir, monkeypatch):
    monkeypatch.setattr(rules, "store_step", _out_of_range(rules.store_step))
    run = SchedulerRun(PR, KVREACH, offline_model_dir, {"kvreach.monitor": "raise"}, spy=False)
    run.add_request("r", EX.prompt)
    with pytest.raises(KvReachMonitorViolation) as err:
        run.step()
    assert isinstance(err.value, RuntimeError) and err.value.property == "in_range"
    assert str(err.value).startswith("kvreach monitor violation: property=in_range")


@pytest.mark.parametrize("mode", ["off", "log", "raise"])
def test_internal_error_falls_back_in_every_monitor_mode(offline_model_dir, monkeypatch, mode):
    def broken(*a):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(rules, "store_step", broken)
    run = drive(SchedulerRun(PR, KVREACH, offline_model_dir, {"kvreach.monitor": mode},
                             spy=False), "r", EX.prompt)
    stock = drive(SchedulerRun(PR, STOCK, offline_model_dir), "r", EX.prompt)
    assert [s.stores for s in run.steps] == [s.stores for s in stock.steps]
    assert run.offload.kvreach_fallbacks == {"error": 3}
    assert run.counter_total(FALLBACKS_METRIC) == 3


def test_monitor_off_adds_no_counter(offline_model_dir):
    run = drive(SchedulerRun(PR, KVREACH, offline_model_dir), "r", EX.prompt)
    assert run.offload.kvreach_monitor_chunks == 0
    for name in (MONITOR_CHUNKS_METRIC, MONITOR_UNLOADABLE_METRIC, SLOW_DECISIONS_METRIC):
        assert run.counter_total(name) == 0


def test_monitor_prometheus_counters_are_registered():
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
        _MetricType,
        _StatsKey,
    )

    prom = _fake_prom_metrics()
    C = _MetricType.COUNTER
    prom.observe({
        _StatsKey.TYPES: {FALLBACKS_METRIC: C, MONITOR_VIOLATIONS_METRIC: C,
                          MONITOR_CHUNKS_METRIC: C, MONITOR_UNLOADABLE_METRIC: C,
                          SLOW_DECISIONS_METRIC: C},
        _StatsKey.DATA: {FALLBACKS_METRIC: {("error",): 2},
                         MONITOR_VIOLATIONS_METRIC: {("in_range",): 1},
                         MONITOR_CHUNKS_METRIC: {(): 7}, MONITOR_UNLOADABLE_METRIC: {(): 3},
                         SLOW_DECISIONS_METRIC: {(): 1}},
    })
    defs = prom._offloading_metric_defs
    assert defs[FALLBACKS_METRIC].incs == [2]
    assert defs[FALLBACKS_METRIC].kw["labelnames"] == ["engine", "reason"]
    assert defs[MONITOR_VIOLATIONS_METRIC].labelled == [("0", "in_range")]
    assert defs[MONITOR_CHUNKS_METRIC].incs == [7]
    assert defs[MONITOR_UNLOADABLE_METRIC].incs == [3]
    assert defs[SLOW_DECISIONS_METRIC].incs == [1]


def test_monitor_error_on_stock_path_keeps_stocks_stores(offline_model_dir, monkeypatch):
    """kvreach's decision raises (fallback), and the monitor raises too while
    checking stock's decision: stock's stores are still submitted."""
    from kvreach.impl import monitor

    def broken(*a):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(rules, "store_step", broken)
    monkeypatch.setattr(monitor.GroupMonitor, "check", broken)
    run = drive(SchedulerRun(PR, KVREACH, offline_model_dir, {"kvreach.monitor": "log"},
                             spy=False), "r", EX.prompt)
    stock = drive(SchedulerRun(PR, STOCK, offline_model_dir), "r", EX.prompt)
    assert [s.stores for s in run.steps] == [s.stores for s in stock.steps]
    assert run.offload.kvreach_fallbacks == {"error": 3}
