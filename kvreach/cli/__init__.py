"""Command line: ``kvreach prove``, ``kvreach simulate``, ``kvreach lookup``
(a later request's offload hit), ``kvreach plot``,
``kvreach counterexample``, ``kvreach catalog`` (docs/proofs.md) and
``kvreach diagram`` (the lifecycle diagram of docs/lifecycle.md) and
``kvreach conform`` (which vLLM release a vLLM tree is), one module
each; the shared plumbing is in :mod:`kvreach.cli._common` (errors, consoles,
options), :mod:`kvreach.cli._options` (the scenario options) and
:mod:`kvreach.cli.render` (terminal output).

Last stage of the data flow (params -> rules -> lifecycle -> properties ->
report). Every command is a thin layer: parse the options, call the library,
render. Bad input is one ``error: ...`` line on stderr with exit code 2
(:class:`kvreach.cli._common.OneLineErrors`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from kvreach.cli import catalog, conform, counterexample, diagram, lookup, plot, prove, simulate
from kvreach.cli._common import OneLineErrors
from kvreach.cli.render import ranges
from kvreach.params import LOAD_MODELS, RULES
from kvreach.proofs.obligations import OBLIGATIONS

__all__ = ["app", "ranges"]

HELP = (
    "Z3 spec and executable model of vLLM's SWA KV-offload store rules (PR #54362).\n\n"
    f"Rules (--rule, --compare): {', '.join(RULES)}.\n\n"
    f"Load models (--load-model): {', '.join(LOAD_MODELS)}.\n\n"
    f"Obligations (prove --obligation, counterexample): {', '.join(OBLIGATIONS)}."
)

app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: no truncated option names, no <bool> on flags
    help=HELP,
)


def _version(value: bool) -> None:
    if value:
        from importlib import metadata

        try:
            v = metadata.version("kvreach")
        except metadata.PackageNotFoundError:  # pragma: no cover
            v = "unknown"
        typer.echo(f"kvreach {v}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version, help="print kvreach's version and exit")] = False,
) -> None:
    """The top-level options (--version)."""


for _command in (prove.prove, simulate.simulate, lookup.lookup, plot.plot,
                 counterexample.counterexample, catalog.catalog, diagram.diagram, conform.conform):
    app.command()(_command)
