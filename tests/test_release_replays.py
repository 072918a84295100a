"""Replays on vLLM 0.29.0, 0.30.0 and 0.32.0's own scheduler and connector
(slow: a venv of about 5.5 GB per release, made once by
``tests/vllm_releases.py``).

Each case runs ``python -m kvreach.vllm_harness.release_replay CASE`` with the
release's python (its real ``Scheduler``, ``KVCacheManager``, stock
``OffloadingConnector``; the offload manager's answers scripted) and, as the
check that the assertion can fail, the same case on vLLM 0.33.0
(``vllm_releases.venv("0.33.0")``: this interpreter when it holds 0.33.0) (or the same release with the store changed).
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
    """version -> the python of a venv holding that vLLM (this one when it does)."""
    cache: dict[str, str] = {}

    def get(version: str) -> str:
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
    """computed-before-stored-restarts of vllm-0.29 in world "restarts" with
    0.33.0's cursor reset (the row's counterexample before the row became
    0.29.0's): window 3, a 1-token prompt decoded twice, preempted
    (``reset_prefix_cache(reset_running_requests=True)``), recomputed (3
    tokens, every store of the recompute refused), finished with
    ``num_tokens`` 4 and 3 computed: with 2-token blocks 0.29.0 stores chunk
    1 (tokens 2-3). In the decoded geometry (1-token blocks) the recompute's
    chunk 2 is refused and the finish retries it, but chunk 3's block is
    never allocated.

    The row's counterexample is now an error finish (docs/findings.md,
    F13): ``FINISHED_ERROR`` before any token is computed, its allocated
    chunks stored (0.29.0's finished-request branch takes ``num_tokens``,
    the prompt); the normal-finish case above is replayed as it was."""
    cex = counterexample("computed-before-stored-restarts", "vllm-0.29")
    c = cex["counterexample"]
    assert cex["vllm"] == "0.29.0"
    assert [(s["kind"], s["scheduled_tokens"]) for s in c["plan"]] == [("error", 0)]
    assert c["replay"][-1]["f"] == [0, 0] and c["chunk"] in c["replay"][-1]["submitted"]
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


def counterexample_at(obligation: str, rule: str, version: str, tmp_path: Path) -> tuple[dict, Path]:
    """``kvreach counterexample OBLIGATION --rule RULE --vllm VERSION --json``,
    also written to a file for ``--cex``."""
    p = subprocess.run([sys.executable, "-m", "kvreach.cli", "counterexample", obligation,
                        "--rule", rule, "--vllm", version, "--json"],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert doc["verdict"] == "counterexample", doc
    f = tmp_path / f"{obligation}-{rule}-{version}.json"
    f.write_text(p.stdout)
    return doc, f


def lookups_agree(out: dict) -> None:
    """Every lookup vLLM made equals the release twin's (hit and loaded keys)."""
    assert out["lookups"], out
    for o in out["lookups"]:
        assert (o["hit_tokens"], o["loaded"]) == (o["twin_hit_tokens"], o["twin_loaded"]), o
        assert o["loaded_miss"] == [], o


def test_hit_preservation_of_vllm_0_33_at_0_30_0_on_its_own_scheduler_and_lookup(python, tmp_path):
    """hit-preservation (rule vllm-0.33, vLLM 0.30.0): the earlier request's
    stores by 0.30.0's own ``_reachable_store_block_mask`` lose SWA chunk
    292, the later request's 0.30.0 lookup hits 0 where dense stores give
    1187; the dense run is the check that the same lookup can hit."""
    doc, f = counterexample_at("hit-preservation", "vllm-0.33", "0.30.0", tmp_path)
    c = doc["counterexample"]
    assert c["lookup_groups"]["vllm"] == "0.30.0" and c["replayed_violation"] == [292]
    out = replay(python("0.30.0"), "hit-preservation", "--cex", str(f))
    assert (out["vllm"], out["record"]) == ("0.30.0", "0.30.0")
    for content in ("rule", "dense"):
        o = out[content]
        assert (o["hit_tokens"], o["loaded"]) == (o["twin_hit_tokens"], o["twin_loaded"]), o
        assert o["loaded_miss"] == []
    assert 292 not in out["stored_swa_chunks"]
    assert (out["rule"]["hit_tokens"], out["dense"]["hit_tokens"]) == (
        c["later_lookup"]["hit_tokens"], c["later_lookup"]["dense_hit_tokens"]) == (0, 1187)


