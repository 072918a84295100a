"""``kvreach lookup``: the request of the scenario options stores its chunks
under a rule; then a later request looks up, as vLLM 0.33.0's offload lookup
does it (``kvreach.impl.lookup``), against those stores and against dense ones
(every offloadable chunk), in the single-request world (``kvreach.impl.worlds``)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from kvreach.cli._common import _check_choice, _from_param_error, _out
from kvreach.cli._options import _run_scenario, _scenario_command
from kvreach.cli.render import _config_line, write_json, ranges
from kvreach.params import RULES, ParamError, check_load_model, check_rule
from kvreach.scenario import Scenario, lookup_groups

LATER_FLAGS = {
    "num_tokens": "--later-prompt", "later_prompt": "--later-prompt",
    "later_diverges_at": "--later-diverges-at", "later_local_hit": "--later-local-hit",
    "local_hit_tokens": "--later-local-hit", "max_load_tokens": "--later-max-load-tokens",
}


@_scenario_command
def lookup(
    rule: Annotated[str, typer.Option("--rule", help="the store rule of the earlier request: "
                                      + ", ".join(RULES))],
    *,
    later_prompt: Annotated[Optional[int], typer.Option(
        "--later-prompt", help="the later request's tokens: the stored prompt cut to N, "
        "or extended with new tokens (default: the stored prompt's length)")] = None,
    later_diverges_at: Annotated[Optional[int], typer.Option(
        "--later-diverges-at", help="the later request shares only the first T tokens")] = None,
    later_local_hit: Annotated[int, typer.Option(
        "--later-local-hit", help="its GPU prefix-cache hit (tokens, block-aligned)")] = 0,
    later_max_load_tokens: Annotated[Optional[int], typer.Option(
        "--later-max-load-tokens", help="its kv_transfer_params max_load_tokens")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    scenario: Scenario,
) -> None:
    """The later request's offload hit under the rule's stores and under dense stores."""
    from kvreach.impl.worlds import later_lookup

    _check_choice("--rule", rule, check_rule)
    _check_choice("--load-model", scenario.load_model, check_load_model)
    trace = _run_scenario(rule, scenario)
    try:
        n = scenario.prompt if later_prompt is None else later_prompt
        r = later_lookup(lookup_groups(scenario), trace, n, later_diverges_at,
                         later_local_hit, later_max_load_tokens)
    except ParamError as e:
        raise _from_param_error(e, LATER_FLAGS) from None
    doc = {"config": scenario.config(rule)} | r.to_json()
    if as_json:
        write_json(doc, sys.stdout.write)
        return
    out = _out()
    tj = trace.to_json()
    out.print(f"[bold]rule[/] {rule}", soft_wrap=True)
    out.print("earlier request: " + _config_line(tj["group"], tj["request"], tj["lifecycle"]),
              markup=False, soft_wrap=True)
    out.print(f"later request: {doc['later_prompt']} tokens, shares {doc['shared_tokens']} with "
              f"the stored prompt, GPU-local hit {doc['local_hit_tokens']}", soft_wrap=True)
    out.print(f"offload hit: {doc['hit_tokens']} tokens with the rule's stores, "
              f"{doc['dense_hit_tokens']} with dense stores "
              f"({doc['lost_hit_tokens']} lost)", markup=False, soft_wrap=True)
    for g in doc["groups"]:
        span = lambda r: f"{r[0]}-{r[1] - 1}" if r else "-"  # noqa: E731
        what = (f"SWA group (window {g['window_tokens']}, runs of {g['window_chunks']} chunks)"
                if g["kind"] == "swa" else "full-attention group")
        out.print(f"{what}: stored {g['stored_chunks']} chunks; loads {span(g['loaded'])}, "
                  f"dense loads {span(g['dense_loaded'])}; asked for, not stored: "
                  f"{ranges(g['missing_chunks'])}", markup=False, soft_wrap=True)
