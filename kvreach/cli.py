"""Command line: ``kvreach prove``, ``kvreach simulate``, ``kvreach plot``,
``kvreach counterexample``, ``kvreach catalog`` (docs/proofs.md) and
``kvreach diagram`` (the lifecycle diagram of docs/lifecycle.md).

Last stage of the data flow (params -> rules -> lifecycle -> properties ->
report). Bad input (``kvreach.params.ParamError`` or a click usage error) is
reported as one line on stderr, ``error: --flag=value: expected ...``, with
exit code 2 and no traceback; that is done once, in :class:`_OneLineErrors`,
so it holds under ``typer.testing.CliRunner`` as well as the console script.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import time
import typing
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

try:  # newer typer vendors click as typer._click
    from typer._click import exceptions as _cx
    from typer.exceptions import Abort as _Abort
except ImportError:  # pragma: no cover
    from click import exceptions as _cx
    from click.exceptions import Abort as _Abort

from kvreach.params import LOAD_MODELS, RULES, ParamError, check_load_model, check_rule

if TYPE_CHECKING:
    from kvreach.impl.lifecycle import Trace

# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

# ParamError.param (library names) -> the CLI flag that sets it.
PARAM_FLAGS: dict[str, str] = {
    "block_size": "--swa-block-size",
    "window": "--window",
    "alignment_tokens": "--full-block-size",
    "blocks_per_chunk": "--blocks-per-chunk",
    "dcp_world_size": "--dcp",
    "retention_interval": "--retention-interval",
    "prompt_tokens": "--prompt",
    "max_offload_tokens": "--max-offload-tokens",
    "budget": "--budget",
    "decode": "--decode",
    "abort_after_step": "--abort-after-step",
    "rule": "--rule",
    "load_model": "--load-model",
    "obligation": "--obligation",
}


class CliError(Exception):
    """Bad command-line input, already phrased for the user."""

    def __init__(self, flag: str, value: object, expected: str) -> None:
        self.flag, self.value, self.expected = flag, value, expected
        super().__init__(f"{flag}={_show(value)}: expected {expected}")


def _show(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _from_param_error(e: ParamError, flags: dict[str, str] | None = None) -> CliError:
    table = PARAM_FLAGS | (flags or {})
    flag = table.get(e.param, "--" + e.param.replace("_", "-"))
    return CliError(flag, e.value, e.expected)


def _error_line(msg: str) -> None:
    msg = " ".join(str(msg).split())  # one line, whatever the message
    sys.stderr.write(f"error: {msg}\n")
    sys.stderr.flush()


def _usage_message(e: Exception) -> str:
    """click's message, as ``--flag=value: expected ...`` when a typed value
    failed to convert (typer keeps the pydantic error as the cause)."""
    param = getattr(e, "param", None)
    cause = e.__cause__
    if (
        param is not None and getattr(param, "opts", None) and cause is not None
        and hasattr(cause, "errors") and type(e).__name__ == "BadParameter"
    ):
        try:
            err = cause.errors()[0]
            flag = max(param.opts, key=len)
            kind = str(err.get("type", ""))
            want = (
                "an integer" if kind.startswith("int_") else
                "a number" if kind.startswith("float_") else
                "a boolean" if kind.startswith("bool_") else err["msg"]
            )
            return f"{flag}={err['input']}: expected {want}"
        except Exception:  # noqa: BLE001  (fall back to click's own wording)
            pass
    return e.format_message()


class _OneLineErrors(TyperGroup):
    """Runs the command non-standalone and turns every input error into one
    ``error: ...`` line on stderr (exit 2) instead of click's usage panel."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            rv = super().main(
                args=args, prog_name=prog_name, complete_var=complete_var,
                standalone_mode=False, **extra,
            )
            code = rv if isinstance(rv, int) else 0
        except CliError as e:
            _error_line(str(e))
            code = 2
        except ParamError as e:
            _error_line(str(_from_param_error(e)))
            code = 2
        except _cx.ClickException as e:  # UsageError, BadParameter, ...
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `kvreach`: help
                sys.stdout.write(e.ctx.get_help() + "\n")
                code = 0
            else:
                _error_line(_usage_message(e))
                code = e.exit_code
        except _Abort:
            _error_line("aborted")
            code = 1
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Z3 spec and executable model of vLLM's SWA KV-offload store rules (PR #54362).",
)


def _out() -> Console:
    c = Console()
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(width=160)  # files and pipes: room for the tables
    return c


def _err() -> Console:
    return Console(stderr=True)


def _need_int(flag: str, value: int | None, minimum: int) -> None:
    if value is not None and value < minimum:
        raise CliError(flag, value, f"an integer >= {minimum}")


def _check_choice(flag: str, value: str | None, check) -> None:
    if value is None:
        return
    try:
        check(value)
    except ParamError as e:
        raise CliError(flag, value, e.expected) from None


def ranges(chunks: Iterable[int]) -> str:
    """Compress ``[5, 6, 7, 8, 14, 15]`` to ``"5-8,14-15"`` ("-" when empty)."""
    xs = sorted(set(chunks))
    if not xs:
        return "-"
    out, lo, prev = [], xs[0], xs[0]
    for x in xs[1:]:
        if x == prev + 1:
            prev = x
            continue
        out.append(f"{lo}-{prev}" if prev > lo else f"{lo}")
        lo = prev = x
    out.append(f"{lo}-{prev}" if prev > lo else f"{lo}")
    return ",".join(out)


