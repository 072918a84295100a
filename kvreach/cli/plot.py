"""``kvreach plot``: one scenario's chunk map (``kvreach.plot``) to PNG and
SVG; the output checks and drawing shared with ``counterexample --plot``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvreach.cli._common import CliError, check_choice, stdout_console
from kvreach.cli._options import run_scenario_or_error, scenario_command, scenario_flags
from kvreach.cli.render import print_drawn
from kvreach.params import LOAD_MODELS, RULES, check_load_model, check_rule
from kvreach.scenario import Scenario


PLOT_EXTRA = "matplotlib: install the plot extra (pip install -e '.[plot]')"


def plot_paths(flag: str, out: Path) -> tuple[Path, Path]:
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


def _rules_pair(value: tuple[str, str] | None) -> tuple[str, str] | None:
    """``--compare`` takes two rules; a flag taken as the second value (the
    second rule left out) is named here, not as a missing option later."""
    if value is not None:
        if any(r.startswith("-") for r in value):
            raise CliError("--compare", " ".join(value),
                           "two rules, each one of " + ", ".join(RULES)
                           + f" (a flag was taken as a rule: {value[1]})")
        for r in value:
            check_choice("--compare", r, check_rule)
    return value


def draw_plot(flag: str, out: Path, maps: list, suptitle: str) -> list:
    """Draw ``maps`` to ``out``'s PNG and SVG; -> the maps as drawn."""
    from kvreach import plot as kplot

    try:
        return kplot.draw(maps, out, suptitle=suptitle)
    except OSError as e:
        raise CliError(flag, out, f"a writable file ({e.strerror})") from None


def _lookup_sets(scenario: Scenario, traces, tjs):
    """Each trace's sets as the release's lookup sees them (kvreach.lookup_view,
    as ``simulate`` prints them): loadable = loaded by a later request or asked
    for and not stored, needed = asked for and not stored; -> (the traces'
    JSON with those sets, the panel titles)."""
    from kvreach.cli.simulate import scenario_lookup_view
    from kvreach.releases import DEFAULT as release

    out, titles = [], []
    for t, tj in zip(traces, tjs):
        view = scenario_lookup_view(scenario, t, release)
        if isinstance(view, str):
            raise CliError("--prompt", scenario.prompt, "a prompt whose later requests the "
                           f"lookup view covers ({view}), or --load-model intended")
        asked = sorted(view.asked_not_stored)
        out.append(tj | {"loadable": sorted(view.loaded | view.asked_not_stored),
                         "needed": asked})
        titles.append(f"{t.rule}, vLLM {release.names[-1]}'s lookup")
    return out, titles


@scenario_command
def plot(
    out_file: Annotated[Path, typer.Option(
        "--out", metavar="FILE",
        help="write the chunk map to FILE; FILE ends in .png or .svg and the other "
             "format is written beside it (always both PNG and SVG)")],
    rule: Annotated[Optional[str], typer.Option(
        "--rule", help="one of " + ", ".join(RULES) + " (or --compare)")] = None,
    compare: Annotated[Optional[tuple[str, str]], typer.Option(
        "--compare", metavar="RULE RULE",
        help="draw two rules one above the other on the same chunk range",
        callback=_rules_pair)] = None,
    *,
    chunks: Annotated[Optional[str], typer.Option(
        "--chunks", metavar="LO:HI",
        help="draw chunks LO..HI-1 only (default: the whole request)")] = None,
    load_model: Annotated[Optional[str], typer.Option(
        "--load-model", help="draw an approximate load model's sets instead of the lookup's: "
        "one of " + ", ".join(LOAD_MODELS) + " (default: what vLLM's lookup loads)")] = None,
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
        check_choice("--rule" if compare is None else "--compare", r, check_rule)
    png, svg = plot_paths("--out", out_file)
    zoom = _chunk_range(chunks)
    check_choice("--load-model", load_model, check_load_model)
    traces = [run_scenario_or_error(r, scenario) for r in rules]

    tjs = [t.to_json(scenario.load_model) for t in traces]
    steps = max(len(t.steps) for t in traces)
    if steps > kplot.MAX_DRAWN_ROWS:
        raise CliError("--budget", scenario.budget,
                       f"a scenario of at most {kplot.MAX_DRAWN_ROWS} scheduler steps to draw "
                       f"(this one has {steps}); raise --budget, shorten --prompt or --decode, "
                       "or use `kvreach simulate`")
    try:
        lo, hi = kplot.drawable_range(max(kplot.chunk_extent(tj) for tj in tjs), zoom)
    except ValueError as e:
        raise CliError("--chunks", chunks or "(whole request)", str(e)) from None
    titles: list = [None] * len(traces)
    if load_model is None:  # after every refusal: the view costs a lookup per later request
        tjs, titles = _lookup_sets(scenario, traces, tjs)
    maps = [kplot.chunk_map(tj, lo, hi, title) for tj, title in zip(tjs, titles)]
    command = "kvreach plot " + scenario_flags(scenario, rules)
    if load_model is not None and "--load-model" not in command:  # its default, given
        command += f" --load-model {load_model}"
    if zoom is not None:
        command += f" --chunks {lo}:{hi}"
    drawn = draw_plot("--out", out_file, maps, command)
    print_drawn(stdout_console(), drawn, png, svg)
