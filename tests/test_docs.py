"""docs/ as one set that matches the code.

- index.md repeats the README's two setup commands verbatim;
- architecture.md's table names real things: each kvreach dotted name
  resolves (importlib + getattr, dataclass fields included), each obligation
  is in ``OBLIGATIONS`` and is exactly the set of obligations whose queries use
  the row's spec elements (recorded while the queries are built), each vLLM
  name resolves in the installed vLLM 0.33.0 (skipped without vllm), and each
  ``vllm 0.29.0:`` name is defined in vLLM 0.29.0's source (fetched once by
  the fixture ``src029``);
- the layering architecture.md describes holds: who imports whom, read from
  the source with ``ast`` (function-level imports included);
- every example in formulas.md (``>>>`` lines in ``python`` blocks) gives the
  printed value with kvreach.impl, and every mask / need / 0.29 decision the
  examples compute equals vLLM's own function on the same arguments;
- every relative link (and anchor) in docs/*.md and README.md resolves.
"""

from __future__ import annotations

import ast
import dataclasses
import doctest
import importlib
import os
import re
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# vLLM 0.29.0's source tree (the pre-fix rule): $KVREACH_VLLM029_SRC, else
# build/vllm-0.29.0 in this checkout (git-ignored), else the Python files of
# the 0.29.0 wheel, downloaded once into the cache (tests/vllm_releases.py).
SRC029 = Path(os.environ.get("KVREACH_VLLM029_SRC", ROOT / "build" / "vllm-0.29.0"))


@pytest.fixture(scope="module")
def src029() -> Path:
    if SRC029.is_dir():
        return SRC029
    import vllm_releases

    return vllm_releases.source("0.29.0")

# --- Markdown helpers ------------------------------------------------------

FENCE = re.compile(r"^(\s*)(```+|~~~+)(.*)$")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced code block, in order."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, body = m.group(2), m.group(3).strip(), []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i])
            i += 1
        out.append((info, "\n".join(body)))
        i += 1
    return out


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a '#' in a code block is no heading)."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(2)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            out.append(line)
    return out


def table(text: str, header: list[str]) -> list[list[str]]:
    """Rows (cells, stripped) of the first pipe table whose header is ``header``."""
    lines = prose_lines(text)
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells == header:
            rows = []
            for row in lines[i + 2:]:
                if not row.strip().startswith("|"):
                    break
                rows.append([c.strip() for c in row.strip().strip("|").split("|")])
            return rows
    raise AssertionError(f"no table with header {header}")


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# --- index.md ----------------------------------------------------------------


def test_index_repeats_the_readme_commands_verbatim():
    """The two set-up commands (the first two command blocks: proof run, then
    tests), then the "try this" block, in both."""
    readme = fenced_blocks((ROOT / "README.md").read_text(encoding="utf-8"))[:3]
    index = fenced_blocks((DOCS / "index.md").read_text(encoding="utf-8"))[:3]
    assert len(readme) == 3 and [b for _, b in index] == [b for _, b in readme]
    assert all(b.startswith("python3 -m venv .venv && ") for _, b in readme[:2])
    assert readme[0][1].rstrip().endswith("kvreach prove")
    assert readme[1][1].rstrip().endswith("python -m pytest -q")
    assert readme[2][1].startswith("$ kvreach lookup ")