# ---------------------------------------------------------------------------
# shared rendering of a lifecycle trace (Trace.to_json form)
# ---------------------------------------------------------------------------


def _steps_table(trace: dict, title: str) -> Table:
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("step", "kind", "sched", "computed", "after", "offload", "chunks",
                "cursor", "#sub"):
        t.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True)
    for s in trace["steps"]:
        kind = s["kind"] + ("*" if s.get("in_flight") else "")
        t.add_row(
            str(s["index"]), kind, str(s["scheduled_tokens"]), str(s["num_computed_tokens"]),
            str(s["tokens_after_batch"]), str(s["offloadable_tokens"]), str(s["num_chunks"]),
            f"{s['cursor_before']}->{s['cursor_after']}", str(len(s["submitted"])),
        )
    return t


def _print_steps(console: Console, trace: dict, loadable: set[int] | None, title: str) -> None:
    """The steps table, then each step's submitted chunks as ranges (and the
    ones the load model never loads)."""
    console.print(_steps_table(trace, title))
    console.print("columns: sched = tokens scheduled, computed = num_computed_tokens, "
                  "after = num_tokens_after_batch, offload = offloadable tokens, "
                  "chunks = storable chunks (num_chunks), cursor = next_stored_chunk_idx",
                  style="dim", soft_wrap=True)
    if any(s.get("in_flight") for s in trace["steps"]):
        console.print("*: async scheduling, the last step's output still in flight",
                      style="dim", soft_wrap=True)
    for s in trace["steps"]:
        line = f"step {s['index']} {s['kind']} submitted: {ranges(s['submitted'])}"
        if loadable is not None:
            bad = [c for c in s["submitted"] if c not in loadable]
            if bad:
                line += f"   [red]not loadable: {ranges(bad)}[/]"
        console.print(line, soft_wrap=True)


def _config_line(group: dict, request: dict, lifecycle: dict | None = None) -> str:
    parts = [
        f"block_size={group['block_size']}", f"window={group['window']}",
        f"alignment_tokens={group['alignment_tokens']}",
        f"blocks_per_chunk={group['blocks_per_chunk']}",
        f"dcp={group.get('dcp_world_size', 1)}", f"eagle={group['eagle']}",
        f"retention_interval={group['retention_interval']}",
        f"prompt={request['prompt_tokens']}",
        f"max_offload_tokens={request['max_offload_tokens']}",
        f"offload_prompt_only={request['offload_prompt_only']}",
    ]
    if lifecycle is not None:
        parts.append(f"budget={lifecycle['budget']}")
        if lifecycle.get("prefill_steps") is not None:
            parts.append("prefill_steps=" + ",".join(map(str, lifecycle["prefill_steps"])))
        parts.append(f"decode={lifecycle['decode']}")
        parts.append(f"abort_after_step={lifecycle['abort_after_step']}")
        if lifecycle.get("async_scheduling"):
            parts.append("async")
    return " ".join(parts)


def _sets_summary(console: Console, stored: list[int], loadable: set[int],
                  needed: set[int], model: str) -> None:
    st = set(stored)
    dup = sorted({c for c in stored if stored.count(c) > 1})
    console.print(f"[bold]stored[/] ({len(stored)}): {ranges(stored)}", soft_wrap=True)
    if dup:
        console.print(f"[red]submitted more than once[/]: {ranges(dup)}", soft_wrap=True)
    console.print(f"[bold]loadable[/] under {model} ({len(loadable)}): {ranges(loadable)}",
                  soft_wrap=True)
    console.print(f"[bold]needed[/] under {model} ({len(needed)}): {ranges(needed)}",
                  soft_wrap=True)
    snl, nns = sorted(st - loadable), sorted(needed - st)
    style = "red" if snl else "green"
    console.print(f"[{style}]stored-not-loadable[/] ({len(snl)}): {ranges(snl)}", soft_wrap=True)
    style = "red" if nns else "green"
    console.print(f"[{style}]needed-not-stored[/] ({len(nns)}): {ranges(nns)}", soft_wrap=True)


# ---------------------------------------------------------------------------
# prove
# ---------------------------------------------------------------------------

RuleOpt = Annotated[Optional[str], typer.Option("--rule", help="one of " + ", ".join(RULES))]
ModelOpt = Annotated[
    Optional[str], typer.Option("--load-model", help="one of " + ", ".join(LOAD_MODELS))
]


def _mark(b: bool | None) -> str:
    return "-" if b is None else ("[green]yes[/]" if b else "[red]NO[/]")


def _scope_ref(i: int) -> str:
    return f"\\[{i}]"


