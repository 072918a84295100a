"""``kvreach conform``: the installed vLLM is 0.33.0's record, a planted change
to one extracted function is reported with the input it differs on, every
checked part of a record is caught when flipped, and bad input is one line."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvreach import conform as cf
from kvreach import releases as R
from kvreach.cli import app

runner = CliRunner()

_WINDOW_LINE = "kv_cache_spec.sliding_window - 1 + kv_cache_spec.extra_retained_tokens"


def _installed_root() -> Path:
    # find_spec, not importorskip: conform reads vLLM's sources and never imports it
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (pip install kvreach[vllm])")
    tree = cf.Tree.installed()
    return Path(tree.label.split("(", 1)[1].rstrip(")")).parent


def _copy_tree(root: Path, dest: Path) -> Path:
    for f in cf.FILES:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / f, dest / f)
    return dest


@pytest.mark.vllm
def test_installed_vllm_equals_the_0_33_0_record():
    _installed_root()
    r = runner.invoke(app, ["conform", "--cases", "500"])
    assert r.exit_code == 0, r.output
    assert "x 500 cases each" in r.output
    assert r.output.strip().splitlines()[-1] == "equals 0.33.0"
    assert "0.31.0/0.32.0: differs in 3: function window, store step, cursor on lookup" in r.output


@pytest.mark.vllm
def test_a_planted_change_to_the_window_function_differs(tmp_path):
    """One ``- 1`` removed from ``get_sliding_window_size_in_chunks``: no
    record matches, the nearest is 0.33.0, and the window role's first
    differing input is printed with both values."""
    tree = _copy_tree(_installed_root(), tmp_path / "branch")
    cfg = tree / cf._CONFIG
    text = cfg.read_text()
    assert text.count(_WINDOW_LINE) == 1
    cfg.write_text(text.replace(_WINDOW_LINE, _WINDOW_LINE.replace(" - 1", "")))
    r = runner.invoke(app, ["conform", "--vllm-src", str(tree), "--cases", "500"])
    assert r.exit_code == 1, r.output
    assert "equals no record; nearest 0.33.0, differs:" in r.output
    lines = r.output.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("  window [lookup_window_extra] at case"))
    assert "W=" in lines[i] and "extra=" in lines[i]
    assert lines[i + 1].strip().startswith("tree -> ") and ", 0.33.0 -> " in lines[i + 1]
    # the planted tree's window is one more than the record's on that input
    tree_v, rec_v = (int(s.rsplit("-> ", 1)[1]) for s in lines[i + 1].split(", 0.33.0"))
    assert tree_v == rec_v + 1


_ALT = {"store_rule": ("vllm-0.29", "vllm-0.33"),
        "null_block_filter": ("last block", "every reachable block"),
        "cursor_on_lookup": ("kept", "reset to 0"), "pending": ("any scanned", "in the run"),
        "eagle_widening": ("SWA groups", "every group")}


def flipped(r: R.Release):
    """(part, a record equal to ``r`` but for that part) for every part a
    role checks (``mask_window_extra`` has no meaning for the pre-fix rule)."""
    for k, v in r.parts().items():
        if k in cf.UNCHECKED or (k == "mask_window_extra" and r.store_rule == "vllm-0.29"):
            continue
        new = (not v) if isinstance(v, bool) else next(a for a in _ALT[k] if a != v)
        yield k, dataclasses.replace(r, names=("flipped",), **{k: new})
    other = R._CONFIG if r.window_module == R._SCHED else R._SCHED
    yield "window_module", dataclasses.replace(r, names=("flipped",), window_module=other)


def assert_every_part_caught(tree: cf.Tree, r: R.Release, cases: int = 300) -> None:
    """``r`` equals the tree, and each record with one part flipped does not
    (one run: the tree's values are computed once for all records)."""
    flips = [dataclasses.replace(m, names=(f"flipped {k}",)) for k, m in flipped(r)]
    assert len(flips) >= 13
    v = cf.conform(tree, cases, records=(r, *flips))
    assert not v.differences[r.name], cf.render(v)
    missed = [m.name for m in flips if not v.differences[m.name]]
    assert not missed, f"{tree.label}: {missed} of {r.name} go unnoticed"


@pytest.mark.vllm
def test_every_checked_part_of_the_0_33_0_record_is_caught_when_flipped():
    _installed_root()
    assert_every_part_caught(cf.Tree.installed(), R.V0_33_0)


def test_bad_input_is_one_line(tmp_path):
    for args, expected in (
        (["--vllm-src", str(tmp_path / "none")], "error: --vllm-src="),
        (["--vllm-src", str(tmp_path)], "expected a vLLM source directory (no vllm/"),
        (["--vllm-wheel", __file__], "error: --vllm-wheel="),
        (["--vllm-wheel", str(tmp_path / "x.whl")], "expected a vLLM wheel file"),
        (["--vllm-wheel", "a.whl", "--vllm-src", str(tmp_path)], "one tree at a time"),
        (["--cases", "0"], "error: --cases=0: expected an integer from 1 to 1,000,000"),
        (["--seed", "-1"], "error: --seed=-1: expected an integer from 0 to"),
    ):
        r = runner.invoke(app, ["conform", *args])
        assert r.exit_code == 2, (args, r.output)
        out = r.output.strip()
        assert len(out.splitlines()) == 1 and expected in out, (args, out)
        assert "Traceback" not in out


def test_a_tree_without_the_lookup_is_reported_not_crashed(tmp_path):
    """A scheduler.py with none of the functions: every role is missing,
    exit 1, no record."""
    sched = tmp_path / cf._SCHED
    sched.parent.mkdir(parents=True)
    sched.write_text("def unrelated():\n    return 1\n")
    r = runner.invoke(app, ["conform", "--vllm-src", str(tmp_path), "--cases", "5"])
    assert r.exit_code == 1, r.output
    assert "equals no record" in r.output and "missing" in r.output
