"""One obligation row searched for a concrete counterexample (``kvreach
counterexample``): which row the options name, and the row as ``kvreach
prove`` runs it (the runner searches by BMC from the initial state where a
lifecycle row's induction step fails; the rule's invariant rows run when a
proof rests on them), through :mod:`runner`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvreach.params import ParamError
from kvreach.proofs import rows, runner
from kvreach.proofs.matrix import check_vllm, representative
from kvreach.proofs.obligations import INVARIANTS, OBLIGATIONS


@dataclass
class Search:
    """The outcome for row (obligation, rule, load_model, vllm); ``rule`` /
    ``load_model`` are ``any`` when the obligation does not depend on them,
    ``concrete_*`` what the solver checked (the runner's choice for ``any``);
    ``vllm`` the row's release group (``kvreach.proofs.matrix``)."""

    obligation: str
    rule: str
    load_model: str
    concrete_rule: str
    concrete_model: str
    verdict: str | None = None
    detail: str = ""
    counterexample: dict | None = None
    depth: int | None = None  # BMC steps, when BMC found it
    vllm: str = ""

    @property
    def replayed(self) -> bool:
        return bool((self.counterexample or {}).get("replayed_violation"))


def row_key(obligation: str, rule: str | None, load_model: str | None) -> tuple[str, str]:
    """The (rule, load model) of the runner's row for these options."""
    ob = OBLIGATIONS[obligation]
    return (rule if ob.rule_specific else "any", load_model if ob.model_specific else "any")


def vllm_group(obligation: str, rule: str, load_model: str, vllm: str | None) -> str:
    """The release group of the row about vLLM ``vllm`` (None: 0.33.0's);
    ParamError when the obligation has no row about it under ``rule``
    (kvreach's own rule is scored against 0.33.0's lookup only)."""

    if vllm is None:
        return rows.default_vllm(obligation, rule)
    check_vllm(vllm)
    for _, _, _, g in rows.rows_for(obligation, rule, load_model, vllm):
        return g
    have = [g for _, _, _, g in rows.rows_for(obligation, rule, load_model)]
    raise ParamError("vllm", vllm, f"a release with a row of '{obligation}' under rule {rule}: "
                     + " or ".join(have))


class _Invariants(dict):
    """rule -> the rule's invariant rows proved, each rule's run the first
    time a row asks (a row that fails its induction step never asks)."""

    def get(self, rule, default=None):
        if rule not in self:
            self[rule] = all(runner.run_row(o.name, rule, "any", {}).verdict == "proved"
                             for o in INVARIANTS)
        return self[rule]


def check_lookahead(obligation: str, rule: str, load_model: str, group: str,
                    hash_lookahead_tokens: int | None) -> None:
    """``--hash-lookahead-tokens N``: ParamError unless N >= 0 and, for
    N >= 1, the row has L symbolic (:func:`rows.models_lookahead`: its
    obligation models lookahead block hashes and its releases have them)."""

    if hash_lookahead_tokens is None:
        return
    if hash_lookahead_tokens < 0:
        raise ParamError("hash_lookahead_tokens", hash_lookahead_tokens, "an integer >= 0")
    if hash_lookahead_tokens and not rows.models_lookahead(OBLIGATIONS[obligation],
                                                             representative(group), rule):
        have = [g for _, _, _, g in rows.rows_for(obligation, rule, load_model)
                if rows.models_lookahead(OBLIGATIONS[obligation], representative(g), rule)]
        raise ParamError("hash_lookahead_tokens", hash_lookahead_tokens,
                         f"0 for the '{obligation}' row about vLLM {group} (it is about L = 0: "
                         + ("its obligation does not model lookahead block hashes)" if not have
                            else "its releases have no lookahead block hashes; the row with L "
                            "symbolic is about " + " or ".join(have) + ")"))


def search(obligation: str, rule: str | None, load_model: str | None,
           vllm: str | None = None, hash_lookahead_tokens: int | None = None) -> Search:
    """The row as ``kvreach prove`` runs it (:func:`runner.run_row`): a
    lifecycle row whose induction step fails gets the runner's BMC search,
    and its rule's invariant rows run only when a proof rests on them. So
    the search spends what the row spends in the run (plus, for a proof,
    its invariant's rows). A lifecycle counterexample that does not replay
    through the executable rule gets a ``detail`` saying so.
    ``hash_lookahead_tokens``: vLLM 0.34.0's L pinned to that value in a row
    with L symbolic (:func:`check_lookahead`); None: L as the row has it."""
    ob = OBLIGATIONS[obligation]
    r, m = row_key(obligation, rule, load_model)
    group = vllm_group(obligation, r, m, vllm)
    check_lookahead(obligation, r, m, group, hash_lookahead_tokens)
    ctx = rows.ctx_for(r, m)  # the runner's concrete rule and model for "any"
    s = Search(obligation, r, m, ctx.rule, ctx.model, vllm=group)
    with rows.pinned_lookahead(hash_lookahead_tokens):
        row = runner.run_row(obligation, r, m, _Invariants(), group)
    s.verdict, s.detail, s.counterexample = row.verdict, row.detail, row.counterexample
    found = re.search(r"counterexample by BMC, (\d+) step", row.scope)
    s.depth = int(found.group(1)) if found else None
    if s.verdict == "counterexample" and ob.kind == "lifecycle" and not s.replayed:
        s.detail = s.detail or "counterexample did NOT replay through the executable rule"
    return s
