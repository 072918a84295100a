"""A vLLM tree's source files, and the functions of each role extracted from
them with ``ast`` and compiled into one namespace of stubs
(:mod:`kvreach.conform.stubs`)."""

from __future__ import annotations

import ast
import importlib.util
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kvreach.conform.stubs import _namespace

_SCHED = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
_CONFIG = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/config.py"
_MANAGER = "vllm/v1/core/single_type_kv_cache_manager.py"
FILES = (_SCHED, _CONFIG, _MANAGER)


class ConformError(Exception):
    """Bad input (no such tree, not a vLLM tree): one line for the CLI."""


@dataclass
class Tree:
    """The source files of one vLLM tree (path inside the tree -> text)."""

    label: str
    files: dict[str, str]

    @staticmethod
    def installed() -> "Tree":
        spec = importlib.util.find_spec("vllm")  # a top-level find_spec imports nothing
        if spec is None or not spec.submodule_search_locations:
            raise ConformError("vllm: not installed (expected an importable vllm package)")
        root = Path(list(spec.submodule_search_locations)[0]).parent
        return Tree._from_dir(root, f"installed vllm ({root / 'vllm'})")

    @staticmethod
    def wheel(path: str | Path) -> "Tree":
        p = Path(path)
        if not p.is_file():
            raise ConformError(f"--vllm-wheel={path}: expected a vLLM wheel file")
        try:
            with zipfile.ZipFile(p) as z:
                names = set(z.namelist())
                files = {f: z.read(f).decode("utf-8") for f in FILES if f in names}
        except (zipfile.BadZipFile, OSError, UnicodeDecodeError) as e:
            raise ConformError(f"--vllm-wheel={path}: expected a vLLM wheel file ({e})") from None
        if _SCHED not in files:
            raise ConformError(f"--vllm-wheel={path}: expected a vLLM wheel (no {_SCHED})")
        return Tree(f"wheel {p.name}", files)

    @staticmethod
    def source(path: str | Path) -> "Tree":
        p = Path(path)
        if not p.is_dir():
            raise ConformError(f"--vllm-src={path}: expected a vLLM source directory")
        root = p.parent if p.name == "vllm" and (p / _SCHED[len('vllm/'):]).is_file() else p
        if not (root / _SCHED).is_file():
            raise ConformError(f"--vllm-src={path}: expected a vLLM source directory (no {_SCHED})")
        return Tree._from_dir(root, f"source {p}")

    @staticmethod
    def _from_dir(root: Path, label: str) -> "Tree":
        files = {}
        for f in FILES:
            if (root / f).is_file():
                try:
                    files[f] = (root / f).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as e:
                    raise ConformError(f"{label}: {f}: cannot be read ({e})") from None
        if _SCHED not in files:
            raise ConformError(f"{label}: expected a vLLM tree (no {_SCHED})")
        return Tree(label, files)

    def find(self, qualname: str) -> tuple[str, ast.FunctionDef] | None:
        """(file, def node) of ``qualname`` (``Class.method`` or a function)
        in the first file that defines it."""
        for f in FILES:
            src = self.files.get(f)
            if src is None:
                continue
            node = _find_def(ast.parse(src), qualname.split("."))
            if node is not None:
                return f, node
        return None


def _find_def(tree: ast.AST, path: list[str]) -> ast.FunctionDef | None:
    for n in getattr(tree, "body", []):
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == path[0]:
            if len(path) == 1:
                return n if isinstance(n, ast.FunctionDef) else None
            return _find_def(n, path[1:])
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


@dataclass
class Extracted:
    """The tree's functions by role (missing roles absent), in one namespace."""

    tree: Tree
    fns: dict[str, Callable] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)  # role -> "file:qualname"
    params: dict[str, tuple[str, ...]] = field(default_factory=dict)


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
    ns = _namespace()
    out = Extracted(tree)
    for role, names in ROLES.items():
        for qn in names:
            hit = tree.find(qn)
            if hit is None:
                continue
            f, node = hit
            node = _strip(node)
            mod = ast.Module(body=[node], type_ignores=[])
            ast.fix_missing_locations(mod)
            try:
                exec(compile(mod, f"<{tree.label}:{f}:{qn}>", "exec"), ns)
            except Exception as e:  # noqa: BLE001 (a tree's text is input)
                raise ConformError(f"{tree.label}: {f}: {qn}: cannot be compiled ({e})") from None
            fn = ns.pop(node.name)
            out.fns[role] = fn
            out.where[role] = f"{f}:{qn}"
            out.params[role] = tuple(a.arg for a in node.args.args + node.args.kwonlyargs)
            break
    if "store_rule" in out.fns:
        ns["is_store_reachable_swa_chunk"] = out.fns["store_rule"]
    return out
