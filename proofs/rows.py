"""The proof run's rows: the row list (:func:`rows_for`: each obligation's
(rule, load model, vLLM release group) rows), the expected-verdict table
(``proofs/expected.toml``: :func:`expected_table`) and a row's record
(:class:`Row`). The runner, the pool and the catalog all read them here.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources

from kvreach.params import LOAD_MODELS, RULES
from kvreach.proofs import matrix
from kvreach.proofs.config import EXPECTED
from kvreach.proofs.framework import Ctx, Obligation
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.releases import DEFAULT as DEFAULT_RELEASE, Release
from kvreach.spec.config import SymConfig


@dataclass
class Row:
    obligation: str
    rule: str
    load_model: str
    verdict: str
    scope: str
    seconds: float
    expected: str = ""
    rlimit: int = 0  # Z3 resource units spent by the row's checks (mutant included)
    solver_seconds: float = 0.0  # CPU seconds inside the solver's check() calls of the row
    # every unsat / unknown check of the row was answered by the result cache
    # (proofs/cache.py; its sat checks, if any, were solved again)
    cached: bool = False
    non_vacuous: bool | None = None
    mutant: str = ""
    mutant_rejected: bool | None = None
    detail: str = ""
    counterexample: dict | None = field(default=None, repr=False)
    # the vLLM releases the row is about (``kvreach.proofs.matrix``)
    vllm: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.obligation, self.rule, self.load_model, self.vllm)

    def ok_apart_from_expected(self) -> bool:
        """Proved, or a counterexample that replays; non-vacuous, its mutant
        rejected (what a kept row must be)."""
        return (self.verdict in ("proved", "counterexample") and not self.detail
                and self.non_vacuous is True and self.mutant_rejected is True)

    @property
    def ok(self) -> bool:
        return (
            self.verdict == self.expected
            and self.verdict != "unknown"
            and "NOT replay" not in self.detail
            and self.non_vacuous is not False
            and self.mutant_rejected is not False
        )

    def to_json(self) -> dict:
        return {
            "obligation": self.obligation, "rule": self.rule,
            "load_model": self.load_model, "vllm": self.vllm, "verdict": self.verdict,
            "expected": self.expected, "scope": self.scope,
            "seconds": round(self.seconds, 3), "solver_seconds": round(self.solver_seconds, 3),
            "rlimit": self.rlimit, "cached": self.cached,
            "non_vacuous": self.non_vacuous,
            "mutant": self.mutant, "mutant_rejected": self.mutant_rejected,
            "detail": self.detail, "counterexample": self.counterexample,
        }


def expected_rows() -> list[dict]:
    """The rows of ``proofs/expected.toml`` as written."""
    text = resources.files("kvreach.proofs").joinpath(EXPECTED).read_text()
    return tomllib.loads(text)["row"]


def expected_table() -> dict[tuple[str, str, str, str], str]:
    """(obligation, rule, load model, vllm) -> the expected verdict."""
    out = {}
    for row in expected_rows():
        out[(row["obligation"], row["rule"], row["load_model"], row["vllm"])] = row["verdict"]
    return out


def rows_for(obligation: str | None, rule: str | None, model: str | None,
             vllm: str | None = None):
    """Row keys (obligation, rule, load model, vllm group) of the selection;
    ``vllm``: a version, the rows about it."""
    for name, ob in OBLIGATIONS.items():
        if obligation and name != obligation:
            continue
        for r in ((ob.rules or RULES) if ob.rule_specific else ("any",)):
            if rule and ob.rule_specific and r != rule:
                continue
            for m in (LOAD_MODELS if ob.model_specific else ("any",)):
                if model and ob.model_specific and m != model:
                    continue
                for g in matrix.groups(ob.reads_for(r), r, ob.lookup_variant):
                    if ob.lookahead_only and not models_lookahead(ob, matrix.representative(g), r):
                        continue
                    name_g = matrix.group_name(g)
                    if ob.releases is not None and not set(matrix.versions(name_g)) & set(ob.releases):
                        continue
                    if vllm is None or matrix.covers(name_g, vllm):
                        yield name, r, m, name_g


def selected_rows(obligation: str | None, rule: str | None, model: str | None,
                  vllm: str | None = None, deep: bool = False):
    """The rows a run makes: :func:`rows_for`'s, without the rows of the
    deep obligations (``Obligation.deep``) unless ``deep`` or the obligation
    is selected by name."""
    return [k for k in rows_for(obligation, rule, model, vllm)
            if deep or obligation or not OBLIGATIONS[k[0]].deep]


def default_vllm(name: str, rule: str) -> str:
    """The release group of ``name``'s row under ``rule`` that is about
    vLLM 0.33.0 (the rule's only group when none is: vllm-0.29's)."""
    ob = OBLIGATIONS[name]
    gs = matrix.groups(ob.reads_for(rule), rule, ob.lookup_variant)
    return matrix.group_name(next((g for g in gs if DEFAULT_RELEASE in g), gs[-1]))


def ctx_for(rule: str, model: str, lookahead: bool = False, **kw) -> Ctx:
    """A row's query context: fresh symbols, its rule and load model (a row
    about "any" of them is run under vllm-0.33 / intended). ``lookahead``:
    the configuration has vLLM 0.34.0's lookahead-hash parameters
    (:func:`models_lookahead`)."""
    return Ctx(SymConfig.fresh(lookahead=lookahead), "vllm-0.33" if rule == "any" else rule,
               "intended" if model == "any" else model, **kw)


def models_lookahead(ob: Obligation, release: Release, rule: str | None = None) -> bool:
    """The row's queries have vLLM 0.34.0's lookahead block hashes as a
    symbolic parameter (``num_hash_lookahead_tokens`` L >= 0,
    ``SymConfig.fresh(lookahead=True)``): the obligation's rows under
    ``rule`` read the part (``Release.lookahead_hashes`` in
    :meth:`Obligation.reads_for`) and the row's releases have it. Any other
    row about 0.34.0 is scoped L = 0."""
    return "lookahead_hashes" in ob.reads_for(rule) and release.lookahead_hashes


def invariant_holds(invariant_ok: dict, rule: str, lookahead: bool) -> bool:
    """The rule's invariant is proved for a row resting on it: with L
    symbolic (``lookahead``), by an invariant row with L symbolic
    (``invariant_ok[(rule, "lookahead")]``); else for L = 0
    (``invariant_ok[rule]``, :func:`invariant_status`)."""
    return bool(invariant_ok.get((rule, "lookahead") if lookahead else rule, False))


def invariant_status(inv_rows) -> dict:
    """The invariant rows' verdicts as :func:`invariant_holds` reads them:
    ``rule`` -> every row of the rule with L = 0 proved (with none, its rows
    with L symbolic, which cover L = 0); ``(rule, "lookahead")`` -> it has
    rows with L symbolic and every one is proved."""
    by: dict = {}
    for row in inv_rows:
        la = models_lookahead(OBLIGATIONS[row.obligation], matrix.representative(row.vllm), row.rule)
        by.setdefault((row.rule, la), []).append(row.verdict == "proved")
    out: dict = {}
    for rule in {r for r, _ in by}:
        zero, sym = by.get((rule, False)), by.get((rule, True))
        out[rule] = all(zero if zero else sym)
        out[(rule, "lookahead")] = bool(sym) and all(sym)
    return out


# ``kvreach counterexample --hash-lookahead-tokens N``: a lookahead row's
# counterexample search with L = N (:class:`pinned_lookahead`). Its induction
# step stays the row's (L symbolic: a proof is for every L; pinned, Z3 spent
# the whole 200 M budget on the step that is sat in 1 M symbolic).
PINNED_L: list[int] = []


class pinned_lookahead:
    """``with pinned_lookahead(N):`` the rows run inside search for a
    counterexample with L = N (``search.find_counterexample``; None: no pin)."""

    def __init__(self, tokens: int | None):
        self.tokens = tokens

    def __enter__(self):
        if self.tokens is not None:
            PINNED_L.append(self.tokens)

    def __exit__(self, *exc):
        if self.tokens is not None:
            PINNED_L.pop()


def release_for(name: str, rule: str, vllm: str | None) -> Release:
    """The release whose parts ``name``'s row under ``rule`` about the
    release group ``vllm`` (None: :func:`default_vllm`) applies."""
    return matrix.representative(vllm or default_vllm(name, rule))
