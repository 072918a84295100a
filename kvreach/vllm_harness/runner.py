"""vLLM 0.33.0's real scheduler side driven with fake model outputs: the
harness's run API in one place, from the modules that hold each part.

- :mod:`~kvreach.vllm_harness.config`: ``Group`` (``full``, ``swa``), ``Setup``,
  the connector (``KVREACH``, ``STOCK``, ``connector_config``);
- :mod:`~kvreach.vllm_harness.memory`: the mocked offload memory
  (``RecordingOffloadingSpec``);
- :mod:`~kvreach.vllm_harness.scheduler_run`: ``SchedulerRun`` (the real
  ``Scheduler``), ``StepRecord``, ``drive``, ``prompt_token_ids``;
- :mod:`~kvreach.vllm_harness.class_level`: ``ClassLevelRun`` (the connector
  scheduler driven directly, for DCP).
"""

from kvreach.vllm_harness.class_level import ClassLevelRun, class_level_vllm_config
from kvreach.vllm_harness.config import KVREACH, STOCK, Group, Setup, connector_config, full, swa
from kvreach.vllm_harness.memory import HARNESS_MODULE, RecordingOffloadingSpec, KeysSpec
from kvreach.vllm_harness.scheduler_run import (
    SAMPLED_TOKEN,
    SchedulerRun,
    StepRecord,
    drive,
    prompt_token_ids,
)

__all__ = [
    "HARNESS_MODULE", "KVREACH", "SAMPLED_TOKEN", "STOCK", "ClassLevelRun", "Group",
    "RecordingOffloadingSpec", "SchedulerRun", "Setup", "StepRecord", "class_level_vllm_config",
    "connector_config", "drive", "full", "prompt_token_ids", "swa",
]
