"""What the connector reports: the errors it raises, the counters it adds to
the connector stats payload (and to Prometheus, through
``KvReachOffloadingConnector.build_prom_metrics``), and its logger (vLLM's
counterpart: ``offloading/metrics.py``)."""

from __future__ import annotations

import deal

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadPromMetrics
from vllm.logger import init_logger

# The connector's logger, named after the module path users configure
# (docs/integration.md: one WARNING line per violation).
LOGGER_NAME = "kvreach.impl.vllm_connector"
logger = init_logger(LOGGER_NAME)

# kvreach.check_contracts=log: contract errors caught (the step fell back).
CONTRACT_VIOLATIONS_METRIC = "vllm:kv_offload_kvreach_contract_violations"
# kvreach.monitor: chunks checked; violations by property; chunks the lookup
# model cannot load (a finding of the rule, not a violation); fallbacks to
# stock vLLM's selection by reason (error: kvreach's decision or the monitor
# raised; monitor: the decision violated a property); decisions slower than
# SLOW_DECISION_NS (their result is used).
MONITOR_CHUNKS_METRIC = "vllm:kv_offload_kvreach_monitor_chunks"
MONITOR_VIOLATIONS_METRIC = "vllm:kv_offload_kvreach_monitor_violations"
MONITOR_UNLOADABLE_METRIC = "vllm:kv_offload_kvreach_monitor_unloadable_chunks"
FALLBACKS_METRIC = "vllm:kv_offload_kvreach_fallbacks"
SLOW_DECISIONS_METRIC = "vllm:kv_offload_kvreach_slow_decisions"
SLOW_DECISION_NS = 10_000_000  # 10 ms for one request's selection in one step


class KvReachMonitorViolation(RuntimeError):
    """A store decision violated a monitored property with ``kvreach.monitor=raise``."""

    def __init__(self, line: str, prop: str) -> None:
        super().__init__(line)
        self.property = prop


class MonitorReject(Exception):
    """kvreach's decision for one group violated ``prop`` (log mode: fall back)."""

    def __init__(self, prop: str, group_idx: int) -> None:
        super().__init__(prop)
        self.prop, self.group_idx = prop, group_idx


class KvReachContractViolation(RuntimeError):
    """A kvreach contract failed with ``kvreach.check_contracts=raise``."""

    def __init__(self, line: str, error: deal.ContractError) -> None:
        super().__init__(line)
        self.error = error



def one_line(text: str) -> str:
    return " ".join(str(text).split())


class KvReachOffloadPromMetrics(OffloadPromMetrics):
    """vLLM's offload Prometheus metrics plus the kvreach violation counter."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        from vllm.v1.kv_offload.base import OffloadingCounterMetadata

        meta = OffloadingCounterMetadata(
            documentation="kvreach contract violations caught in log mode "
            "(the step fell back to stock vLLM's SWA store decision)."
        )
        self._offloading_metric_metadata[CONTRACT_VIOLATIONS_METRIC] = meta
        self._offloading_metric_defs[CONTRACT_VIOLATIONS_METRIC] = self._create_metric(
            CONTRACT_VIOLATIONS_METRIC, meta
        )
        for name, doc, labels in (
            (MONITOR_CHUNKS_METRIC, "SWA chunks whose store decision kvreach.monitor checked.", ()),
            (MONITOR_VIOLATIONS_METRIC, "Store decisions that violated a monitored property.",
             ("property",)),
            (MONITOR_UNLOADABLE_METRIC, "Decided SWA chunks that no later request of the "
             "single-request world can load (a finding of the rule).", ()),
            (FALLBACKS_METRIC, "Request steps that used stock vLLM's SWA store selection "
             "because kvreach's decision raised or violated a property.", ("reason",)),
            (SLOW_DECISIONS_METRIC, "kvreach store selections slower than 10 ms.", ()),
        ):
            m = OffloadingCounterMetadata(documentation=doc, labelnames=labels)
            self._offloading_metric_metadata[name] = m
            self._offloading_metric_defs[name] = self._create_metric(name, m)
