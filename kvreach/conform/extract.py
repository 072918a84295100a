"""A vLLM tree's source files, and the functions of each role extracted from
them with ``ast`` and compiled into one namespace of stubs
(:mod:`kvreach.conform.stubs`)."""

from __future__ import annotations

import ast
import builtins
import importlib.util
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kvreach.conform.stubs import stub_namespace

SCHEDULER_FILE = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
CONFIG_FILE = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/config.py"
MANAGER_FILE = "vllm/v1/core/single_type_kv_cache_manager.py"
FILES = (SCHEDULER_FILE, CONFIG_FILE, MANAGER_FILE)
# Where else a function may have moved to (searched after FILES), and the
# files the configuration switches are read from (:mod:`.switches`).
OFFLOADING_DIR = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/"
CONNECTOR_FILE = "vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py"
VLLM_CONFIG_FILE = "vllm/config/vllm.py"
KV_UTILS_FILE = "vllm/v1/core/kv_cache_utils.py"
CACHE_CONFIG_FILE = "vllm/config/cache.py"
KV_INTERFACE_FILE = "vllm/v1/kv_cache_interface.py"
EXTRA = (CONNECTOR_FILE, VLLM_CONFIG_FILE, KV_UTILS_FILE, CACHE_CONFIG_FILE, KV_INTERFACE_FILE)


def _wanted(name: str) -> bool:
    return name in FILES or name in EXTRA or (
        name.startswith(OFFLOADING_DIR) and name.endswith(".py"))


class ConformError(Exception):
    """Bad input (no such tree, not a vLLM tree): one line for the CLI."""


@dataclass
class Tree:
    """The source files of one vLLM tree (path inside the tree -> text)."""

    label: str
    files: dict[str, str]
    # where the whole tree is, for the system layer: a source directory
    # (``vllm/`` at its top) or a wheel; neither: the installed vLLM
    root: Path | None = None
    wheel_path: Path | None = None

    @staticmethod
    def installed() -> "Tree":
        spec = importlib.util.find_spec("vllm")  # a top-level find_spec imports nothing
        if spec is None or not spec.submodule_search_locations:
            raise ConformError("vllm: not installed (expected an importable vllm package)")
        root = Path(list(spec.submodule_search_locations)[0]).parent
        return Tree._from_dir(root, f"installed vllm ({root / 'vllm'})", installed=True)

    @staticmethod
    def wheel(path: str | Path) -> "Tree":
        p = Path(path)
        if not p.is_file():
            raise ConformError(f"--vllm-wheel={path}: expected a vLLM wheel file")
        try:
            with zipfile.ZipFile(p) as z:
                files = {f: z.read(f).decode("utf-8") for f in z.namelist() if _wanted(f)}
        except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as e:
            raise ConformError(f"--vllm-wheel={path}: expected a vLLM wheel file ({e})") from None
        if SCHEDULER_FILE not in files:
            raise ConformError(f"--vllm-wheel={path}: expected a vLLM wheel (no {SCHEDULER_FILE})")
        return Tree(f"wheel {p.name}", files, wheel_path=p)

    @staticmethod
    def source(path: str | Path) -> "Tree":
        p = Path(path)
        if not p.is_dir():
            raise ConformError(f"--vllm-src={path}: expected a vLLM source directory")
        root = p.parent if p.name == "vllm" and (p / SCHEDULER_FILE[len('vllm/'):]).is_file() else p
        if not (root / SCHEDULER_FILE).is_file():
            raise ConformError(f"--vllm-src={path}: expected a vLLM source directory (no {SCHEDULER_FILE})")
        return Tree._from_dir(root, f"source {p}")

    @staticmethod
    def _from_dir(root: Path, label: str, installed: bool = False) -> "Tree":
        files = {}
        names = [*FILES, *EXTRA]
        if (root / OFFLOADING_DIR).is_dir():
            names += sorted(str(p.relative_to(root)) for p in (root / OFFLOADING_DIR).rglob("*.py"))
        for f in dict.fromkeys(names):
            if (root / f).is_file():
                try:
                    files[f] = (root / f).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as e:
                    raise ConformError(f"{label}: {f}: cannot be read ({e})") from None
        if SCHEDULER_FILE not in files:
            raise ConformError(f"{label}: expected a vLLM tree (no {SCHEDULER_FILE})")
        return Tree(label, files, root=None if installed else root)

    def order(self) -> list[str]:
        """The files a function is looked for in: FILES first, then the
        rest of the offloading package (where a moved function goes)."""
        return [f for f in FILES if f in self.files] + sorted(
            f for f in self.files if f not in FILES and f.startswith(OFFLOADING_DIR))

    def parsed(self, f: str) -> ast.Module:
        cache = self.__dict__.setdefault("_parsed", {})
        if f not in cache:
            try:
                cache[f] = ast.parse(self.files[f])
            except SyntaxError as e:
                raise ConformError(f"{self.label}: {f}: not Python ({e})") from None
        return cache[f]

    def find(self, qualname: str) -> tuple[str, ast.FunctionDef] | None:
        """(file, def node) of ``qualname`` (``Class.method`` or a function)
        in the first file that defines it (a fresh node each call)."""
        for f in self.order():
            node = find_def(ast.parse(self.files[f]), qualname.split("."))
            if node is not None:
                return f, node
        return None

    def module_def(self, name: str) -> tuple[str, ast.stmt] | None:
        """A module-level function or literal constant ``name`` (a helper an
        extracted function calls by name)."""
        for f in self.order():
            for n in self.parsed(f).body:
                if isinstance(n, ast.FunctionDef) and n.name == name:
                    return f, find_def(ast.parse(self.files[f]), [name])
                if (isinstance(n, ast.Assign) and len(n.targets) == 1
                        and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name):
                    try:
                        ast.literal_eval(n.value)
                    except ValueError:
                        return None
                    return f, n
        return None