@pytest.mark.parametrize("page", ["README.md", "docs/index.md"])
def test_try_this_block_prints_what_it_shows(page):
    """Each ``$ kvreach ...`` line of the page's "try this" block (its third,
    after the two set-up commands), run: every line the block shows under it
    is a line of its output (the block may leave lines out, never change one)."""
    import shlex

    from typer.testing import CliRunner

    from kvreach.cli import app

    (_, body), = fenced_blocks((ROOT / page).read_text(encoding="utf-8"))[2:3]
    runs: list[tuple[list[str], list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            runs.append((shlex.split(line[2:]), []))
        else:
            runs[-1][1].append(line)
    assert len(runs) == 2 and all(shown for _, shown in runs)
    for args, shown in runs:
        assert args[0] == "kvreach"
        r = CliRunner().invoke(app, args[1:])
        assert r.exit_code == 0, r.stderr
        out = r.stdout.splitlines()
        for line in shown:
            assert line in out, (args, line, out)


def test_index_links_every_page():
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = {Path(t.split("#")[0]).name for t in link_targets(text)}
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages <= linked, sorted(pages - linked)
    assert "img/pr54362-chunk-map.png" in link_targets(text)


# --- architecture.md: the table ------------------------------------------------

ARCH_HEADER = ["what", "vLLM function", "spec element", "impl function", "obligations"]


def arch_rows() -> list[list[str]]:
    rows = table((DOCS / "architecture.md").read_text(encoding="utf-8"), ARCH_HEADER)
    assert rows, "architecture.md: the table is empty"
    for r in rows:
        assert len(r) == len(ARCH_HEADER), r
    return rows


def resolve(dotted: str):
    """Import the longest module prefix of ``dotted`` and getattr the rest; a
    dataclass field without a default (no class attribute) counts."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        break
    else:
        raise AssertionError(f"{dotted}: no importable module prefix")
    for p in parts[i:]:
        if hasattr(obj, p):
            obj = getattr(obj, p)
        elif dataclasses.is_dataclass(obj) and p in {f.name for f in dataclasses.fields(obj)}:
            obj = dataclasses.fields(obj)[[f.name for f in dataclasses.fields(obj)].index(p)]
        else:
            raise AssertionError(f"{dotted}: {p!r} not found in {obj!r}")
    return obj


def test_arch_table_kvreach_names_resolve():
    for row in arch_rows():
        spec, impl = names(row[2]), names(row[3])
        assert all(n.startswith("kvreach.spec.") for n in spec), row
        assert all(n.startswith("kvreach.") and not n.startswith("kvreach.spec.")
                   for n in impl), row
        for n in spec + impl:
            resolve(n)


def spec_element_users() -> dict[str, set[str]]:
    """For every spec function, property or ``SymConfig`` attribute: the
    obligations whose queries use it, over every (rule, load model) row the
    runner checks (the induction step, the invariant's base case, the static
    queries). Recorded while the queries are built; no solver runs."""
    from kvreach.proofs import induction as O
    from kvreach.proofs.framework import Role
    from kvreach.proofs.obligations import OBLIGATIONS
    from kvreach.proofs.rows import ctx_for as _runner_ctx
    from kvreach.proofs.matrix import representative
    from kvreach.proofs.rows import rows_for
    from kvreach.spec.config import SymConfig

    users: dict[str, set[str]] = {}
    current: list[str] = []

    def note(name: str) -> None:
        users.setdefault(name, set()).add(current[0])

    def prof(frame, event, arg):
        mod = frame.f_globals.get("__name__", "")
        if event == "call" and mod.startswith("kvreach.spec."):
            note(f"{mod}.{frame.f_code.co_qualname}")

    orig = SymConfig.__getattribute__

    def getattribute(self, attr):
        if not attr.startswith("__"):
            note(f"kvreach.spec.config.SymConfig.{attr}")
        return orig(self, attr)

    SymConfig.__getattribute__ = getattribute
    sys.setprofile(prof)
    try:
        for name, rule, model, vllm in rows_for(None, None, None):
            ob = OBLIGATIONS[name]

            def _ctx(rule, model):  # the runner's context for the obligation's rows
                return _runner_ctx(rule, model, lookup_variant=ob.lookup_variant,
                                   release=representative(vllm))

            current[:] = [name]
            ctx = _ctx(rule, model)
            if ob.kind == "static":
                ob.queries(ctx)
            else:
                O.lifecycle_step_query(ob, ctx)
                if ob.role is Role.INVARIANT:
                    O.invariant_base_query(_ctx(rule, model))
                elif ob.world != "single":  # world "restarts": the row's own base case
                    O.invariant_base_query(_ctx(rule, model), ob)
    finally:
        sys.setprofile(None)
        SymConfig.__getattribute__ = orig
    return users


def test_arch_table_obligations_are_those_using_the_spec_elements():
    from kvreach.proofs.obligations import OBLIGATIONS

    users = spec_element_users()
    wrong = []
    for row in arch_rows():
        listed = set(OBLIGATIONS) if row[4] == "every obligation" else set(names(row[4]))
        assert listed, row
        assert listed <= set(OBLIGATIONS), (row[0], sorted(listed - set(OBLIGATIONS)))
        used = set().union(*(users.get(n, set()) for n in names(row[2])))
        if listed != used:
            wrong.append(f"{row[0]}: listed {sorted(listed)}, used by {sorted(used)}")
    assert not wrong, "\n".join(wrong)


def _vllm_names() -> list[tuple[str, str]]:
    out = []
    for row in arch_rows():
        version = "0.29.0" if row[1].startswith("vllm 0.29.0:") else "0.33.0"
        out += [(version, n) for n in names(row[1])]
    assert all(n.startswith("vllm.") for _, n in out), out
    return out


def test_arch_table_vllm_033_names_resolve():
    pytest.importorskip("vllm")
    from importlib import metadata

    # the table names 0.33.0's functions; 0.34.0 kept every one of them
    assert metadata.version("vllm") in ("0.33.0", "0.34.0")
    for version, n in _vllm_names():
        if version == "0.33.0":
            resolve(n)


def test_arch_table_vllm_029_names_in_source(src029):
    """Textually: the longest module prefix is a file of the 0.29.0 source and
    every further component is a ``def`` or ``class`` in it (in order)."""
    checked = 0
    for version, n in _vllm_names():
        if version != "0.29.0":
            continue
        parts = n.split(".")
        for i in range(len(parts), 0, -1):
            path = src029.joinpath(*parts[:i]).with_suffix(".py")
            if path.is_file():
                break
        else:
            raise AssertionError(f"vllm 0.29.0: {n}: no module file")
        src, pos = path.read_text(encoding="utf-8"), 0
        for p in parts[i:]:
            m = re.compile(rf"^\s*(?:def|class)\s+{re.escape(p)}\b", re.M).search(src, pos)
            assert m, f"vllm 0.29.0: {n}: no def/class {p} in {path}"
            pos = m.end()
        checked += 1
    assert checked


# --- architecture.md: the layering ----------------------------------------------

PACKAGE_DIRS = {"kvreach": ROOT / "kvreach", "kvreach.spec": ROOT / "spec",
                "kvreach.impl": ROOT / "impl", "kvreach.impl.vllm": ROOT / "impl" / "vllm",
                "kvreach.impl.vllm.vllm_copy": ROOT / "impl" / "vllm" / "vllm_copy",
                "kvreach.proofs": ROOT / "proofs", "kvreach.cli": ROOT / "kvreach" / "cli",
                "kvreach.conform": ROOT / "kvreach" / "conform",
                "kvreach.vllm_harness": ROOT / "kvreach" / "vllm_harness"}


def import_graph() -> dict[str, set[str]]:
    """module -> every module it imports (module level and inside functions)."""
    graph: dict[str, set[str]] = {}
    for pkg, d in PACKAGE_DIRS.items():
        for f in sorted(d.glob("*.py")):
            mod = pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"
            out: set[str] = set()
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    out.update(a.name for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    out.add(node.module)
                    # ``from kvreach.spec import mask`` imports the module kvreach.spec.mask
                    out.update(f"{node.module}.{a.name}" for a in node.names
                               if f"{node.module}.{a.name}" in _modules())
            graph[mod] = {m for m in out if m != "__future__"}
    return graph


def _modules() -> set[str]:
    return {pkg if f.stem == "__init__" else f"{pkg}.{f.stem}"
            for pkg, d in PACKAGE_DIRS.items() for f in d.glob("*.py")}


def _kv(imports: set[str]) -> set[str]:
    return {m for m in imports if m in _modules()}


def _in(mod: str, *pkgs: str) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in pkgs)


def test_layering():
    g = import_graph()
    bad = []

    def forbid(src_pred, dst_pred, why):
        for mod, imps in g.items():
            if src_pred(mod):
                bad.extend(f"{mod} imports {m} ({why})" for m in _kv(imps) if dst_pred(m))

    forbid(lambda m: m == "kvreach.params", lambda m: True, "params is the first layer")
    forbid(lambda m: m == "kvreach.releases", lambda m: True, "the release records are data")
    forbid(lambda m: _in(m, "kvreach.spec"),
           lambda m: not _in(m, "kvreach.spec", "kvreach.params", "kvreach.releases"),
           "spec sees only params and the release records")
    forbid(lambda m: _in(m, "kvreach.impl"),
           lambda m: not _in(m, "kvreach.impl", "kvreach.params", "kvreach.releases"),
           "impl sees only params and the release records")
    forbid(lambda m: _in(m, "kvreach.proofs"),
           lambda m: _in(m, "kvreach.cli") or m in ("kvreach.plot", "kvreach.diagram"),
           "proofs never import the CLI or the report modules")
    forbid(lambda m: not _in(m, "kvreach.cli"), lambda m: _in(m, "kvreach.cli"),
           "only the entry point")
    forbid(lambda m: _in(m, "kvreach.proofs") and m != "kvreach.proofs.catalog",
           lambda m: m == "kvreach.proofs.catalog", "catalog is read by the CLI only")
    forbid(lambda m: m == "kvreach.scenario",
           lambda m: not _in(m, "kvreach.params", "kvreach.releases", "kvreach.impl"),
           "a scenario is parameters (and a release record) run through impl")
    forbid(lambda m: m == "kvreach.proofs.results", lambda m: True,
           "the run's file formats are read and written without the rest")
    # the solver layer -> the rows -> the run
    forbid(lambda m: m == "kvreach.proofs.solve",
           lambda m: _in(m, "kvreach.proofs") and m not in (
               "kvreach.proofs", "kvreach.proofs.cache", "kvreach.proofs.config",
               "kvreach.proofs.framework"),
           "the solver layer knows no obligation, row or run")
    forbid(lambda m: _in(m, "kvreach.proofs") and m != "kvreach.proofs.pool",
           lambda m: m == "kvreach.proofs.pool", "the run is above the rows it runs")
    forbid(lambda m: m == "kvreach.plot", lambda m: m != "kvreach.params",
           "plot draws traces it is given")
    forbid(lambda m: m == "kvreach.diagram", lambda m: not _in(m, "kvreach.spec"),
           "the diagram is generated from the spec")
    # vLLM is imported by the connector and the harness only (the rest runs
    # without the vllm extra)
    for mod, imps in g.items():
        if not _in(mod, "kvreach.impl.vllm", "kvreach.vllm_harness"):
            bad.extend(f"{mod} imports {m} (vllm)" for m in imps if _in(m, "vllm"))
    assert not bad, "\n".join(sorted(bad))


def test_layering_within_spec_and_impl_is_one_way():
    """config -> load, mask, lookup -> rules -> lifecycle -> evaluate;
    contracts -> load, lookup -> oracles -> mask -> rules, monitor -> release_rules
    -> lifecycle -> worlds, release -> decoded; the connector: metrics, vllm_release -> vllm_copy
    (seams, connector_init -> one module per release -> the package); options, groups ->
    scheduler -> connector -> vllm_connector (the configured path). A module
    imports only modules ranked below it."""
    rank = {
        "kvreach.spec.config": 0, "kvreach.spec.load": 1, "kvreach.spec.mask": 1,
        "kvreach.spec.lookup": 1,
        "kvreach.spec.rules": 2, "kvreach.spec.lifecycle": 3, "kvreach.spec.evaluate": 4,
        "kvreach.impl.contracts": 0, "kvreach.impl.load": 1, "kvreach.impl.lookup": 1,
        "kvreach.impl.oracles": 2, "kvreach.impl.mask": 3,
        "kvreach.impl.rules": 4, "kvreach.impl.monitor": 4,
        "kvreach.impl.release_rules": 5,
        "kvreach.impl.lifecycle": 6, "kvreach.impl.worlds": 7, "kvreach.impl.release": 7,
        "kvreach.impl.decoded": 8,
        "kvreach.impl.vllm": 0, "kvreach.impl.vllm.metrics": 0, "kvreach.impl.vllm.vllm_release": 0,
        "kvreach.impl.vllm.vllm_copy.seams": 0, "kvreach.impl.vllm.vllm_copy.connector_init": 0,
        "kvreach.impl.vllm.vllm_copy.v0_33_0": 1, "kvreach.impl.vllm.vllm_copy.v0_34_0": 1,
        "kvreach.impl.vllm.vllm_copy": 2,
        "kvreach.impl.vllm.options": 5, "kvreach.impl.vllm.groups": 5,
        "kvreach.impl.vllm.scheduler": 6, "kvreach.impl.vllm.connector": 7,
        "kvreach.impl.vllm_connector": 8,
    }
    g = import_graph()
    assert set(rank) == {m for m in g if _in(m, "kvreach.spec", "kvreach.impl")
                         and m not in ("kvreach.spec", "kvreach.impl")}
    bad = [f"{m} imports {d}" for m in rank for d in _kv(g[m])
           if d in rank and rank[d] >= rank[m]]
    assert not bad, bad


# --- links ------------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def link_targets(text: str) -> list[str]:
    out = []
    for line in prose_lines(text):
        line = re.sub(r"`[^`]*`", "", line)  # code spans hold no links
        out += LINK.findall(line)
    return out


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces -> '-'."""
    h = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    h = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", h)
    keep = "".join(ch for ch in h if ch in " -_" or unicodedata.category(ch)[0] in "LN")
    return keep.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def test_relative_links_resolve():
    bad = []
    for md in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in link_targets(md.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, frag = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            if not dest.exists():
                bad.append(f"{md.name}: {target}: no such file")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                bad.append(f"{md.name}: {target}: no heading with anchor #{frag}")
    assert not bad, "\n".join(bad)


def test_slug_matches_github():
    assert slug("Load models (written from the load side)") == "load-models-written-from-the-load-side"
    assert slug("F1. vLLM 0.29.0 stores the tails") == "f1-vllm-0290-stores-the-tails"
    assert slug("The `need` formula: ceil((W - 1) / B)") == "the-need-formula-ceilw---1--b"


# --- formulas.md: the worked examples ------------------------------------------


def _sw_spec(g):
    import torch
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    return SlidingWindowSpec(block_size=g.block_size, num_kv_heads=1, head_size=1,
                             dtype=torch.float32, sliding_window=g.window)


def _v029_is_store_reachable(src029: Path):
    """vLLM 0.29.0's ``is_store_reachable_swa_chunk``, compiled from its source
    (a pure function of ints)."""
    path = src029 / "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
    src = path.read_text(encoding="utf-8")
    fn = next(n for n in ast.parse(src).body
              if isinstance(n, ast.FunctionDef) and n.name == "is_store_reachable_swa_chunk")
    ns: dict = {}
    exec(compile(ast.Module([fn], []), str(path), "exec"), ns)
    return ns["is_store_reachable_swa_chunk"]


@pytest.fixture(scope="module")
def formulas_run():
    """Run every ``>>>`` example of formulas.md (one namespace, in order),
    recording each mask and 0.29 decision the examples compute."""
    from kvreach.impl import mask as impl_mask

    calls: dict[str, list] = {"mask": [], "v029": []}
    orig_mask, orig_029 = impl_mask.reachable_block_mask, impl_mask.v029_chunk_reachable

    def mask(start_block, end_block, g, prompt_tokens, final_segment_end_block=None):
        out = orig_mask(start_block, end_block, g, prompt_tokens, final_segment_end_block)
        calls["mask"].append((start_block, end_block, g, prompt_tokens,
                              final_segment_end_block, out))
        return out

    def v029(chunk, storable_count, g):
        out = orig_029(chunk, storable_count, g)
        calls["v029"].append((chunk, storable_count, g, out))
        return out

    text = (DOCS / "formulas.md").read_text(encoding="utf-8")
    src = "\n".join(b for info, b in fenced_blocks(text) if info == "python" and ">>>" in b)
    test = doctest.DocTestParser().get_doctest(src, {}, "formulas.md", str(DOCS / "formulas.md"), 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    impl_mask.reachable_block_mask, impl_mask.v029_chunk_reachable = mask, v029
    out: list[str] = []
    try:
        result = runner.run(test, out=out.append)
    finally:
        impl_mask.reachable_block_mask, impl_mask.v029_chunk_reachable = orig_mask, orig_029
    return result, "".join(out), calls


def test_formulas_examples_hold(formulas_run):
    result, report, calls = formulas_run
    assert result.attempted >= 40, result
    assert result.failed == 0, report
    assert len(calls["mask"]) >= 20 and len(calls["v029"]) >= 14


def test_formulas_masks_equal_vllm(formulas_run):
    pytest.importorskip("vllm")
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    _, _, calls = formulas_run
    configs = set()
    for start, end, g, prompt, final, ours in calls["mask"]:
        theirs = SlidingWindowManager.reachable_block_mask(
            start_block=start, end_block=end, alignment_tokens=g.alignment_tokens,
            kv_cache_spec=_sw_spec(g), use_eagle=g.eagle,
            retention_interval=g.retention_interval,
            reachable_boundaries=(prompt - 1,) if g.retention_interval is not None else (),
            dcp_world_size=g.dcp_world_size, final_segment_end_block=final,
        )
        assert ours == theirs, (start, end, g, prompt, final)
        configs.add(g)
    for g in configs:
        assert g.need == SlidingWindowManager._contiguous_blocks_for_hit(
            g.window, g.block_tokens, g.eagle), g
    assert any(g.dcp_world_size == 2 for g in configs)
    assert any(g.dense for g in configs) and any(g.eagle for g in configs)


def test_formulas_029_decisions_equal_vllm_029(formulas_run, src029):
    from kvreach.impl.mask import v029_alignment_chunk_count, v029_window_chunks

    is_store_reachable_swa_chunk = _v029_is_store_reachable(src029)
    _, _, calls = formulas_run
    for chunk, storable, g, ours in calls["v029"]:
        assert ours == is_store_reachable_swa_chunk(
            chunk, storable, v029_alignment_chunk_count(g), v029_window_chunks(g), g.eagle,
        ), (chunk, storable, g)