def test_no_waste_of_vllm_0_33_at_0_30_0_on_its_own_lookup(python, tmp_path):
    """no-waste (rule vllm-0.33, vLLM 0.30.0): chunk 23, kept by 0.30.0's
    store rule at horizon 27, is loaded by no later request of 1 .. 117
    tokens on 0.30.0's own lookup (the lookup checks a run of
    ``cdiv(17, 4)`` = 5 chunks before each 36-token boundary, the mask
    keeps 4). With every offloadable SWA chunk held (the check that the
    search can fail) the requests of 108 .. 117 tokens load it."""
    doc, f = counterexample_at("no-waste", "vllm-0.33", "0.30.0", tmp_path)
    c = doc["counterexample"]
    assert (c["chunk"], c["final_horizon_chunks"]) == (23, 27)
    py = python("0.30.0")
    out = replay(py, "no-waste", "--cex", str(f))
    assert out["on_vllm"] == out["kvreach"], out
    assert out["on_vllm"]["chunk_kept"] and out["on_vllm"]["loaded_by_later_tokens"] == []
    assert out["on_vllm"]["later_requests"] == 117
    dense = replay(py, "no-waste", "--cex", str(f), "--dense")
    assert dense["on_vllm"] == dense["kvreach"], dense
    assert dense["on_vllm"]["loaded_by_later_tokens"] == list(range(108, 118))


def test_neighbours_of_vllm_0_33_at_0_30_0_lose_a_hit_on_its_own_code(python, tmp_path):
    """hit-preservation-neighbours (rule vllm-0.33, vLLM 0.30.0): three
    earlier requests' one-shot stores by 0.30.0's own connector, the later
    request's 0.30.0 lookup against their union hits 16 where dense stores
    give 36. The decoded later request carries ``max_load_tokens`` 0, which
    0.30.0 does not read; 0.33.0 honours it and hits nothing either way (the
    check that the figures are the release's)."""
    doc, f = counterexample_at("hit-preservation-neighbours", "vllm-0.33", "0.30.0", tmp_path)
    c = doc["counterexample"]
    assert (c["twin_hit_tokens"], c["twin_dense_hit_tokens"]) == (16, 36)
    out = {v: replay(python(v), "hit-preservation-neighbours", "--cex", str(f))
           for v in ("0.30.0", "0.33.0")}
    for o in out.values():
        assert o["on_vllm"] == o["kvreach"], o
    old, new = out["0.30.0"]["on_vllm"], out["0.33.0"]["on_vllm"]
    assert (old["hit_tokens"], old["dense_hit_tokens"]) == (16, 36)
    assert c["chunk"] not in {ch for s in old["stored_swa_chunks"] for ch in s}
    assert out["0.33.0"]["max_load_tokens"] == 0
    assert (new["hit_tokens"], new["dense_hit_tokens"]) == (0, 0)


def _restart_figures(out: dict) -> tuple:
    lookups_agree(out)
    assert out["offered_again"] == out["twin_offered_again"], out
    assert [s["swa_chunks"] for s in out["steps"] if s["swa_chunks"]] == [
        s["swa_chunks"] for s in out["twin_steps"] if s["swa_chunks"]], out
    return out["lookups"][-1]["hit_tokens"], out["offered_again"]


def test_exactly_once_restarts_of_0_29_0_submits_twice_through_a_loaded_start(python, tmp_path):
    """exactly-once-restarts (rule vllm-0.29, vLLM 0.29.0): prefill 1000
    tokens (cursor 250), preemption, a start loading 576 tokens (16 of the
    lookup's 36-token full-attention chunks; the search asks for whole
    ones), the rest of the prompt, finish, on 0.29.0's own scheduler: hit
    576, cursor 144, and the prefill submits the decoded chunks (149-152,
    158-161, ..., 248-249) a second time. Without the load 0.29.0 submits
    nothing twice (the cursor is kept), where 0.33.0 (cursor reset on
    lookup) submits the 110 chunks of the first prefill again; the loaded
    start in the preemption's own step trips 0.29.0's
    ``build_connector_meta`` assertion."""
    doc, f = counterexample_at("exactly-once-restarts", "vllm-0.29", "0.29.0", tmp_path)
    c = doc["counterexample"]
    assert [s["kind"] for s in c["plan"]] == ["prefill", "preempt", "loaded", "prefill", "finish"]
    assert c["plan"][2]["scheduled_tokens"] == 576 and len(c["replayed_violation"]) == 46
    py = python("0.29.0")
    out = replay(py, "exactly-once-restarts", "--cex", str(f))
    assert (out["vllm"], out["rule"], out["load_chunks"]) == ("0.29.0", "vllm-0.29", 16)
    assert out["cursor_before_preemption"] == [27, 250]
    hit, again = _restart_figures(out)
    assert hit == 576 and again == c["replayed_violation"]
    assert set(again) <= set(out["steps"][0]["swa_chunks"])
    none = replay(py, "exactly-once-restarts", "--cex", str(f), "--load-chunks", "0")
    assert _restart_figures(none) == (0, [])
    reset = replay(python("0.33.0"), "exactly-once-restarts", "--cex", str(f), "--load-chunks", "0")
    hit, again = _restart_figures(reset)
    assert hit == 0 and again == reset["steps"][0]["swa_chunks"] and len(again) == 110
    same = replay(py, "exactly-once-restarts", "--cex", str(f), "--same-step")
    assert same["same_step_error"].startswith("AssertionError"), same
    assert "build_connector_meta" in same["same_step_error"]


