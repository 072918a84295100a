"""The harness that drives vLLM 0.33.0's real scheduler side on CPU (needs the
``vllm`` extra): used by tests/vllm, bench/ and ``kvreach counterexample
--replay-vllm``.

- :mod:`~kvreach.vllm_harness.runner`: the run API, from
  :mod:`~kvreach.vllm_harness.config` (``Setup``, the groups, the connector),
  :mod:`~kvreach.vllm_harness.memory` (the offload manager's memory, mocked),
  :mod:`~kvreach.vllm_harness.scheduler_run` (``SchedulerRun``: the real
  ``Scheduler`` with an offloading connector and fake model outputs;
  ``drive``) and :mod:`~kvreach.vllm_harness.class_level` (``ClassLevelRun``:
  the connector scheduler driven directly, for DCP);
- :mod:`~kvreach.vllm_harness.lookups`: vLLM's own offload lookups recorded
  and compared with kvreach's twin;
- :mod:`~kvreach.vllm_harness.replay_lifecycle`, :mod:`~kvreach.vllm_harness.replay`:
  a decoded counterexample replayed on vLLM (``replay.REPLAYS``, ``replay.replay_on_vllm``);
- :mod:`~kvreach.vllm_harness.cpu_shims`: the two CPU shims (hybrid KV cache
  manager, offline model config) that only the harness's callers apply.

It sits above ``kvreach.proofs`` (it replays the proofs' decoded
counterexamples), beside the CLI; the connector it drives is
``kvreach.impl.vllm``, which imports none of this.
"""
