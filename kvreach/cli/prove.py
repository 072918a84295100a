"""``kvreach prove``: run the proof obligations, show the table, write the
run (``--json``, ``--junit``: :mod:`kvreach.proofs.results`; ``-`` for
stdout). Unchanged queries are answered from the result cache
(:mod:`kvreach.proofs.cache`; ``--no-cache`` or ``CI=true``: none). Output
paths are checked before the first proof; Ctrl-C, SIGTERM
or SIGHUP stops the run within a second (:mod:`kvreach.cli._interrupt`); with stderr not a
terminal, progress is one line per finished row."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvreach.cli._common import (
    VLLM_VERSIONS, CliError, ModelOpt, RuleOpt, check_choice, stderr_console, error_line,
    from_param_error, stdout_console, vllm_release, check_writable,
)
from kvreach.cli._interrupt import ExitOnInterrupt
from kvreach.cli.render import print_prove_report
from kvreach.params import ParamError, check_load_model, check_rule
from kvreach.proofs.obligations import OBLIGATIONS, run_order


def prove(
    rule: RuleOpt = None,
    load_model: ModelOpt = None,
    obligation: Annotated[Optional[str], typer.Option(
        "--obligation", help="run one obligation only: one of " + ", ".join(OBLIGATIONS))] = None,
    json_file: Annotated[Optional[Path], typer.Option(
        "--json", metavar="FILE", help="write the run header and rows as JSON to FILE "
                                       "(- for stdout; the table then goes to stderr)")] = None,
    junit_file: Annotated[Optional[Path], typer.Option(
        "--junit", metavar="FILE", help="write JUnit XML to FILE (- for stdout)")] = None,
    vllm: Annotated[Optional[str], typer.Option(
        "--vllm", metavar="X", help="only the rows about vLLM release X (one of "
        + ", ".join(VLLM_VERSIONS) + "; default: every release)")] = None,
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", help="solve every query, ignoring the result cache of unchanged "
                           "queries (the cache is also off when CI=true)")] = False,
    deep: Annotated[bool, typer.Option(
        "--deep", help="also run the deep rows (over the block-shape family, or with vLLM "
                       "0.34.0's lookahead hashes symbolic): "
                       + ", ".join(n for n, ob in OBLIGATIONS.items() if ob.deep)
                       + " (docs/proofs-cost.md; without it they run only when named by "
                       "--obligation)")] = False,
) -> None:
    """Run the proof obligations with Z3; exit 0 only if every row is as expected."""
    from kvreach.proofs import pool, results
    from kvreach.proofs.rows import selected_rows

    check_choice("--rule", rule, check_rule)
    check_choice("--load-model", load_model, check_load_model)
    vllm_release(vllm)  # a known version, else one line naming them
    if obligation is not None and obligation not in OBLIGATIONS:
        raise CliError("--obligation", obligation, "one of " + ", ".join(OBLIGATIONS))
    if json_file is not None and junit_file is not None and str(json_file) == str(junit_file) == "-":
        raise CliError("--junit", "-", "a file when --json is - (one of them can have stdout)")
    for flag, path in (("--json", json_file), ("--junit", junit_file)):
        check_writable(flag, path)  # before the first proof, not after a minute of them

    from kvreach.proofs import cache

    # the spawned workers inherit the environment: the switch goes there (for
    # this run only: a caller in the same process keeps its own setting)
    previous = os.environ.get(cache.ENV)
    os.environ[cache.ENV] = "0" if no_cache else "1"
    todo = selected_rows(obligation, rule, load_model, vllm, deep)
    if not todo:
        _empty_selection(obligation, rule, load_model, vllm)
    order = run_order(todo)  # the order pool.run yields them in
    to_stdout = "-" in (str(json_file), str(junit_file))
    out, err = (stderr_console() if to_stdout else stdout_console()), stderr_console()
    rows: list = []
    header = results.run_header(obligation, rule, load_model, 0.0, vllm, deep)  # the code and time it starts with
    t0, cpu0 = time.perf_counter(), _cpu_seconds()
    stop = lambda: (f"interrupted: {len(rows)} of {len(order)} row(s) proved in "  # noqa: E731
                    f"{time.perf_counter() - t0:.1f} s; nothing written")
    with ExitOnInterrupt(stop, before_exit=lambda: err.show_cursor(True)):
        try:
            for row in _rows_with_progress(pool.run(obligation, rule, load_model, vllm=vllm, deep=deep), order, err, t0):
                rows.append(row)
        except ParamError as e:
            raise from_param_error(e) from None
        finally:
            if previous is None:
                os.environ.pop(cache.ENV, None)
            else:
                os.environ[cache.ENV] = previous
    total = time.perf_counter() - t0

    n_ok = print_prove_report(out, rows, total)
    if rows:
        # every worker has been joined (the pool is shut down): its CPU is counted
        cpu, solver = _cpu_seconds() - cpu0, sum(r.solver_seconds for r in rows)
        n_cached = sum(r.cached for r in rows)
        out.print(f"CPU {cpu:.1f} s over all processes, {solver:.1f} s of it in the solver's "
                  f"checks: {cpu / solver if solver else float('inf'):.2f}x the solver's own"
                  + (f"; {n_cached} row(s) from the result cache" if n_cached else ""),
                  markup=False, highlight=False)
    failed = False
    for flag, path, write in (
        ("--json", json_file, lambda f: results.write_json(f, header, rows, total)),
        ("--junit", junit_file, lambda f: results.write_junit(rows, f, total)),
    ):
        if path is None:
            continue
        try:  # a failed --json write does not skip --junit
            write(path)
        except OSError as e:
            error_line(str(CliError(flag, path, f"a writable file ({e.strerror})")))
            failed = True
    if failed:
        raise typer.Exit(2)
    if not rows or n_ok != len(rows):
        raise typer.Exit(1)


def _empty_selection(obligation: str | None, rule: str | None, load_model: str | None,
                     vllm: str | None) -> None:
    """No row matches the options: one line naming the last narrowing option
    and the values it could take with the others kept."""
    from kvreach.proofs.rows import rows_for

    given = {"--obligation": obligation, "--rule": rule, "--load-model": load_model,
             "--vllm": vllm}
    sel = dict(obligation=obligation, rule=rule, model=load_model, vllm=vllm)
    flag = [f for f, v in given.items() if v is not None][-1]
    key = {"--obligation": "obligation", "--rule": "rule", "--load-model": "model",
           "--vllm": "vllm"}[flag]
    others = " ".join(f"{f} {v}" for f, v in given.items() if v is not None and f != flag)
    if key == "vllm":
        from kvreach.releases import RELEASES

        ok = [r.names[-1] for r in RELEASES
              if any(True for _ in rows_for(**(sel | {"vllm": r.names[-1]})))]
    else:
        pos = {"obligation": 0, "rule": 1, "model": 2}[key]
        ok = sorted({row[pos] for row in rows_for(**(sel | {key: None}))} - {"any"})
    why = f"no proof row has {flag} {given[flag]}" + (f" with {others}" if others else "")
    raise CliError(flag, given[flag], (f"one of {', '.join(ok)} here" if ok else
                                       "another selection") + f" ({why})")


def _cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and of its children that
    have ended (the pool's workers, once joined)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _rows_with_progress(rows, order: list, err, t0: float):
    """The runner's rows, with progress on stderr: a bar on a terminal, else
    one line per finished row (CI logs)."""
    if not err.is_terminal:
        for i, row in enumerate(rows, 1):
            err.print(f"[{i}/{len(order)}] {row.obligation} {row.rule} {row.load_model} "
                      f"vllm {row.vllm}: "
                      f"{row.verdict}{' (cached)' if row.cached else ''} "
                      f"({'ok' if row.ok else 'NOT ok'}) {row.seconds:.2f} s "
                      f"(solver {row.solver_seconds:.2f} s), "
                      f"{time.perf_counter() - t0:.0f} s elapsed", markup=False, soft_wrap=True,
                      highlight=False)
            yield row
        return
    from rich.progress import (
        BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
    )

    desc = lambda i: "proving " + "/".join(order[i]) if i < len(order) else "done"  # noqa: E731
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True) as p:
        task = p.add_task(desc(0), total=len(order))
        for i, row in enumerate(rows, 1):
            p.update(task, advance=1, description=desc(i))
            yield row
