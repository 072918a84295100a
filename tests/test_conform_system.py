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
    mgr = tree / cf._MANAGER
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
    sched = tree / cf._SCHED
    sched.write_text(sched.read_text().replace("_maximal_prefix_lookup", "_longest_prefix_lookup"))
    sched.write_text(_add_keyword(sched.read_text(), {"_sliding_window_lookup", "storable_chunks"}))
    (tree / cf._MANAGER).write_text(_add_keyword((tree / cf._MANAGER).read_text(),
                                                 {"reachable_block_mask"}))
    _move(tree, cf._CONFIG, "get_sliding_window_size_in_chunks", "window_size")
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
    sched = tree / cf._SCHED
    sched.write_text(sched.read_text().replace("_maximal_prefix_lookup", "_longest_prefix_lookup"))
    sched.write_text(_add_keyword(sched.read_text(), {"_sliding_window_lookup"}))
    (tree / cf._MANAGER).write_text(_add_keyword((tree / cf._MANAGER).read_text(),
                                                 {"reachable_block_mask"}))
    _move(tree, cf._CONFIG, "get_sliding_window_size_in_chunks", "window_size")
    fv, sv = _run(tree)
    assert sv.data["vllm"] == "0.34.0"
    assert sv.agree == ["0.34.0"], sv.data["first"]
    assert not fv.differences.get("0.34.0")
    lines, code = combine(fv, sv)
    assert code == 0 and lines[-1] == "equals 0.34.0", lines
