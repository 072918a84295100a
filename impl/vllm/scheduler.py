"""vLLM 0.33.0 ``OffloadingConnector`` whose SWA store decisions come from kvreach.

Enable it with::

    KVTransferConfig(
        kv_connector="KvReachOffloadingConnector",
        kv_connector_module_path="kvreach.impl.vllm_connector",
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

- ``kvreach.rule``: ``vllm-0.33`` (default) or ``vllm-0.29`` (the pre-fix
  rule of vLLM PR #54362, selection only; bookkeeping stays vLLM 0.33's).
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
"""

# Parts of this module (KvReachOffloadingConnector.__init__ and
# KvReachOffloadingConnectorScheduler._build_store_jobs) are adapted from
# vLLM 0.33.0, vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py
# and .../offloading/scheduler.py.
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any

import deal

from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
    build_offloading_config,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
    OffloadPromMetrics,
    _ConnectorMetricName,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    GroupOffloadConfig,
    OffloadingConnectorScheduler,
    RequestOffloadState,
    TransferJobStatus,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import (
    OffloadingConnectorWorker,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    TransferJob,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector import (
    OffloadingConnector,
)
from vllm.logger import init_logger
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec
from vllm.v1.kv_offload.base import GPULoadStoreSpec, OffloadingSpec, OffloadKey
from vllm.v1.kv_offload.factory import OffloadingSpecFactory
from vllm.v1.request import RequestStatus

from kvreach.impl import contracts, monitor, rules
from kvreach.params import RULES, GroupConfig, ParamError, RequestConfig

logger = init_logger(__name__)

OPTION_RULE = "kvreach.rule"
OPTION_CHECK_CONTRACTS = "kvreach.check_contracts"
OPTION_MONITOR = "kvreach.monitor"
OPTION_PREFIX = "kvreach."
# Counters on the connector stats payload (and Prometheus, via
# KvReachOffloadingConnector.build_prom_metrics).
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


class _MonitorReject(Exception):
    """kvreach's decision for one group violated ``prop`` (log mode: fall back)."""

    def __init__(self, prop: str, group_idx: int) -> None:
        super().__init__(prop)
        self.prop, self.group_idx = prop, group_idx


class KvReachContractViolation(RuntimeError):
    """A kvreach contract failed with ``kvreach.check_contracts=raise``."""

    def __init__(self, line: str, error: deal.ContractError) -> None:
        super().__init__(line)
        self.error = error


@dataclass(frozen=True)
class KvReachOptions:
    """rule: the kvreach store rule. check_contracts: None (option absent)
    keeps the process-wide mode of ``kvreach.impl.contracts`` (``off`` unless
    ``KVREACH_CHECK_CONTRACTS=1``); a value sets it (deal's switch is
    process-wide, so the last connector built wins)."""

    rule: str = "vllm-0.33"
    check_contracts: str | None = None
    monitor: str = "off"

    @classmethod
    def from_extra_config(cls, extra: dict[str, Any] | None) -> KvReachOptions:
        """Parse ``kvreach.*`` keys; unknown keys or bad values raise
        ``ParamError`` (a ``ValueError``) naming option, value and expected."""
        extra = extra or {}
        known = (OPTION_RULE, OPTION_CHECK_CONTRACTS, OPTION_MONITOR)
        for key in extra:
            if isinstance(key, str) and key.startswith(OPTION_PREFIX) and key not in known:
                raise ParamError(key, extra[key], "a known option: " + ", ".join(known))
        rule = extra.get(OPTION_RULE, cls.rule)
        if rule not in RULES:
            raise ParamError(OPTION_RULE, rule, "one of " + ", ".join(RULES))
        mode = extra.get(OPTION_CHECK_CONTRACTS)
        if mode is not None and mode not in contracts.MODES:
            raise ParamError(OPTION_CHECK_CONTRACTS, mode, "one of " + ", ".join(contracts.MODES))
        mon = extra.get(OPTION_MONITOR, cls.monitor)
        if mon not in monitor.MODES:
            raise ParamError(OPTION_MONITOR, mon, "one of " + ", ".join(monitor.MODES))
        return cls(rule=rule, check_contracts=mode, monitor=mon)


def _extra_config(vllm_config) -> dict[str, Any]:
    # getattr: vLLM's own tests build the scheduler from partial configs.
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    extra = getattr(ktc, "kv_connector_extra_config", None)
    return dict(extra) if extra else {}


@lru_cache(maxsize=4096)
def _request_config(
    prompt_tokens: int, max_offload_tokens: int | None, offload_prompt_only: bool
) -> RequestConfig:
    return RequestConfig(prompt_tokens, max_offload_tokens, offload_prompt_only)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class KvReachOffloadingConnectorScheduler(OffloadingConnectorScheduler):
    """``OffloadingConnectorScheduler`` with kvreach's SWA chunk selection.

    Same constructor as vLLM's; options are read from
    ``vllm_config.kv_transfer_config.kv_connector_extra_config``.

    Counters (cumulative, per instance):
    ``kvreach_contract_violations``: contract errors caught in ``log`` mode.
    ``kvreach_unmodeled_fallbacks``: requests/groups decided by stock vLLM
    because kvreach does not model them (see the module docstring).
    ``kvreach_fallbacks``: request-steps decided by stock vLLM because
    kvreach's decision raised (``error``) or, with ``kvreach.monitor`` on,
    violated a property (``monitor``), by reason.
    ``kvreach_monitor_violations``: by property (kvreach's and, on fallback
    steps, stock's decisions). ``kvreach_monitor_chunks``: chunks checked.
    ``kvreach_monitor_unloadable``: chunks the lookup model cannot load.
    ``kvreach_slow_decisions``: selections slower than ``SLOW_DECISION_NS``.
    """

    # Class-level defaults: vLLM's tests build instances without __init__.
    kvreach_options = KvReachOptions()
    kvreach_contract_violations = 0
    kvreach_unmodeled_fallbacks = 0
    kvreach_monitor_chunks = 0
    kvreach_monitor_unloadable = 0
    kvreach_slow_decisions = 0
    _kvreach_groups_cache: tuple[GroupConfig | None, ...] | None = None
    _kvreach_monitors_cache: tuple[monitor.GroupMonitor | None, ...] | None = None
    _kvreach_monitor_state: dict | None = None

    def __init__(self, spec: OffloadingSpec, vllm_config, kv_cache_config) -> None:
        self.kvreach_options = KvReachOptions.from_extra_config(_extra_config(vllm_config))
        if self.kvreach_options.check_contracts is not None:
            contracts.set_mode(self.kvreach_options.check_contracts)
        super().__init__(spec, vllm_config, kv_cache_config)
        self.kvreach_contract_violations = 0
        self.kvreach_unmodeled_fallbacks = 0
        self.kvreach_fallbacks: dict[str, int] = {}
        self.kvreach_monitor_violations: dict[str, int] = {}
        self.kvreach_monitor_chunks = 0
        self.kvreach_monitor_unloadable = 0
        self.kvreach_slow_decisions = 0
        # req_id -> per-group monitor.RequestGroupState (None: not monitored)
        self._kvreach_monitor_state = {}
        if self.kvreach_options.monitor != "off":
            # Built here, not in the first step (the pattern covers max_model_len).
            max_len = getattr(getattr(vllm_config, "model_config", None), "max_model_len", 0)
            for gc, m in zip(self.config.kv_group_configs, self._kvreach_monitors):
                if m is not None and m.loadability is not None and isinstance(max_len, int):
                    m.loadability._grow(max_len // gc.tokens_per_chunk + 1)

    @property
    def _kvreach_groups(self) -> tuple[GroupConfig | None, ...]:
        """kvreach GroupConfig per offload group (None: vLLM's path)."""
        if self._kvreach_groups_cache is None:
            self._kvreach_groups_cache = tuple(
                self._kvreach_group_config(gc) for gc in self.config.kv_group_configs
            )
        return self._kvreach_groups_cache

    @property
    def _kvreach_monitors(self) -> tuple[monitor.GroupMonitor | None, ...]:
        """A GroupMonitor per kvreach-modeled SWA group (None elsewhere)."""
        if self._kvreach_monitors_cache is None:
            gcs = self.config.kv_group_configs
            n_swa = sum(gc.sliding_window_size_in_chunks is not None for gc in gcs)
            others_full = all(
                isinstance(gc.kv_cache_spec, FullAttentionSpec)
                for gc in gcs if gc.sliding_window_size_in_chunks is None
            )
            A = self.config.alignment_tokens
            has_full = any(
                isinstance(gc.kv_cache_spec, FullAttentionSpec) and gc.tokens_per_chunk == A
                for gc in gcs
            )
            out = []
            for g in self._kvreach_groups:
                if g is None:
                    out.append(None)
                    continue
                # The world of monitor.loadable_chunk: one SWA group (not
                # EAGLE, sparse, no retention interval) beside full attention.
                world = (n_swa == 1 and others_full and has_full and A is not None
                         and not g.dense and not g.eagle and g.retention_interval is None)
                lo = monitor.Loadability(monitor.lookup_group(g), A) if world else None
                out.append(monitor.GroupMonitor(g, lo))
            self._kvreach_monitors_cache = tuple(out)
        return self._kvreach_monitors_cache

    # -- configuration -----------------------------------------------------
    def _kvreach_group_config(self, gc: GroupOffloadConfig) -> GroupConfig | None:
        """kvreach parameters of an SWA group; None keeps vLLM's path."""
        spec = gc.kv_cache_spec
        if (
            not isinstance(spec, SlidingWindowSpec)
            or not issubclass(gc.manager_cls, SlidingWindowManager)
            or gc.requires_cow_source
        ):
            return None
        dcp = self.config.dcp_world_size
        if gc.tokens_per_block != spec.block_size * dcp:
            # reachable_block_mask scales the block by DCP but the offload
            # group does not (dcp_sharded=False): no single GroupConfig.
            logger.info(
                "kvreach: group %d (offload block %d != %d * DCP %d) keeps "
                "vLLM's store selection", gc.group_idx, gc.tokens_per_block,
                spec.block_size, dcp,
            )
            return None
        alignment = self.config.alignment_tokens
        # With no alignment the mask is dense whatever the retention interval
        # (reachable_block_mask returns None first), as it is in kvreach with
        # retention_interval=None.
        retention = self.config.retention_interval if alignment is not None else None
        return GroupConfig(
            block_size=spec.block_size,
            # vLLM 0.33 widens only the store mask by the MTP re-prefill tokens
            # (_reachable_store_block_mask).
            window=spec.sliding_window, extra_retained_tokens=spec.extra_retained_tokens,
            alignment_tokens=alignment,
            blocks_per_chunk=self.config.blocks_per_chunk,
            dcp_world_size=dcp,
            eagle=gc.is_eagle_group,
            retention_interval=retention,
        )

    # -- stats ---------------------------------------------------------------
    def _record_violation(self) -> None:
        self.kvreach_contract_violations += 1
        self._connector_stats.increase_counter(CONTRACT_VIOLATIONS_METRIC)

    def _record_fallback(self, reason: str) -> None:
        self.kvreach_fallbacks[reason] = self.kvreach_fallbacks.get(reason, 0) + 1
        self._connector_stats.increase_counter(FALLBACKS_METRIC, 1, (reason,))

    def _record_monitor_violation(self, prop: str) -> None:
        self.kvreach_monitor_violations[prop] = self.kvreach_monitor_violations.get(prop, 0) + 1
        self._connector_stats.increase_counter(MONITOR_VIOLATIONS_METRIC, 1, (prop,))

    def _monitor_states(self, req_id: str, n_groups: int) -> list:
        states = self._kvreach_monitor_state
        if states is None:
            states = self._kvreach_monitor_state = {}
        st = states.get(req_id)
        if st is None:
            if len(states) > 2 * len(self._req_status) + 64:
                for r in [r for r in states if r not in self._req_status]:
                    del states[r]
            st = states[req_id] = [monitor.RequestGroupState() for _ in range(n_groups)]
        return st

    # -- selection -----------------------------------------------------------
    def _select_store_keys(
        self,
        req_status: RequestOffloadState,
        num_offloadable_tokens: int,
        prompt_offloadable_tokens: int,
        reachable_boundaries: tuple[int, ...],
        use_kvreach: bool,
    ) -> tuple[list[OffloadKey], list[tuple[int, int]]]:
        """Per-group chunk selection of ``_build_store_jobs``: the offload keys
        to submit and each group's ``(start_chunk_idx, num_chunks)``.

        With ``kvreach.monitor`` on, each modeled SWA group's decision is
        checked (``kvreach.impl.monitor``) before its keys are used; a
        violation by kvreach's decision raises ``_MonitorReject`` (the caller
        falls back or, in ``raise`` mode, raises); a violation by stock's is
        counted. The monitor's per-request state is updated only once the
        whole request's decision is final."""
        req = req_status.req
        blocks_per_chunk = self.config.blocks_per_chunk
        finished = req.is_finished()
        new_offload_keys: list[OffloadKey] = []
        group_store_ranges: list[tuple[int, int]] = []
        req_cfg = None
        monitors = self._kvreach_monitors if self.kvreach_options.monitor != "off" else None
        staged: list = []
        horizon_tokens: int | None = None
        for group_config, group_state, g, gi in zip(
            self.config.kv_group_configs, req_status.group_states, self._kvreach_groups,
            range(len(req_status.group_states)),
        ):
            num_chunks = req_status.storable_chunks(
                group_config, group_state, num_offloadable_tokens
            )
            if use_kvreach and g is not None:
                if req_cfg is None:
                    req_cfg = _request_config(
                        req.num_prompt_tokens,
                        req_status.max_offload_tokens,
                        self.config.offload_prompt_only,
                    )
                cursor = group_state.next_stored_chunk_idx
                try:
                    w = rules.store_step(
                        self.kvreach_options.rule, g, req_cfg, cursor, num_chunks, finished
                    )
                except deal.ContractError as e:
                    e.kvreach_group = group_config.group_idx  # type: ignore[attr-defined]
                    raise
                start_chunk_idx, block_mask, candidates = w.start_chunk, w.block_mask, w.chunks
                horizon = w.horizon_chunks
                group_store_ranges.append((start_chunk_idx, num_chunks))
            else:
                start_chunk_idx, block_mask, candidates, horizon = self._stock_group_candidates(
                    group_config, group_state, num_chunks, finished,
                    prompt_offloadable_tokens, reachable_boundaries,
                )
                group_store_ranges.append((start_chunk_idx, num_chunks))
                if group_config.requires_cow_source:
                    continue
            if monitors is not None and g is not None:
                # kvreach.monitor: check this group's decision before its keys are used.
                m = monitors[gi]
                assert m is not None
                prompt_h = prompt_offloadable_tokens // group_config.tokens_per_chunk
                horizon_tokens = rules.known_final_horizon(
                    finished, num_chunks, prompt_h,
                    num_offloadable_tokens, prompt_offloadable_tokens,
                )
                cursor = group_state.next_stored_chunk_idx
                try:
                    st = self._monitor_states(req.request_id, len(req_status.group_states))[gi]
                    st.sync(cursor)
                    prop, unloadable = m.check(
                        st, cursor, candidates, num_chunks, num_offloadable_tokens,
                        prompt_h, finished, horizon, horizon_tokens,
                    )
                except Exception:
                    if use_kvreach:
                        raise  # the caller falls back to stock's selection
                    # stock's own decision is used whatever the monitor does
                    logger.exception("kvreach monitor error on stock's decision")
                    st = None
                if st is not None:
                    if prop is not None:
                        if use_kvreach:
                            raise _MonitorReject(prop, group_config.group_idx)
                        self._record_monitor_violation(prop)
                    staged.append((st, candidates, max(cursor, num_chunks), horizon, unloadable))
            block_ids = group_state.block_ids
            offload_keys = group_state.offload_keys
            if blocks_per_chunk == 1:
                # One block per chunk: both of vLLM's null checks are this one.
                new_offload_keys.extend(
                    offload_keys[c] for c in candidates if block_ids[c] != 0
                )
                continue
            for abs_chunk_idx in candidates:
                chunk_start = abs_chunk_idx * blocks_per_chunk
                # A block_id of 0 means either a sliding window / SSM skip
                # or a stale entry that was zeroed out (vLLM's filter).
                if block_ids[chunk_start + blocks_per_chunk - 1] == 0:
                    continue
                # A reachable null block would leave part of the chunk unwritten.
                mask_off = (abs_chunk_idx - start_chunk_idx) * blocks_per_chunk
                if any(
                    block_ids[chunk_start + b] == 0
                    and (block_mask is None or block_mask[mask_off + b])
                    for b in range(blocks_per_chunk)
                ):
                    continue
                new_offload_keys.append(offload_keys[abs_chunk_idx])
        for st, candidates, after, horizon, unloadable in staged:
            st.stage(candidates, after, horizon)
            self.kvreach_monitor_chunks += len(candidates)
            if candidates:
                self._connector_stats.increase_counter(MONITOR_CHUNKS_METRIC, len(candidates))
            if unloadable:
                self.kvreach_monitor_unloadable += unloadable
                self._connector_stats.increase_counter(MONITOR_UNLOADABLE_METRIC, unloadable)
        if finished and staged:
            self._kvreach_monitor_state.pop(req.request_id, None)  # type: ignore[union-attr]
        return new_offload_keys, group_store_ranges

    def _stock_group_candidates(
        self, group_config, group_state, num_chunks, finished,
        prompt_offloadable_tokens, reachable_boundaries,
    ) -> tuple[int, list[bool] | None, list[int], int | None]:
        """vLLM 0.33.0's per-group selection (before its null-block filter),
        and the final-segment end it hands to the mask."""
        blocks_per_chunk = self.config.blocks_per_chunk
        start_chunk_idx = group_state.next_stored_chunk_idx
        prompt_horizon_chunks = prompt_offloadable_tokens // group_config.tokens_per_chunk
        final_swa_alignment_blocks = self._final_swa_alignment_blocks(group_config)
        reconsider_final_swa_tail = (
            finished
            and num_chunks != prompt_horizon_chunks
            and self.config.retention_interval is None
            and final_swa_alignment_blocks is not None
        )
        if self.config.retention_interval is not None or group_config.is_eagle_group:
            store_horizon_chunks = None
        elif finished:
            store_horizon_chunks = num_chunks
        elif num_chunks <= prompt_horizon_chunks:
            store_horizon_chunks = prompt_horizon_chunks
        else:
            store_horizon_chunks = None
        if reconsider_final_swa_tail:
            assert final_swa_alignment_blocks is not None
            horizon_blocks = num_chunks * blocks_per_chunk
            partial_segment_start_block = (
                horizon_blocks - horizon_blocks % final_swa_alignment_blocks
            )
            start_chunk_idx = min(
                start_chunk_idx, partial_segment_start_block // blocks_per_chunk
            )
        if group_config.requires_cow_source or num_chunks <= start_chunk_idx:
            return start_chunk_idx, None, [], store_horizon_chunks
        block_mask = self._reachable_store_block_mask(
            group_config=group_config,
            start_chunk_idx=start_chunk_idx,
            end_chunk_idx=num_chunks,
            final_segment_end_chunk_idx=store_horizon_chunks,
            reachable_boundaries=reachable_boundaries,
        )
        prompt_mask: list[bool] | None = None
        if reconsider_final_swa_tail:
            prompt_mask = self._reachable_store_block_mask(
                group_config=group_config,
                start_chunk_idx=start_chunk_idx,
                end_chunk_idx=num_chunks,
                final_segment_end_chunk_idx=prompt_horizon_chunks,
                reachable_boundaries=reachable_boundaries,
            )
        candidates: list[int] = []
        for key_idx in range(num_chunks - start_chunk_idx):
            abs_chunk_idx = start_chunk_idx + key_idx
            lo, hi = key_idx * blocks_per_chunk, (key_idx + 1) * blocks_per_chunk
            if (
                reconsider_final_swa_tail
                and abs_chunk_idx < group_state.next_stored_chunk_idx
                and (prompt_mask is None or any(prompt_mask[lo:hi]))
            ):
                continue
            if block_mask is not None and not any(block_mask[lo:hi]):
                continue
            candidates.append(abs_chunk_idx)
        return start_chunk_idx, block_mask, candidates, store_horizon_chunks

    def _kvreach_applies(self, req) -> bool:
        if any(g is not None for g in self._kvreach_groups):
            if self.config.retention_interval is not None and req.shared_prefix_boundary:
                # kvreach does not model the shared-prefix junction boundary.
                self.kvreach_unmodeled_fallbacks += 1
                return False
            return True
        return False

    def _violation_line(self, req_id: str, e: deal.ContractError) -> str:
        """One line: function, contract kind, rule, request, group, the
        contract's source and the scalar arguments it saw."""
        origin = getattr(e.origin, "__qualname__", None) or "?"
        shown = []
        for k, v in (e.params or {}).items():
            if k == "result" and hasattr(v, "next_cursor"):
                shown.append(f"result=StoreStep(start_chunk={v.start_chunk}, "
                             f"end_chunk={v.end_chunk}, next_cursor={v.next_cursor})")
            elif isinstance(v, (int, bool, type(None))):
                shown.append(f"{k}={v}")
        return (
            f"kvreach contract violation: function={origin} kind={type(e).__name__} "
            f"rule={self.kvreach_options.rule} req={req_id} "
            f"group={getattr(e, 'kvreach_group', '?')} "
            f"contract={_one_line(e.source or e.message)!r} params={{{', '.join(shown)}}}"
        )

    # -- vLLM 0.33.0 _build_store_jobs, per-group selection replaced ---------
    def _build_store_jobs(
        self,
        scheduler_output: SchedulerOutput,
    ) -> dict[int, TransferJob]:
        blocks_per_chunk = self.config.blocks_per_chunk
        store_jobs: dict[int, TransferJob] = {}
        for req_id in chain(
            scheduler_output.num_scheduled_tokens,
            scheduler_output.finished_req_ids or (),
        ):
            req_status = self._req_status.get(req_id)
            if req_status is None:
                continue
            req = req_status.req

            if req.status is RequestStatus.FINISHED_ABORTED:
                num_tokens_after_batch = req.num_computed_tokens
            elif req.is_finished():
                num_tokens_after_batch = max(req.num_prompt_tokens, req.num_tokens - 1)
            else:
                num_scheduled_tokens = scheduler_output.num_scheduled_tokens[req_id]
                num_tokens_after_batch = req.num_computed_tokens + num_scheduled_tokens

            num_offloadable_tokens = self._calc_num_offloadable_tokens(
                req_status, num_tokens_after_batch
            )
            prompt_offloadable_tokens = self._calc_num_offloadable_tokens(
                req_status, req.num_prompt_tokens
            )

            reachable_boundaries: tuple[int, ...] = ()
            if self.config.retention_interval is not None:
                reachable_boundaries = (req.num_prompt_tokens - 1,)
                if req.shared_prefix_boundary:
                    reachable_boundaries += (req.shared_prefix_boundary,)

            # kvreach: the per-group selection (SWA groups from impl).
            selection_args = (
                req_status, num_offloadable_tokens, prompt_offloadable_tokens,
                reachable_boundaries,
            )
            use_kvreach = self._kvreach_applies(req)
            timed = use_kvreach and self.kvreach_options.monitor != "off"
            t0 = time.perf_counter_ns() if timed else 0
            try:
                new_offload_keys, group_store_ranges = self._select_store_keys(
                    *selection_args, use_kvreach=use_kvreach
                )
            except deal.ContractError as e:
                line = self._violation_line(req_id, e)
                if contracts.mode() == "raise":
                    raise KvReachContractViolation(line, e) from e
                logger.warning("%s", line)
                self._record_violation()
                new_offload_keys, group_store_ranges = self._select_store_keys(
                    *selection_args, use_kvreach=False
                )
            except _MonitorReject as e:
                line = (f"kvreach monitor violation: property={e.prop} "
                        f"rule={self.kvreach_options.rule} req={req_id} group={e.group_idx}")
                self._record_monitor_violation(e.prop)
                if self.kvreach_options.monitor == "raise":
                    raise KvReachMonitorViolation(line, e.prop) from None
                logger.warning("%s; this step uses stock vLLM's stores", line)
                self._record_fallback("monitor")
                new_offload_keys, group_store_ranges = self._select_store_keys(
                    *selection_args, use_kvreach=False
                )
            except Exception as e:  # noqa: BLE001 - never fail a scheduler step
                if not use_kvreach:
                    raise  # stock vLLM's own path: its behaviour
                logger.warning(
                    "kvreach internal error: %s: %s req=%s; this step uses stock "
                    "vLLM's stores", type(e).__name__, _one_line(e), req_id,
                    exc_info=logger.isEnabledFor(10),  # the traceback at DEBUG
                )
                self._record_fallback("error")
                new_offload_keys, group_store_ranges = self._select_store_keys(
                    *selection_args, use_kvreach=False
                )
            if timed and time.perf_counter_ns() - t0 > SLOW_DECISION_NS:
                self.kvreach_slow_decisions += 1
                self._connector_stats.increase_counter(SLOW_DECISIONS_METRIC)

            if not new_offload_keys:
                req_status.advance_stored_idx(num_offloadable_tokens)
                continue

            store_output = self.manager.prepare_store(
                new_offload_keys, req_status.req_context
            )
            if store_output is None:
                self._connector_stats.increase_counter(
                    _ConnectorMetricName.ALLOCATION_FAILURE
                )
                logger.warning("Request %s: cannot store chunks", req_id)
                continue

            if not store_output.keys_to_store:
                req_status.advance_stored_idx(num_offloadable_tokens)
                continue

            keys_to_store = set(store_output.keys_to_store)

            group_sizes: list[int] = []
            block_indices: list[int] = []
            src_block_ids: list[int] = []
            fenced_block_ids: list[int] = []
            deferred_fence_block_ids: list[int] = []
            for group_config, group_state, store_range in zip(
                self.config.kv_group_configs,
                req_status.group_states,
                group_store_ranges,
            ):
                is_sliding_window = (
                    group_config.sliding_window_size_in_chunks is not None
                )
                start_chunk_idx, num_chunks = store_range
                block_ids = group_state.block_ids
                num_group_blocks = 0
                start_gpu_block_idx: int | None = None
                for idx, offload_key in enumerate(
                    group_state.offload_keys[start_chunk_idx:num_chunks]
                ):
                    if offload_key not in keys_to_store:
                        continue

                    chunk_idx = start_chunk_idx + idx

                    self._events_tracker.record_store(
                        req, group_config, chunk_idx, offload_key
                    )

                    gpu_block_idx = chunk_idx * blocks_per_chunk
                    for i in range(blocks_per_chunk):
                        block_id = block_ids[gpu_block_idx + i]
                        if block_id == 0:
                            continue
                        if start_gpu_block_idx is None:
                            start_gpu_block_idx = gpu_block_idx + i
                        src_block_ids.append(block_id)
                        num_group_blocks += 1
                        if is_sliding_window:
                            fenced_block_ids.append(block_id)
                        else:
                            deferred_fence_block_ids.append(block_id)

                group_sizes.append(num_group_blocks)
                block_indices.append(start_gpu_block_idx or 0)
                group_state.next_stored_chunk_idx = max(
                    group_state.next_stored_chunk_idx, num_chunks
                )

            src_spec = GPULoadStoreSpec(
                src_block_ids, group_sizes=group_sizes, block_indices=block_indices
            )
            dst_spec = store_output.store_spec

            job_id = self._generate_job_id()
            # a store can only be issued when no load is pending.
            if req_status.transfer_jobs:
                any_jid = next(iter(req_status.transfer_jobs))
                any_job = self._jobs[any_jid]
                assert any_job.is_store or any_job.is_sync_load
            req_status.transfer_jobs.add(job_id)

            # Watch sliding window blocks as they may get evicted
            # before the request finishes
            for bid in fenced_block_ids:
                self._block_id_to_pending_jobs.setdefault(bid, set()).add(job_id)

            # the non-sliding window blocks will be watched only
            # when the request finishes
            self._jobs[job_id] = TransferJobStatus(
                req_id=req_id,
                pending_count=self.config.num_workers,
                keys=set(keys_to_store),
                is_store=True,
                deferred_fence_block_ids=deferred_fence_block_ids,
                fenced_block_ids=fenced_block_ids or None,
            )

            store_jobs[job_id] = TransferJob(
                req_id=req_id, src_spec=src_spec, dst_spec=dst_spec
            )

            logger.debug(
                "Request %s offloading %s chunks upto %d tokens (job %d)",
                req_id,
                len(keys_to_store),
                num_offloadable_tokens,
                job_id,
            )

            if req.is_finished():
                # Register non-sliding-window blocks for flush detection.
                for bid in deferred_fence_block_ids:
                    self._block_id_to_pending_jobs.setdefault(bid, set()).add(job_id)
                    if bid in self._current_batch_allocated_block_ids:
                        self._current_batch_jobs_to_flush.add(job_id)

        return store_jobs


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


class KvReachOffloadingConnector(OffloadingConnector):
    """``OffloadingConnector`` with ``KvReachOffloadingConnectorScheduler`` on
    the scheduler side; the worker side is vLLM's."""

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config) -> None:
        # Validate kvreach.* options at start-up, in every role.
        self.kvreach_options = KvReachOptions.from_extra_config(_extra_config(vllm_config))
        # Adapted from vLLM 0.33.0 OffloadingConnector.__init__ (the scheduler
        # class is the only difference; constructing vLLM's first would build
        # a second offloading manager).
        KVConnectorBase_V1.__init__(self, vllm_config, role, kv_cache_config)
        offloading_config = build_offloading_config(vllm_config, kv_cache_config)
        self._canonical_layout = offloading_config.canonical_layout
        spec = OffloadingSpecFactory.create_spec(offloading_config)
        self.connector_scheduler = None
        self.connector_worker = None
        if role == KVConnectorRole.SCHEDULER:
            self.connector_scheduler = KvReachOffloadingConnectorScheduler(
                spec, vllm_config, kv_cache_config
            )
        elif role == KVConnectorRole.WORKER:
            self.connector_worker = OffloadingConnectorWorker(
                spec, vllm_config, kv_cache_config
            )

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
    "SLOW_DECISIONS_METRIC",
]
