"""``kvreach simulate``: one scenario through the executable store rule,
every step shown (or ``--json``)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kvreach.cli._common import _check_choice, _out
from kvreach.cli._options import _run_scenario, _scenario_command
from kvreach.cli.render import _config_line, write_json, _print_steps, _sets_summary
from kvreach.params import RULES, check_load_model, check_rule
from kvreach.scenario import Scenario


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
            "config": s.config(rule) | {"derived": derived},
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
    out.print(f"[bold]rule[/] {rule}  [bold]load model[/] {load_model}", soft_wrap=True)
    out.print(_config_line(tj["group"], tj["request"], tj["lifecycle"]), markup=False, soft_wrap=True)
    out.print(" ".join(f"{k}={v}" for k, v in derived.items()), markup=False, soft_wrap=True)
    _print_steps(out, tj, set(loadable), "SWA group: steps")
    out.print(f"final horizon {trace.final_horizon_chunks} chunks, computed {trace.computed_tokens} tokens",
              soft_wrap=True)
    _sets_summary(out, stored, set(loadable), set(needed), load_model)
