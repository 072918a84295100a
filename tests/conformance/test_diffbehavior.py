"""``crosshair diffbehavior`` between rule implementations.

- kvreach's ``reachable_block_mask`` vs vLLM 0.33.0's
  ``SlidingWindowManager.reachable_block_mask`` (plain-int adapters,
  ``diff_targets.impl_mask`` / ``vllm_diff_targets.vllm_mask``; bounds in
  ``diff_targets``): no difference found within the timeout.
- kvreach's vllm-0.29 vs vllm-0.33 store step (``store_step`` with the rule
  fixed): a difference is found, reported as a concrete input, and replaying
  that input gives different results.
"""

from __future__ import annotations

import importlib.util

import pytest

import _crosshair
import diff_targets

from kvreach.proofs.scenarios import (
    PR_54362, PR_54362_FRONTIER_CHUNKS, PR_54362_PROMPT_CHUNKS, PR_54362_WASTED,
)

HAS_VLLM = importlib.util.find_spec("vllm") is not None
MASK_TIMEOUT = 60  # CPU seconds for the mask comparison
RULE_TIMEOUT = 30


def _parse_given(stdout: str) -> dict:
    m = _crosshair.GIVEN_RE.search(stdout)
    assert m, stdout
    return eval(f"dict({m.group(1)})")


@pytest.fixture(scope="module")
def runs():
    procs = {
        "rules": _crosshair.start(
            ["diffbehavior", "diff_targets.store_v029_example",
             "diff_targets.store_v033_example", f"--per_condition_timeout={RULE_TIMEOUT}"]
        ),
        "rules_general": _crosshair.start(
            ["diffbehavior", "diff_targets.store_v029", "diff_targets.store_v033",
             f"--per_condition_timeout={RULE_TIMEOUT}"]
        ),
    }
    if HAS_VLLM:
        procs["vllm"] = _crosshair.start(
            ["diffbehavior", "diff_targets.impl_mask", "vllm_diff_targets.vllm_mask",
             f"--per_condition_timeout={MASK_TIMEOUT}"],
            preimport=("vllm_diff_targets",),
        )
    return {k: _crosshair.finish(p, wall_timeout=400) for k, p in procs.items()}


@pytest.mark.parametrize(
    "key,f029,f033",
    [
        ("rules", diff_targets.store_v029_example, diff_targets.store_v033_example),
        ("rules_general", diff_targets.store_v029, diff_targets.store_v033),
    ],
)
def test_v029_v033_differ_on_concrete_input(runs, key, f029, f033):
    r = runs[key]
    assert "Given:" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])
    given = _parse_given(r.stdout)
    a, b = f029(**given), f033(**given)
    assert a != b and diff_targets.OUT_OF_BOUNDS not in (a, b), (given, a, b)
    print(f"vllm-0.29 vs vllm-0.33 differ at {given}: {a} vs {b}")


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed")
def test_impl_mask_matches_vllm_reachable_block_mask(runs):
    r = runs["vllm"]
    assert "No differences found" in r.stdout, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "Given:" not in r.stdout


@pytest.mark.vllm
@pytest.mark.skipif(not HAS_VLLM, reason="vllm not installed")
def test_vllm_adapter_reproduces_worked_example():
    """The vLLM adapter really reaches vLLM: the brief's worked example."""
    import vllm_diff_targets as V

    def kept(res, start):
        return [start + i for i, b in enumerate(res) if b]

    ex, frontier, prompt_chunks = PR_54362, PR_54362_FRONTIER_CHUNKS, PR_54362_PROMPT_CHUNKS
    args = dict(block_size=ex.swa_block_size, window=ex.window, alignment_tokens=ex.alignment_tokens,
                dcp_world_size=1, retention_interval=None, prompt_tokens=ex.prompt,
                start_block=243, end_block=frontier)
    assert kept(V.vllm_mask(eagle=False, final_segment_end_block=prompt_chunks, **args), 243) == [248, 249]
    assert kept(V.vllm_mask(eagle=False, final_segment_end_block=frontier, **args), 243) == \
        [*PR_54362_WASTED, 248, 249]
    assert kept(V.vllm_mask(eagle=True, final_segment_end_block=prompt_chunks, **args), 243) == [243, 248, 249]
