"""``kvreach conform``'s system layer: the real ``Scheduler`` and stock
``OffloadingConnector`` of a vLLM tree (here 0.33.0's sources, from the
project's cached fetch ``tests/vllm_releases.py``, laid over the installed
vLLM) over hypothesis-drawn lifecycles, compared with every record's twin.

- 0.33.0's own code agrees with the 0.33.0 record and no other; the function
  layer names the same record (where both run they agree), and so does the
  combined verdict (exit 0);
- a planted semantic change (one block fewer in each segment tail of
  ``SlidingWindowManager.reachable_block_mask``) differs from every record,
  with a shrunk trace and the record part it is nearest to (exit 1); the
  function layer differs too;
- a planted pure refactor (a renamed helper, new keyword arguments with
  defaults, a function moved to another module) still equals 0.33.0;
- the same two plantings in a copy of 0.34.0 (the current release, whose
  function layer cannot run five roles): the mask change differs with a
  shrunk trace, the refactor still equals 0.34.0.

Each run starts one python over the overlaid tree (about 20 s to import
vLLM) and drives 25 cases; the planted ones are marked slow."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvreach import conform as cf
from kvreach.conform import system
from kvreach.conform.combined import combine
from test_conform import _add_keyword, _move, installed_version, record_of
import vllm_releases

pytestmark = pytest.mark.vllm
CASES = 60  # the CLI default: enough cases that 0.33.0 and 0.34.0 differ on one (seed 0)
_MASK_LINE = "(i - shift) % per_segment >= per_segment - need"


def _need_vllm():
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (pip install kvreach[vllm])")


@pytest.fixture(scope="module")
def src033() -> Path:
    _need_vllm()
    return vllm_releases.source("0.33.0")


def _copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src / "vllm", dest / "vllm")
    return dest


def _run(tree: Path) -> tuple[cf.Verdict, system.SystemVerdict]:
    fv = cf.conform(cf.Tree.source(tree), 300)
    sv = system.run_system(tree, CASES, 0)
    assert sv.data is not None, sv.missing
    assert sv.data["ran"] >= CASES * 3 // 4, sv.data
    return fv, sv


def test_0_33_0_equals_its_record_and_the_layers_agree(src033):
    fv, sv = _run(src033)
    assert sv.data["vllm"] == "0.33.0"
    assert sv.agree == ["0.33.0"], sv.data["first"]
    assert fv.equal is not None and fv.equal.name == "0.33.0"  # the function layer agrees
    # every other record differs on some case: the run can tell them apart
    assert all(n > 0 for name, n in sv.data["differing"].items() if name != "0.33.0")
    lines, code = combine(fv, sv)
    assert code == 0 and lines[-1] == "equals 0.33.0", lines


def _planted_mask_change(src: Path, tmp_path: Path) -> Path:
    """A copy of ``src`` whose ``reachable_block_mask`` keeps one block fewer
    in each segment tail (a semantic change of one block)."""
    tree = _copy(src, tmp_path / "planted")
    mgr = tree / cf.MANAGER_FILE
    text = mgr.read_text()
    assert text.count(_MASK_LINE) == 1
    mgr.write_text(text.replace(_MASK_LINE, _MASK_LINE + " + 1"))
    return tree


@pytest.mark.slow
def test_a_planted_mask_change_is_a_shrunk_difference(src033, tmp_path):
    fv, sv = _run(_planted_mask_change(src033, tmp_path))
    assert sv.agree == [], sv.data["differing"]
    sh = sv.data["shrunk"]
    assert sh["mismatch"]["what"] == "stores", sh
    assert sh["case"]["prompt"] <= 240
    lines, code = combine(fv, sv)
    assert code == 1, lines
    assert lines[-1].startswith("differs from every record; nearest ")
    assert any(line.startswith("  case: ") for line in lines)
    assert any("explained by the record part(s)" in line for line in lines)
    # the function layer sees it as well, in the store roles
    assert fv.outcome == cf.DIFFERS
    assert {"store rule", "store step"} & {d.role for d in fv.differences["0.33.0"]}


@pytest.mark.slow
def test_a_planted_refactor_still_equals_its_record(src033, tmp_path):
    tree = _copy(src033, tmp_path / "refactored")
    sched = tree / cf.SCHEDULER_FILE
    sched.write_text(sched.read_text().replace("_maximal_prefix_lookup", "_longest_prefix_lookup"))
    sched.write_text(_add_keyword(sched.read_text(), {"_sliding_window_lookup", "storable_chunks"}))
    (tree / cf.MANAGER_FILE).write_text(_add_keyword((tree / cf.MANAGER_FILE).read_text(),
                                                 {"reachable_block_mask"}))
    _move(tree, cf.CONFIG_FILE, "get_sliding_window_size_in_chunks", "window_size")
    fv, sv = _run(tree)
    assert sv.agree == ["0.33.0"], sv.data["first"]
    assert not fv.differences["0.33.0"]
    assert {u.role for u in fv.unchecked} == {"prefix scan"}  # renamed: not found
    lines, code = combine(fv, sv)
    assert code == 0 and lines[-1] == "equals 0.33.0", lines


def test_the_installed_release_equals_its_record():
    _need_vllm()
    r = record_of(installed_version())
    if r is None:
        pytest.skip(f"kvreach.releases.RELEASES has no record of the installed vLLM "
                    f"{installed_version()}: the system layer can only report which records "
                    "differ (tests above use 0.33.0's sources)")
    sv = system.run_system(None, CASES, 0)
    assert sv.data is not None, sv.missing
    assert sv.agree == [r.name], (sv.data["differing"], sv.data.get("shrunk"))


# The same two plantings in a copy of 0.34.0, the current release, whose
# function layer cannot run five roles (the system layer decides alone).


@pytest.fixture(scope="module")
def src034() -> Path:
    _need_vllm()
    return vllm_releases.source("0.34.0")


@pytest.mark.slow
def test_a_planted_mask_change_in_0_34_0_is_a_shrunk_difference(src034, tmp_path):
    fv, sv = _run(_planted_mask_change(src034, tmp_path))
    assert sv.data["vllm"] == "0.34.0"
    assert sv.agree == [], sv.data["differing"]
    assert sv.data["shrunk"]["mismatch"]["what"] == "stores", sv.data["shrunk"]
    lines, code = combine(fv, sv)
    assert code == 1, lines
    assert lines[-1].startswith("differs from every record; nearest ")
    assert any(line.startswith("  case: ") for line in lines)


@pytest.mark.slow
def test_a_planted_refactor_of_0_34_0_still_equals_its_record(src034, tmp_path):
    tree = _copy(src034, tmp_path / "refactored")
    sched = tree / cf.SCHEDULER_FILE
    sched.write_text(sched.read_text().replace("_maximal_prefix_lookup", "_longest_prefix_lookup"))
    sched.write_text(_add_keyword(sched.read_text(), {"_sliding_window_lookup"}))
    (tree / cf.MANAGER_FILE).write_text(_add_keyword((tree / cf.MANAGER_FILE).read_text(),
                                                 {"reachable_block_mask"}))
    _move(tree, cf.CONFIG_FILE, "get_sliding_window_size_in_chunks", "window_size")
    fv, sv = _run(tree)
    assert sv.data["vllm"] == "0.34.0"
    assert sv.agree == ["0.34.0"], sv.data["first"]
    assert not fv.differences.get("0.34.0")
    lines, code = combine(fv, sv)
    assert code == 0 and lines[-1] == "equals 0.34.0", lines


# kvreach's lookup-window patch on 0.34.0, a 0.34.0 without the shared-prefix
# junction, and failed transfers: the sources from 0.34.0's sdist, fetched
# once into the user's cache by the project's own kvreach.vllm_sdist.

_PATCH_034 = Path(__file__).resolve().parents[1] / "docs" / "upstream" / "lookup-window-0.34.0.patch"
_TEST_FILE = "tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py"
_JUNCTION_GUARD = ("        if self.config.retention_interval is None:\n            return\n"
                   "        if boundary <= req_status.num_locally_computed_tokens + num_hit_tokens:")


@pytest.fixture(scope="module")
def sdist034() -> Path:
    _need_vllm()
    from kvreach import vllm_sdist

    return vllm_sdist.tree("0.34.0")


def _sdist_copy(src: Path, dest: Path) -> Path:
    shutil.copytree(src / "vllm", dest / "vllm")
    (dest / _TEST_FILE).parent.mkdir(parents=True)
    shutil.copy2(src / _TEST_FILE, dest / _TEST_FILE)
    return dest


@pytest.mark.slow
def test_the_patched_0_34_0_equals_lookup_window(sdist034, tmp_path):
    """The upstream patch applied with ``patch -p1`` to 0.34.0's sdist: both
    layers name kvreach's lookup-window record (not "differs"), and no other."""
    import subprocess

    from typer.testing import CliRunner

    from kvreach.cli import app

    if shutil.which("patch") is None:
        pytest.skip("no `patch` program on this machine")
    tree = _sdist_copy(sdist034, tmp_path / "patched")
    p = subprocess.run(["patch", "-p1", "--batch", "--forward", "-i", str(_PATCH_034)],
                       cwd=tree, capture_output=True, text=True)
    assert p.returncode == 0 and "fuzz" not in p.stdout and "offset" not in p.stdout, p.stdout
    r = CliRunner().invoke(app, ["conform", "--vllm-src", str(tree), "--cases", "300"])
    lines = r.output.strip().splitlines()
    assert r.exit_code == 0 and lines[-1] == "equals lookup-window", r.output
    assert "  lookup-window: agrees on every case" in lines
    assert any(ln.startswith("  0.34.0: differs on ") for ln in lines), r.output
    # the function layer's store rule runs the patched mask and narrows too
    assert "  lookup-window: no checked role differs" in lines
    assert "  0.34.0: differs in 1: store rule" in lines


