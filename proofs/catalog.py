"""The proof catalog, ``docs/proofs.md``: every obligation in words, the
mutant it must reject, and per (rule, load model) row the expected verdict
next to the latest proof run's.

Data flows one way: the registry (``proofs.obligations.ALL``, each record
with its mutant), the expected-verdict table
(``proofs/expected.toml``), the latest run's JSON (``kvreach prove --json
docs/proof-results.json``, read by ``proofs.results.load_results``) and the finding headings of ``docs/findings.md``
-> Markdown. Nothing runs a solver here; the output depends only on those
inputs. Only the CLI (``kvreach catalog``) and the tests import this module.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from kvreach.params import RULES
from kvreach.proofs.framework import Role
from kvreach.proofs import obligations, versions
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.rows import expected_rows, expected_table, rows_for

RESULTS = "docs/proof-results.json"
PAGE = "docs/proofs.md"
VERSIONS_PAGE = versions.PAGE
REGENERATE = f"kvreach prove --deep --json {RESULTS} && kvreach catalog"

Key = tuple[str, str, str, str]  # (obligation, rule, load model, vllm)


# ---------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------


def run_order() -> list[Key]:
    """Every row the runner runs, in the order ``kvreach prove`` reports them
    (the invariants first: lifecycle proofs rest on them)."""
    return obligations.run_order(rows_for(None, None, None))


def expected_findings() -> dict[Key, list[str]]:
    """(obligation, rule, load model, vllm) -> the findings (``F1``...) that
    ``proofs/expected.toml`` names for the row's expected counterexample."""
    return {
        (r["obligation"], r["rule"], r["load_model"], r["vllm"]): list(r.get("findings", []))
        for r in expected_rows()
    }


def finding_anchors(findings_md: str) -> dict[str, tuple[str, str]]:
    """``F1`` -> (GitHub anchor, title) for each ``## F<n>. title`` heading."""
    out = {}
    for line in findings_md.splitlines():
        m = re.match(r"^## (F\d+)\. (.+?)\s*$", line)
        if m:
            heading = line[3:].strip()
            anchor = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
            out[m.group(1)] = (anchor, m.group(2))
    return out


def _key(row: dict) -> Key:
    return (row["obligation"], row["rule"], row["load_model"], row.get("vllm", ""))


# ---------------------------------------------------------------------------
# staleness (no solver)
# ---------------------------------------------------------------------------


def results_problems(results: dict) -> list[str]:
    """Why ``results`` is not a complete run of the current registry and
    expected table: rows missing, extra or duplicated, or run against another
    expected verdict. Empty when it is."""
    order, table = run_order(), expected_table()
    keys = [_key(r) for r in results["rows"]]
    problems = []
    missing = [k for k in order if k not in keys]
    extra = [k for k in keys if k not in order]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    for what, ks in (("missing", missing), ("not run by the runner", extra), ("duplicated", dup)):
        if ks:
            problems.append(f"{len(ks)} row(s) {what}: " + ", ".join("/".join(k) for k in ks))
    for r in results["rows"]:
        k = _key(r)
        if k in table and r.get("expected") != table[k]:
            problems.append(f"{'/'.join(k)} was run expecting {r.get('expected')}, "
                            f"proofs/expected.toml now says {table[k]}")
    return problems


@dataclass(frozen=True)
class Staleness:
    """What ``kvreach catalog --check`` finds: why the run is not a complete
    run of today's registry (:func:`results_problems`), whether the page
    differs from :func:`render` of the run, and whether docs/versions.md's
    verdict matrix differs from :func:`versions_page` of it."""

    run: list[str]
    page: bool
    versions: bool = False

    @property
    def up_to_date(self) -> bool:
        return not self.run and not self.page and not self.versions


def staleness(results: dict, current_page: str | None, findings_md: str = "",
              current_versions: str | None = None) -> Staleness:
    """Compare the committed page (None: missing) with the page ``results``
    renders to, and docs/versions.md (None: not checked) with its matrix
    rendered from ``results``; ``ValueError`` when the run cannot be rendered."""
    page = render(results, findings_md)
    stale_versions = (current_versions is not None
                      and versions_page(results, current_versions) != current_versions)
    return Staleness(results_problems(results), current_page != page, stale_versions)


