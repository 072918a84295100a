"""``kvreach simulate``: one scenario through a store side, a vLLM
release's (``--vllm``) or one of kvreach's rules (``--rule``), every step
shown (or ``--json``)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from kvreach.cli._common import CliError, VllmOpt, check_choice, stdout_console, vllm_release
from kvreach.cli._options import run_scenario_or_error, scenario_command
from kvreach.cli.render import (config_line, print_steps, sets_summary, flagged_set, ranges,
                                store_side, write_json)
from kvreach.params import RULES, check_load_model, check_rule
from kvreach.scenario import Scenario


@scenario_command
def simulate(
    rule: Annotated[Optional[str], typer.Option(
        "--rule", help="one of kvreach's rules " + ", ".join(RULES) + " (instead of --vllm's "
        "store side)")] = None,
    vllm: VllmOpt = None,
    *,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    scenario: Scenario,
) -> None:
    """Drive one request through a store side and show every step: vLLM
    release X's (--vllm X, default 0.34.0: its store rule, mask window, EAGLE
    tail and finish) or one of kvreach's rules as transcribed (--rule R)."""
    s = scenario
    check_choice("--rule", rule, check_rule)
    if rule is not None and vllm is not None:
        raise CliError("--vllm", vllm, "no --rule beside it: simulate runs one store side, a "
                       "release's (--vllm X) or one of kvreach's rules (--rule R); to score a rule "
                       "against a release's lookup use `kvreach lookup --rule R --vllm X`")
    r = vllm_release(vllm)
    check_choice("--load-model", s.load_model, check_load_model)
    trace = run_scenario_or_error(r if rule is None else rule, s)
    view = scenario_lookup_view(s, trace, r)
    rule_name = trace.rule
    load_model, g = s.load_model, trace.group

    loadable, needed = trace.wanted(load_model), trace.needed(load_model)
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
            "config": s.config(rule_name) | {"vllm": None if rule else vllm or r.names[-1],
                                             "derived": derived},
            "groups": {"swa": {
                "steps": steps,
                "stored": sorted(stored),
                "lookup": view if isinstance(view, str) else view.to_json(stored),
                "loadable": sorted(loadable),
                "needed": sorted(needed),
                "stored_not_loadable": sorted(set(stored) - loadable),
                "needed_not_stored": sorted(needed - set(stored)),
                "final_chunks": trace.final_horizon_chunks,
                "computed_tokens": trace.computed_tokens,
            }},
            "trace": tj,
        }
        write_json(doc, sys.stdout.write)
        return

    out = stdout_console()
    side = ("" if rule else
            f"  [bold]vllm[/] {vllm or r.names[-1]} (its store side: {store_side(r)})")
    out.print(f"[bold]rule[/] {rule_name}{side}  [bold]load model[/] {load_model}",
              soft_wrap=True)
    out.print(config_line(tj["group"], tj["request"], tj["lifecycle"]), markup=False, soft_wrap=True)
    out.print(" ".join(f"{k}={v}" for k, v in derived.items()), markup=False, soft_wrap=True)
    print_steps(out, tj, set(loadable), "SWA group: steps")
    out.print(f"final horizon {trace.final_horizon_chunks} chunks, computed {trace.computed_tokens} tokens",
              soft_wrap=True)
    _lookup_summary(out, stored, view, r)
    sets_summary(out, stored, set(loadable), set(needed), load_model)


def scenario_lookup_view(s: Scenario, trace, release):
    """The release's lookup of the later requests repeating the prompt
    (kvreach.lookup_view), or why it was not computed (a prompt with too
    many chunk boundaries to look each up)."""
    from kvreach.impl.release import lookup_parts
    from kvreach.lookup_view import MAX_LATER_REQUESTS, lookup_view
    from kvreach.scenario import lookup_groups

    groups = lookup_groups(s, release)
    try:
        return lookup_view(groups, trace, lookup_parts(release))
    except ValueError as e:
        return (f"not computed: {e.args[0]:,} later requests, past {MAX_LATER_REQUESTS:,} "
                "(`kvreach lookup --later-prompt N` looks one up)")


def _lookup_summary(out, stored, view, release) -> None:
    """The lookup's view first: loaded, stored and never loaded, asked for
    and not stored, the later requests that lose hit tokens."""
    if isinstance(view, str):
        out.print(f"[bold]vLLM {release.names[-1]}'s lookup[/] of the later requests: {view}",
                  soft_wrap=True)
        return
    st = set(stored)
    never, asked = sorted(st - view.loaded), sorted(view.asked_not_stored)
    out.print(f"[bold]vLLM {release.names[-1]}'s lookup[/] of {len(view.later_prompts)} later "
              "requests (the prompt cut at every chunk boundary + 1 token, the prompt, the "
              "prompt + 1 token):", soft_wrap=True)
    out.print(f"  [bold]loaded[/] by a later request ({len(view.loaded)}): "
              f"{ranges(sorted(view.loaded))}", soft_wrap=True)
    flagged_set(out, "stored, loaded by none", never, indent="  ")
    flagged_set(out, "asked for, not stored", asked, indent="  ")
    for x in view.lost[:3]:
        missing = (f", not stored {ranges(list(x.missing_chunks))}" if x.missing_chunks
                   else "")
        out.print(f"  [red]lost hit[/]: a later request of {x.later_prompt} tokens hits "
                  f"{x.hit_tokens} tokens, {x.dense_hit_tokens} with dense stores (its SWA "
                  f"load: {ranges(list(x.dense_loaded))}{missing})", soft_wrap=True)
    if len(view.lost) > 3:
        out.print(f"  ... {len(view.lost) - 3} more later requests lose hit tokens "
                  "(--json lists them)", soft_wrap=True)
    out.print("the approximate load model, by its name:", soft_wrap=True)