@pytest.mark.slow
def test_a_0_34_0_without_the_junction_is_explained_by_junction_on_lookup(sdist034, tmp_path):
    tree = _sdist_copy(sdist034, tmp_path / "no-junction")
    sched = tree / cf.SCHEDULER_FILE
    text = sched.read_text()
    assert text.count(_JUNCTION_GUARD) == 1
    sched.write_text(text.replace(_JUNCTION_GUARD, _JUNCTION_GUARD.replace(
        "if self.config.retention_interval is None:", "if True:  # planted: no junction")))
    sv = system.run_system(tree, 20, 0)
    assert sv.data is not None, sv.missing
    assert sv.agree == [] and sv.data["nearest"] == "0.34.0", sv.data["differing"]
    sh = sv.data["shrunk"]
    assert sh["mismatch"]["what"] == "junction", sh
    assert "junction_on_lookup=False (the record has True)" in sh["explained_by"], sh


def test_failed_transfers_follow_the_record():
    """On the installed vLLM, if its worker can report a failed transfer
    (0.34.0): a failed store is completed with success=False, a failed load
    (recompute policy) makes the request's next lookup 0; 0.34.0's record
    agrees, the same record without ``failed_transfers`` differs on each and
    the explaining part is ``failed_transfers``."""
    import dataclasses
    import tempfile

    _need_vllm()
    from kvreach.conform.system import Case, explain, explaining_parts
    from kvreach.releases import V0_34_0
    from kvreach.vllm_harness import conform_run
    from kvreach.vllm_harness.cpu_shims import hybrid_kv_cache_shim, write_offline_model

    if not conform_run.failures_settable():
        pytest.skip("the installed vLLM's worker cannot report a failed transfer (before 0.34.0)")
    base = Case(4, 4, 8, 0, False, 1, None, 32, 64, 0, "finish", 0, False, True, 32, None,
                None, 0)
    without = dataclasses.replace(V0_34_0, failed_transfers=False)
    with tempfile.TemporaryDirectory() as d, hybrid_kv_cache_shim():
        model_dir = write_offline_model(d)
        store = conform_run.run_case(dataclasses.replace(base, fail_store=0), model_dir)
        load = conform_run.run_case(dataclasses.replace(base, fail_load=True, recompute=True),
                                    model_dir)
    assert store.error is None and load.error is None
    done = [e for e in store.events if e["kind"] == "store completed" and e["failed_job"]]
    assert len(done) == 1 and done[0]["success"] is False
    later = [e["hit_tokens"] for e in load.events if e["kind"] == "lookup" and e["req"] == "later"]
    assert later[0] > 0 and later[1:] == [0], later
    for t, what in ((store, "store completion"), (load, "lookup hit")):
        assert explain(t, V0_34_0) is None
        m = explain(t, without)
        assert m is not None and m.what == what, m
        assert explaining_parts(t, without) == ["failed_transfers=True (the record has False)"]
