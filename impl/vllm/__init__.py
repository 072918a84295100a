"""kvreach's vLLM ``OffloadingConnector`` (vLLM 0.33.0 or 0.34.0, chosen at
import: :mod:`~kvreach.impl.vllm.vllm_release`), along vLLM's own seams
(vLLM's ``offloading/config.py``, ``metrics.py``, ``scheduler.py`` and
``offloading_connector.py``):

- :mod:`~kvreach.impl.vllm.options`: the ``kvreach.*`` keys of
  ``kv_connector_extra_config`` (``KvReachOptions``); no vLLM import;
- :mod:`~kvreach.impl.vllm.metrics`: the errors it raises, the counters it
  reports, its Prometheus metrics and its logger;
- :mod:`~kvreach.impl.vllm.groups`: vLLM's offload groups as kvreach
  ``GroupConfig`` values and their runtime monitors;
- :mod:`~kvreach.impl.vllm.scheduler`: ``KvReachOffloadingConnectorScheduler``,
  the per-group SWA selection from ``kvreach.impl.rules.store_step``, the
  monitor, the null-block filter and the fallback to stock vLLM's selection;
- :mod:`~kvreach.impl.vllm.vllm_release`: the installed release and the parts
  of vLLM's API that differ between 0.33.0 and 0.34.0 (one name each);
- :mod:`~kvreach.impl.vllm.vllm_copy`: the code copied from vLLM, and only
  that, one module per release whose code differs (tests/vllm/test_vllm_copy.py
  diffs the installed release's against the installed vLLM);
- :mod:`~kvreach.impl.vllm.connector`: ``KvReachOffloadingConnector``, the
  facade vLLM loads (``kv_connector_module_path="kvreach.impl.vllm_connector"``,
  which re-exports it).

Importing this package imports nothing; the modules above import vLLM (except
``options``). No CPU or test shim is applied by any of them
(``kvreach.vllm_harness.cpu_shims`` is the harness's).
"""