def test_exactly_once_restarts_of_0_30_0_submits_twice_through_a_loaded_start(python, tmp_path):
    """exactly-once-restarts (rule vllm-0.33, vLLM 0.30.0/0.31.0/0.32.0) on
    0.30.0's and 0.32.0's own scheduler (0.32.0: the 0.31.0/0.32.0
    record): the decoded start loads 972 tokens (27 full-attention chunks);
    the manager holding what the first prefill stored gives hit 972, cursor
    243, and the recompute submits chunks 248 and 249 again, as decoded.
    Without the load nothing is submitted
    twice; the same-step start trips the assertion 0.33.0 removed, and
    0.33.0 runs it, submitting 248 and 249 again too."""
    doc, f = counterexample_at("exactly-once-restarts", "vllm-0.33", "0.30.0", tmp_path)
    c = doc["counterexample"]
    assert doc["vllm"] == "0.30.0/0.31.0/0.32.0"
    assert c["plan"][2]["scheduled_tokens"] == 972 and c["replayed_violation"] == [248, 249]
    for v, record in (("0.30.0", "0.30.0"), ("0.32.0", "0.31.0/0.32.0")):
        py = python(v)
        out = replay(py, "exactly-once-restarts", "--cex", str(f))
        assert (out["vllm"], out["record"], out["rule"], out["load_chunks"]) == (
            v, record, "vllm-0.33", 27)
        assert _restart_figures(out) == (972, [248, 249])
        none = replay(py, "exactly-once-restarts", "--cex", str(f), "--load-chunks", "0")
        assert _restart_figures(none) == (0, [])
        same = replay(py, "exactly-once-restarts", "--cex", str(f), "--same-step")
        assert same["same_step_error"].startswith("AssertionError"), same
        assert "build_connector_meta" in same["same_step_error"]
    new = replay(python("0.33.0"), "exactly-once-restarts", "--cex", str(f), "--same-step")
    assert "same_step_error" not in new and _restart_figures(new) == (972, [248, 249])


def _cases():
    from kvreach.proofs.scenarios import FINDINGS
    for f in FINDINGS:
        for r in f.release_replays:
            for o in r.outcomes:
                for v in o.releases:
                    yield pytest.param(f.finding, r, o, v, id=f"{f.finding}-{r.case}-{v}")


@pytest.mark.parametrize("finding,r,o,version", list(_cases()))
def test_finding_record_replays_on_the_release(python, tmp_path, finding, r, o, version):
    """Every finding record's release replay (proofs/scenarios.py), on each
    release its outcome names, prints that outcome."""
    args = list(r.args)
    if r.cex:
        obligation, rule, vllm = r.cex
        if vllm is None:
            doc = counterexample(obligation, rule)
            f = tmp_path / "cex.json"
            f.write_text(json.dumps(doc))
        else:
            _, f = counterexample_at(obligation, rule, vllm, tmp_path)
        args = ["--cex", str(f), *args]
    out = replay(python(version), r.case, *args)
    assert out["vllm"] == version, (finding, out)
    if o.hit_tokens is not None or o.loaded_miss is not None:
        lookup = only_lookup(out)
        if o.hit_tokens is not None:
            assert lookup["hit_tokens"] == o.hit_tokens, (finding, out)
        if o.loaded_miss is not None:
            assert [tuple(p) for p in lookup["loaded_miss"]] == list(o.loaded_miss), (finding, out)
    if o.cpu_manager_load is not None:
        got = out["cpu_manager_load"]
        assert len(got) == len(o.cpu_manager_load), (finding, out)
        assert all(g.startswith(w) for g, w in zip(got, o.cpu_manager_load)), (finding, out)
    if o.same_step_error == "":
        assert "same_step_error" not in out, (finding, out)
    elif o.same_step_error is not None:
        prefix, where = o.same_step_error
        assert out["same_step_error"].startswith(prefix) and where in out["same_step_error"], (
            finding, out)