def _cex_line(row) -> str:
    cex = row.counterexample or {}
    cfg = cex.get("config", {})
    g, r = cfg.get("group", {}), cfg.get("request", {})
    lc = cex.get("lifecycle")
    s = f"{row.obligation} {row.rule} {row.load_model}: chunk {cex.get('chunk')}"
    if g:
        s += "; " + _config_line(g, r, lc)
    if "final_horizon_chunks" in cex:
        s += f"; final_horizon_chunks={cex['final_horizon_chunks']}"
        s += f" boundary_block={cex.get('boundary_block')}"
    if "replayed_violation" in cex:
        s += f"; replayed violation chunks: {ranges(cex['replayed_violation'])}"
    return s


def _junit(rows: list, path: Path, total: float) -> None:
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", {
        "name": "kvreach.prove", "tests": str(len(rows)),
        "failures": str(sum(1 for r in rows if not r.ok)), "errors": "0",
        "skipped": "0", "time": f"{total:.3f}",
    })
    for r in rows:
        tc = ET.SubElement(suite, "testcase", {
            "classname": f"kvreach.prove.{r.obligation}",
            "name": f"{r.obligation}[{r.rule},{r.load_model}]",
            "time": f"{r.seconds:.3f}",
        })
        if not r.ok:
            f = ET.SubElement(tc, "failure", {
                "message": f"verdict {r.verdict}, expected {r.expected}",
                "type": r.verdict,
            })
            f.text = (
                f"verdict={r.verdict} expected={r.expected} non_vacuous={r.non_vacuous} "
                f"mutant={r.mutant} mutant_rejected={r.mutant_rejected} detail={r.detail}"
            )
        out = ET.SubElement(tc, "system-out")
        out.text = json.dumps(r.to_json(), default=str)
    ET.indent(suites)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def _prove_table(rows: list) -> Table:
    """One row per (obligation, rule, load model); scope as a footnote number."""
    scopes = list(dict.fromkeys(r.scope for r in rows))
    table = Table(title="kvreach prove", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("obligation\n  rule, load model", no_wrap=True, min_width=18)
    table.add_column("verdict", no_wrap=True)
    table.add_column("expected", no_wrap=True)
    table.add_column("ok", justify="center", no_wrap=True)
    table.add_column("non-\nvac.", justify="center", no_wrap=True)
    table.add_column("mutant\n  rejected", overflow="fold", min_width=10)
    table.add_column("s", justify="right", no_wrap=True)
    table.add_column("rlimit", justify="right", no_wrap=True)
    table.add_column("scope", justify="right", no_wrap=True)
    for r in rows:
        vstyle = {"proved": "green", "counterexample": "yellow"}.get(r.verdict, "red")
        table.add_row(
            f"{r.obligation}\n  [dim]{r.rule}, {r.load_model}[/]",
            f"[{vstyle}]{r.verdict}[/]", r.expected,
            "[green]✓[/]" if r.ok else "[red]✗[/]", _mark(r.non_vacuous),
            f"{r.mutant}\n  {_mark(r.mutant_rejected)}",
            f"{r.seconds:.2f}", f"{r.rlimit:,}", _scope_ref(scopes.index(r.scope) + 1),
        )
    return table


def _git_commit() -> str | None:
    """HEAD of the checkout kvreach runs from (``-dirty`` with local changes to
    tracked files), or None outside git."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _run_header(obligation, rule, load_model, total: float) -> dict:
    """The ``run`` header of ``prove --json``: what ran, with which versions,
    when (one field) and how long; every other field is reproducible."""
    import platform
    from datetime import datetime, timezone
    from importlib import metadata

    import z3

    try:
        version = metadata.version("kvreach")
    except metadata.PackageNotFoundError:  # pragma: no cover
        version = None
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kvreach": version, "git_commit": _git_commit(),
        "z3": z3.get_version_string(), "python": platform.python_version(),
        "selection": {"obligation": obligation, "rule": rule, "load_model": load_model},
        "seconds": round(total, 3),
    }


@app.command()
def prove(
    rule: RuleOpt = None,
    load_model: ModelOpt = None,
    obligation: Annotated[Optional[str], typer.Option("--obligation", help="one obligation")] = None,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="write the run header and rows as JSON")] = None,
    junit_file: Annotated[Optional[Path], typer.Option("--junit", help="write JUnit XML")] = None,
) -> None:
    """Run the proof obligations with Z3; exit 0 only if every row is as expected."""
    from kvreach.proofs import runner
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
    header = _run_header(obligation, rule, load_model, 0.0)  # the code and time it starts with
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

    out.print(_prove_table(rows))
    scopes = list(dict.fromkeys(r.scope for r in rows))
    base = os.path.commonprefix(scopes) if len(scopes) > 1 else ""
    base = base[: base.rfind(";") + 1] if ";" in base else ""
    out.print("[bold]scopes[/]" + (f" (all: {base.rstrip(';')})" if base else "") + ":",
              soft_wrap=True)
    for i, sc in enumerate(scopes, 1):
        out.print(f"  [{i}] {sc[len(base):].strip()}", markup=False, soft_wrap=True)
    details = [r for r in rows if r.detail]
    if details:
        out.print("[bold]details[/]:")
        for r in details:
            out.print(f"  {r.obligation} {r.rule} {r.load_model}: {r.detail}",
                      markup=False, soft_wrap=True)
    cexs = [r for r in rows if r.verdict == "counterexample" and r.counterexample]
    if cexs:
        out.print("[bold]counterexamples[/]:")
        for r in cexs:
            out.print("  " + _cex_line(r), markup=False, soft_wrap=True)
    n_ok = sum(1 for r in rows if r.ok)
    out.print(f"{len(rows)} row(s), {n_ok} ok, {len(rows) - n_ok} not ok; total {total:.2f} s")

    try:
        if json_file is not None:
            doc = {"run": {**header, "seconds": round(total, 3)},
                   "rows": [r.to_json() for r in rows]}
            json_file.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    except OSError as e:
        raise CliError("--json", json_file, f"a writable file ({e.strerror})") from None
    try:
        if junit_file is not None:
            _junit(rows, junit_file, total)
    except OSError as e:
        raise CliError("--junit", junit_file, f"a writable file ({e.strerror})") from None
    if not rows or n_ok != len(rows):
        raise typer.Exit(1)


# ---------------------------------------------------------------------------
# scenario options: one definition, shared by simulate and plot
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One request's scenario as given on the command line (``simulate`` and
    ``plot``); :func:`_run_scenario` validates it and drives the rule."""

    swa_block_size: int
    window: int
    prompt: int
    budget: int
    full_block_size: int | None = None
    blocks_per_chunk: int = 1
    dcp: int = 1
    eagle: bool = False
    retention_interval: int | None = None
    max_offload_tokens: int | None = None
    offload_prompt_only: bool = True
    abort_after_step: int | None = None
    async_scheduling: bool = False
    decode: int = 0
    load_model: str = "intended"

    def config(self, rule: str) -> dict:
        """The ``config`` object of ``simulate --json`` (option names)."""
        return {
            "rule": rule, "load_model": self.load_model,
            "full_block_size": self.full_block_size, "swa_block_size": self.swa_block_size,
            "window": self.window, "blocks_per_chunk": self.blocks_per_chunk, "dcp": self.dcp,
            "eagle": self.eagle, "retention_interval": self.retention_interval,
            "prompt": self.prompt, "budget": self.budget,
            "max_offload_tokens": self.max_offload_tokens,
            "offload_prompt_only": self.offload_prompt_only, "decode": self.decode,
            "abort_after_step": self.abort_after_step, "async": self.async_scheduling,
        }


_REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class _Opt:
    """One scenario option: Scenario field, flag(s), type, default, help."""

    name: str
    flag: str
    type: object
    default: object = _REQUIRED
    help: str | None = None

    def parameter(self) -> inspect.Parameter:
        ann = Annotated[self.type, typer.Option(self.flag, help=self.help)]  # type: ignore[valid-type]
        return inspect.Parameter(self.name, inspect.Parameter.KEYWORD_ONLY,
                                 annotation=ann, default=self.default)


# The scenario options, in --help order.
SCENARIO_OPTIONS: list[_Opt] = [
    _Opt("swa_block_size", "--swa-block-size", int, help="SWA block_size (tokens)"),
    _Opt("window", "--window", int, help="sliding window W (tokens)"),
    _Opt("prompt", "--prompt", int, help="prompt tokens"),
    _Opt("budget", "--budget", int, help="per-step token budget"),
    _Opt("full_block_size", "--full-block-size", Optional[int], None,
         "full-attention block_size; alignment = it * dcp * blocks_per_chunk "
         "(omit: SWA-only, alignment = the SWA chunk)"),
    _Opt("blocks_per_chunk", "--blocks-per-chunk", int, 1),
    _Opt("dcp", "--dcp", int, 1, "decode context parallel world size"),
    _Opt("eagle", "--eagle", bool, False, "EAGLE/MTP draft group"),
    _Opt("retention_interval", "--retention-interval", Optional[int], None),
    _Opt("max_offload_tokens", "--max-offload-tokens", Optional[int], None),
    _Opt("offload_prompt_only", "--offload-prompt-only/--no-offload-prompt-only", bool, True),
    _Opt("abort_after_step", "--abort-after-step", Optional[int], None,
         "abort once K steps are scheduled"),
    _Opt("async_scheduling", "--async", bool, False, "async scheduling"),
    _Opt("decode", "--decode", int, 0, "decode steps after the prompt"),
    _Opt("load_model", "--load-model", str, "intended", "one of " + ", ".join(LOAD_MODELS)),
]


def _scenario_command(fn: Callable[..., None]) -> Callable[..., None]:
    """Give command ``fn`` the scenario options of :data:`SCENARIO_OPTIONS`
    after its own; ``fn`` receives them as one ``scenario: Scenario``."""
    hints = typing.get_type_hints(fn, include_extras=True)
    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints[p.name])
        for p in inspect.signature(fn).parameters.values() if p.name != "scenario"
    ]
    shared = [o.parameter() for o in SCENARIO_OPTIONS]

    @functools.wraps(fn)
    def command(**kw: object) -> None:
        scenario = Scenario(**{o.name: kw.pop(o.name) for o in SCENARIO_OPTIONS})
        return fn(scenario=scenario, **kw)

    # fn's positional parameters first (e.g. --rule), then the scenario, then
    # fn's keyword-only ones (e.g. --json)
    first = [p.name for p in inspect.signature(fn).parameters.values()
             if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    params = ([p for p in own if p.name in first] + shared
              + [p for p in own if p.name not in first])
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def _run_scenario(rule: str, s: Scenario) -> Trace:
    """Validate ``s`` (one-line errors naming the flag) and drive it through
    the executable rule ``rule``."""
    from kvreach.impl.lifecycle import Lifecycle, run
    from kvreach.params import GroupConfig, RequestConfig

    for flag, v, lo in [
        ("--swa-block-size", s.swa_block_size, 1), ("--window", s.window, 1),
        ("--prompt", s.prompt, 1), ("--budget", s.budget, 1),
        ("--full-block-size", s.full_block_size, 1), ("--blocks-per-chunk", s.blocks_per_chunk, 1),
        ("--dcp", s.dcp, 1), ("--retention-interval", s.retention_interval, 0),
        ("--max-offload-tokens", s.max_offload_tokens, 0),
        ("--abort-after-step", s.abort_after_step, 0), ("--decode", s.decode, 0),
    ]:
        _need_int(flag, v, lo)
    unit = s.full_block_size if s.full_block_size is not None else s.swa_block_size
    try:
        g = GroupConfig(
            block_size=s.swa_block_size, window=s.window,
            alignment_tokens=unit * s.dcp * s.blocks_per_chunk,
            blocks_per_chunk=s.blocks_per_chunk, dcp_world_size=s.dcp, eagle=s.eagle,
            retention_interval=s.retention_interval,
        )
        req = RequestConfig(s.prompt, s.max_offload_tokens, s.offload_prompt_only)
        lc = Lifecycle(budget=s.budget, decode=s.decode, abort_after_step=s.abort_after_step,
                       async_scheduling=s.async_scheduling)
        return run(rule, g, req, lc)
    except ParamError as e:
        raise _from_param_error(e) from None


# ---------------------------------------------------------------------------
# simulate
# ---------------------------------------------------------------------------


@app.command()
@_scenario_command
def simulate(
    rule: Annotated[str, typer.Option("--rule", help="one of " + ", ".join(RULES))],
    *,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    scenario: Scenario,
) -> None:
    """Drive one request through the executable store rule and show every step."""
    s = scenario
    _check_choice("--rule", rule, check_rule)
    _check_choice("--load-model", s.load_model, check_load_model)
    trace = _run_scenario(rule, s)
    load_model, g = s.load_model, trace.group

    loadable, needed = trace.loadable(load_model), trace.needed(load_model)
    stored = list(trace.stored)
    tj = trace.to_json(load_model)
    derived = {
        "alignment_tokens": g.alignment_tokens, "block_tokens": g.block_tokens,
        "chunk_tokens": g.chunk_tokens, "need": g.need, "per_segment": g.per_segment,
        "dense": g.dense, "final_alignment_blocks": g.final_alignment_blocks,
    }
    if as_json:
        steps = [
            {"step": st["index"], **st,
             "not_loadable": [c for c in st["submitted"] if c not in loadable]}
            for st in tj["steps"]
        ]
        doc = {
            "config": s.config(rule) | {"derived": derived},
            "groups": {"swa": {
                "steps": steps,
                "stored": sorted(stored),
                "loadable": sorted(loadable),
                "needed": sorted(needed),
                "stored_not_loadable": sorted(set(stored) - loadable),
                "needed_not_stored": sorted(needed - set(stored)),
                "final_chunks": trace.final_chunks,
                "computed_tokens": trace.computed_tokens,
            }},
            "trace": tj,
        }
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return

    out = _out()
    out.print(f"[bold]rule[/] {rule}  [bold]load model[/] {load_model}", soft_wrap=True)
    out.print(_config_line(tj["group"], tj["request"], tj["lifecycle"]), markup=False, soft_wrap=True)
    out.print(" ".join(f"{k}={v}" for k, v in derived.items()), markup=False, soft_wrap=True)
    _print_steps(out, tj, set(loadable), "SWA group: steps")
    out.print(f"final horizon {trace.final_chunks} chunks, computed {trace.computed_tokens} tokens",
              soft_wrap=True)
    _sets_summary(out, stored, set(loadable), set(needed), load_model)


# ---------------------------------------------------------------------------
# plot
# ---------------------------------------------------------------------------

PLOT_EXTRA = "matplotlib: install the plot extra (pip install -e '.[plot]')"


def _plot_paths(flag: str, out: Path) -> tuple[Path, Path]:
    """Check an output option before any work: a .png or .svg name in an
    existing directory, and matplotlib importable. -> (png, svg)."""
    from kvreach import plot as kplot  # no matplotlib here

    try:
        png, svg = kplot.out_paths(out)
    except ValueError:
        raise CliError(flag, out, "a file name ending in .png or .svg (both are written)") from None
    if not png.parent.is_dir():
        raise CliError(flag, out, "a file in an existing directory")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CliError(flag, out, PLOT_EXTRA) from None
    return png, svg


def _chunk_range(value: str | None) -> tuple[int, int] | None:
    """``--chunks LO:HI`` -> ``(LO, HI)``, chunks ``LO..HI-1``."""
    if value is None:
        return None
    lo, sep, hi = value.partition(":")
    try:
        a, b = int(lo), int(hi)
    except ValueError:
        a = b = -1
    if not sep or not 0 <= a < b:
        raise CliError("--chunks", value, "LO:HI with 0 <= LO < HI (chunk indices, HI excluded)")
    return a, b


def _draw(flag: str, out: Path, maps: list, suptitle: str) -> list:
    """Draw ``maps`` to ``out``'s PNG and SVG; -> the maps as drawn."""
    from kvreach import plot as kplot

    try:
        return kplot.draw(maps, out, suptitle=suptitle)
    except OSError as e:
        raise CliError(flag, out, f"a writable file ({e.strerror})") from None


def _print_drawn(console: Console, drawn: list, png: Path, svg: Path) -> None:
    from kvreach.plot import MISSED, WASTED, panel_title

    for m in drawn:
        end = m.rows[-1]  # the end state (or a mask's single row)
        console.print(f"{panel_title(m)}; drawn chunks {m.lo}-{m.hi - 1}: "
                      f"wasted {ranges(end.chunks(WASTED))}, missed {ranges(end.chunks(MISSED))}",
                      markup=False, soft_wrap=True)
    console.print(f"wrote {png} and {svg}", markup=False, soft_wrap=True)


def _scenario_flags(s: Scenario, rules: list[str]) -> str:
    """The scenario as the options that reproduce it (defaults left out)."""
    parts = [f"--rule {rules[0]}" if len(rules) == 1 else "--compare " + " ".join(rules)]
    for o in SCENARIO_OPTIONS:
        v = getattr(s, o.name)
        if v == o.default:
            continue
        flags = o.flag.split("/")
        if isinstance(v, bool):
            parts.append(flags[0] if v else flags[-1])
        else:
            parts.append(f"{flags[0]} {v}")
    return " ".join(parts)


@app.command()
@_scenario_command
def plot(
    out_file: Annotated[Path, typer.Option(
        "--out", metavar="FILE",
        help="write the chunk map to FILE; FILE ends in .png or .svg and the other "
             "format is written beside it (always both PNG and SVG)")],
    rule: Annotated[Optional[str], typer.Option(
        "--rule", help="one of " + ", ".join(RULES) + " (or --compare)")] = None,
    compare: Annotated[Optional[tuple[str, str]], typer.Option(
        "--compare", metavar="RULE RULE",
        help="draw two rules one above the other on the same chunk range")] = None,
    *,
    chunks: Annotated[Optional[str], typer.Option(
        "--chunks", metavar="LO:HI",
        help="draw chunks LO..HI-1 only (default: the whole request)")] = None,
    scenario: Scenario,
) -> None:
    """Draw the chunk map of one scenario (the options of `simulate`) to PNG and SVG.

    One row per scheduler step and a final 'stored at end' row; cells:
    submitted this step, stored earlier, loadable but not stored, and stored
    but not loadable (wasted, red). Needs the `plot` extra (matplotlib).
    """
    from kvreach import plot as kplot

    if rule is None and compare is None:
        raise CliError("--rule", "(missing)", "one of " + ", ".join(RULES)
                       + " (or --compare RULE RULE)")
    if rule is not None and compare is not None:
        raise CliError("--compare", " ".join(compare), "either --rule or --compare, not both")
    rules = [rule] if rule is not None else list(compare or ())
    for r in rules:
        _check_choice("--rule" if compare is None else "--compare", r, check_rule)
    png, svg = _plot_paths("--out", out_file)
    zoom = _chunk_range(chunks)
    _check_choice("--load-model", scenario.load_model, check_load_model)
    traces = [_run_scenario(r, scenario) for r in rules]

    maps = [kplot.chunk_map(t.to_json(scenario.load_model)) for t in traces]
    lo, hi = zoom or (0, max(m.hi for m in maps))
    maps = [kplot.clipped(m, lo, hi) for m in maps]
    drawn = _draw("--out", out_file, maps, "kvreach plot " + _scenario_flags(scenario, rules))
    _print_drawn(_out(), drawn, png, svg)


# ---------------------------------------------------------------------------
# counterexample
# ---------------------------------------------------------------------------


@app.command()
def counterexample(
    obligation: Annotated[str, typer.Argument(help="obligation name (see `kvreach prove`)")],
    rule: RuleOpt = None,
    load_model: ModelOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot_file: Annotated[Optional[Path], typer.Option(
        "--plot", metavar="FILE",
        help="also draw the counterexample's chunk map to FILE (.png or .svg; both are "
             "written): the replayed lifecycle, or for mask-equivalence the mask at "
             "the decoded final horizon against the loadable chunks")] = None,
) -> None:
    """Find and show a concrete counterexample scenario for one obligation row."""
    from kvreach.proofs import runner
    from kvreach.proofs.obligations import OBLIGATIONS

    if obligation not in OBLIGATIONS:
        raise CliError("OBLIGATION", obligation, "one of " + ", ".join(OBLIGATIONS))
    _check_choice("--rule", rule, check_rule)
    _check_choice("--load-model", load_model, check_load_model)
    ob = OBLIGATIONS[obligation]
    if ob.rule_specific and rule is None:
        raise CliError("--rule", "(missing)", f"one of {', '.join(RULES)} for '{obligation}'")
    if ob.model_specific and load_model is None:
        raise CliError("--load-model", "(missing)",
                       f"one of {', '.join(LOAD_MODELS)} for '{obligation}'")
    if plot_file is not None:
        if ob.kind == "static" and obligation not in MAPPABLE_STATIC:
            raise CliError("--plot", plot_file,
                           "a lifecycle obligation or " + ", ".join(MAPPABLE_STATIC)
                           + f" ('{obligation}' has no chunk map)")
        _plot_paths("--plot", plot_file)
    r = rule if ob.rule_specific else "any"
    m = load_model if ob.model_specific else "any"
    concrete_rule = "vllm-0.33" if r == "any" else r
    concrete_model = "intended" if m == "any" else m

    t0 = time.perf_counter()
    err = _err()
    depth = cex = None
    verdict, detail = None, ""
    with err.status(f"searching {obligation}/{r}/{m} ..."):
        try:
            if ob.kind == "lifecycle" and obligation != "invariant":
                depth, cex = runner.find_counterexample(obligation, concrete_rule, concrete_model)
                if cex is not None:
                    verdict = "counterexample"
            if verdict is None:
                inv = {}
                if ob.kind == "lifecycle" and obligation != "invariant":
                    inv_row = runner.run_row("invariant", concrete_rule, "any", {})
                    inv[concrete_rule] = inv_row.verdict == "proved"
                row = runner.run_row(obligation, r, m, inv)
                verdict, detail, cex = row.verdict, row.detail, row.counterexample
        except ParamError as e:
            raise _from_param_error(e) from None
    secs = time.perf_counter() - t0
    replayed = (cex or {}).get("replayed_violation")
    if verdict == "counterexample" and ob.kind == "lifecycle" and not replayed:
        detail = detail or "counterexample did NOT replay through the executable rule"

    if as_json:
        doc = {"obligation": obligation, "rule": r, "load_model": m, "verdict": verdict,
               "depth": depth, "seconds": round(secs, 3), "detail": detail,
               "counterexample": cex}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        out = _out()
        out.print(f"[bold]{obligation}[/] rule={r} load_model={m}: [bold]{verdict}[/] "
                  f"({secs:.2f} s)", soft_wrap=True)
        out.print(OBLIGATIONS[obligation].statement, markup=False, soft_wrap=True)
        if detail:
            out.print(f"detail: {detail}", markup=False, soft_wrap=True)
        if verdict == "proved":
            out.print("[green]proved: no counterexample exists[/]")
        elif cex is not None:
            _print_cex(out, cex, concrete_model, depth)
    if plot_file is not None:
        if verdict != "counterexample" or cex is None:
            raise CliError("--plot", plot_file,
                           f"a row with a counterexample to draw ('{obligation}' {r} {m}: {verdict})")
        _plot_cex(plot_file, obligation, cex, concrete_rule, concrete_model, as_json)
    if verdict == "unknown" or (verdict == "counterexample" and detail):
        raise typer.Exit(1)


# Static obligations whose counterexample is a chunk set at one horizon.
MAPPABLE_STATIC = ("mask-equivalence",)


def _plot_cex(out_file: Path, obligation: str, cex: dict, rule: str, model: str,
              quiet: bool) -> None:
    """Draw a counterexample: the replayed lifecycle, or a static one's mask at
    its final horizon against the loadable chunks (a single row)."""
    from kvreach import plot as kplot
    from kvreach.proofs.decode import replay_mask

    title = f"{obligation} counterexample: {rule}, load model {model}"
    if cex.get("trace") is not None:
        m = kplot.chunk_map(cex["trace"], title=title)
        bad = cex.get("replayed_violation") or []
    else:
        kept, wanted = replay_mask(cex, rule, model)
        m = kplot.mask_map(rule, model, cex["config"]["group"], kept, wanted,
                           cex["final_horizon_chunks"], title=title)
        bad = sorted(kept ^ wanted)
    g, req = cex["config"]["group"], cex["config"]["request"]
    sup = f"replayed violation chunks: {ranges(bad)}; tracked chunk {cex.get('chunk')}\n"
    sup += _config_line(g, req, cex.get("lifecycle"))
    png, svg = kplot.out_paths(out_file)
    drawn = _draw("--plot", out_file, [m], sup)
    _print_drawn(_err() if quiet else _out(), drawn, png, svg)


def _print_cex(out: Console, cex: dict, model: str, depth: int | None) -> None:
    cfg = cex["config"]
    t = Table(title="configuration", title_justify="left", show_header=False)
    t.add_column("key")
    t.add_column("value")
    for k, v in {**cfg["group"], **cfg["request"], **(cex.get("lifecycle") or {})}.items():
        t.add_row(k, _show(v) if v is not None else "None")
    t.add_row("tracked chunk", str(cex.get("chunk")))
    for k in ("final_horizon_chunks", "boundary_block"):
        if k in cex:
            t.add_row(k, str(cex[k]))
    if depth is not None:
        t.add_row("BMC depth (steps)", str(depth))
    out.print(t)
    trace = cex.get("trace")
    if trace is None:
        return
    loadable = set(trace.get("loadable", []))
    _print_steps(out, trace, loadable, f"replayed lifecycle (load model {model})")
    spec = cex.get("spec_steps") or []
    if spec:
        out.print("spec steps: " + "; ".join(
            f"{i}:{s['kind']} sched={s['scheduled_tokens']} n={s['num_chunks']}"
            f"{' submits tracked chunk' if s['submitted_tracked_chunk'] else ''}"
            for i, s in enumerate(spec, 1)), markup=False, soft_wrap=True)
    _sets_summary(out, list(trace["stored"]), loadable, set(trace.get("needed", [])), model)
    out.print(f"[bold]replayed violation chunks[/]: {ranges(cex.get('replayed_violation') or [])}",
              soft_wrap=True)


# ---------------------------------------------------------------------------
# catalog (docs/proofs.md, generated by kvreach.proofs.catalog)
# ---------------------------------------------------------------------------


def _read_results(flag: str, path: Path) -> dict:
    from kvreach.proofs import catalog as cat

    try:
        return cat.load_results(path)
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e)
        raise CliError(flag, path, f"a `kvreach prove --json` file ({why})") from None


