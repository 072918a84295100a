"""The upstream patches against their vLLM release's sdist
(docs/upstream/lookup-window-0.34.0.patch on 0.34.0, lookup-window.patch on
0.33.0): each applies cleanly (fast), and scripts/upstream_check.py's verdicts
on the patched 0.34.0 tree with vLLM's stock connector (slow: four runs of
vLLM's own scheduler tests, the F6 replays, the differential check, the
hashed-end horizon case, kvreach conform on the patched and stock trees).

The sdist comes from a cache (``$VLLM_SRC_CACHE`` or
``~/.cache/kvreach/vllm-sdist``) or is downloaded once into the user's cache
by the project's sdist fetch (``kvreach.vllm_sdist``, through
``upstream_check.sdist_archive``).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "upstream_check.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("upstream_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


upstream_check = _load_script()


@pytest.fixture(scope="module", params=sorted(upstream_check.PATCHES))
def release(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def sdist_tree(tmp_path_factory, release) -> Path:
    """The release's sdist, unpacked into a temporary folder."""
    if shutil.which("patch") is None:
        pytest.skip("no `patch` program on this machine")
    archive = upstream_check.sdist_archive(release)  # fetched once; a failed fetch fails
    return upstream_check.unpack(archive, tmp_path_factory.mktemp(f"sdist-{release}"))


def test_patch_applies_cleanly_to_the_sdist(sdist_tree, release):
    """``patch --dry-run`` on the pristine sdist: every hunk applies with no
    fuzz or offset, to exactly the two files the patch names."""
    r = upstream_check.apply_patch(sdist_tree, upstream_check.PATCHES[release], dry_run=True)
    assert r.returncode == 0, r.stdout + r.stderr
    checked = [ln.removeprefix("checking file ") for ln in r.stdout.splitlines()
               if ln.startswith("checking file ")]
    assert checked == list(upstream_check.PATCHED_FILES)
    assert "offset" not in r.stdout and "fuzz" not in r.stdout, r.stdout


def test_patch_does_not_apply_twice(sdist_tree, release, tmp_path):
    """The dry run can fail: on an already patched tree it refuses."""
    tree = tmp_path / "patched"
    for f in upstream_check.PATCHED_FILES:
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sdist_tree / f, tree / f)
    patch = upstream_check.PATCHES[release]
    assert upstream_check.apply_patch(tree, patch).returncode == 0
    assert upstream_check.apply_patch(tree, patch, dry_run=True).returncode != 0


def test_unknown_release_is_refused():
    r = subprocess.run([sys.executable, str(SCRIPT), "--vllm", "0.35.0"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --vllm=0.35.0: expected one of 0.34.0, 0.33.0"


@pytest.mark.slow
def test_upstream_check_verdicts(tmp_path):
    """scripts/upstream_check.py on the patched 0.34.0 tree (stock connector):
    only the tests pinning 0.34.0's stored sets differ, and they pass updated;
    every F6 counterexample gets the dense hit (and still loses it on stock);
    the patched mask equals lookup-window on every differential case; the
    hashed-end horizon chunk stock stores is not stored; kvreach conform names
    lookup-window on the patched tree and 0.34.0 on the stock one."""
    out = tmp_path / "verdicts.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--cases", "5000", "--json", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    v = json.loads(out.read_text())
    assert v["ok"]
    own = v["own_tests"]
    assert own["ok"]
    assert set(own["differ_stock_tests"]) == upstream_check.expected_stock_differences()
    assert own["new_tests"] and own["counts"]["patched"]["passed"] > 0
    for world in ("replays_patched", "replays_stock"):
        rows = v[world]["rows"]
        assert {r["obligation"] for r in rows} == {"hit-preservation",
                                                   "hit-preservation-neighbours"}
        assert all(r["ok"] for r in rows), rows
    assert all(r["hit"] == r["dense"] > 0 for r in v["replays_patched"]["rows"])
    assert all(r["hit"] < r["dense"] for r in v["replays_stock"]["rows"])
    assert v["diff_patched"]["first_difference"] is None
    assert v["diff_patched"]["compared"] > 0 and v["diff_patched"]["sparse"] > 0
    assert v["diff_stock"]["first_difference"] is not None
    h = v["horizon"]
    assert h["ok"] and 4 in h["stock"]["swa_stored"] and 4 not in h["patched"]["swa_stored"]
    c = v["conform"]  # kvreach conform names kvreach's rule on the patched tree
    assert c["ok"] and c["patched"]["last"] == "equals lookup-window" and c["patched"]["exit"] == 0
    assert c["stock"]["last"] == "equals 0.34.0" and c["stock"]["exit"] == 0
