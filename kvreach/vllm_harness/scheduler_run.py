"""Drive vLLM's real scheduler side (0.33.0 or 0.34.0; the release replays
run it on older ones) with fake model outputs.

Real: ``Scheduler`` / ``AsyncScheduler``, ``KVCacheManager`` (block
allocation, sliding-window block freeing, block hashing), the connector
(``OffloadingConnector`` or ``KvReachOffloadingConnector``, loaded through
``KVTransferConfig`` like in production) and its ``OffloadingConnectorScheduler``.

Fake: the model runner. Each step returns one sampled token for every request
that is not mid-prefill (``Request.is_prefill_chunk``), as the GPU runner does,
and reports every transfer job of that step as completed by the one worker.

Mocked: only the offload manager's memory (``RecordingOffloadingSpec``,
:mod:`kvreach.vllm_harness.memory`), which accepts every store. So what ``prepare_store`` receives is exactly the
store decision of ``_build_store_jobs``; it is recorded per step as
``(req_id, group_idx, chunk_idx)``. No worker and no KV memory exist.

A ``VllmConfig`` here needs the two CPU shims of :mod:`kvreach.vllm_harness.cpu_shims`
applied by the caller (tests/vllm/conftest.py for the tests,
:func:`kvreach.vllm_harness.replay.replay_on_vllm` for the CLI); this module
applies neither.

Written for kvreach (not copied from vLLM's tests/v1/kv_connector/unit/
offloading_connector/utils.py, whose RequestRunner it is modeled on).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any
from unittest.mock import patch

from vllm import SamplingParams
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVEventsConfig,
    KVTransferConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingConnectorMetadata,
    OffloadingWorkerMetadata,
)
from vllm.platforms import current_platform
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import (
    init_none_hash,
    resolve_kv_cache_block_sizes,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
from vllm.v1.kv_offload.base import OffloadKey, PrepareStoreOutput
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import Request, RequestStatus
from vllm.v1.structured_output import StructuredOutputManager

from kvreach.vllm_harness.config import KVREACH, Setup, connector_config
from kvreach.vllm_harness import vllm_api
from kvreach.vllm_harness.memory import HARNESS_MODULE, KeysSpec

SAMPLED_TOKEN = 7  # not EOS (2) of cpu_shims.write_offline_model's config; ignore_eos anyway


@dataclass
class StepRecord:
    index: int
    scheduled: dict[str, int]
    finished: tuple[str, ...]
    stores: list[tuple[str, int, int]] = field(default_factory=list)
    # (req_id, group_sizes, block_indices, src block ids) of every store job
    jobs: list[tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=list
    )
    # kvreach only: (group_idx, StoreStep, chunks vLLM's null-block filter drops)
    windows: list[tuple[int, Any, frozenset[int]]] = field(default_factory=list)

    def window_chunks(self, group_idx: int) -> list[int]:
        return sorted(c for gi, w, _ in self.windows if gi == group_idx for c in w.chunks)

    def null_dropped(self, group_idx: int) -> set[int]:
        return {c for gi, _, d in self.windows if gi == group_idx for c in d}

    def chunks(self, group_idx: int, req_id: str | None = None) -> list[int]:
        return [c for r, g, c in self.stores
                if g == group_idx and (req_id is None or r == req_id)]


def prompt_token_ids(prompt_tokens: int, seed: int = 0) -> list[int]:
    """The harness's deterministic prompt: equal seeds share every prefix."""
    base = 1000 + 37 * seed
    return [(base + 13 * i) % 30000 + 100 for i in range(prompt_tokens)]


