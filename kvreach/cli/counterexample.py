"""``kvreach counterexample``: search one obligation row
(:func:`kvreach.proofs.counterexample.search`), show the decoded scenario,
optionally draw it (``--plot``)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvreach.cli._common import (
    DEFAULT_RELEASE, VLLM_VERSIONS, CliError, ModelOpt, RuleOpt, check_choice, stderr_console,
    from_param_error, stdout_console,
    vllm_release,
)
from kvreach.cli._interrupt import ExitOnInterrupt
from kvreach.cli.plot import draw_plot, plot_paths
from kvreach.cli.render import config_line, print_cex, print_drawn, ranges
from kvreach.params import LOAD_MODELS, RULES, ParamError, check_load_model, check_rule
from kvreach.proofs.obligations import OBLIGATIONS


def counterexample(
    obligation: Annotated[str, typer.Argument(
        metavar="OBLIGATION", help="one of " + ", ".join(OBLIGATIONS))],
    rule: RuleOpt = None,
    load_model: ModelOpt = None,
    vllm: Annotated[Optional[str], typer.Option(
        "--vllm", metavar="X", help="the row about vLLM release X (one of "
        + ", ".join(VLLM_VERSIONS) + f"; default {DEFAULT_RELEASE.names[0]})")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    plot_file: Annotated[Optional[Path], typer.Option(
        "--plot", metavar="FILE",
        help="also draw the counterexample's chunk map to FILE (.png or .svg; both are "
             "written): the replayed lifecycle, or for mask-equivalence the mask at "
             "the decoded final horizon against the loadable chunks")] = None,
    hash_lookahead_tokens: Annotated[Optional[int], typer.Option(
        "--hash-lookahead-tokens", metavar="N",
        help="vllm_config.num_hash_lookahead_tokens L pinned to N in the search (vLLM 0.34.0's "
        "lookahead block hashes; N >= 1 only for a row with L symbolic: soundness about "
        "0.34.0). Default: L as the row has it (symbolic L >= 0, the search trying L = 1 "
        "first; 0 in every other row). vLLM itself derives L = 1 + extra_retained_tokens "
        "for an EAGLE/MTP drafter under the offloading connector")] = None,
    replay_vllm: Annotated[bool, typer.Option(
        "--replay-vllm", help="replay the counterexample on vLLM 0.33.0's real scheduler "
        "(hit-preservation*, no-waste*, world single's soundness, completeness, "
        "computed-before-stored, mask-equivalence, and exactly-once-restarts; needs the "
        "vllm extra: it runs kvreach.vllm_harness.replay) and fail unless vLLM's numbers "
        "equal kvreach's and show the violation")] = False,
) -> None:
    """Find and show a concrete counterexample scenario for one obligation row."""
    from kvreach.proofs import counterexample as search

    if obligation not in OBLIGATIONS:
        raise CliError("OBLIGATION", obligation, "one of " + ", ".join(OBLIGATIONS))
    check_choice("--rule", rule, check_rule)
    check_choice("--load-model", load_model, check_load_model)
    vllm_release(vllm)  # a known version, else one line naming them
    ob = OBLIGATIONS[obligation]
    if ob.rule_specific and rule is None:
        raise CliError("--rule", "(missing)", f"one of {', '.join(RULES)} for '{obligation}'")
    if ob.model_specific and load_model is None:
        raise CliError("--load-model", "(missing)",
                       f"one of {', '.join(LOAD_MODELS)} for '{obligation}'")
    if plot_file is not None:
        if (ob.kind == "static" and obligation not in MAPPABLE_STATIC) or ob.world != "single":
            raise CliError("--plot", plot_file,
                           "a lifecycle obligation of world single or " + ", ".join(MAPPABLE_STATIC)
                           + f" ('{obligation}' has no chunk map)")
        plot_paths("--plot", plot_file)
    replays = _replay_module() if replay_vllm else None
    if replays is not None and obligation not in replays.REPLAYS:
        raise CliError("--replay-vllm", True,
                       "an obligation with a vLLM replay: " + ", ".join(replays.REPLAYS))
    t0 = time.perf_counter()
    err = stderr_console()
    r, m = search.row_key(obligation, rule, load_model)
    try:
        group = search.vllm_group(obligation, r, m, vllm)
        search.check_lookahead(obligation, r, m, group, hash_lookahead_tokens)
    except ParamError as e:
        raise from_param_error(e) from None
    stop = lambda: f"interrupted: searching {obligation}/{r}/{m} for {time.perf_counter() - t0:.1f} s"  # noqa: E731
    with ExitOnInterrupt(stop, lambda: err.show_cursor(True)), \
            err.status(f"searching {obligation}/{r}/{m} ..."):
        try:
            found = search.search(obligation, rule, load_model, vllm, hash_lookahead_tokens)
        except ParamError as e:
            raise from_param_error(e) from None
    verdict, detail, cex, depth = found.verdict, found.detail, found.counterexample, found.depth
    if replay_vllm and cex is not None:
        cex["vllm_replay"], ok = _replay_vllm(replays, obligation, cex, r, m)
        if not ok:
            detail = (detail + "; " if detail else "") + (
                "vLLM's replay differs from kvreach's" if
                cex["vllm_replay"]["vllm"] != cex["vllm_replay"]["kvreach"]
                else "vLLM's replay does not show the violation")
    secs = time.perf_counter() - t0
    concrete_rule, concrete_model = found.concrete_rule, found.concrete_model

    if as_json:
        doc = {"obligation": obligation, "rule": r, "load_model": m, "vllm": group,
               "verdict": verdict,
               "depth": depth, "seconds": round(secs, 3), "detail": detail,
               "counterexample": cex}
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        out = stdout_console()
        out.print(f"[bold]{obligation}[/] rule={r} load_model={m} vllm={group}: [bold]{verdict}[/] "
                  f"({secs:.2f} s)", soft_wrap=True)
        out.print(OBLIGATIONS[obligation].statement, markup=False, soft_wrap=True)
        if detail:
            out.print(f"detail: {detail}", markup=False, soft_wrap=True)
        if verdict == "proved":
            out.print("[green]proved: no counterexample exists[/]")
        elif cex is not None:
            print_cex(out, cex, concrete_model, depth)
            command = simulate_command(cex, concrete_rule, concrete_model)
            if command:
                out.print(f"reproduce: {command}", markup=False, soft_wrap=True)
    if plot_file is not None:
        if verdict != "counterexample" or cex is None:
            raise CliError("--plot", plot_file,
                           f"a row with a counterexample to draw ('{obligation}' {r} {m}: {verdict})")
        _plot_cex(plot_file, obligation, cex, concrete_rule, concrete_model, as_json)
    if verdict == "unknown" or (verdict == "counterexample" and detail):
        raise typer.Exit(1)


def simulate_command(cex: dict, rule: str, model: str) -> str | None:
    """The ``kvreach simulate`` command that runs a world-"single" lifecycle
    counterexample's decoded configuration and lifecycle (its L included:
    ``--hash-lookahead-tokens``; ``--rule`` runs under the default release,
    0.34.0, which has it), or None
    for another counterexample or a configuration simulate's options cannot
    state (no full-attention group, DCP, explicit prefill cuts other than
    the scheduler's, ``max_offload_tokens``)."""
    g, req = cex["config"]["group"], cex["config"]["request"]
    lc = cex.get("lifecycle")
    if cex.get("trace") is None or lc is None or cex.get("world"):
        return None
    P, budget = req["prompt_tokens"], lc["budget"]
    cut, left = [], P
    while left > 0:
        cut.append(min(budget, left))
        left -= cut[-1]
    if (g["alignment_tokens"] is None or g["alignment_tokens"] % g["blocks_per_chunk"]
            or g.get("dcp_world_size", 1) != 1 or list(lc["prefill_steps"]) != cut
            or req["max_offload_tokens"] is not None or g.get("extra_retained_tokens")):
        return None
    argv = ["kvreach", "simulate", "--rule", rule, "--load-model", model,
            "--full-block-size", str(g["alignment_tokens"] // g["blocks_per_chunk"]),
            "--swa-block-size", str(g["block_size"]), "--window", str(g["window"]),
            "--prompt", str(P), "--budget", str(budget)]
    if g["blocks_per_chunk"] != 1:
        argv += ["--blocks-per-chunk", str(g["blocks_per_chunk"])]
    if g["eagle"]:
        argv.append("--eagle")
    if g["retention_interval"] is not None:
        argv += ["--retention-interval", str(g["retention_interval"])]
    if not req["offload_prompt_only"]:
        argv.append("--no-offload-prompt-only")
    if lc["decode"]:
        argv += ["--decode", str(lc["decode"])]
    if lc["abort_after_step"] is not None:
        argv += ["--abort-after-step", str(lc["abort_after_step"])]
    L = req.get("hash_lookahead_tokens", 0)
    if L or g["eagle"]:  # simulate's default L is vLLM's derived one: state it
        argv += ["--hash-lookahead-tokens", str(L)]
    return " ".join(argv)


def _replay_module():
    """:mod:`kvreach.vllm_harness.replay` (needs the vllm extra; it applies
    its CPU shims around each replay, :mod:`kvreach.vllm_harness.cpu_shims`)."""
    import importlib

    try:
        return importlib.import_module("kvreach.vllm_harness.replay")
    except ImportError as e:
        raise CliError("--replay-vllm", True, f"vLLM installed (python -m kvreach.vllm_install): {e}") from None


def _replay_vllm(mod, obligation: str, cex: dict, rule: str, model: str) -> tuple[dict, bool]:
    """``mod``: :func:`_replay_module`. -> (``{"vllm": ..., "kvreach": ...}``, reproduced)."""
    try:
        got = mod.replay_on_vllm(obligation, cex, rule, model)
    except ValueError as e:
        raise CliError("--replay-vllm", True, f"a counterexample the real scheduler can run ({e})") from None
    return got, mod.reproduced(obligation, got)


# Static obligations whose counterexample is a chunk set at one horizon
# (``Obligation.chunk_map``).
MAPPABLE_STATIC = tuple(name for name, ob in OBLIGATIONS.items() if ob.chunk_map)


def _plot_cex(out_file: Path, obligation: str, cex: dict, rule: str, model: str,
              quiet: bool) -> None:
    """Draw a counterexample: the replayed lifecycle, or a static one's mask at
    its final horizon against the loadable chunks (a single row)."""
    from kvreach import plot as kplot
    from kvreach.proofs.decode import replay_mask

    title = f"{obligation} counterexample: {rule}, load model {model}"
    if cex.get("trace") is not None:
        m = kplot.chunk_map(cex["trace"], title=title)
        if cex.get("later_lookup", {}).get("dense_loaded") is not None:
            m = kplot.with_lookup(m, cex["later_lookup"])  # the lost hit, drawn
        bad = cex.get("replayed_violation") or []
    else:
        kept, wanted = replay_mask(cex, rule, model)
        m = kplot.mask_map(rule, model, cex["config"]["group"], kept, wanted,
                           cex["final_horizon_chunks"], title=title)
        bad = sorted(kept ^ wanted)
    g, req = cex["config"]["group"], cex["config"]["request"]
    sup = f"replayed violation chunks: {ranges(bad)}"
    sup += ("" if cex.get("chunk") is None else f"; tracked chunk {cex['chunk']}") + "\n"
    sup += config_line(g, req, cex.get("lifecycle"))
    png, svg = kplot.out_paths(out_file)
    drawn = draw_plot("--plot", out_file, [m], sup)
    print_drawn(stderr_console() if quiet else stdout_console(), drawn, png, svg)
