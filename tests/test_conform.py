"""``kvreach conform``, the function layer: a release's own code equals its
record; a planted semantic change (one chunk more in the lookup window) is a
difference with the input it shows; a planted pure refactor (a renamed
helper, a new keyword argument with a default, a function moved to another
module) is not; a role the tree's code cannot run with the stubs is "cannot
check", never "differs"; every checked part of a record is caught when
flipped; bad input is one line.

Trees: the installed vLLM's sources, or a release's sources from the
project's own cached fetch (``tests/vllm_releases.py``), copied and planted."""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
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
CASES = 300


def _installed_root() -> Path:
    # find_spec, not importorskip: conform reads vLLM's sources and never imports it
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm is not installed (pip install kvreach[vllm])")
    tree = cf.Tree.installed()
    return Path(tree.label.split("(", 1)[1].rstrip(")")).parent


def installed_version() -> str:
    return importlib.metadata.version("vllm").split("+")[0]


def record_of(version: str) -> R.Release | None:
    try:
        return R.release(version)
    except ValueError:
        return None


def copy_tree(root: Path, dest: Path) -> Path:
    """The files conform reads (the three files and the offloading package)."""
    files = cf.Tree._from_dir(root, "copy").files
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / f, dest / f)
    return dest


def _roles(v: cf.Verdict) -> dict[str, list[str]]:
    return {name: [d.role for d in ds] for name, ds in v.differences.items()}


@pytest.fixture(scope="module")
def pristine():
    root = _installed_root()
    return root, cf.conform(cf.Tree.installed(), CASES)


@pytest.mark.vllm
def test_installed_vllm_is_its_record_or_cannot_decide(pristine):
    """The installed release equals its record when every role runs on its
    code; a role that cannot run makes it "cannot decide" (exit 2) with what
    the role now reads, and no checked role differs from the release's record
    (or, before that record exists, from the previous one)."""
    _, v = pristine
    r = record_of(installed_version())
    assert v.outcome != cf.DIFFERS, cf.render(v)
    if not v.unchecked:
        assert v.equal == r
        return
    assert v.outcome == cf.UNDECIDED and v.exit_code == 2
    for u in v.unchecked:
        assert u.why.startswith(("it now reads", "its signature changed", "it now returns",
                                 "it now calls", "the tree has no")), u
    assert (r or R.RELEASES[-1]) in v.candidates
    out = runner.invoke(app, ["conform", "--cases", "50", "--function-only"])
    assert out.exit_code == 2, out.output
    assert "cannot check role" in out.output and "differs in" not in out.output.split("cannot check")[0]


@pytest.mark.vllm
def test_release_0_33_0_sources_equal_its_record():
    """0.33.0's own sources (the project's cached fetch): every role runs
    and it equals the 0.33.0 record."""
    import vllm_releases

    v = cf.conform(cf.Tree.source(vllm_releases.source("0.33.0")), CASES)
    assert not v.unchecked, cf.render(v)
    assert v.equal == R.V0_33_0 and v.exit_code == 0
    assert _roles(v)["0.31.0/0.32.0"] == ["store step", "cursor on lookup"]


def _plant(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) >= 1, (path, old)
    path.write_text(text.replace(old, new))


@pytest.mark.vllm
def test_a_planted_change_to_the_lookup_window_differs(tmp_path, pristine):
    """One ``- 1`` removed from ``get_sliding_window_size_in_chunks`` (one
    chunk more in the lookup window for some inputs): every record differs,
    exit 1, and the window role's first differing input is printed with
    both values."""
    root, _ = pristine
    tree = copy_tree(root, tmp_path / "branch")
    _plant(tree / cf.CONFIG_FILE, _WINDOW_LINE, _WINDOW_LINE.replace(" - 1", ""))
    v = cf.conform(cf.Tree.source(tree), CASES)
    assert v.outcome == cf.DIFFERS and v.exit_code == 1
    r = runner.invoke(app, ["conform", "--vllm-src", str(tree), "--cases", str(CASES),
                            "--function-only"])
    assert r.exit_code == 1, r.output
    assert "differs from every record; nearest " in r.output
    lines = r.output.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("  window [lookup_window_extra] at case"))
    assert "W=" in lines[i] and "extra=" in lines[i]
    near = v.nearest.name
    assert lines[i + 1].strip().startswith("tree -> ") and f", {near} -> " in lines[i + 1]
    tree_v, rec_v = (int(s.rsplit("-> ", 1)[1]) for s in lines[i + 1].split(f", {near}"))
    assert tree_v == rec_v + 1