def versions_page(results: dict, current: str) -> str:
    """docs/versions.md (``current``, its hand-written parts kept) with the
    verdict matrix of ``results`` (:mod:`kvreach.proofs.versions`)."""
    return versions.updated(current, results)


COMPARED = ("verdict", "expected", "non_vacuous", "mutant", "mutant_rejected")


def verdict_differences(fresh: dict, committed: dict) -> list[str]:
    """Rows whose verdict (or expected verdict, non-vacuity, mutant) differs
    between two runs; times, details and counterexample models are ignored."""
    a = {_key(r): r for r in fresh["rows"]}
    b = {_key(r): r for r in committed["rows"]}
    out = [f"{'/'.join(k)} only in the {side} run"
           for side, x, y in (("fresh", a, b), ("committed", b, a)) for k in x if k not in y]
    for k in a:
        if k in b:
            diff = [f"{f} {b[k].get(f)} -> {a[k].get(f)}" for f in COMPARED
                    if a[k].get(f) != b[k].get(f)]
            if diff:
                out.append(f"{'/'.join(k)}: " + ", ".join(diff))
    return out


# ---------------------------------------------------------------------------
# rendering
# ---------------------------------------------------------------------------


def _md(text: str) -> str:
    """Prose from the registry / run, safe in a Markdown table cell."""
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("*", "\\*").replace("|", "\\|")


def _doc(text: str) -> str:
    """A docstring's text, reST literals as Markdown code."""
    return " ".join((text or "").split()).replace("``", "`")


def _yes(b) -> str:
    return "—" if b is None else ("yes" if b else "**NO**")


def _scope_split(rows: list[dict]) -> tuple[str, dict[str, str]]:
    """The part of the scope common to every row (cut at a ';') and, per
    scope, the rest (what ``kvreach prove`` prints as its footnotes)."""
    scopes = list(dict.fromkeys(r["scope"] for r in rows))
    base = os.path.commonprefix(scopes) if len(scopes) > 1 else ""
    base = base[: base.rfind(";") + 1] if ";" in base else ""
    return base.rstrip(";"), {s: s[len(base):].strip() for s in scopes}


def _each(what: str, values) -> str:
    vals = [f"`{v}`" for v in values]
    return f"{what}: " + (vals[0] if len(vals) == 1 else "each of " + ", ".join(vals))


def _rule_text(name: str) -> str:
    ob = OBLIGATIONS[name]
    parts = [
        _each("rule", ob.rules or RULES) if ob.rule_specific
        else "rule: `any` (does not depend on the store rule; checked with `vllm-0.33`'s symbols)",
        "load model: each of `aligned`, `intended`" if ob.model_specific
        else "load model: `any` (does not depend on it; checked with `intended`)",
    ]
    kind = ("lifecycle: one scheduler step from any state satisfying the rule's invariant "
            "(induction); a counterexample is searched by BMC from the initial state"
            if ob.kind == "lifecycle" else "static: one symbolic chunk / boundary / horizon, no steps")
    if ob.role is Role.INVARIANT:
        kind = "lifecycle: the initial state satisfies it and one running step preserves it"
    return f"Kind: {kind}. Rows: {'; '.join(parts)}."


