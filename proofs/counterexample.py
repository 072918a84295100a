"""One obligation row searched for a concrete counterexample (``kvreach
counterexample``): which row the options name, BMC from the initial state
for lifecycle obligations, and otherwise the row's proof as ``kvreach prove``
runs it (with the rule's invariant first), all through :mod:`runner`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreach.proofs import runner
from kvreach.proofs.framework import Role
from kvreach.proofs.obligations import INVARIANTS, OBLIGATIONS


@dataclass
class Search:
    """The outcome for row (obligation, rule, load_model); ``rule`` /
    ``load_model`` are ``any`` when the obligation does not depend on them,
    ``concrete_*`` what the solver checked (the runner's choice for ``any``)."""

    obligation: str
    rule: str
    load_model: str
    concrete_rule: str
    concrete_model: str
    verdict: str | None = None
    detail: str = ""
    counterexample: dict | None = None
    depth: int | None = None  # BMC steps, when BMC found it

    @property
    def replayed(self) -> bool:
        return bool((self.counterexample or {}).get("replayed_violation"))


def row_key(obligation: str, rule: str | None, load_model: str | None) -> tuple[str, str]:
    """The (rule, load model) of the runner's row for these options."""
    ob = OBLIGATIONS[obligation]
    return (rule if ob.rule_specific else "any", load_model if ob.model_specific else "any")


def search(obligation: str, rule: str | None, load_model: str | None) -> Search:
    """BMC first for a lifecycle obligation (other than ``invariant``); when
    it finds nothing, or for the others, the row's verdict from the runner.
    A lifecycle counterexample that does not replay through the executable
    rule gets a ``detail`` saying so."""
    ob = OBLIGATIONS[obligation]
    r, m = row_key(obligation, rule, load_model)
    ctx = runner._ctx(r, m)  # the runner's concrete rule and model for "any"
    s = Search(obligation, r, m, ctx.rule, ctx.model)
    bmc = ob.kind == "lifecycle" and ob.role is not Role.INVARIANT
    if bmc:
        s.depth, s.counterexample = runner.find_counterexample(obligation, s.concrete_rule,
                                                               s.concrete_model)
        if s.counterexample is not None:
            s.verdict = "counterexample"
    if s.verdict is None:
        inv = {}
        if bmc:
            inv[s.concrete_rule] = all(
                runner.run_row(o.name, s.concrete_rule, "any", {}).verdict == "proved"
                for o in INVARIANTS)
        row = runner.run_row(obligation, r, m, inv)
        s.verdict, s.detail, s.counterexample = row.verdict, row.detail, row.counterexample
    if s.verdict == "counterexample" and ob.kind == "lifecycle" and not s.replayed:
        s.detail = s.detail or "counterexample did NOT replay through the executable rule"
    return s