def _add_keyword(src: str, names: set[str]) -> str:
    """Each def in ``names`` gets a new keyword-only argument with a default."""
    mod = ast.parse(src)
    hit = set()
    for node in ast.walk(mod):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.args.kwonlyargs.append(ast.arg("trace_id", None))
            node.args.kw_defaults.append(ast.Constant(None))
            hit.add(node.name)
    assert hit == names, names - hit
    return ast.unparse(mod)


def _move(root: Path, f: str, name: str, new_module: str) -> None:
    """Move the module-level def ``name`` from ``f`` into ``new_module`` of
    the same package (with ``f``'s imports); ``f`` imports it from there."""
    path = root / f
    mod = ast.parse(path.read_text())
    node = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == name)
    imports = [n for n in mod.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    at = mod.body.index(node)
    pkg = f.rsplit("/", 1)[0].replace("/", ".")
    mod.body[at] = ast.ImportFrom(f"{pkg}.{new_module}", [ast.alias(name)], 0)
    path.write_text(ast.unparse(mod))
    (path.parent / f"{new_module}.py").write_text(ast.unparse(ast.Module([*imports, node], [])))


REFACTORS = ("renamed helper", "new keyword argument", "moved function")


@pytest.mark.vllm
@pytest.mark.parametrize("refactor", REFACTORS)
def test_a_planted_refactor_is_not_a_difference(tmp_path, pristine, refactor):
    """The same tree refactored: the same records differ in the same roles,
    the outcome is not "differs", and no role is lost except one whose very
    name the refactor changed (reported as not found)."""
    root, before = pristine
    tree = copy_tree(root, tmp_path / "refactored")
    sched = tree / cf.SCHEDULER_FILE
    lost: set[str] = set()
    if refactor == "renamed helper":
        _plant(sched, "_maximal_prefix_lookup", "_longest_prefix_lookup")
        lost = {"prefix scan"}
    elif refactor == "new keyword argument":
        sched.write_text(_add_keyword(sched.read_text(), {
            "_sliding_window_lookup", "_maximal_prefix_lookup", "storable_chunks"}))
        (tree / cf.MANAGER_FILE).write_text(_add_keyword((tree / cf.MANAGER_FILE).read_text(),
                                                     {"reachable_block_mask"}))
    else:
        f = before.where["window"].split(":")[0]
        _move(tree, f, "get_sliding_window_size_in_chunks", "window_size")
    after = cf.conform(cf.Tree.source(tree), CASES)
    assert _roles(after) == _roles(before), cf.render(after)
    assert after.outcome != cf.DIFFERS
    assert [c.name for c in after.candidates] == [c.name for c in before.candidates]
    assert {u.role for u in after.unchecked} == {u.role for u in before.unchecked} | lost
    for u in after.unchecked:
        if u.role in lost:
            assert "_maximal_prefix_lookup" in u.why and "the tree has no" in u.why
    if refactor == "moved function":
        assert after.where["window"].endswith("offloading/window_size.py:get_sliding_window_size_in_chunks")
    if refactor == "renamed helper":
        # the lookup calls the renamed helper through its class: still run
        # wherever it ran before
        assert ("lookup" in {u.role for u in before.unchecked}) == (
            "lookup" in {u.role for u in after.unchecked})


def test_a_role_the_stubs_cannot_run_is_cannot_check_not_differs(tmp_path):
    """A padded-window method that now reads a new attribute of the spec
    and a store-rule function with a new required parameter: both roles are
    "cannot check" with what they now read, and no record differs."""
    sched = tmp_path / cf.SCHEDULER_FILE
    sched.parent.mkdir(parents=True)
    sched.write_text(
        "def get_sliding_window_size_in_chunks(kv_cache_spec, tokens_per_chunk):\n"
        "    return -(-kv_cache_spec.sliding_window // tokens_per_chunk)\n"
        "class GroupOffloadConfig:\n"
        "    def load_window_size_in_chunks(self, num_tokens):\n"
        "        return self.kv_cache_spec.window_in_tokens\n"
        "def is_store_reachable_swa_chunk(chunk_idx, num_chunks, acc, w, eagle, new_flag):\n"
        "    return True\n")
    v = cf.conform(cf.Tree.source(tmp_path), 5)
    whys = {u.role: u.why for u in v.unchecked}
    assert whys["load window"] == "it now reads SlidingWindowSpec.window_in_tokens"
    assert whys["store rule"].startswith("its signature changed (") and "new_flag" in whys["store rule"]
    assert "window" not in whys  # it ran
    assert v.candidates and v.outcome == cf.UNDECIDED and v.exit_code == 2, cf.render(v)


_ALT = {"store_rule": ("vllm-0.29", "vllm-0.33"),
        "null_block_filter": ("last block", "every reachable block"),
        "cursor_on_lookup": ("kept", "reset to 0"), "pending": ("any scanned", "in the run"),
        "eagle_widening": ("SWA groups", "every group")}


def flipped(r: R.Release):
    """(part, a record equal to ``r`` but for that part) for every part a
    role checks (``mask_window_extra`` has no meaning for the pre-fix rule;
    the window's module is where a function lives, a refactor, not a part
    a role checks)."""
    for k, v in r.parts().items():
        if k in cf.UNCHECKED or (k == "mask_window_extra" and r.store_rule == "vllm-0.29"):
            continue
        new = (not v) if isinstance(v, bool) else next(a for a in _ALT[k] if a != v)
        yield k, dataclasses.replace(r, names=("flipped",), **{k: new})


def assert_every_part_caught(tree: cf.Tree, r: R.Release, cases: int = 300) -> None:
    """``r`` equals the tree, and each record with one part flipped does not
    (one run: the tree's values are computed once for all records)."""
    flips = [dataclasses.replace(m, names=(f"flipped {k}",)) for k, m in flipped(r)]
    assert len(flips) >= 13, [m.name for m in flips]
    v = cf.conform(tree, cases, records=(r, *flips))
    assert not v.differences[r.name], cf.render(v)
    missed = [m.name for m in flips if not v.differences[m.name]]
    assert not missed, f"{tree.label}: {missed} of {r.name} go unnoticed"


@pytest.mark.vllm
def test_every_checked_part_of_the_0_33_0_record_is_caught_when_flipped():
    import vllm_releases

    assert_every_part_caught(cf.Tree.source(vllm_releases.source("0.33.0")), R.V0_33_0)


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


def test_a_tree_without_the_functions_cannot_decide(tmp_path):
    """A scheduler.py with none of the functions: every role cannot be
    checked (not found), exit 2, no record named."""
    sched = tmp_path / cf.SCHEDULER_FILE
    sched.parent.mkdir(parents=True)
    sched.write_text("def unrelated():\n    return 1\n")
    r = runner.invoke(app, ["conform", "--vllm-src", str(tmp_path), "--cases", "5",
                            "--function-only"])
    assert r.exit_code == 2, r.output
    assert "cannot decide" in r.output and "the tree has no" in r.output
    assert "equals" not in r.output.splitlines()[-1]


@pytest.mark.vllm
def test_the_switches_are_read_from_the_tree(tmp_path):
    """Lookahead block hashes are reachable under the offloading connector
    exactly when the scheduler reads them, the connector supports them and
    the config consults the connector (0.34.0 on), never on 0.33.0; a copy of
    the installed tree whose connector says False is not; the retention and
    extra_retained_tokens defaults are the trees' (0 and 0)."""
    import vllm_releases
    from kvreach.conform import switches

    s33 = switches.read(cf.Tree.source(vllm_releases.source("0.33.0")))
    assert not s33.lookahead_reachable and not s33.scheduler_reads_lookahead
    assert (s33.retention_default, s33.extra_retained_default) == (0, 0)
    root = _installed_root()
    here = switches.read(cf.Tree.installed())
    assert here.lookahead_reachable == (tuple(map(int, installed_version().split(".")[:2])) >= (0, 34))
    if here.lookahead_reachable:
        tree = copy_tree(root, tmp_path / "no-lookahead")
        for f in ("vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py",):
            (tree / f).parent.mkdir(parents=True, exist_ok=True)
            text = (root / f).read_text()
            i = text.index("def supports_lookahead_block_hashes")
            j = text.index("return True", i)
            (tree / f).write_text(text[:j] + "return False" + text[j + len("return True"):])
        off = switches.read(cf.Tree.source(tree))
        assert off.connector_supports_lookahead is False and not off.lookahead_reachable
        assert "the connector does not support it" in off.lines()[0]
