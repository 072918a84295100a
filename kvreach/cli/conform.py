"""``kvreach conform``: which vLLM release record a vLLM tree equals
(:mod:`kvreach.conform` runs the comparison; this picks the tree and reports)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvreach.cli._common import CliError, error_line
from kvreach.params import MAX_INT


def conform(
    vllm_wheel: Annotated[Optional[Path], typer.Option(
        "--vllm-wheel", help="a vLLM wheel file (default: the installed vLLM)")] = None,
    vllm_src: Annotated[Optional[Path], typer.Option(
        "--vllm-src", help="a vLLM source directory, e.g. a branch (default: the installed vLLM)")] = None,
    cases: Annotated[Optional[int], typer.Option(
        "--cases", help="random cases per checked function (default 1000, at most 1,000,000)")] = None,
    seed: Annotated[int, typer.Option("--seed", help="the inputs' random seed")] = 0,
    function_only: Annotated[bool, typer.Option(
        "--function-only", help="only the function layer (no vLLM run)")] = False,
    system_cases: Annotated[Optional[int], typer.Option(
        "--system-cases", help="hypothesis cases of the system layer (default 60, at most 10,000)")] = None,
) -> None:
    """Which release record a vLLM tree equals. Exit 0: it equals a record
    (named on the last line); 1: it differs from every record (the first
    differing input or trace, with the record part that explains it); 2:
    cannot decide (the roles that could not be checked on this tree and what
    they now read), or bad input."""
    from kvreach import conform as cf
    from kvreach.conform.combined import combine

    if vllm_wheel is not None and vllm_src is not None:
        raise CliError("--vllm-src", vllm_src, "no --vllm-wheel with it (one tree at a time)")
    n = cf.DEFAULT_CASES if cases is None else cases
    if not 1 <= n <= cf.MAX_CASES:
        raise CliError("--cases", n, f"an integer from 1 to {cf.MAX_CASES:,}")
    if not 0 <= seed <= MAX_INT:
        raise CliError("--seed", seed, f"an integer from 0 to {MAX_INT}")
    m = 60 if system_cases is None else system_cases
    if not 1 <= m <= 10_000:
        raise CliError("--system-cases", m, "an integer from 1 to 10,000")
    try:
        tree = (cf.Tree.wheel(vllm_wheel) if vllm_wheel is not None
                else cf.Tree.source(vllm_src) if vllm_src is not None else cf.Tree.installed())
        verdict = cf.conform(tree, n, seed)
    except cf.ConformError as e:
        error_line(str(e))
        raise typer.Exit(2) from None
    sv = None
    if not function_only:
        import tempfile

        from kvreach.conform import switches, system

        with tempfile.TemporaryDirectory() as tmp:
            root = tree.root
            if tree.wheel_path is not None:
                root = system.unpack_wheel(tree.wheel_path, Path(tmp))
            sv = system.run_system(root, m, seed, switches=switches.read(tree))
    lines, code = combine(verdict, sv)
    sys.stdout.write("\n".join(lines) + "\n")
    raise typer.Exit(code)
