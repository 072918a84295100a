"""vLLM's ``OffloadingConnector.__init__``
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py``),
the same in 0.33.0 and 0.34.0: one copy, checked against the installed
release (:data:`~kvreach.impl.vllm.vllm_copy.seams.CONNECTOR_INIT`), building
``self.scheduler_class`` in the scheduler role instead of
``OffloadingConnectorScheduler``, and calling the base class
``KVConnectorBase_V1.__init__`` instead of ``super().__init__`` (constructing
vLLM's connector first would build a second offloading manager)."""

# Copied from vLLM 0.33.0 (unchanged in 0.34.0):
# vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py
# (OffloadingConnector.__init__).
# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project

from __future__ import annotations

from vllm.config import VllmConfig
from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import (
    build_offloading_config,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    OffloadingConnectorScheduler,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker import (
    OffloadingConnectorWorker,
)
from vllm.v1.kv_cache_interface import KVCacheConfig
from vllm.v1.kv_offload.factory import OffloadingSpecFactory


class ConnectorInit:
    """Mixin for an ``OffloadingConnector`` subclass with a ``scheduler_class``
    (an ``OffloadingConnectorScheduler`` subclass): vLLM's
    ``OffloadingConnector.__init__`` building it."""

    scheduler_class: type[OffloadingConnectorScheduler] = OffloadingConnectorScheduler

    def __init__(
        self,
        vllm_config: VllmConfig,
        role: KVConnectorRole,
        kv_cache_config: KVCacheConfig,
    ):
        # kvreach: vLLM's base class, not OffloadingConnector's __init__
        KVConnectorBase_V1.__init__(self, vllm_config, role, kv_cache_config)

        offloading_config = build_offloading_config(vllm_config, kv_cache_config)
        self._canonical_layout = offloading_config.canonical_layout
        spec = OffloadingSpecFactory.create_spec(offloading_config)

        self.connector_scheduler: OffloadingConnectorScheduler | None = None
        self.connector_worker: OffloadingConnectorWorker | None = None
        if role == KVConnectorRole.SCHEDULER:
            # kvreach: the connector's scheduler class
            self.connector_scheduler = self.scheduler_class(
                spec, vllm_config, kv_cache_config
            )
        elif role == KVConnectorRole.WORKER:
            self.connector_worker = OffloadingConnectorWorker(
                spec, vllm_config, kv_cache_config
            )