def find_def(tree: ast.AST, path: list[str]) -> ast.FunctionDef | None:
    for n in getattr(tree, "body", []):
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == path[0]:
            if len(path) == 1:
                return n if isinstance(n, ast.FunctionDef) else None
            return find_def(n, path[1:])
    return None


def _strip(node: ast.FunctionDef) -> ast.FunctionDef:
    """The def without decorators (a classmethod's ``cls`` is passed
    explicitly) and without annotations (they name vLLM types)."""
    node.decorator_list = []
    node.returns = None
    a = node.args
    for arg in a.posonlyargs + a.args + a.kwonlyargs + [a.vararg, a.kwarg]:
        if arg is not None:
            arg.annotation = None
    return node


def _is_property(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id in ("property", "cached_property")
               or isinstance(d, ast.Attribute) and d.attr == "cached_property"
               for d in node.decorator_list)


def _free_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


@dataclass
class Extracted:
    """The tree's functions by role (missing roles absent), in one namespace."""

    tree: Tree
    fns: dict[str, Callable] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)  # role -> "file:qualname"
    params: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ns: dict = field(default_factory=dict)
    # (class, member) -> (function, is a property) or None; helpers pulled in
    members: dict[tuple[str, str], tuple[Callable, bool] | None] = field(default_factory=dict)
    helpers: dict[str, str] = field(default_factory=dict)  # name -> file

    def compile(self, f: str, qualname: str, node: ast.FunctionDef) -> Callable:
        node = _strip(node)
        mod = ast.Module(body=[node], type_ignores=[])
        ast.fix_missing_locations(mod)
        try:
            exec(compile(mod, f"<{self.tree.label}:{f}:{qualname}>", "exec"), self.ns)
        except Exception as e:  # noqa: BLE001 (a tree's text is input)
            raise ConformError(f"{self.tree.label}: {f}: {qualname}: cannot be compiled ({e})") from None
        self._pull_helpers(node)
        return self.ns.pop(node.name)

    def _pull_helpers(self, node: ast.AST) -> None:
        """Module-level helpers the code calls by a name the stubs lack,
        compiled from the tree (a renamed or moved helper runs as written)."""
        for name in sorted(_free_names(node)):
            if name in self.ns or name in self.helpers or hasattr(builtins, name):
                continue
            hit = self.tree.module_def(name)
            if hit is None:
                continue
            f, d = hit
            self.helpers[name] = f
            if isinstance(d, ast.Assign):
                self.ns[name] = ast.literal_eval(d.value)
            else:
                self.ns[name] = self.compile(f, name, d)

    def member(self, cls: str, name: str) -> tuple[Callable, bool] | None:
        """``cls.name`` of the tree, compiled (a stub's fallback)."""
        key = (cls, name)
        if key not in self.members:
            hit = self.tree.find(f"{cls}.{name}")
            if hit is None:
                self.members[key] = None
            else:
                f, node = hit
                prop = _is_property(node)
                self.members[key] = (self.compile(f, f"{cls}.{name}", node), prop)
        return self.members[key]


# role -> candidate qualified names (the first found wins)
ROLES: dict[str, tuple[str, ...]] = {
    "window": ("get_sliding_window_size_in_chunks",),
    "load_window": ("GroupOffloadConfig.load_window_size_in_chunks",),
    "sliding_window_lookup": ("OffloadingConnectorScheduler._sliding_window_lookup",),
    "maximal_prefix_lookup": ("OffloadingConnectorScheduler._maximal_prefix_lookup",),
    "lookup_complete_chunks": ("OffloadingConnectorScheduler._lookup_complete_chunks",),
    "storable_chunks": ("RequestOffloadState.storable_chunks",),
    "advance_stored_idx": ("RequestOffloadState.advance_stored_idx",),
    "store_rule": ("is_store_reachable_swa_chunk",),
    "store_mask": ("OffloadingConnectorScheduler._reachable_store_block_mask",),
    "block_mask": ("SlidingWindowManager.reachable_block_mask",),
    "contiguous_blocks": ("SlidingWindowManager._contiguous_blocks_for_hit",),
    "final_alignment": ("OffloadingConnectorScheduler._final_swa_alignment_blocks",),
    "offloadable": ("OffloadingConnectorScheduler._calc_num_offloadable_tokens",),
    "build_store_jobs": ("OffloadingConnectorScheduler._build_store_jobs",),
    "get_num_new_matched_tokens": ("OffloadingConnectorScheduler.get_num_new_matched_tokens",),
}


def extract(tree: Tree) -> Extracted:
    out = Extracted(tree, ns=stub_namespace())
    for role, names in ROLES.items():
        for qn in names:
            hit = tree.find(qn)
            if hit is None:
                continue
            f, node = hit
            out.params[role] = tuple(a.arg for a in node.args.args + node.args.kwonlyargs)
            out.fns[role] = out.compile(f, qn, node)
            out.where[role] = f"{f}:{qn}"
            break
    if "store_rule" in out.fns:
        out.ns["is_store_reachable_swa_chunk"] = out.fns["store_rule"]
    return out