class SchedulerRun:
    """One real vLLM scheduler with an offloading connector (``kvreach`` or
    ``stock``), fed fake model outputs one step at a time."""

    def __init__(self, setup: Setup, which: str, model_dir: str,
                 extra_config: dict[str, Any] | None = None, record: bool = True,
                 spy: bool = True) -> None:
        """record=False (benchmarks): no per-step store recording and no spy.
        spy=False: stores are recorded, ``store_step`` is not wrapped (fault
        injection replaces it and the spy would read its faulty chunks)."""
        self.setup, self.which, self.record, self.spy = setup, which, record, spy
        extra: dict[str, Any] = {
            "spec_name": "RecordingOffloadingSpec",
            "spec_module_path": HARNESS_MODULE,
            "offload_prompt_only": setup.offload_prompt_only,
            "blocks_per_chunk": setup.blocks_per_chunk,
            **dict(setup.extra),
            **(extra_config or {}),
        }
        self.vllm_config = self._vllm_config(setup, model_dir, connector_config(which, extra))
        self.kv_cache_config = self._kv_cache_config(setup)
        sched_block, hash_block = resolve_kv_cache_block_sizes(
            self.kv_cache_config, self.vllm_config
        )
        cls = AsyncScheduler if setup.async_scheduling else Scheduler
        self.scheduler = cls(
            vllm_config=self.vllm_config,
            kv_cache_config=self.kv_cache_config,
            log_stats=True,
            structured_output_manager=StructuredOutputManager(self.vllm_config),
            block_size=sched_block,
            hash_block_size=hash_block,
        )
        self.connector = self.scheduler.connector
        assert self.connector is not None
        self.offload = self.connector.connector_scheduler
        init_none_hash(sha256)
        self._hasher = vllm_api.block_hasher(hash_block, sha256, setup.hash_lookahead_tokens)
        self.requests: dict[str, Request] = {}
        self.steps: list[StepRecord] = []
        self.connector_stats: list[Any] = []
        self._pending: tuple[Any, Any] | None = None  # (SchedulerOutput, ModelRunnerOutput)
        self._current: StepRecord | None = None
        self.manager = self.offload.manager
        if record:
            self.manager.prepare_store.side_effect = self._prepare_store

    # -- construction -------------------------------------------------------
    @staticmethod
    def _vllm_config(setup: Setup, model_dir: str, ktc: KVTransferConfig) -> VllmConfig:
        model_config = ModelConfig(model=model_dir, dtype="float16", seed=0,
                                   skip_tokenizer_init=True,
                                   max_model_len=setup.max_model_len)
        scheduler_config = SchedulerConfig(
            max_num_seqs=setup.max_num_seqs,
            max_num_batched_tokens=setup.budget,
            max_model_len=setup.max_model_len,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            disable_hybrid_kv_cache_manager=False,
            async_scheduling=setup.async_scheduling,
        )
        cache_config = CacheConfig(
            block_size=min(g.block_size for g in setup.groups),
            enable_prefix_caching=True,
            prefix_cache_retention_interval=setup.retention_interval,
        )
        kwargs: dict[str, Any] = {}
        if setup.dcp_world_size > 1:
            world = setup.dcp_world_size
            with patch.object(current_platform, "device_count", return_value=world):
                kwargs["parallel_config"] = ParallelConfig(
                    tensor_parallel_size=world,
                    decode_context_parallel_size=setup.dcp_world_size,
                )
        cfg = VllmConfig(
            model_config=model_config,
            scheduler_config=scheduler_config,
            cache_config=cache_config,
            kv_transfer_config=ktc,
            kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="null"),
            device_config=DeviceConfig("cpu"),
            **kwargs,
        )
        cfg.cache_config.num_gpu_blocks = setup.num_gpu_blocks
        vllm_api.set_hash_lookahead(cfg, setup.hash_lookahead_tokens)
        return cfg

    @staticmethod
    def _kv_cache_config(setup: Setup) -> KVCacheConfig:
        groups = [
            KVCacheGroupSpec([f"layer{i}"], g.spec(), is_eagle_group=g.eagle)
            for i, g in enumerate(setup.groups)
        ]
        stride = max(gr.kv_cache_spec.page_size_bytes for gr in groups)
        tensors = [
            KVCacheTensor(
                size=stride * setup.num_gpu_blocks,
                layers=list(gr.layer_names),
                layer_stride=gr.kv_cache_spec.page_size_bytes * setup.num_gpu_blocks,
                block_stride=gr.kv_cache_spec.page_size_bytes,
            )
            for gr in groups
        ]
        return KVCacheConfig(num_blocks=setup.num_gpu_blocks,
                             kv_cache_tensors=tensors, kv_cache_groups=groups)

    # -- recording ----------------------------------------------------------
    def _prepare_store(self, keys, req_context):
        status = self.offload._req_status[req_context.req_id]
        where: dict[OffloadKey, tuple[int, int]] = {}
        for gc, gs in zip(self.offload.config.kv_group_configs, status.group_states):
            for chunk, key in enumerate(gs.offload_keys):
                where[key] = (gc.group_idx, chunk)
        assert self._current is not None
        self._current.stores.extend((req_context.req_id, *where[k]) for k in keys)
        return PrepareStoreOutput(keys_to_store=list(keys), store_spec=KeysSpec(keys),
                                  evicted_keys=[])

    # -- driving ------------------------------------------------------------
    def add_request(self, req_id: str, prompt_tokens: int, max_tokens: int = 1,
                    kv_transfer_params: dict | None = None, seed: int = 0,
                    token_ids: list[int] | None = None) -> Request:
        """``token_ids`` given: the prompt is exactly those tokens (then
        ``prompt_tokens`` must be their count); else :func:`prompt_token_ids`."""
        if token_ids is None:
            token_ids = prompt_token_ids(prompt_tokens, seed)
        assert len(token_ids) == prompt_tokens
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
        req = Request(request_id=req_id, prompt_token_ids=token_ids,
                      sampling_params=params, pooling_params=None,
                      block_hasher=self._hasher)
        if kv_transfer_params is not None:
            req.kv_transfer_params = kv_transfer_params
        self.scheduler.add_request(req)
        self.requests[req_id] = req
        return req

    def abort(self, req_id: str) -> None:
        self.scheduler.finish_requests((req_id,), RequestStatus.FINISHED_ABORTED)

    def _spy_store_step(self):
        """Record kvreach's ``store_step`` decisions of this step (kvreach
        connector only), with the chunks vLLM's null-block filter drops."""
        from kvreach.impl import rules

        real = rules.store_step
        rec = self._current

        def spy(rule, g, req, cursor, num_chunks, finished):
            w = real(rule, g, req, cursor, num_chunks, finished)
            states = [st for st in self.offload._req_status.values() if st.req is not None]
            # group index: the k-th call of a request-step is its k-th SWA group
            gi = [i for i, kg in enumerate(self.offload._kvreach_groups) if kg is not None]
            idx = gi[len(rec.windows) % len(gi)]
            bpc = g.blocks_per_chunk
            dropped = set()
            if len(states) == 1:
                ids = states[0].group_states[idx].block_ids
                for c in w.chunks:
                    blocks = ids[c * bpc:(c + 1) * bpc]
                    off = (c - w.start_chunk) * bpc
                    if blocks[-1] == 0 or any(
                        b == 0 and (w.block_mask is None or w.block_mask[off + i])
                        for i, b in enumerate(blocks)
                    ):
                        dropped.add(c)
            rec.windows.append((idx, w, frozenset(dropped)))
            return w

        return patch.object(rules, "store_step", spy)

    def step(self) -> StepRecord:
        rec = StepRecord(len(self.steps) + 1, {}, ())
        self._current = rec
        spy = (self._spy_store_step() if self.which == KVREACH and self.record and self.spy
               else contextlib.nullcontext())
        with spy:
            out = self.scheduler.schedule()
        rec.scheduled = dict(out.num_scheduled_tokens)
        rec.finished = tuple(sorted(out.finished_req_ids or ()))
        meta = out.kv_connector_metadata
        assert isinstance(meta, OffloadingConnectorMetadata)
        for job in meta.store_jobs.values():
            src = job.src_spec
            rec.jobs.append((job.req_id, tuple(src.group_sizes), tuple(src.block_indices),
                             tuple(int(b) for b in src.block_ids)))
        sampling = [r for r in out.num_scheduled_tokens
                    if not self.scheduler.requests[r].is_prefill_chunk]
        done = OffloadingWorkerMetadata()
        for jid in (*meta.store_jobs, *meta.load_jobs):
            done.mark_completed(jid)
        ids = list(out.num_scheduled_tokens)
        mro = vllm_api.model_runner_output(
            ids,
            sampled_token_ids=[[SAMPLED_TOKEN] if r in sampling else [] for r in ids],
            logprobs=None,
            prompt_logprobs_dict={},
            pooler_output=None,
            # a load completes in its step: the worker reports it received
            kv_connector_output=KVConnectorOutput(
                kv_connector_worker_meta=done,
                finished_recving={job.req_id for job in meta.load_jobs.values()} or None,
            ),
        )
        if self.setup.async_scheduling:
            if self._pending is not None:
                self._update(*self._pending)
            self._pending = (out, mro)
        else:
            self._update(out, mro)
        self.steps.append(rec)
        self._current = None
        return rec

    def _update(self, out, mro) -> None:
        engine_outputs = self.scheduler.update_from_output(out, mro)
        for eo in engine_outputs.values():
            stats = eo.scheduler_stats
            if stats is not None and stats.kv_connector_stats:
                self.connector_stats.append(stats.kv_connector_stats)

    def counter_total(self, name: str) -> float:
        """Sum of a counter over the connector stats the scheduler reported."""
        total = 0
        for st in self.connector_stats:
            data = st if isinstance(st, dict) else st.data
            total += sum(data.get("data", {}).get(name, {}).values())
        return total

    def flush(self) -> None:
        """Apply the in-flight output (async scheduling)."""
        if self._pending is not None:
            self._update(*self._pending)
            self._pending = None

    def busy(self) -> bool:
        return bool(self.scheduler.requests or self.scheduler.finished_req_ids
                    or self.offload._jobs or self._pending)

    def run_to_completion(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.busy():
                return
            if not self.scheduler.requests and not self.scheduler.finished_req_ids:
                self.flush()
                if not self.busy():
                    return
            self.step()
        raise AssertionError("lifecycle did not finish")

    # -- results --------------------------------------------------------------
    def stored(self, group_idx: int, req_id: str | None = None) -> list[int]:
        return sorted(c for s in self.steps for c in s.chunks(group_idx, req_id))

    def per_step(self, group_idx: int, req_id: str | None = None) -> list[list[int]]:
        return [sorted(s.chunks(group_idx, req_id)) for s in self.steps]


def drive(run: SchedulerRun, req_id: str, prompt_tokens: int, *, decode: int = 0,
          abort_after_step: int | None = None,
          kv_transfer_params: dict | None = None,
          token_ids: list[int] | None = None) -> SchedulerRun:
    """One request: chunked prefill, ``decode`` decode steps and a normal
    finish (``max_tokens = decode + 1``), or an abort once ``abort_after_step``
    steps are scheduled (after that step's output is processed, as vLLM's own
    test aborts; with async scheduling the last output is still in flight).
    ``token_ids``: the prompt, as :meth:`SchedulerRun.add_request` takes it."""
    run.add_request(req_id, prompt_tokens, max_tokens=decode + 1,
                    kv_transfer_params=kv_transfer_params, token_ids=token_ids)
    if abort_after_step is None:
        run.run_to_completion()
        return run
    for _ in range(abort_after_step):
        run.step()
    run.abort(req_id)
    run.run_to_completion()
    return run
