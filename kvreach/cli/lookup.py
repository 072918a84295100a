"""``kvreach lookup``: the request of the scenario options stores its chunks
under a store side; then a later request looks up, as vLLM release X's
offload lookup does it (``--vllm X``, default 0.34.0; ``kvreach.impl.lookup``
with the release's parts, ``kvreach.impl.release``), against those stores and
against dense ones (every offloadable chunk), in the single-request world
(``kvreach.impl.worlds``). The store side is the release's own, or kvreach's
rule ``--rule R`` scored against the release's lookup."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from kvreach.cli._common import (CliError, VllmOpt, check_choice, from_param_error, stdout_console,
                                 vllm_release)
from kvreach.cli._options import run_scenario_or_error, scenario_command
from kvreach.cli.render import config_line, lookup_side, ranges, store_side, write_json
from kvreach.params import MAX_CHUNKS, RULES, ParamError, check_rule
from kvreach.scenario import Scenario, lookup_groups

LATER_FLAGS = {
    "num_tokens": "--later-prompt", "later_prompt": "--later-prompt",
    "later_diverges_at": "--later-diverges-at", "later_local_hit": "--later-local-hit",
    "local_hit_tokens": "--later-local-hit", "max_load_tokens": "--later-max-load-tokens",
}


@scenario_command
def lookup(
    rule: Annotated[Optional[str], typer.Option(
        "--rule", help="the earlier request's store rule, one of kvreach's "
        + ", ".join(RULES) + " (default: --vllm's own store side)")] = None,
    vllm: VllmOpt = None,
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
    later_evicted: Annotated[Optional[list[str]], typer.Option(
        "--later-evicted", metavar="GROUP:CHUNKS",
        help="chunks the tier evicted before the later lookup, e.g. swa:3 or full:10-11 "
             "(repeatable; a MISS under the rule's and dense stores)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    load_model: Annotated[Optional[str], typer.Option(
        "--load-model", help="not taken: the lookup loads what vLLM X's own lookup loads "
        "(the approximate load models are for simulate, plot and counterexample)")] = None,
    scenario: Scenario,
) -> None:
    """The later request's offload hit, as vLLM X's lookup finds it (--vllm X,
    default 0.34.0), under the earlier request's stores (X's own store side,
    or kvreach's rule --rule R) and under dense stores."""
    from kvreach.impl.release import lookup_parts
    from kvreach.impl.worlds import later_lookup

    check_choice("--rule", rule, check_rule)
    release = vllm_release(vllm)
    if load_model is not None:
        raise CliError("--load-model", load_model,
                       "no --load-model with `kvreach lookup`: it loads what vLLM X's own "
                       "lookup loads (the approximate load models are for simulate, plot "
                       "and counterexample)")
    groups = lookup_groups(scenario, release)
    n = scenario.prompt if later_prompt is None else later_prompt
    evicted = _evicted(later_evicted or [], groups, n)
    trace = run_scenario_or_error(release if rule is None else rule, scenario, release)
    try:
        r = later_lookup(groups, trace, n, later_diverges_at, later_local_hit,
                         later_max_load_tokens, parts=lookup_parts(release), evicted=evicted)
    except ParamError as e:
        raise from_param_error(e, LATER_FLAGS) from None
    version = vllm or release.names[-1]
    doc = {"config": scenario.config(trace.rule) | {
        "vllm": version, "store_side": "vllm" if rule is None else "rule",
        "later_evicted": [list(e) for e in evicted]}} | r.to_json()
    if as_json:
        write_json(doc, sys.stdout.write)
        return
    out = stdout_console()
    tj = trace.to_json()
    stores = (f"vLLM {version}'s ({store_side(release)})"
              if rule is None else "kvreach's rule")
    out.print(f"[bold]rule[/] {trace.rule}: {stores}; [bold]lookup[/] vLLM {version}'s "
              f"({lookup_side(release)})", soft_wrap=True)
    out.print("earlier request: " + config_line(tj["group"], tj["request"], tj["lifecycle"]),
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
                  f"{ranges(g['missing_chunks'])}"
                  + (f"; loads, never answered HIT: {ranges(g['unchecked_chunks'])}"
                     if g["unchecked_chunks"] else ""), markup=False, soft_wrap=True)


def _evicted(values: list[str], groups: tuple, later_tokens: int) -> tuple[tuple[int, ...], ...]:
    """``--later-evicted`` values (``swa:3``, ``full:10-11``) as chunks per
    group; a chunk past the later request's ``later_tokens`` (one its lookup
    never asks for) is refused."""
    out: list[set[int]] = [set() for _ in groups]
    kinds = {"full": [i for i, g in enumerate(groups) if not g.is_swa],
             "swa": [i for i, g in enumerate(groups) if g.is_swa]}
    for v in values:
        kind, sep, chunks = v.partition(":")
        lo, dash, hi = chunks.partition("-")
        ok = (sep and kind in kinds and lo.isdigit() and (not dash or hi.isdigit())
              and (not dash or int(lo) <= int(hi)))
        if not ok:
            raise CliError("--later-evicted", v, "GROUP:CHUNK or GROUP:LO-HI, GROUP full or swa "
                           "and chunk indices (e.g. swa:3, full:10-11)")
        if not kinds[kind]:
            raise CliError("--later-evicted", v, f"a group the scenario has (no {kind} group: "
                           + "give --full-block-size)")
        first, last = int(lo), int(hi if dash else lo)
        if last - first >= MAX_CHUNKS:
            raise CliError("--later-evicted", v, f"at most {MAX_CHUNKS:,} chunks per range")
        for gi in kinds[kind]:
            n = later_tokens // groups[gi].chunk_tokens  # the later request's whole chunks
            if last >= n:
                raise CliError("--later-evicted", v, f"chunks of the later request: {kind}:0 "
                               f"to {kind}:{n - 1} ({later_tokens} tokens, "
                               f"{groups[gi].chunk_tokens} a chunk)")
            out[gi].update(range(first, last + 1))
    return tuple(tuple(sorted(e)) for e in out)
