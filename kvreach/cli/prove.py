"""``kvreach prove``: run the proof obligations, show the table, write the
run (``--json``, ``--junit``: :mod:`kvreach.proofs.results`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvreach.cli._common import CliError, ModelOpt, RuleOpt, _check_choice, _err, _from_param_error, _out
from kvreach.cli.render import print_prove_report
from kvreach.params import ParamError, check_load_model, check_rule


def prove(
    rule: RuleOpt = None,
    load_model: ModelOpt = None,
    obligation: Annotated[Optional[str], typer.Option("--obligation", help="one obligation")] = None,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="write the run header and rows as JSON")] = None,
    junit_file: Annotated[Optional[Path], typer.Option("--junit", help="write JUnit XML")] = None,
) -> None:
    """Run the proof obligations with Z3; exit 0 only if every row is as expected."""
    from kvreach.proofs import results, runner
    from kvreach.proofs.obligations import OBLIGATIONS

    _check_choice("--rule", rule, check_rule)
    _check_choice("--load-model", load_model, check_load_model)
    if obligation is not None and obligation not in OBLIGATIONS:
        raise CliError("--obligation", obligation, "one of " + ", ".join(OBLIGATIONS))

    todo = list(runner.rows_for(obligation, rule, load_model))
    # runner.run yields the invariant rows first, then the rest in order.
    order = [t for t in todo if t[0] == "invariant"] + [t for t in todo if t[0] != "invariant"]
    out, err = _out(), _err()
    rows = []
    header = results.run_header(obligation, rule, load_model, 0.0)  # the code and time it starts with
    t0 = time.perf_counter()
    from rich.progress import (
        BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
    )

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
        MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True,
    ) as progress:
        desc = lambda i: "proving " + "/".join(order[i]) if i < len(order) else "done"  # noqa: E731
        task = progress.add_task(desc(0), total=len(order))
        try:
            for row in runner.run(obligation, rule, load_model):
                rows.append(row)
                progress.update(task, advance=1, description=desc(len(rows)))
        except ParamError as e:
            raise _from_param_error(e) from None
    total = time.perf_counter() - t0

    n_ok = print_prove_report(out, rows, total)

    try:
        if json_file is not None:
            results.write_json(json_file, header, rows, total)
    except OSError as e:
        raise CliError("--json", json_file, f"a writable file ({e.strerror})") from None
    try:
        if junit_file is not None:
            results.write_junit(rows, junit_file, total)
    except OSError as e:
        raise CliError("--junit", junit_file, f"a writable file ({e.strerror})") from None
    if not rows or n_ok != len(rows):
        raise typer.Exit(1)
