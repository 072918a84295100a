"""pytest plugin for running vLLM 0.33.0's own offloading-connector tests on a
CPU-only machine, optionally with kvreach's scheduler substituted.

Loaded by scripts/run_vllm_own_tests.sh with ``-p kvreach_vllm_plugin``.
Test-only shims (never in library code):

- the hybrid KV cache manager is allowed on CPU
  (``current_platform.support_hybrid_kv_cache()`` returns True);
- vLLM's hub retries sleep 2 s before giving up on the (offline, impossible)
  safetensors metadata lookup of ``facebook/opt-125m``; the sleep is skipped.
  The model's ``config.json`` comes from a fake offline HF cache the script
  writes (``HF_HUB_CACHE``, ``HF_HUB_OFFLINE=1``).

``KVREACH_SUBSTITUTE=1`` replaces ``OffloadingConnectorScheduler`` with
``KvReachOffloadingConnectorScheduler`` where vLLM and its tests look it up:
the ``offloading.scheduler`` module (which test_scheduler.py imports from) and
the ``offloading_connector`` module (which ``OffloadingConnector.__init__``
instantiates from). The number of kvreach scheduler instances is written to
``KVREACH_INSTANCES_FILE`` so the script can check the substitution happened.
``KVREACH_RULE`` (optional) is the kvreach rule the substituted scheduler runs
(default ``vllm-0.33``), e.g. ``lookup-window``.
"""

from __future__ import annotations

import os

_instances = 0


def pytest_configure(config):
    from vllm.platforms import current_platform

    type(current_platform).support_hybrid_kv_cache = classmethod(lambda cls: True)

    import vllm.transformers_utils.repo_utils as repo_utils

    repo_utils.time = _NoSleepTime(repo_utils.time)

    if os.environ.get("KVREACH_SUBSTITUTE") == "1":
        _substitute()


class _NoSleepTime:
    def __init__(self, real):
        self._real = real

    def sleep(self, _seconds):
        return None

    def __getattr__(self, name):
        return getattr(self._real, name)


def _substitute() -> None:
    import vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler as sched_mod
    import vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector as conn_mod

    from kvreach.impl.vllm_connector import KvReachOffloadingConnectorScheduler as KvReach

    original_init = KvReach.__init__

    def counting_init(self, *args, **kwargs):
        global _instances
        _instances += 1
        original_init(self, *args, **kwargs)

    KvReach.__init__ = counting_init
    sched_mod.OffloadingConnectorScheduler = KvReach
    conn_mod.OffloadingConnectorScheduler = KvReach
    rule = os.environ.get("KVREACH_RULE")
    if rule:  # the rule the substituted scheduler runs when a test sets none
        from kvreach.impl.vllm_connector import KvReachOptions

        KvReachOptions.rule = rule


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("KVREACH_INSTANCES_FILE")
    if path:
        with open(path, "w") as f:
            f.write(str(_instances))
