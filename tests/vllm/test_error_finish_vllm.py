"""The error finish (``FINISHED_ERROR`` before the prompt is computed;
docs/findings.md, F13) on the installed vLLM's real scheduler and stock
connector (0.33.0 or 0.34.0): ``kvreach simulate --vllm X --error-after-step
K`` stores what stock stores, and so does world "restarts"'s ``error`` step of
the installed release (``kvreach.impl.lifecycle.run_vllm``).
vLLM 0.33.0's finish clamp ``max(P, num_tokens - 1)`` reads past the
computed tokens (it stores a chunk whose last token was never computed);
0.34.0's ``min(num_computed_tokens, ...)`` does not."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

import vllm  # noqa: E402
from typer.testing import CliRunner  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402

from kvreach.cli import app  # noqa: E402
from kvreach.impl.lifecycle import VllmStep, run_vllm  # noqa: E402
from kvreach.params import GroupConfig, RequestConfig  # noqa: E402
from kvreach.releases import release  # noqa: E402
from kvreach.vllm_harness.runner import STOCK, SchedulerRun, Setup, full, swa  # noqa: E402

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(vllm.__version__ not in ("0.33.0", "0.34.0"),
                       reason=f"about vLLM 0.33.0 and 0.34.0 (installed: {vllm.__version__})"),
]

# full 2, SWA 2, window 4, an 8-token prompt, budget 5, FINISHED_ERROR after step 1
CASE = {"full": 2, "swa": 2, "window": 4, "prompt": 8, "budget": 5}
# what each release stores at the error finish (the step-1 stores are chunks 0-1)
AT_ERROR = {"0.33.0": [2], "0.34.0": []}


def stock(model_dir: str, error_after_step: int) -> list[list[int]]:
    setup = Setup((full(CASE["full"]), swa(CASE["swa"], CASE["window"])), budget=CASE["budget"],
                  max_num_seqs=CASE["budget"])
    run = SchedulerRun(setup, STOCK, model_dir)
    run.add_request("r", CASE["prompt"], max_tokens=1)
    for _ in range(error_after_step):
        run.step()
    assert run.requests["r"].num_computed_tokens == 5 * error_after_step
    run.scheduler.finish_requests(("r",), RequestStatus.FINISHED_ERROR)
    run.run_to_completion()
    return run.per_step(1)


def test_error_finish_before_the_prompt_is_computed(offline_model_dir):
    v = vllm.__version__
    got = [c for c in stock(offline_model_dir, 1) if c]
    r = CliRunner().invoke(app, [
        "simulate", "--vllm", v, "--full-block-size", str(CASE["full"]), "--swa-block-size",
        str(CASE["swa"]), "--window", str(CASE["window"]), "--prompt", str(CASE["prompt"]), "--budget",
        str(CASE["budget"]), "--error-after-step", "1", "--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    steps = json.loads(r.stdout)["groups"]["swa"]["steps"]
    assert [s["submitted"] for s in steps if s["submitted"]] == got
    assert got == [[0, 1]] + ([AT_ERROR[v]] if AT_ERROR[v] else [])
    # 0.33.0's chunk 2 holds tokens 4-5; token 5 was never computed
    stored_uncomputed = [c for s in got for c in s if (c + 1) * CASE["swa"] > 5]
    assert stored_uncomputed == AT_ERROR[v]


def test_error_finish_stores_what_the_release_step_stores(offline_model_dir):
    rel = release(vllm.__version__)
    setup = Setup((full(2), swa(2, 4)), budget=5, blocks_per_chunk=1,
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
