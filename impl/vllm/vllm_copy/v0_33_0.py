"""vLLM 0.33.0's ``OffloadingConnectorScheduler._build_store_jobs``
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``),
line for line, vLLM's comments included, except at its one seam
(:data:`~kvreach.impl.vllm.vllm_copy.seams.SELECT_STORE_KEYS`, marked
``# kvreach:``): the per-group chunk selection is a call of
``self._select_store_keys``. Used only when vLLM 0.33.0 is installed
(:mod:`kvreach.impl.vllm.vllm_copy` picks it).
"""

# Copied from vLLM 0.33.0:
# vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py
# (OffloadingConnectorScheduler._build_store_jobs).
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project

from __future__ import annotations

from itertools import chain

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import TransferJob
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (
    _ConnectorMetricName,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    TransferJobStatus,
)
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.kv_offload.base import GPULoadStoreSpec, OffloadKey
from vllm.v1.request import RequestStatus

from kvreach.impl.vllm.metrics import logger
from kvreach.impl.vllm.vllm_copy.seams import BUILD_STORE_JOBS, CONNECTOR_INIT

ORIGIN = "vllm 0.33.0"

COPIES = (BUILD_STORE_JOBS, CONNECTOR_INIT)


class StoreJobs:
    """Mixin for an ``OffloadingConnectorScheduler`` subclass that defines
    ``_select_store_keys(req_status, num_offloadable_tokens,
    prompt_offloadable_tokens, reachable_boundaries, new_offload_keys,
    group_store_ranges)``: vLLM 0.33.0's ``_build_store_jobs`` around it."""

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
                # Clamp to the GPU prefix cache's commit point. The final sampled
                # token's slot is never committed (under spec decode it holds a
                # rejected draft's KV), so a block ending there must not be stored.
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

            # Filter out chunks skipped due to sliding window attention / SSM
            # or unreachable by the load path's alignment constraints.
            new_offload_keys: list[OffloadKey] = []
            group_store_ranges: list[tuple[int, int]] = []

            reachable_boundaries: tuple[int, ...] = ()
            if self.config.retention_interval is not None:
                reachable_boundaries = (req.num_prompt_tokens - 1,)
                if req.shared_prefix_boundary:
                    reachable_boundaries += (req.shared_prefix_boundary,)

            # kvreach: the per-group selection (vLLM's loop over kv_group_configs)
            self._select_store_keys(
                req_status,
                num_offloadable_tokens,
                prompt_offloadable_tokens,
                reachable_boundaries,
                new_offload_keys,
                group_store_ranges,
            )

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
