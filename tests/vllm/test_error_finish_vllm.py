"""A request finished with ``FINISHED_ERROR`` before its prompt is computed
(docs/findings.md, F13), on the installed vLLM's real scheduler with the
stock connector: what it stores at the error finish is what world
"vllm"'s ``error`` step of the installed release stores
(``kvreach.impl.lifecycle.run_vllm``, the release's
``finish_computed_clamp``): 0.33.0 stores chunk 2, whose token 5 was never
computed; 0.34.0 stores nothing."""

from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from vllm.v1.request import RequestStatus  # noqa: E402

from kvreach.impl.lifecycle import VllmStep, run_vllm  # noqa: E402
from kvreach.params import GroupConfig, RequestConfig  # noqa: E402
from kvreach.releases import release  # noqa: E402
from kvreach.vllm_harness.config import STOCK, Group, Setup  # noqa: E402
from kvreach.vllm_harness.scheduler_run import SchedulerRun  # noqa: E402

pytestmark = pytest.mark.vllm


def test_error_finish_stores_what_the_release_step_stores(offline_model_dir):
    rel = release(vllm.__version__)
    setup = Setup((Group("full", 2), Group("swa", 2, window=4)), budget=5, blocks_per_chunk=1,
                  max_model_len=4096, max_num_seqs=1)
    run = SchedulerRun(setup, STOCK, offline_model_dir)
    req = run.add_request("r", 8, max_tokens=4)
    first = run.step()
    assert first.scheduled == {"r": 5} and req.num_computed_tokens == 5
    run.scheduler.finish_requests("r", RequestStatus.FINISHED_ERROR)
    at_error = run.step().chunks(1, "r")

    g = GroupConfig(block_size=2, window=4, alignment_tokens=2, blocks_per_chunk=1)
    r = RequestConfig(prompt_tokens=8, offload_prompt_only=True)
    plan = [VllmStep("prefill", 5), VllmStep("error", allocated_chunks=3)]  # 3 blocks for 5 tokens
    steps = run_vllm("vllm-0.33", g, r, plan, rel)
    assert first.chunks(1, "r") == list(steps[0].submitted) == [0, 1]
    assert at_error == list(steps[1].submitted)
    assert at_error == ([] if rel.finish_computed_clamp else [2])
