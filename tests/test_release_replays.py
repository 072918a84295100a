"""Replays on vLLM 0.29.0 and 0.30.0's own scheduler and connector (slow: a
venv of about 9 GB per release, made once by ``tests/vllm_releases.py``).

Each case runs ``python -m kvreach.vllm_harness.release_replay CASE`` with the
release's python (its real ``Scheduler``, ``KVCacheManager``, stock
``OffloadingConnector``; the offload manager's answers scripted) and, as the
check that the assertion can fail, the same case on the vLLM 0.33.0 this
checkout's venv holds (or the same release with the store changed).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import vllm_releases

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
OLD = ("0.29.0", "0.30.0")


@pytest.fixture(scope="session")
def python():
    """version -> the python of a venv holding that vLLM (0.33.0: this one)."""
    cache: dict[str, str] = {}

    def get(version: str) -> str:
        if version == "0.33.0":
            pytest.importorskip("vllm")
            return sys.executable
        if version not in cache:
            cache[version] = str(vllm_releases.venv(version))
        return cache[version]
    return get


def replay(python: str, case: str, *args: str) -> dict:
    p = subprocess.run([python, "-m", "kvreach.vllm_harness.release_replay", case, *args],
                       capture_output=True, text=True, cwd=REPO,
                       env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                            "PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def counterexample(obligation: str, rule: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "kvreach.cli", "counterexample", obligation,
                        "--rule", rule, "--json"], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def only_lookup(out: dict) -> dict:
    (lookup,) = out["lookups"]
    assert (lookup["hit_tokens"], lookup["loaded"]) == (
        lookup["twin_hit_tokens"], lookup["twin_loaded"]), out  # the release's twin agrees
    return lookup


def test_the_0_29_0_lookup_loads_a_swa_chunk_it_never_checked(python):
    for v in ("0.29.0", "0.30.0", "0.33.0"):
        out = replay(python(v), "unchecked-load-029")
        assert out["vllm"] == v
        lookup = only_lookup(out)
        if v == "0.29.0":
            assert lookup["hit_tokens"] == 22
            assert lookup["loaded_miss"] == [[1, 3]]
            assert [c for g, c in lookup["loaded"] if g == 1] == [3, 4, 5]
            # the release's own CPUOffloadingManager asserts on the unchecked key
            (answer,) = out["cpu_manager_load"]
            assert answer.startswith("AssertionError: Block ") and answer.endswith(
                "not found in cache"), answer
        else:
            assert (lookup["hit_tokens"], lookup["loaded_miss"]) == (12, [])
            assert out["cpu_manager_load"] == ["ok"]
    # with SWA chunk 3 stored the same lookup loads only what it checked
    out = replay(python("0.29.0"), "unchecked-load-029", "--missing", "[[0, 11]]")
    lookup = only_lookup(out)
    assert (lookup["hit_tokens"], lookup["loaded_miss"]) == (22, [])
    assert out["cpu_manager_load"] == ["ok"]


def test_the_0_29_0_and_0_30_0_lookups_load_chunk_0_unchecked_with_extra_retained(python):
    for v in ("0.29.0", "0.30.0", "0.33.0"):
        out = replay(python(v), "unchecked-load-030")
        lookup = only_lookup(out)
        if v in OLD:
            assert (lookup["hit_tokens"], lookup["loaded_miss"]) == (6, [[0, 0]])
            (answer,) = out["cpu_manager_load"]
            assert answer.startswith("AssertionError: ") and "not found in cache" in answer
        else:
            assert (lookup["hit_tokens"], lookup["loaded"]) == (0, [])
            assert out["cpu_manager_load"] == []
    out = replay(python("0.30.0"), "unchecked-load-030", "--missing", "[]")
    lookup = only_lookup(out)
    assert (lookup["hit_tokens"], lookup["loaded_miss"]) == (6, [])
    assert out["cpu_manager_load"] == ["ok"]


def _group(cex: dict) -> dict:
    return cex["counterexample"]["config"]["group"]


def _steps(out: dict) -> list[tuple]:
    return [(st["computed_after_batch"], st["stored"], st["refused"]) for st in out["steps"]]


def test_0_29_0_finish_stores_a_chunk_before_it_is_computed(python):
    """computed-before-stored of vllm-0.29: its decoded scenario (window 4,
    4-token chunks, a 7-token prompt offloaded past the prompt, one prefill
    step, no decode) on 0.29.0's own scheduler. With 4-token blocks the
    finish step (``num_tokens`` 8, 7 computed) stores chunk 1, whose last
    token (the sampled one) was never computed; 0.30.0 on clamp the finish
    to ``max(num_prompt_tokens, num_tokens - 1)``. In the decoded geometry
    itself (1-token blocks) 0.29.0 stores nothing at the finish:
    ``storable_chunks`` caps at the allocated chunks, and the sampled
    token's slot is never allocated."""
    cex = counterexample("computed-before-stored", "vllm-0.29")
    c, g = cex["counterexample"], _group(cex)
    assert (g["block_size"], g["window"], g["blocks_per_chunk"],
            c["config"]["request"]["prompt_tokens"], c["lifecycle"]["decode"],
            c["lifecycle"]["prefill_steps"]) == (1, 4, 4, 7, 0, [7])
    assert c["config"]["request"]["offload_prompt_only"] is False
    for v in ("0.29.0", "0.30.0", "0.33.0"):
        out = replay(python(v), "finish-store")
        assert out["tokens_per_chunk"] == g["block_size"] * g["blocks_per_chunk"]
        assert out["steps"][-1]["status"] == "FINISHED_LENGTH_CAPPED"
        if v == "0.29.0":
            assert out["uncomputed"] == [c["chunk"]] == [1]
            assert _steps(out) == [(7, [0], []), (7, [1], [])]
        else:
            assert out["uncomputed"] == []
            assert _steps(out) == [(7, [0], []), (7, [], [])]
    decoded = replay(python("0.29.0"), "finish-store", "--group", "1,4,4")
    assert decoded["uncomputed"] == [] and _steps(decoded) == [(7, [0], []), (7, [], [])]