def render(results: dict, findings_md: str = "") -> str:
    """docs/proofs.md for ``results`` (a ``kvreach prove --json`` document),
    the registry, the mutants and the expected table. ``findings_md`` (the
    text of docs/findings.md) supplies the finding links."""
    order, table, fnd = run_order(), expected_table(), expected_findings()
    anchors = finding_anchors(findings_md)
    by_key = {_key(r): r for r in results["rows"]}
    run = results.get("run") or {}
    base, rest = _scope_split(results["rows"]) if results["rows"] else ("", {})

    ran = [by_key[k] for k in order if k in by_key]
    as_expected = sum(1 for k in order if k in by_key and by_key[k]["verdict"] == table.get(k))
    wall = run.get("seconds")
    row_sum = sum(r.get("seconds") or 0 for r in ran)
    rl_sum = sum(r.get("rlimit") or 0 for r in ran)
    commit = run.get("git_commit")
    made_by = ", ".join(x for x in [
        f"kvreach {run['kvreach']}" if run.get("kvreach") else "",
        f"commit `{commit[:12]}{'-dirty' if commit.endswith('-dirty') else ''}`" if commit else "",
        f"Z3 {run['z3']}" if run.get("z3") else "",
        f"Python {run['python']}" if run.get("python") else "",
    ] if x)

    L = [
        "# Proof catalog",
        "",
        f"<!-- Generated by `kvreach catalog` from proofs/obligations.py, proofs/mutants.py, "
        f"proofs/expected.toml, {RESULTS} and docs/findings.md. Do not edit: regenerate. -->",
        "",
        "Every proof obligation of `kvreach prove`: what it states, the mutant it must reject, "
        "and, per (rule, load model) row, the verdict expected by `proofs/expected.toml` next to "
        f"the verdict of the latest proof run (`{RESULTS}`). The scope and the solver strategy are "
        "described in [spec.md](spec.md#scope); what the counterexamples mean in "
        "[findings.md](findings.md).",
        "",
        "## How to read it",
        "",
        "- **rule**: the store rule checked, `vllm-0.29` (vLLM 0.29.0's, before PR #54362), "
        "`vllm-0.33` (vLLM 0.30.0 .. 0.33.0's) or `lookup-window` (kvreach's: keeps the run "
        "vLLM's offload lookup verifies, [findings.md](findings.md) F6); `any` when the "
        "obligation does not depend on the rule.",
        "- **vLLM**: the vLLM releases the row is about: those whose store rule is the row's "
        "rule and that agree in every part of their code the obligation reads (its lookup, its "
        "cursor; `kvreach/releases.py`, one record per distinct release); kvreach's own rule and "
        "lookup variant are scored against 0.33.0's. The release × obligation matrix is "
        "[versions.md](versions.md).",
        "- **load model**: which later hits the stores are checked against, one of two "
        "approximations of vLLM's offload lookup: `aligned` (a hit at every alignment boundary, "
        "the premise that hits are aligned; it is not what the lookup loads, findings F4) or "
        "`intended` (plus a hit at the request's own final horizon, the PR's premise), see "
        "[spec.md](spec.md#load-models-the-lookup-and-two-approximations-of-it); `any` when the "
        "obligation does not depend on it (the `lookup-*`, `hit-preservation*` and `no-waste*` "
        "rows use vLLM's lookup itself).",
        "- **scope**: what the verdict covers beyond the part common to every row (below).",
        "- **expected** / **last verdict**: `proved` (every solver query unsat; lifecycle rows also "
        "need the rule's `invariant` proved) or `counterexample` (a concrete model, decoded; for "
        "lifecycle rows a real trace from the initial state, replayed through the executable rule). "
        "`unknown` is never expected: it fails the run, as does any last verdict other than the "
        "expected one.",
        "- **s**: the row's wall time in the run, seconds (proof, non-vacuity and mutant); rows run "
        "in parallel. Reported only: no verdict depends on it.",
        "- **rlimit**: the Z3 resources the row's checks spent (proof, non-vacuity, counterexample "
        "search and mutant), in Z3's `rlimit` units. Every check is bounded by such a budget, never "
        "by time, so the verdict and this count depend on the query and the Z3 version only, not on "
        "machine load (budgets: [spec.md](spec.md#scope), Solver).",
        "- **non-vacuous**: the row's premises are satisfiable, so `proved` is not vacuous.",
        "- **mutant rejected**: the obligation found a counterexample against its mutant (a "
        "deliberately wrong `vllm-0.33`, checked under `intended`), so it is strong enough to "
        "notice that mistake.",
        "- **findings**: for an expected counterexample, its section of "
        "[findings.md](findings.md) (from `findings` in `proofs/expected.toml`).",
        "",
        "Regenerate (from the repository root) after changing an obligation, a mutant, an expected "
        "verdict or the rules:",
        "",
        "```",
        REGENERATE,
        "```",
        "",
        "`kvreach catalog` alone re-renders this page from the committed run; "
        "`kvreach catalog --check` exits 1 when the page is stale (the tests check it too).",
        "",
        "## Latest run",
        "",
        f"{run.get('date') or 'date unknown'}" + (f", {made_by}" if made_by else "") + ": "
        f"{len(ran)} of {len(order)} rows run, {as_expected} as expected; "
        + (f"{wall:.1f} s wall, " if isinstance(wall, (int, float)) else "")
        + f"row times sum to {row_sum:.1f} s"
        + (f", Z3 resources to {rl_sum:,} rlimit units." if rl_sum else "."),
        "",
    ]
    if base:
        L += [f"Scope common to every row: {_md(base)}.", ""]

    L += ["| obligation | kind | rows | as expected |", "|---|---|---:|---:|"]
    names = list(dict.fromkeys(k[0] for k in order))
    for name in names:
        ks = [k for k in order if k[0] == name]
        ok = sum(1 for k in ks if k in by_key and by_key[k]["verdict"] == table.get(k))
        L.append(f"| [`{name}`](#{name}) | {OBLIGATIONS[name].kind} | {len(ks)} | {ok} |")
    L.append("")

    for name in names:
        ob = OBLIGATIONS[name]
        L += [
            f"## {name}",
            "",
            _md(ob.statement),
            "",
            _rule_text(name),
            "",
            f"Mutant it must reject: `{ob.mutant.name}`: {_md(_doc(ob.mutant.doc))}",
            "",
            "| rule | load model | vLLM | scope | expected | last verdict | s | rlimit | non-vacuous "
            "| mutant rejected | findings |",
            "|---|---|---|---|---|---|---:|---:|---|---|---|",
        ]
        notes = []
        for k in (k for k in order if k[0] == name):
            _, rule, model, vllm = k
            r = by_key.get(k)
            exp = table.get(k, "?")
            links = []
            for f in fnd.get(k, []):
                if not anchors:  # no findings.md to link to
                    links.append(f)
                    continue
                if f not in anchors:
                    raise ValueError(f"proofs/expected.toml names {f} for {'/'.join(k)}, "
                                     f"which has no '## {f}. ...' heading in docs/findings.md")
                links.append(f"[{f}](findings.md#{anchors[f][0]})")
            if r is None:
                cells = ["—", "not run", "—", "—", "—", "—"]
            else:
                v = r["verdict"] if r["verdict"] == exp else f"**{r['verdict']}** (differs)"
                cells = [_md(rest.get(r["scope"], r["scope"])) or "—", v,
                         f"{r['seconds']:.2f}",
                         f"{r['rlimit']:,}" if isinstance(r.get("rlimit"), int) else "—",
                         _yes(r.get("non_vacuous")),
                         _yes(r.get("mutant_rejected"))]
                if r.get("detail"):
                    notes.append(f"- {rule}, {model}, vLLM {vllm}: {_md(r['detail'])}")
            L.append(f"| {rule} | {model} | {vllm} | {cells[0]} | {exp} | {cells[1]} | {cells[2]} "
                     f"| {cells[3]} | {cells[4]} | {cells[5]} | {', '.join(links) or '—'} |")
        L.append("")
        if notes:
            L += ["Details:", ""] + notes + [""]
        if any(table.get(k) == "counterexample" for k in order if k[0] == name):
            flags = ("" if not ob.rule_specific else " --rule R") + \
                    ("" if not ob.model_specific else " --load-model M") + \
                    (" --vllm X" if ob.reads else "")
            L += [f"A counterexample, decoded: `kvreach counterexample {name}{flags}`.", ""]
    return "\n".join(L).rstrip("\n") + "\n"

