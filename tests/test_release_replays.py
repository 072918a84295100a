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
        else:
            assert (lookup["hit_tokens"], lookup["loaded_miss"]) == (12, [])
    # with SWA chunk 3 stored the same lookup loads only what it checked
    lookup = only_lookup(replay(python("0.29.0"), "unchecked-load-029", "--missing", "[[0, 11]]"))
    assert lookup["loaded_miss"] == []


def test_the_0_29_0_and_0_30_0_lookups_load_chunk_0_unchecked_with_extra_retained(python):
    for v in ("0.29.0", "0.30.0", "0.33.0"):
        out = replay(python(v), "unchecked-load-030")
        lookup = only_lookup(out)
        if v in OLD:
            assert (lookup["hit_tokens"], lookup["loaded_miss"]) == (6, [[0, 0]])
        else:
            assert (lookup["hit_tokens"], lookup["loaded"]) == (0, [])
    lookup = only_lookup(replay(python("0.30.0"), "unchecked-load-030", "--missing", "[]"))
    assert (lookup["hit_tokens"], lookup["loaded_miss"]) == (6, [])


def _group(cex: dict) -> dict:
    return cex["counterexample"]["config"]["group"]


def test_0_29_0_finish_stores_a_chunk_before_it_is_computed(python):
    """computed-before-stored of vllm-0.29: its decoded SWA group, request and
    lifecycle (one prefill step of the whole prompt, no decode) on 0.29.0's
    own scheduler: the finish step stores chunk 1, whose last token (the
    sampled one) was never computed. 0.30.0 on clamp the finish to
    ``max(num_prompt_tokens, num_tokens - 1)``."""
    cex = counterexample("computed-before-stored", "vllm-0.29")
    c, g = cex["counterexample"], _group(cex)
    assert (g["block_size"], g["window"], g["blocks_per_chunk"],
            c["config"]["request"]["prompt_tokens"], c["lifecycle"]["decode"]) == (1, 4, 4, 7, 0)
    assert c["config"]["request"]["offload_prompt_only"] is False
    for v in ("0.29.0", "0.30.0", "0.33.0"):
        out = replay(python(v), "finish-store")
        if v == "0.29.0":
            assert out["uncomputed"] == [c["chunk"]] == [1]
            finish = out["steps"][-1]
            assert finish["status"] == "FINISHED_LENGTH_CAPPED"
            assert (finish["computed_after_batch"], finish["stored"]) == (7, [1])
        else:
            assert out["uncomputed"] == []


def test_0_29_0_finish_after_a_refused_recompute_stores_an_uncomputed_chunk(python):
    """computed-before-stored-restarts of vllm-0.29: SWA block 1, window 3, a
    1-token prompt decoded twice, preempted, its 3-token recompute's stores
    refused; the finish then stores up to ``num_tokens`` (4): chunk 3."""
    cex = counterexample("computed-before-stored-restarts", "vllm-0.29")
    c, g = cex["counterexample"], _group(cex)
    assert (g["block_size"], g["window"], g["blocks_per_chunk"],
            c["config"]["request"]["prompt_tokens"]) == (1, 3, 1, 1)
    assert [s["kind"] for s in c["plan"]] == ["recompute", "finish"]
    for v in ("0.29.0", "0.33.0"):
        out = replay(python(v), "finish-store-restart")
        assert out["preempted"]
        recompute = [s for s in out["steps"] if s["refused"]]
        assert recompute and recompute[0]["scheduled"] == 3
        if v == "0.29.0":
            assert out["uncomputed"] == [c["chunk"]] == [3]
        else:
            assert out["uncomputed"] == []


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
