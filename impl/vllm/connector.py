"""vLLM ``OffloadingConnector`` (0.33.0 or 0.34.0) whose SWA store decisions come from kvreach.

Enable it with::

    KVTransferConfig(
        kv_connector="KvReachOffloadingConnector",
        kv_connector_module_path="kvreach.impl.vllm_connector",  # re-exports this module
        kv_role="kv_both",
        kv_connector_extra_config={"kvreach.rule": "vllm-0.33",
                                   "kvreach.check_contracts": "log"},
    )

What changes against stock vLLM: only the per-group chunk selection of
``OffloadingConnectorScheduler._build_store_jobs`` for sliding-window groups
(the mask, the store horizon, the abort reconsideration, which chunks of
``[next_stored_chunk_idx, num_chunks)`` are submitted). It is taken from
``kvreach.impl.rules.store_step``. Everything else (``storable_chunks``,
the null-block filter, ``prepare_store``, job building, fencing, full-attention
and non-SWA groups, load side) is vLLM's own code path.

Options (``kv_connector_extra_config``; see ``KvReachOptions``):

- ``kvreach.rule``: ``vllm-0.33`` (default; vLLM 0.34.0 stores by the same
  rule), ``vllm-0.29`` (the pre-fix rule of vLLM PR #54362, selection only;
  bookkeeping stays the installed release's) or ``lookup-window``.
- ``kvreach.check_contracts``: ``off``, ``log`` or ``raise``; absent keeps
  the process-wide mode of ``kvreach.impl.contracts`` (``off`` unless
  ``KVREACH_CHECK_CONTRACTS=1``). deal's switch is process-wide. In
  ``log`` mode a ``deal.ContractError`` from kvreach is logged as one warning
  line (``kvreach contract violation: ...``), counted in
  ``KvReachOffloadingConnectorScheduler.kvreach_contract_violations`` and in
  the stats counter ``vllm:kv_offload_kvreach_contract_violations``, and the
  request's step falls back to stock vLLM's decision. In ``raise`` mode
  ``KvReachContractViolation`` is raised.

- ``kvreach.monitor``: ``off`` (default), ``log`` or ``raise``. The
  incremental runtime monitor (``kvreach.impl.monitor``): each SWA group's
  decision is checked before its keys are used (in range, computed before
  stored, once per incarnation, horizon final; loadability by the lookup
  model is counted as a finding). ``log``: a violation is one warning line,
  counted, and the request's step uses stock vLLM's selection; ``raise``:
  ``KvReachMonitorViolation``. In every mode, any other exception inside
  kvreach's decision or the monitor makes that step use stock vLLM's
  selection, counted in ``vllm:kv_offload_kvreach_fallbacks{reason="error"}``
  (a scheduler step never fails because of kvreach).

Unmodeled inputs fall back to stock vLLM for the affected request/group and
are counted in ``kvreach_unmodeled_fallbacks``: a shared-prefix junction
(``Request.shared_prefix_boundary``) under a retention interval, and an SWA
group whose offload block is not ``block_size * dcp_world_size``
(``dcp_sharded=False`` under DCP).

Lookahead block hashes (vLLM 0.34.0, ``num_hash_lookahead_tokens > 0``, on by
default for EAGLE/MTP drafts with this connector, which inherits
``supports_lookahead_block_hashes = True``): the connector follows vLLM's
``use_lookahead_block_hashes``. Its EAGLE groups keep vLLM's own selection
(a plain sliding-window mask, no trailing drop, no final tail: a group
kvreach's rules do not have, never the legacy EAGLE mask), and the prompt
horizon kvreach's rule gets for the other SWA groups is vLLM's hashed end
(``_calc_num_offloadable_tokens`` capped by ``len(block_hashes) *
tokens_per_hash``). docs/integration.md says more.
"""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)

from kvreach.impl.vllm.metrics import (
    CONTRACT_VIOLATIONS_METRIC,
    FALLBACKS_METRIC,
    MONITOR_CHUNKS_METRIC,
    MONITOR_UNLOADABLE_METRIC,
    MONITOR_VIOLATIONS_METRIC,
    SLOW_DECISION_NS,
    SLOW_DECISIONS_METRIC,
    KvReachContractViolation,
    KvReachMonitorViolation,
    KvReachOffloadPromMetrics,
)
from kvreach.impl.vllm.options import (
    OPTION_CHECK_CONTRACTS,
    OPTION_MONITOR,
    OPTION_RULE,
    KvReachOptions,
    extra_config,
)
from kvreach.impl.vllm.scheduler import KvReachOffloadingConnectorScheduler
from kvreach.impl.vllm.vllm_copy import ConnectorInit


class KvReachOffloadingConnector(ConnectorInit, OffloadingConnector):
    """``OffloadingConnector`` with ``KvReachOffloadingConnectorScheduler`` on
    the scheduler side (vLLM's ``__init__``, :class:`~kvreach.impl.vllm.vllm_copy.ConnectorInit`);
    the worker side is vLLM's."""

    scheduler_class = KvReachOffloadingConnectorScheduler

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config) -> None:
        # Validate kvreach.* options at start-up, in every role.
        self.kvreach_options = KvReachOptions.from_extra_config(extra_config(vllm_config))
        super().__init__(vllm_config, role, kv_cache_config)

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return KvReachOffloadPromMetrics(
            vllm_config, metric_types, labelnames, per_engine_labelvalues
        )


__all__ = [
    "KvReachContractViolation",
    "KvReachMonitorViolation",
    "KvReachOffloadingConnector",
    "KvReachOffloadingConnectorScheduler",
    "KvReachOptions",
    "CONTRACT_VIOLATIONS_METRIC",
    "FALLBACKS_METRIC",
    "MONITOR_CHUNKS_METRIC",
    "MONITOR_UNLOADABLE_METRIC",
    "MONITOR_VIOLATIONS_METRIC",
    "OPTION_CHECK_CONTRACTS",
    "OPTION_MONITOR",
    "OPTION_RULE",
    "SLOW_DECISION_NS",
    "SLOW_DECISIONS_METRIC",
]