@app.command()
def catalog(
    results: Annotated[Path, typer.Option(
        "--results", help="the proof run's JSON (`kvreach prove --json`)")] = Path("docs/proof-results.json"),
    out: Annotated[Path, typer.Option("--out", help="the Markdown page")] = Path("docs/proofs.md"),
    check: Annotated[bool, typer.Option(
        "--check", help="write nothing; exit 1 if --out or --results is stale")] = False,
    verdicts_only: Annotated[bool, typer.Option(
        "--verdicts-only",
        help="with --check: only compare --results' verdicts with --against's (times ignored)")] = False,
    against: Annotated[Path, typer.Option(
        "--against", help="the committed run, for --verdicts-only")] = Path("docs/proof-results.json"),
) -> None:
    """Generate docs/proofs.md from the obligations, expected verdicts and the latest proof run."""
    from kvreach.proofs import catalog as cat

    if verdicts_only and not check:
        raise CliError("--verdicts-only", True, "--check as well")
    fresh = _read_results("--results", results)
    if verdicts_only:
        diff = cat.verdict_differences(fresh, _read_results("--against", against))
        if diff:
            _error_line(f"stale: {against}'s verdicts differ from {results}'s in {len(diff)} "
                        "row(s) (committed -> fresh): " + "; ".join(diff)
                        + f"; if the fresh run is right, run `{cat.REGENERATE}` and commit")
            raise typer.Exit(1)
        typer.echo(f"{against}: verdicts as in {results} ({len(fresh['rows'])} rows)")
        return
    findings = out.parent / "findings.md"
    try:
        page = cat.render(fresh, findings.read_text() if findings.exists() else "")
    except ValueError as e:
        raise CliError("--results", results, f"a run the catalog can render ({e})") from None
    if not check:
        try:
            out.write_text(page)
        except OSError as e:
            raise CliError("--out", out, f"a writable file ({e.strerror})") from None
        typer.echo(f"wrote {out} ({len(fresh['rows'])} rows from {results})")
        return
    problems = cat.results_problems(fresh)
    if problems:
        _error_line(f"stale: {results}: " + "; ".join(problems) + f"; re-run `{cat.REGENERATE}`")
        raise typer.Exit(1)
    try:
        current = out.read_text()
    except OSError:
        current = None
    if current != page:
        _error_line(f"stale: {out} is not `kvreach catalog`'s output for {results}; "
                    f"run `kvreach catalog --results {results} --out {out}`")
        raise typer.Exit(1)
    typer.echo(f"{out} is up to date with {results}")


