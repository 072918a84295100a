"""Shared CLI plumbing: the one-line error handling (:class:`CliError`,
:class:`OneLineErrors`), the consoles, and the option helpers every command
uses.

Bad input (``kvreach.params.ParamError`` or a click usage error) is reported
as one line on stderr, ``error: --flag=value: expected ...``, with exit code
2 and no traceback; that is done once, in :class:`OneLineErrors`, so it
holds under ``typer.testing.CliRunner`` as well as the console script.
"""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from typer.core import TyperGroup

try:  # newer typer vendors click as typer._click
    from typer._click import exceptions as _cx
    from typer.exceptions import Abort as _Abort
except ImportError:  # pragma: no cover
    from click import exceptions as _cx
    from click.exceptions import Abort as _Abort

from kvreach.params import LOAD_MODELS, RULES, ParamError
from kvreach.releases import DEFAULT as DEFAULT_RELEASE, RELEASES, Release, release


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
    "vllm": "--vllm",
}


class CliError(Exception):
    """Bad command-line input, already phrased for the user."""

    def __init__(self, flag: str, value: object, expected: str) -> None:
        self.flag, self.value, self.expected = flag, value, expected
        super().__init__(f"{flag}={show_value(value)}: expected {expected}")


def show_value(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def from_param_error(e: ParamError, flags: dict[str, str] | None = None) -> CliError:
    table = PARAM_FLAGS | (flags or {})
    flag = table.get(e.param, "--" + e.param.replace("_", "-"))
    return CliError(flag, e.value, e.expected)


def error_line(msg: str, prefix: str = "error: ") -> None:
    msg = " ".join(str(msg).split())  # one line, whatever the message
    sys.stderr.write(f"{prefix}{msg}\n")
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


def _extra_argument_message(e: Exception, args: list[str]) -> str | None:
    """click's "Got unexpected extra argument(s)" in terms of what was typed:
    a value given to an on/off flag, an obligation given to ``prove`` as a
    positional, a second positional to ``counterexample``."""
    msg = e.format_message()
    if "unexpected extra argument" not in msg:
        return None
    ctx = getattr(e, "ctx", None)
    cmd = ctx.command if ctx is not None else None
    name = cmd.name if cmd is not None else "kvreach"
    m = re.search(r"argument(?:\(s\))? \((.*)\)", msg)
    extra = m.group(1).split() if m else []
    first = extra[0] if extra else "?"
    i = args.index(first) if first in args else -1
    prev = args[i - 1] if i > 0 else None
    if cmd is not None and prev is not None:
        for p in cmd.params:
            if getattr(p, "is_flag", False) and prev in (*p.opts, *p.secondary_opts):
                return (f"{prev}={first}: expected no value ({prev} is an on/off flag: give "
                        f"{prev} to switch it on, leave it out for off)")
    if name == "prove":
        return (f"{first}: unexpected argument (`kvreach prove` takes options only; for one "
                f"obligation give --obligation {first})")
    if name == "counterexample":
        return (f"{first}: unexpected second argument (`kvreach counterexample` takes one "
                "OBLIGATION, then options)")
    return f"{first}: unexpected argument (`kvreach {name}` takes options only; see --help)"


class OneLineErrors(TyperGroup):
    """Runs the command non-standalone and turns every input error into one
    ``error: ...`` line on stderr (exit 2) instead of click's usage panel;
    an output that cannot be written (a full disk, a closed pipe) is one line
    too, Ctrl-C is ``interrupted`` (exit 130), and anything else unexpected
    is one ``error: internal error ...`` line (exit 1; ``KVREACH_TRACEBACK=1``
    shows the traceback)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        argv = list(sys.argv[1:] if args is None else args)
        try:
            _no_empty_values(argv)
            rv = super().main(
                args=args, prog_name=prog_name, complete_var=complete_var,
                standalone_mode=False, **extra,
            )
            code = rv if isinstance(rv, int) else 0
        except CliError as e:
            error_line(str(e))
            code = 2
        except ParamError as e:
            error_line(str(from_param_error(e)))
            code = 2
        except _cx.ClickException as e:  # UsageError, BadParameter, ...
            if type(e).__name__ == "NoArgsIsHelpError":  # bare `kvreach`: help
                msg = e.format_message()  # (rich help was printed when it was made)
                if msg:
                    sys.stdout.write(msg + "\n")
                code = 0
            else:
                error_line(_extra_argument_message(e, argv) or _usage_message(e))
                code = e.exit_code
        except _Abort as e:
            interrupted = isinstance(e.__cause__ or e.__context__, KeyboardInterrupt)
            error_line("interrupted" if interrupted else "aborted")
            code = 130 if interrupted else 1
        except KeyboardInterrupt:
            error_line("interrupted")
            code = 130
        except BrokenPipeError:  # the reader went away (`| head`): nothing to say
            _silence_stdout()
            code = 1
        except OSError as e:  # a file or stdout failed: a full disk, an unreadable file
            if e.filename:
                error_line(f"{e.filename}: {e.strerror or e}")
            else:
                error_line(f"stdout: cannot write ({e.strerror or e})")
            _silence_stdout()
            code = 2
        except Exception as e:  # noqa: BLE001  (a bug: one line, not a traceback)
            if os.environ.get("KVREACH_TRACEBACK") == "1":
                raise
            error_line(f"internal error ({type(e).__name__}: {e}); please report it "
                        "(KVREACH_TRACEBACK=1 shows the traceback)")
            code = 1
        if standalone_mode:
            sys.exit(code)
        return code


def _no_empty_values(argv: list[str]) -> None:
    """An option given an empty string is an error (typer would read it as
    the option left out)."""
    for i, a in enumerate(argv):
        if a == "--":
            return
        flag, eq, value = a.partition("=")
        if flag.startswith("--") and ((eq and not value) or (not eq and i + 1 < len(argv)
                                                             and argv[i + 1] == "")):
            raise CliError(flag, "", "a value, not an empty string")


def _silence_stdout() -> None:
    """After a failed write, point stdout at /dev/null so that the flush at
    exit does not fail again (with a traceback)."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def check_writable(flag: str, path: Path | None) -> None:
    """Check an output option before any work: ``-`` (stdout), or a file that
    can be created or overwritten (its directory is created if missing)."""
    if path is None or str(path) == "-":
        return
    if path.is_dir():
        raise CliError(flag, path, "a file name, not a directory (or - for stdout)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists()
        with open(path, "a"):
            pass
        if not existed:
            path.unlink()
    except OSError as e:
        raise CliError(flag, path, f"a writable file ({e.strerror})") from None


def stdout_console() -> Console:
    # highlight=False: rich's number highlighting costs O(digits) regex work per
    # line, minutes on a long request's chunk ranges
    c = Console(highlight=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(width=160, highlight=False)  # files and pipes: room for the tables
    return c


def stderr_console() -> Console:
    c = Console(stderr=True, highlight=False)
    if not c.is_terminal and "COLUMNS" not in os.environ:
        c = Console(stderr=True, width=160, highlight=False)
    return c


def check_choice(flag: str, value: str | None, check) -> None:
    if value is None:
        return
    try:
        check(value)
    except ParamError as e:
        raise CliError(flag, value, e.expected) from None


RuleOpt = Annotated[Optional[str], typer.Option("--rule", help="one of " + ", ".join(RULES))]


ModelOpt = Annotated[
    Optional[str], typer.Option("--load-model", help="one of " + ", ".join(LOAD_MODELS))
]


VLLM_VERSIONS = tuple(v for r in RELEASES for v in r.names)

VllmOpt = Annotated[Optional[str], typer.Option(
    "--vllm", metavar="X",
    help=f"the vLLM release ({', '.join(VLLM_VERSIONS)}; default {DEFAULT_RELEASE.names[0]})")]


def vllm_release(value: str | None) -> Release:
    """The record of ``--vllm`` (default: ``kvreach.releases.DEFAULT``, 0.34.0); a one-line error naming
    the known versions for any other value."""
    if value is None:
        return DEFAULT_RELEASE
    try:
        return release(value)
    except ValueError:
        raise CliError("--vllm", value, "one of " + ", ".join(VLLM_VERSIONS)) from None


RepoOpt = Annotated[Optional[Path], typer.Option(
    "--repo", metavar="DIR",
    help="the kvreach checkout whose docs/ the defaults name (default: the first "
         "directory from the current one upward with pyproject.toml and docs/)")]


def repo_root(repo: Path | None) -> Path:
    """``--repo``, or the first directory from the current one upward that
    holds pyproject.toml and docs/; a one-line error when there is none."""
    def is_repo(d: Path) -> bool:
        return (d / "pyproject.toml").is_file() and (d / "docs").is_dir()

    if repo is not None:
        if not is_repo(repo):
            raise CliError("--repo", repo, "a kvreach checkout (a directory with pyproject.toml and docs/)")
        return repo
    cwd = Path.cwd()
    for d in (cwd, *cwd.parents):
        if is_repo(d):
            return d
    raise CliError("--repo", "(missing)", "a kvreach checkout: no directory with pyproject.toml "
                   f"and docs/ from {cwd} upward; run from the checkout or pass --repo DIR")


def in_repo(root: Path, rel: str | Path) -> Path:
    """``root / rel``, shown relative to the current directory when under it
    (``docs/proofs.md`` from the checkout, as the defaults always read)."""
    p = root / rel
    try:
        return p.relative_to(Path.cwd())
    except ValueError:
        return p
