"""``kvreach catalog``: docs/proofs.md from the registry and the latest run,
and the verdict matrix of docs/versions.md beside it
(:mod:`kvreach.proofs.catalog` renders and decides staleness; this reports)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvreach.cli._common import CliError, RepoOpt, error_line, in_repo, repo_root, check_writable


def _read_results(flag: str, path: Path) -> dict:
    from kvreach.proofs.results import load_results

    try:
        return load_results(path)
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise CliError(flag, path, f"a `kvreach prove --json` file ({why})") from None


def catalog(
    results: Annotated[Optional[Path], typer.Option(
        "--results", help="the proof run's JSON (`kvreach prove --json`), - for stdin (default: "
                          "docs/proof-results.json in the repository)")] = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", help="the Markdown page, - for stdout (default: docs/proofs.md in the "
                      "repository)")] = None,
    check: Annotated[bool, typer.Option(
        "--check", help="write nothing; exit 1 if --out or --results is stale")] = False,
    verdicts_only: Annotated[bool, typer.Option(
        "--verdicts-only",
        help="with --check: only compare --results' verdicts with --against's (times ignored)")] = False,
    against: Annotated[Optional[Path], typer.Option(
        "--against", help="the committed run, for --verdicts-only (default: "
                          "docs/proof-results.json in the repository)")] = None,
    partial: Annotated[bool, typer.Option(
        "--partial", help="write the page from a run of a selection (`prove --obligation/"
                          "--rule/--load-model`), which covers only some rows")] = False,
    repo: RepoOpt = None,
) -> None:
    """Generate docs/proofs.md from the obligations, expected verdicts and the latest proof run,
    and the verdict matrix of docs/versions.md (the page beside --out) from the run."""
    from kvreach.proofs import catalog as cat

    def default(rel: str) -> Path:  # only an option left out needs the repository
        return in_repo(repo_root(repo), rel)

    if verdicts_only and not check:
        raise CliError("--verdicts-only", True, "--check as well")
    if repo is not None:
        repo_root(repo)  # a bad --repo is an error even when every path is given
    if out is not None and not check:
        check_writable("--out", out)
    results = results or default(cat.RESULTS)
    out = out or default(cat.PAGE)
    if verdicts_only:
        against = against or default(cat.RESULTS)
    fresh = _read_results("--results", results)
    if verdicts_only:
        assert against is not None
        diff = cat.verdict_differences(fresh, _read_results("--against", against))
        if diff:
            error_line(f"stale: {against}'s verdicts differ from {results}'s in {len(diff)} "
                        "row(s) (committed -> fresh): " + "; ".join(diff)
                        + f"; if the fresh run is right, run `{cat.REGENERATE}` and commit")
            raise typer.Exit(1)
        typer.echo(f"{against}: verdicts as in {results} ({len(fresh['rows'])} rows)")
        return
    if not fresh["rows"]:
        raise CliError("--results", results, "a run with rows (this one has none)")
    run_selection = (fresh.get("run") or {}).get("selection") or {}
    # every row: no selection, and the deep rows in (--deep; a run from before
    # --deep existed has no such key)
    selection = [f"--{k.replace('_', '-')} {v}" for k, v in run_selection.items()
                 if v and k != "deep"]
    if run_selection.get("deep", True) is False:
        selection.append("the default rows (no --deep)")
    if selection and not partial and not check:
        raise CliError("--results", results, "a run of every row; this one ran only "
                       + ", ".join(selection)
                       + f" ({len(fresh['rows'])} rows); give --partial to write its page anyway")
    missing = [p for p in cat.results_problems(fresh) if " missing: " in p]
    if missing and not check:
        error_line(f"warning: {results}: " + "; ".join(missing) + "; the page shows the rows "
                    f"the run has; re-run `{cat.REGENERATE}`", prefix="")
    findings = out.parent / "findings.md"
    findings_md = findings.read_text() if findings.exists() else ""
    # docs/versions.md beside the page: its verdict matrix is regenerated too
    versions = None if str(out) == "-" else out.parent / Path(cat.VERSIONS_PAGE).name
    try:
        versions_md = versions.read_text(encoding="utf-8") if versions and versions.is_file() else None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError("--out", out, f"a page beside a readable {versions} ({e})") from None
    if not check:
        try:
            page = cat.render(fresh, findings_md)
            new_versions = None if versions_md is None else cat.versions_page(fresh, versions_md)
        except cat.versions.MarkerError as e:
            raise CliError("--out", out, f"a page beside a {versions} with its verdict matrix's "
                           f"markers ({e})") from None
        except ValueError as e:
            raise CliError("--results", results, f"a run the catalog can render ({e})") from None
        if str(out) == "-":
            sys.stdout.write(page)
            return
        try:
            out.write_text(page)
            if new_versions is not None and new_versions != versions_md:
                assert versions is not None
                versions.write_text(new_versions, encoding="utf-8")
        except OSError as e:
            raise CliError("--out", out, f"a writable file ({e.strerror})") from None
        also = "" if new_versions is None else f" and the verdict matrix of {versions}"
        typer.echo(f"wrote {out}{also} ({len(fresh['rows'])} rows from {results})")
        return
    try:
        current = out.read_text()
    except OSError:
        current = None
    try:
        stale = cat.staleness(fresh, current, findings_md, versions_md)
    except cat.versions.MarkerError as e:
        raise CliError("--out", out, f"a page beside a {versions} with its verdict matrix's "
                       f"markers ({e})") from None
    except ValueError as e:
        raise CliError("--results", results, f"a run the catalog can render ({e})") from None
    if stale.run:
        error_line(f"stale: {results}: " + "; ".join(stale.run) + f"; re-run `{cat.REGENERATE}`")
        raise typer.Exit(1)
    if stale.page or stale.versions:
        page = out if stale.page else f"{versions}'s verdict matrix"
        error_line(f"stale: {page} is not `kvreach catalog`'s output for {results}; "
                    f"run `kvreach catalog --results {results} --out {out}`")
        raise typer.Exit(1)
    typer.echo(f"{out} is up to date with {results}")
