"""Randomized lifecycles through vLLM's real scheduler: kvreach connector ==
stock vLLM 0.33.0 (every step, every group, every store job) == the
``kvreach.impl.lifecycle`` prediction for each SWA group."""

from __future__ import annotations

import math
import os

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvreach.vllm_harness.runner import Setup, full, swa  # noqa: E402
from test_vllm_connector_lifecycles import check_all  # noqa: E402

pytestmark = pytest.mark.vllm


@st.composite
def lifecycles(draw):
    fa = draw(st.sampled_from([6, 8, 12, 16, 36]))
    sb = draw(st.sampled_from([2, 4, 8]))
    window = draw(st.integers(2, 80))
    extra = draw(st.sampled_from([0, 0, 0, 3]))
    groups = [full(fa), swa(sb, window, extra=extra)]
    if draw(st.booleans()):
        groups.append(swa(sb, window, eagle=True, extra=extra))
    if draw(st.integers(0, 5)) == 0:
        groups.insert(1, full(2 * fa))  # two chunk sizes: no alignment
    bpc = draw(st.sampled_from([1, 1, 2, 3]))
    chunk = sb * bpc
    retention = draw(st.sampled_from([None, None, None, 0, 1, 2, 4]))
    if retention:
        retention *= math.lcm(chunk, fa * bpc)
    prompt = draw(st.integers(1, 700))
    budget = draw(st.integers(16, 600))
    decode = draw(st.integers(0, 12))
    setup = Setup(tuple(groups), budget=budget, blocks_per_chunk=bpc,
                  async_scheduling=draw(st.booleans()), retention_interval=retention,
                  offload_prompt_only=draw(st.booleans()), num_gpu_blocks=3000)
    steps = -(-prompt // budget) + decode
    abort = draw(st.one_of(st.none(), st.integers(0, steps)))
    return setup, prompt, decode, abort


# CI size: 25 fixed examples. KVREACH_VLLM_EXAMPLES=N runs N random ones.
EXAMPLES = int(os.environ.get("KVREACH_VLLM_EXAMPLES", "25"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize="KVREACH_VLLM_EXAMPLES" not in os.environ,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(case=lifecycles())
def test_random_lifecycles_match(offline_model_dir, case):
    setup, prompt, decode, abort = case
    check_all(offline_model_dir, setup, prompt, decode=decode, abort_after_step=abort,
              expect_stores=False)
