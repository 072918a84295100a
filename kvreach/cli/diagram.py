"""``kvreach diagram``: the lifecycle diagram block of docs/lifecycle.md
(:mod:`kvreach.diagram` generates it and decides staleness; this reports)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvreach.cli._common import CliError, RepoOpt, error_line, repo_root


def diagram(
    check: Annotated[bool, typer.Option(
        "--check", help="write nothing; exit 1 if the committed block differs")] = False,
    doc: Annotated[Optional[Path], typer.Option(
        "--doc", help="the Markdown file holding the generated block (default: docs/lifecycle.md "
             "in the repository)")] = None,
    repo: RepoOpt = None,
) -> None:
    """Regenerate the lifecycle diagram block of docs/lifecycle.md from the
    spec's transition table (``--check``: only compare)."""
    from kvreach import diagram as dg

    root = repo_root(repo) if repo is not None or doc is None else None  # a bad --repo: an error
    path = doc or root.resolve() / dg.DOC
    if not path.is_file():
        raise CliError("--doc", path, "an existing Markdown file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CliError("--doc", path, f"a UTF-8 Markdown file (byte {e.start} is not UTF-8)") from None
    except OSError as e:
        raise CliError("--doc", path, f"a readable file ({e.strerror})") from None
    try:
        new = dg.regenerate(text)
    except ValueError:
        raise CliError("--doc", path, f"a file with a {dg.BEGIN} ... {dg.END} block") from None
    if new is None:
        sys.stdout.write(f"{path}: lifecycle diagram up to date\n")
        return
    if check:
        error_line(f"{path}: the lifecycle diagram differs from the one generated from "
                    "spec.lifecycle.TRANSITIONS; run `kvreach diagram`")
        raise typer.Exit(1)
    path.write_text(new, encoding="utf-8")
    sys.stdout.write(f"{path}: lifecycle diagram regenerated\n")
