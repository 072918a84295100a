"""``kvreach simulate``: one scenario through a store side, a vLLM
release's (``--vllm``) or one of kvreach's rules (``--rule``), every step
shown (or ``--json``)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from kvreach.cli._common import CliError, VllmOpt, _check_choice, _out, _release
from kvreach.cli._options import _run_scenario, _scenario_command
from kvreach.cli.render import _config_line, write_json, _print_steps, _sets_summary, store_side
from kvreach.params import RULES, check_load_model, check_rule
from kvreach.scenario import Scenario


@_scenario_command
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
    _check_choice("--rule", rule, check_rule)
    if rule is not None and vllm is not None:
        raise CliError("--vllm", vllm, "no --rule beside it: simulate runs one store side, a "
                       "release's (--vllm X) or one of kvreach's rules (--rule R); to score a rule "
                       "against a release's lookup use `kvreach lookup --rule R --vllm X`")
    r = _release(vllm)
    _check_choice("--load-model", s.load_model, check_load_model)
    trace = _run_scenario(r if rule is None else rule, s)
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

    out = _out()
    side = ("" if rule else
            f"  [bold]vllm[/] {vllm or r.names[-1]} (its store side: {store_side(r)})")
    out.print(f"[bold]rule[/] {rule_name}{side}  [bold]load model[/] {load_model}",
              soft_wrap=True)
    out.print(_config_line(tj["group"], tj["request"], tj["lifecycle"]), markup=False, soft_wrap=True)
    out.print(" ".join(f"{k}={v}" for k, v in derived.items()), markup=False, soft_wrap=True)
    _print_steps(out, tj, set(loadable), "SWA group: steps")
    out.print(f"final horizon {trace.final_horizon_chunks} chunks, computed {trace.computed_tokens} tokens",
              soft_wrap=True)
    _sets_summary(out, stored, set(loadable), set(needed), load_model)
