"""docs/proofs.md is generated (``kvreach catalog``) and must not go stale.

- the page equals the generator's output for the committed run
  (docs/proof-results.json), the registry, the mutants and the expected table;
- the committed run has exactly one row per (obligation, rule, load model) the
  runner runs, each run against today's expected verdict, so adding an
  obligation or changing an expected verdict without re-running fails here;
- these checks can fail: a changed statement, verdict or expected verdict
  makes the page (or the run) stale, and ``--check`` says so.

No solver runs here: everything reads files.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.proofs import catalog, rows
from kvreach.proofs import results as results_file
from kvreach.proofs.obligations import OBLIGATIONS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / catalog.RESULTS
PAGE = ROOT / catalog.PAGE
FINDINGS = ROOT / "docs" / "findings.md"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture
def results() -> dict:
    return results_file.load_results(RESULTS)


def render(results: dict) -> str:
    return catalog.render(results, FINDINGS.read_text())


# --- (a) the page is the generator's output --------------------------------


def test_page_is_generated_from_committed_run(results):
    assert PAGE.read_text() == render(results), (
        f"docs/proofs.md is stale: run `{catalog.REGENERATE}` (or `kvreach catalog` "
        "if the run is current)")


def test_check_mode_passes_on_committed_files():
    r = invoke("catalog", "--results", str(RESULTS), "--out", str(PAGE), "--check")
    assert r.exit_code == 0, r.stderr
    assert "up to date" in r.stdout


def test_generation_is_deterministic_and_writes_the_page(tmp_path, results):
    (tmp_path / "findings.md").write_text(FINDINGS.read_text())
    out = tmp_path / "proofs.md"
    r = invoke("catalog", "--results", str(RESULTS), "--out", str(out))
    assert r.exit_code == 0, r.stderr
    assert out.read_text() == PAGE.read_text() == render(copy.deepcopy(results))


# --- (b) the committed run matches the runner and the expected table --------


def test_committed_run_has_one_row_per_runner_row_in_order(results):
    keys = [(r["obligation"], r["rule"], r["load_model"], r["vllm"]) for r in results["rows"]]
    assert keys == catalog.run_order()
    assert set(keys) == set(rows.rows_for(None, None, None))


def test_committed_run_was_run_against_todays_expected_table(results):
    table = rows.expected_table()
    for r in results["rows"]:
        k = (r["obligation"], r["rule"], r["load_model"], r["vllm"])
        assert r["expected"] == table[k], k
        assert r["verdict"] == r["expected"], (k, r["verdict"], r.get("detail"))
        assert r["non_vacuous"] is True and r["mutant_rejected"] is True, k
        assert r["mutant"] == OBLIGATIONS[r["obligation"]].mutant.name, k
        assert {"obligation", "rule", "load_model", "verdict", "scope", "seconds", "rlimit"} <= set(r)
    assert catalog.results_problems(results) == []


def test_committed_run_header(results):
    run = results["run"]
    assert {"date", "kvreach", "git_commit", "z3", "python", "selection", "seconds"} <= set(run)
    selection = dict(run["selection"])
    # every row: no selection, and the deep rows in (a run before --deep had no such key)
    assert selection.pop("deep", True) is True
    assert selection == {"obligation": None, "rule": None, "load_model": None, "vllm": None}


def test_every_named_finding_has_a_section():
    anchors = catalog.finding_anchors(FINDINGS.read_text())
    named = {f for fs in catalog.expected_findings().values() for f in fs}
    assert named and named <= set(anchors)
    table = rows.expected_table()
    for k, fs in catalog.expected_findings().items():
        assert not fs or table[k] == "counterexample", k  # findings only for counterexamples


def test_every_static_variant_is_described():
    for name, ob in OBLIGATIONS.items():
        assert ob.mutant.doc, name


# --- (c) the checks can fail ---------------------------------------------------


def test_changed_statement_makes_page_stale(monkeypatch, tmp_path, results):
    monkeypatch.setattr(OBLIGATIONS["soundness"], "statement", "Something else entirely.")
    page = render(results)
    assert page != PAGE.read_text() and "Something else entirely." in page
    r = invoke("catalog", "--results", str(RESULTS), "--out", str(PAGE), "--check")
    assert r.exit_code == 1
    assert r.stderr.startswith("error: stale: ") and r.stderr.count("\n") == 1, r.stderr


def _copy_with(tmp_path: Path, results: dict, edit) -> Path:
    doc = copy.deepcopy(results)
    edit(doc["rows"])
    path = tmp_path / "proof-results.json"
    path.write_text(json.dumps(doc))
    return path


def test_changed_verdict_makes_page_and_run_stale(tmp_path, results):
    def edit(rows):
        rows[-1]["verdict"] = "unknown"
    path = _copy_with(tmp_path, results, edit)
    assert render(results_file.load_results(path)) != PAGE.read_text()
    r = invoke("catalog", "--results", str(path), "--out", str(PAGE), "--check")
    assert r.exit_code == 1 and "stale" in r.stderr
    r = invoke("catalog", "--results", str(path), "--against", str(RESULTS), "--check",
               "--verdicts-only")
    assert r.exit_code == 1 and "verdict proved -> unknown" in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1


def test_verdicts_only_ignores_times_and_models(tmp_path, results):
    def edit(rows):
        for row in rows:
            row["seconds"] += 1.5
            row["counterexample"] = None
    path = _copy_with(tmp_path, results, edit)
    r = invoke("catalog", "--results", str(path), "--against", str(RESULTS), "--check",
               "--verdicts-only")
    assert r.exit_code == 0, r.stderr


def test_changed_expected_verdict_makes_run_stale(monkeypatch, results):
    table = rows.expected_table()
    k = catalog.run_order()[0]
    monkeypatch.setattr(rows, "expected_table", lambda: {**table, k: "counterexample"})
    monkeypatch.setattr(catalog, "expected_table", rows.expected_table)
    problems = catalog.results_problems(results)
    assert problems and "expected.toml now says counterexample" in problems[0]
    assert render(results) != PAGE.read_text()


def test_new_obligation_without_a_run_is_stale(monkeypatch, results):
    extra = ("new-obligation", "any", "any")
    order = catalog.run_order() + [extra]
    monkeypatch.setattr(catalog, "run_order", lambda: order)
    problems = catalog.results_problems(results)
    assert problems == ["1 row(s) missing: new-obligation/any/any"]


def test_dropped_row_is_stale(tmp_path, results):
    path = _copy_with(tmp_path, results, lambda rows: rows.pop(3))
    problems = catalog.results_problems(results_file.load_results(path))
    assert problems and "missing" in problems[0]
    r = invoke("catalog", "--results", str(path), "--against", str(RESULTS), "--check",
               "--verdicts-only")
    assert r.exit_code == 1 and "only in the committed run" in r.stderr
