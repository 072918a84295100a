"""proofs/ is layered one way: read from the source (``ast``, imports inside
functions included), every import of one ``kvreach.proofs`` module by
another goes to a lower layer of :data:`LAYERS` (so there is no cycle), and
no module of proofs/ imports the layers above it (the CLI, the harness, the
report's plots and diagram). A module added to proofs/ must be given its
layer here."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROOFS = ROOT / "proofs"
P = "kvreach.proofs."

# lowest first; a module imports only modules of lower layers
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(x) for x in (
    # data and records: run files, result cache, budgets and bounds, the
    # obligation record, the release matrix, the findings
    {"results", "cache", "config", "framework", "matrix", "scenarios"},
    # helpers of queries and counterexamples
    {"flatten", "keep", "mutants", "geometries"},
    # induction queries, world (b), decoding, the store obligations
    {"induction", "neighbours", "decode", "obligations.store"},
    {"obligations.lookup", "obligations.neighbours", "obligations.restarts"},
    {"obligations"},  # ALL, OBLIGATIONS, run_order
    {"solve", "versions", "rows"},  # rows: the row list, the expected table, Row
    {"search"},  # the counterexample search (BMC, static shapes)
    {"mutant_check"},
    {"runner"},  # one row
    {"pool", "counterexample", "catalog"},
))
ABOVE = ("kvreach.cli", "kvreach.vllm_harness", "kvreach.plot", "kvreach.diagram")


def module_name(path: Path) -> str:
    rel = path.relative_to(PROOFS).with_suffix("").parts
    return ".".join(rel[:-1] if rel[-1] == "__init__" else rel)


def _target(module: str, name: str, known: set[str]) -> str:
    """``from kvreach.proofs.X import Y``: module X.Y if it is one, else X."""
    sub = module[len(P):] if module.startswith(P) else ""
    cand = f"{sub}.{name}" if sub else name
    return cand if cand in known else sub


def imports() -> dict[str, set[str]]:
    """module (relative to kvreach.proofs, "" for the package) -> every
    kvreach module it imports (proofs modules relative, others absolute)."""
    files = {module_name(p): p for p in sorted(PROOFS.rglob("*.py"))}
    known = set(files)
    out: dict[str, set[str]] = {}
    for name, path in files.items():
        deps: set[str] = set()
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                if n.module == "kvreach.proofs" or n.module.startswith(P):
                    deps |= {_target(n.module, a.name, known) for a in n.names}
                elif n.module.startswith("kvreach."):
                    deps.add(n.module)
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.startswith(P):
                        deps.add(a.name[len(P):])
                    elif a.name.startswith("kvreach."):
                        deps.add(a.name)
        out[name] = deps - {name, ""}
    return out


def layering_errors(graph: dict[str, set[str]]) -> list[str]:
    layer = {m: i for i, ms in enumerate(LAYERS) for m in ms}
    errors = [f"{m}: not in a layer of LAYERS" for m in graph if m and m not in layer]
    for m, deps in graph.items():
        for d in deps:
            if d.startswith(ABOVE):
                errors.append(f"{m} imports {d}, a layer above proofs/")
            elif not d.startswith("kvreach.") and m in layer and d in layer and layer[d] >= layer[m]:
                errors.append(f"{m} (layer {layer[m]}) imports {d} (layer {layer[d]})")
    return errors


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles among proofs' modules (depth-first search)."""
    found, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            if d not in graph:
                continue
            if state.get(d) == "open":
                found.append(path[path.index(d):] + [d])
            elif d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_proofs_has_no_import_cycle_and_imports_only_downward():
    graph = imports()
    assert not cycles(graph), cycles(graph)
    assert not layering_errors(graph), layering_errors(graph)


def test_the_check_sees_an_upward_import_and_a_cycle():
    """The two imports this layering removed: decode reading
    obligations.lookup's replay, and decode <-> neighbours."""
    graph = imports()
    graph["decode"] = graph["decode"] | {"obligations.lookup", "neighbours"}
    graph["neighbours"] = graph["neighbours"] | {"decode"}
    errors = layering_errors(graph)
    assert "decode (layer 2) imports obligations.lookup (layer 3)" in errors, errors
    assert any(set(c) == {"decode", "neighbours"} for c in cycles(graph)), cycles(graph)
    graph["catalog"] = graph["catalog"] | {"kvreach.cli.render"}
    assert "catalog imports kvreach.cli.render, a layer above proofs/" in layering_errors(graph)


TREES = ("proofs", "spec", "impl", "kvreach", "tests", "scripts", "bench")
# where an installed name lives in the checkout (pyproject.toml's package-dir)
PACKAGE_DIRS = {"kvreach.spec": "spec", "kvreach.proofs": "proofs", "kvreach.impl": "impl",
                "kvreach": "kvreach"}


