"""The connector scheduler driven directly, for DCP.

vLLM's KVCacheManager refuses a DCP-sharded SWA group
(HybridKVCacheCoordinator: "DCP with hybrid KV cache layouts only supports
full-attention, Mamba, and replicated draft groups"), so DCP > 1 is driven at
the OffloadingConnectorScheduler level, like vLLM's
test_dcp_abort_reconsiders_final_swa_tail: synthetic SchedulerOutputs, a
mocked Request, the whole block table handed over in the first step.
"""

from __future__ import annotations

import math
from typing import Any
from unittest.mock import MagicMock, patch

import torch

from vllm.config import KVEventsConfig
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingWorkerMetadata,
)
from vllm.platforms import current_platform
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import RequestStatus

from kvreach.vllm_harness import vllm_api
from kvreach.vllm_harness.config import KVREACH, Setup, connector_config
from kvreach.vllm_harness.memory import HARNESS_MODULE, RecordingOffloadingSpec
from kvreach.vllm_harness.scheduler_run import SchedulerRun, StepRecord


def class_level_vllm_config(setup: Setup, which: str) -> Any:
    from vllm.config import ParallelConfig as _PC

    cfg = MagicMock()
    cfg.cache_config.block_size = min(g.block_size for g in setup.groups)
    cfg.cache_config.enable_prefix_caching = True
    cfg.cache_config.prefix_match_unit = None
    cfg.cache_config.cache_dtype = torch.float32
    cfg.cache_config.prefix_cache_retention_interval = setup.retention_interval
    cfg.model_config.use_mla = False
    cfg.model_config.max_model_len = setup.max_model_len
    world = max(1, setup.dcp_world_size)
    with patch.object(current_platform, "device_count", return_value=world, create=True):
        cfg.parallel_config = _PC(tensor_parallel_size=world,
                                  decode_context_parallel_size=setup.dcp_world_size)
    cfg.speculative_config = None
    cfg.num_hash_lookahead_tokens = setup.hash_lookahead_tokens  # read by 0.34.0
    cfg.kv_events_config = KVEventsConfig(enable_kv_cache_events=True, publisher="null")
    cfg.use_v2_model_runner = True
    extra = {"spec_name": "RecordingOffloadingSpec", "spec_module_path": HARNESS_MODULE,
             "offload_prompt_only": setup.offload_prompt_only,
             "blocks_per_chunk": setup.blocks_per_chunk, **dict(setup.extra)}
    if which == KVREACH:
        extra["kvreach.check_contracts"] = "raise"
    cfg.kv_transfer_config = connector_config(which, extra)
    cfg.kv_transfer_config.engine_id = "class-level"
    return cfg


class ClassLevelRun:
    """``OffloadingConnectorScheduler`` (stock or kvreach) driven directly."""

    def __init__(self, setup: Setup, which: str) -> None:
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
            build_offloading_config,
        )
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
            OffloadingConnectorScheduler,
        )

        from kvreach.impl.vllm_connector import KvReachOffloadingConnectorScheduler

        self.setup = setup
        self.vllm_config = class_level_vllm_config(setup, which)
        self.kv_cache_config = KVCacheConfig(
            num_blocks=0, kv_cache_tensors=[],
            kv_cache_groups=[KVCacheGroupSpec([f"layer{i}"], g.spec(), is_eagle_group=g.eagle)
                             for i, g in enumerate(setup.groups)],
        )
        spec = RecordingOffloadingSpec(build_offloading_config(self.vllm_config,
                                                               self.kv_cache_config))
        cls = KvReachOffloadingConnectorScheduler if which == KVREACH else OffloadingConnectorScheduler
        self.offload = cls(spec, self.vllm_config, self.kv_cache_config)
        self.offload.manager.prepare_store.side_effect = self._prepare_store
        self.steps: list[StepRecord] = []
        self._current: StepRecord | None = None

    _prepare_store = SchedulerRun._prepare_store
    stored = SchedulerRun.stored
    per_step = SchedulerRun.per_step

    def _step(self, out) -> None:
        rec = StepRecord(len(self.steps) + 1, dict(out.num_scheduled_tokens),
                         tuple(sorted(out.finished_req_ids or ())))
        self._current = rec
        meta = self.offload.build_connector_meta(out)
        for job in meta.store_jobs.values():
            src = job.src_spec
            rec.jobs.append((job.req_id, tuple(src.group_sizes), tuple(src.block_indices),
                             tuple(int(b) for b in src.block_ids)))
        # every job completes at once (one worker)
        done = OffloadingWorkerMetadata()
        for jid in meta.store_jobs:
            done.mark_completed(jid)
        self.offload.update_connector_output(KVConnectorOutput(kv_connector_worker_meta=done))
        self.steps.append(rec)
        self._current = None

    def drive(self, req_id: str, prompt_tokens: int, prefill_steps: list[int],
              abort: bool) -> None:
        from vllm.v1.core.kv_cache_utils import BlockHash
        from vllm.v1.core.sched.output import SchedulerOutput

        s = self.setup
        dcp = s.dcp_world_size
        hash_block = math.gcd(*(g.block_size * dcp for g in s.groups))
        req = MagicMock()
        req.request_id = req_id
        req.kv_transfer_params = None
        req.num_prompt_tokens = prompt_tokens
        req.num_tokens = prompt_tokens
        req.num_computed_tokens = 0
        req.block_hashes = [BlockHash(f"{req_id}-h{i}".encode())
                            for i in range(prompt_tokens // hash_block)]
        req.all_token_ids = list(range(prompt_tokens))
        req.lora_request = None
        req.shared_prefix_boundary = 0
        req.status = RequestStatus.RUNNING
        req.is_finished.return_value = False
        self.offload.on_new_request(req)
        next_id = iter(range(1, 1 << 30))
        block_ids = tuple(
            [next(next_id) for _ in range(-(-prompt_tokens // (g.block_size * dcp)))]
            for g in s.groups
        )
        computed = 0
        for i, n in enumerate(prefill_steps):
            out = SchedulerOutput.make_empty()
            if i == 0:
                out.scheduled_new_reqs = [vllm_api.new_request_data(
                    [], req_id=req_id, prompt_token_ids=[], mm_features=[],
                    sampling_params=None, pooling_params=None, block_ids=block_ids,
                    num_computed_tokens=0, lora_request=None)]
            out.num_scheduled_tokens = {req_id: n}
            out.total_num_scheduled_tokens = n
            req.num_computed_tokens = computed
            self._step(out)
            computed += n
        req.num_computed_tokens = computed
        if abort:
            req.status = RequestStatus.FINISHED_ABORTED
        else:
            assert computed == prompt_tokens
            req.num_tokens = prompt_tokens + 1
            req.status = RequestStatus.FINISHED_LENGTH_CAPPED
        req.is_finished.return_value = True
        out = SchedulerOutput.make_empty()
        out.finished_req_ids = {req_id}
        self._step(out)