# ---------------------------------------------------------------------------
# diagram (docs/lifecycle.md, generated from spec.lifecycle.TRANSITIONS)
# ---------------------------------------------------------------------------


@app.command()
def diagram(
    check: Annotated[bool, typer.Option(
        "--check", help="write nothing; exit 1 if the committed block differs")] = False,
    doc: Annotated[Optional[Path], typer.Option(
        help="the Markdown file holding the generated block (default: docs/lifecycle.md)")] = None,
) -> None:
    """Regenerate the lifecycle diagram block of docs/lifecycle.md from the
    spec's transition table (``--check``: only compare)."""
    from kvreach import diagram as dg

    path = doc or dg.DOC
    if not path.is_file():
        raise CliError("--doc", path, "an existing Markdown file")
    text = path.read_text(encoding="utf-8")
    current = dg.extract(text)
    if current is None:
        raise CliError("--doc", path, f"a file with a {dg.BEGIN} ... {dg.END} block")
    new = dg.block()
    if current == new:
        sys.stdout.write(f"{path}: lifecycle diagram up to date\n")
        return
    if check:
        _error_line(f"{path}: the lifecycle diagram differs from the one generated from "
                    "spec.lifecycle.TRANSITIONS; run `kvreach diagram`")
        raise typer.Exit(1)
    path.write_text(dg.replace(text, new), encoding="utf-8")
    sys.stdout.write(f"{path}: lifecycle diagram regenerated\n")


if __name__ == "__main__":  # pragma: no cover
    app()