def _is_module(dotted: str) -> bool:
    """``dotted`` (``kvreach.x.y``) names a module or package of the checkout."""
    for prefix, folder in sorted(PACKAGE_DIRS.items(), key=lambda kv: -len(kv[0])):
        if dotted == prefix or dotted.startswith(prefix + "."):
            rest = dotted[len(prefix):].lstrip(".").replace(".", "/")
            base = ROOT / folder / rest if rest else ROOT / folder
            return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
    return False


def private_imports() -> list[str]:
    """Every ``from kvreach.X import _y`` (a name with one leading
    underscore), and every ``m._y`` where ``m`` is a kvreach module the file
    imported, in proofs/, spec/, impl/, kvreach/ (the CLI and conform
    packages included: a helper their modules share has a public name),
    tests/, scripts/ and bench/ (what a test or a script needs is public)."""
    out = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT / tree).with_suffix("").parts
            where = f"{tree}/{'/'.join(rel)}.py"
            tree_ast = ast.parse(path.read_text(encoding="utf-8"))
            modules: dict[str, str] = {}  # a local name bound to a kvreach module
            for n in ast.walk(tree_ast):
                if isinstance(n, ast.Import):
                    for a in n.names:
                        if a.name.startswith("kvreach") and a.asname:
                            modules[a.asname] = a.name
                if not (isinstance(n, ast.ImportFrom) and n.module and n.level == 0
                        and n.module.startswith("kvreach")):
                    continue
                private = [a.name for a in n.names
                           if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    out.append(f"{where}:{n.lineno} takes {n.module}'s " + ", ".join(private))
                for a in n.names:
                    if _is_module(f"{n.module}.{a.name}"):
                        modules[a.asname or a.name] = f"{n.module}.{a.name}"
            for n in ast.walk(tree_ast):
                if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                        and n.value.id in modules and n.attr.startswith("_")
                        and not n.attr.startswith("__")):
                    out.append(f"{where}:{n.lineno} takes {modules[n.value.id]}'s {n.attr}")
    return out


def test_no_module_takes_another_modules_private_name():
    assert not private_imports(), private_imports()


def test_the_private_name_check_sees_one(tmp_path, monkeypatch):
    """The import this check removed: an obligation taking conform's
    private lookup-group helper."""
    (tmp_path / "proofs").mkdir()
    (tmp_path / "proofs" / "x.py").write_text("from kvreach.conform import _lookup_group\n")
    for tree in ("spec", "impl", "kvreach", "tests", "scripts", "bench"):
        (tmp_path / tree).mkdir()
    # and one module of a package taking a sibling's private name (the CLI
    # modules once shared their plumbing that way)
    (tmp_path / "kvreach" / "cli").mkdir()
    (tmp_path / "kvreach" / "cli" / "plot.py").write_text("from kvreach.cli._common import _out\n")
    # and a script reading a module's private name through the module
    (tmp_path / "proofs" / "neighbours.py").write_text("def _geometries(): pass\n")
    (tmp_path / "scripts" / "check.py").write_text(
        "from kvreach.proofs import neighbours\nneighbours._geometries()\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert private_imports() == ["proofs/x.py:1 takes kvreach.conform's _lookup_group",
                                 "kvreach/cli/plot.py:1 takes kvreach.cli._common's _out",
                                 "scripts/check.py:2 takes kvreach.proofs.neighbours's _geometries"]


# What the vLLM harness may read of proofs/: the obligation records (each
# one's replay story) and the lookahead lifecycle a decoded no-waste model
# is replayed with. A counterexample's twin (its lookup groups, world (b)'s
# lookup) is kvreach.impl's (impl/decoded.py), not proofs'.
HARNESS_READS_OF_PROOFS = {"kvreach.proofs.obligations", "kvreach.proofs.obligations.restarts",
                           "kvreach.proofs.decode"}


def harness_proofs_imports(root: Path) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in sorted((root / "kvreach" / "vllm_harness").rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("kvreach.proofs"):
                out.setdefault(n.module, set()).add(path.name)
    return out


def test_the_harness_replays_through_impl_not_proofs():
    got = harness_proofs_imports(ROOT)
    assert set(got) <= HARNESS_READS_OF_PROOFS, {m: f for m, f in got.items()
                                                 if m not in HARNESS_READS_OF_PROOFS}
    assert "kvreach.proofs.neighbours" not in got


def test_impl_imports_neither_spec_nor_proofs():
    bad = []
    for path in sorted((ROOT / "impl").rglob("*.py")):
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = ([n.module] if isinstance(n, ast.ImportFrom) and n.module else
                    [a.name for a in n.names] if isinstance(n, ast.Import) else [])
            bad += [f"{path.name}: {m}" for m in mods
                    if m.startswith(("kvreach.spec", "kvreach.proofs"))]
    assert not bad, bad