def test_0_29_0_finish_after_a_preempted_recompute_stores_an_uncomputed_chunk(python):
    """computed-before-stored-restarts of vllm-0.29: window 3, a 1-token
    prompt decoded twice, preempted (``reset_prefix_cache(
    reset_running_requests=True)``), recomputed (3 tokens, every store of the
    recompute refused), finished with ``num_tokens`` 4 and 3 computed: with
    2-token blocks 0.29.0 stores chunk 1 (tokens 2-3). In the decoded
    geometry (1-token blocks) the recompute's chunk 2 is refused and the
    finish retries it, but chunk 3's block is never allocated."""
    cex = counterexample("computed-before-stored-restarts", "vllm-0.29")
    c, g = cex["counterexample"], _group(cex)
    assert (g["block_size"], g["window"], g["blocks_per_chunk"],
            c["config"]["request"]["prompt_tokens"]) == (1, 3, 1, 1)
    assert [(s["kind"], s["scheduled_tokens"], s["outcome"]) for s in c["plan"]] == [
        ("recompute", 3, "refused"), ("finish", 0, "accept")]
    for v in ("0.29.0", "0.33.0"):
        out = replay(python(v), "finish-store-restart")
        assert out["preempted"]
        assert [st["scheduled"] for st in out["steps"]] == [1, 1, 3, 0]
        if v == "0.29.0":
            assert out["uncomputed"] == [1]
            assert _steps(out) == [(1, [], []), (2, [0], []), (3, [], []), (3, [1], [])]
        else:
            assert out["uncomputed"] == []
    decoded = replay(python("0.29.0"), "finish-store-restart", "--group", "1,3,1")
    assert decoded["uncomputed"] == []
    assert _steps(decoded)[2:] == [(3, [], [2]), (3, [2], [])]


def test_hit_preservation_of_vllm_0_29_on_its_own_scheduler_and_lookup(python, tmp_path):
    cex = counterexample("hit-preservation", "vllm-0.29")
    f = tmp_path / "cex.json"
    f.write_text(json.dumps(cex))
    out = {v: replay(python(v), "hit-preservation", "--cex", str(f)) for v in ("0.29.0", "0.33.0")}
    for o in out.values():
        for content in ("rule", "dense"):
            assert (o[content]["hit_tokens"], o[content]["loaded"]) == (
                o[content]["twin_hit_tokens"], o[content]["twin_loaded"]), o
            assert o[content]["loaded_miss"] == []
    old, new = out["0.29.0"], out["0.33.0"]
    assert old["rule"]["hit_tokens"] < old["dense"]["hit_tokens"]
    # 0.33.0's own store rule keeps the dense hit
    assert new["rule"]["hit_tokens"] == new["dense"]["hit_tokens"]
