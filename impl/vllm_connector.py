"""The module path users configure for kvreach's connector::

    KVTransferConfig(kv_connector="KvReachOffloadingConnector",
                     kv_connector_module_path="kvreach.impl.vllm_connector", ...)

It re-exports :mod:`kvreach.impl.vllm.connector` (options, errors, metrics and
the two classes; docs/integration.md); the code lives in ``kvreach.impl.vllm``.
"""

from kvreach.impl.vllm.connector import (  # noqa: F401
    CONTRACT_VIOLATIONS_METRIC,
    FALLBACKS_METRIC,
    MONITOR_CHUNKS_METRIC,
    MONITOR_UNLOADABLE_METRIC,
    MONITOR_VIOLATIONS_METRIC,
    OPTION_CHECK_CONTRACTS,
    OPTION_MONITOR,
    OPTION_RULE,
    SLOW_DECISION_NS,
    SLOW_DECISIONS_METRIC,
    KvReachContractViolation,
    KvReachMonitorViolation,
    KvReachOffloadingConnector,
    KvReachOffloadingConnectorScheduler,
    KvReachOptions,
    __all__,
)
