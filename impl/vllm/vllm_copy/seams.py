"""How a copy of vLLM code is declared: the original it copies and the seams
where it differs (:class:`Copy`, :class:`Seam`). tests/vllm/test_vllm_copy.py
checks each copy of the installed release against that release's source."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULER_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"
CONNECTOR_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector"


@dataclass(frozen=True)
class Seam:
    """Where a copy differs from its original: the original's lines
    ``first`` .. ``last`` (stripped; the first such run) are ``replacement``
    (stripped lines, the ``# kvreach:`` comments left out)."""

    first: str
    last: str
    replacement: tuple[str, ...]


@dataclass(frozen=True)
class Copy:
    """``copy`` (an attribute path in the release's copy module) is
    ``original`` (a module and an attribute path in it) line for line except
    at ``seams``."""

    copy: str
    original: tuple[str, str]
    seams: tuple[Seam, ...]


# The seam of _build_store_jobs, the same in every release copied: vLLM's
# per-group loop (from its first line to the key append that ends it) is a
# call of self._select_store_keys filling the same two lists.
SELECT_STORE_KEYS = Seam(
    "for group_config, group_state in zip(",
    "new_offload_keys.append(offload_key)",
    ("self._select_store_keys(", "req_status,", "num_offloadable_tokens,",
     "prompt_offloadable_tokens,", "reachable_boundaries,", "new_offload_keys,",
     "group_store_ranges,", ")"),
)

BUILD_STORE_JOBS = Copy(
    "StoreJobs._build_store_jobs",
    (SCHEDULER_MODULE, "OffloadingConnectorScheduler._build_store_jobs"),
    (SELECT_STORE_KEYS,),
)

CONNECTOR_INIT = Copy(
    "ConnectorInit.__init__",
    (CONNECTOR_MODULE, "OffloadingConnector.__init__"),
    (Seam("super().__init__(vllm_config, role, kv_cache_config)",
          "super().__init__(vllm_config, role, kv_cache_config)",
          ("KVConnectorBase_V1.__init__(self, vllm_config, role, kv_cache_config)",)),
     Seam("self.connector_scheduler = OffloadingConnectorScheduler(",
          "self.connector_scheduler = OffloadingConnectorScheduler(",
          ("self.connector_scheduler = self.scheduler_class(",))),
)
