"""``KvReachOffloadingConnectorScheduler``: vLLM's
``OffloadingConnectorScheduler`` (vLLM's ``offloading/scheduler.py``, 0.33.0
or 0.34.0: :mod:`kvreach.impl.vllm.vllm_release`) whose
per-group chunk selection for the SWA groups kvreach models comes from
``kvreach.impl.rules.store_step``: the selection, the runtime monitor around
it (``kvreach.impl.monitor``), vLLM's null-block filter, and the fallback to
stock vLLM's selection. ``_build_store_jobs`` itself is vLLM's
(:class:`kvreach.impl.vllm.vllm_copy.StoreJobs`)."""

# _stock_group_candidates is adapted from vLLM 0.33.0 (its loop body is
# unchanged in 0.34.0),
# vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py.
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project

from __future__ import annotations

import time
from functools import lru_cache

import deal

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
    RequestOffloadState,
)
from vllm.v1.kv_offload.base import OffloadingSpec, OffloadKey

from kvreach.impl import contracts, monitor, rules
from kvreach.impl.vllm import groups, vllm_release
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
    MonitorReject,
    logger,
    one_line,
)
from kvreach.impl.vllm.options import KvReachOptions, extra_config
from kvreach.impl.vllm.vllm_copy import StoreJobs
from kvreach.params import GroupConfig, RequestConfig


@lru_cache(maxsize=4096)
def request_config(
    prompt_tokens: int, max_offload_tokens: int | None, offload_prompt_only: bool
) -> RequestConfig:
    return RequestConfig(prompt_tokens, max_offload_tokens, offload_prompt_only)


class KvReachOffloadingConnectorScheduler(StoreJobs, OffloadingConnectorScheduler):
    """``OffloadingConnectorScheduler`` with kvreach's SWA chunk selection
    (``_build_store_jobs`` is vLLM's, :class:`~kvreach.impl.vllm.vllm_copy.StoreJobs`;
    its per-group selection is :meth:`_select_store_keys`).

    Same constructor as vLLM's; options are read from
    ``vllm_config.kv_transfer_config.kv_connector_extra_config``.

    Counters (cumulative, per instance):
    ``kvreach_contract_violations``: contract errors caught in ``log`` mode.
    ``kvreach_unmodeled_fallbacks``: requests/groups decided by stock vLLM
    because kvreach does not model them (see ``kvreach.impl.vllm.connector``).
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
        self.kvreach_options = KvReachOptions.from_extra_config(extra_config(vllm_config))
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
            lookahead = vllm_release.use_lookahead_block_hashes(self)
            self._kvreach_groups_cache = tuple(
                groups.group_config(self.config, gc, lookahead_hashes=lookahead)
                for gc in self.config.kv_group_configs
            )
        return self._kvreach_groups_cache

    @property
    def _kvreach_monitors(self) -> tuple[monitor.GroupMonitor | None, ...]:
        """A GroupMonitor per kvreach-modeled SWA group (None elsewhere)."""
        if self._kvreach_monitors_cache is None:
            self._kvreach_monitors_cache = groups.group_monitors(self.config, self._kvreach_groups)
        return self._kvreach_monitors_cache

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
        new_offload_keys: list[OffloadKey],
        group_store_ranges: list[tuple[int, int]],
    ) -> None:
        """The seam of vLLM's ``_build_store_jobs`` (``vllm_copy.StoreJobs``):
        append the offload keys to submit to ``new_offload_keys`` and each
        group's ``(start_chunk_idx, num_chunks)`` to ``group_store_ranges``,
        as vLLM's per-group loop does. kvreach decides the SWA groups it
        models (:meth:`_group_selection`) unless the request is unmodeled; a
        contract error, a monitor violation or any other exception in
        kvreach's decision is logged, counted and answered by stock vLLM's
        selection, or raised, by the options' modes."""
        req_id = req_status.req.request_id
        selection_args = (
            req_status, num_offloadable_tokens, prompt_offloadable_tokens,
            reachable_boundaries,
        )
        use_kvreach = self._kvreach_applies(req_status.req)
        timed = use_kvreach and self.kvreach_options.monitor != "off"
        t0 = time.perf_counter_ns() if timed else 0
        try:
            keys, ranges = self._group_selection(*selection_args, use_kvreach=use_kvreach)
        except deal.ContractError as e:
            line = self._violation_line(req_id, e)
            if contracts.mode() == "raise":
                raise KvReachContractViolation(line, e) from e
            logger.warning("%s", line)
            self._record_violation()
            keys, ranges = self._group_selection(*selection_args, use_kvreach=False)
        except MonitorReject as e:
            line = (f"kvreach monitor violation: property={e.prop} "
                    f"rule={self.kvreach_options.rule} req={req_id} group={e.group_idx}")
            self._record_monitor_violation(e.prop)
            if self.kvreach_options.monitor == "raise":
                raise KvReachMonitorViolation(line, e.prop) from None
            logger.warning("%s; this step uses stock vLLM's stores", line)
            self._record_fallback("monitor")
            keys, ranges = self._group_selection(*selection_args, use_kvreach=False)
        except Exception as e:  # noqa: BLE001 - never fail a scheduler step
            if not use_kvreach:
                raise  # stock vLLM's own path: its behaviour
            logger.warning(
                "kvreach internal error: %s: %s req=%s; this step uses stock "
                "vLLM's stores", type(e).__name__, one_line(e), req_id,
                exc_info=logger.isEnabledFor(10),  # the traceback at DEBUG
            )
            self._record_fallback("error")
            keys, ranges = self._group_selection(*selection_args, use_kvreach=False)
        if timed and time.perf_counter_ns() - t0 > SLOW_DECISION_NS:
            self.kvreach_slow_decisions += 1
            self._connector_stats.increase_counter(SLOW_DECISIONS_METRIC)
        new_offload_keys.extend(keys)
        group_store_ranges.extend(ranges)

    def _group_selection(
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
        violation by kvreach's decision raises ``MonitorReject`` (the caller
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
            num_chunks = vllm_release.storable_chunks(
                self, req_status, group_config, group_state, num_offloadable_tokens
            )
            if use_kvreach and g is not None:
                if req_cfg is None:
                    req_cfg = request_config(
                        req.num_prompt_tokens,
                        self._max_offload_tokens(req_status),
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
                            raise MonitorReject(prop, group_config.group_idx)
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
        and the final-segment end it hands to the mask: the loop body of
        vLLM's ``_build_store_jobs`` restated (adapted from vLLM 0.33.0, not a
        copy: it returns the candidate chunks before the null-block filter,
        which :meth:`_group_selection` applies to both rules, so the monitor
        checks stock's decisions too). tests/vllm compares the stores with
        stock vLLM's connector."""
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

    def _max_offload_tokens(self, req_status: RequestOffloadState) -> int | None:
        """The request's offload cap as kvreach's ``RequestConfig`` takes it:
        ``max_offload_tokens``, and under vLLM 0.34.0's lookahead block hashes
        also the hashed tokens (``_calc_num_offloadable_tokens`` caps by both),
        so the prompt horizon handed to kvreach's rule is the one vLLM hands
        its own (``prompt_offloadable_tokens``: the hashed end while the
        prompt's last blocks have no hash yet)."""
        cap = req_status.max_offload_tokens
        hashed = vllm_release.hashed_tokens(self, req_status.req)
        if hashed is not None:
            cap = hashed if cap is None else min(cap, hashed)
        return cap

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
            f"contract={one_line(e.source or e.message)!r} params={{{', '.join(shown)}}}"
        )
