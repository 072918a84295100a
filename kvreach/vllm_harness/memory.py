"""The offload manager's memory, mocked (the one mock of the harness): a
``MagicMock(spec=OffloadingManager)`` whose ``prepare_store`` accepts every key
it is given (as vLLM's own tests do with ``generate_store_output``) and whose
``lookup`` always misses. vLLM loads it through ``kv_connector_extra_config``
(``spec_name`` ``RecordingOffloadingSpec``, ``spec_module_path``
:data:`HARNESS_MODULE`). Importable under vLLM 0.29.0 and 0.30.0 too (the
release replays)."""

from __future__ import annotations

from unittest.mock import MagicMock

from vllm.v1.kv_offload.base import (
    LoadStoreSpec,
    LookupResult,
    OffloadingManager,
    OffloadingSpec,
    OffloadKey,
    PrepareStoreOutput,
    RequestOffloadingContext,
)
try:  # vLLM 0.31.0 on; the release replays (release_replay.py) run this on 0.29.0 / 0.30.0 too
    from vllm.v1.metrics.cache_hit_source import CacheHitSource
except ImportError:
    CacheHitSource = None

HARNESS_MODULE = __name__  # the spec_module_path vLLM loads RecordingOffloadingSpec from


class KeysSpec(LoadStoreSpec):
    def __init__(self, keys):
        self.offload_keys: list[OffloadKey] = list(keys)


class RecordingOffloadingSpec(OffloadingSpec):
    """OffloadingSpec whose manager is a mock that accepts every store."""

    def __init__(self, config):
        super().__init__(config)
        m = MagicMock(spec=OffloadingManager)
        m.lookup.return_value = LookupResult.MISS
        answers = {"get_stats": None, "config_info": [{}], "has_pending_work": False,
                   "on_new_request": RequestOffloadingContext()}
        if CacheHitSource is not None:
            answers["get_load_source"] = CacheHitSource.EXTERNAL_UNSPECIFIED
        for name, value in answers.items():
            if hasattr(OffloadingManager, name):  # an older release's manager lacks some
                getattr(m, name).return_value = value
        m.prepare_load = lambda keys, req_context: KeysSpec(keys)
        m.prepare_store.side_effect = lambda keys, req_context: PrepareStoreOutput(
            keys_to_store=list(keys), store_spec=KeysSpec(keys), evicted_keys=[]
        )
        self.manager = m

    def get_manager(self) -> OffloadingManager:
        return self.manager

    def get_worker(self, kv_caches):  # pragma: no cover - scheduler side only
        raise NotImplementedError("scheduler-side harness: no worker")
