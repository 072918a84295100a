"""Proof budgets are Z3 resources, not seconds:

- a row's verdict and the resources it spends are the same whether it runs
  alone in this process, after other rows here, or in a spawned pool process
  (as ``pool.run(jobs=2)`` runs it);
- a budget too small for a row gives ``unknown``, a row that is not ok and a
  failing ``kvreach prove``: an exhausted budget is never a pass.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.proofs import mutant_check, rows, runner, search, solve

INVARIANT_OK = {"vllm-0.29": True, "vllm-0.33": True, ("vllm-0.33", "lookahead"): True}
FAST = ("exactly-once", "vllm-0.33", "any")  # lifecycle, case split, ~0.5 s


def _fresh_caches(monkeypatch):
    monkeypatch.setattr(mutant_check, "mutant_cache", {})
    monkeypatch.setattr(mutant_check, "mutant_use_counts", {})


def test_same_verdict_and_resources_in_process_and_in_the_pool(monkeypatch):
    _fresh_caches(monkeypatch)
    runner.run_row("load-window-blocks", "any", "any", INVARIANT_OK)  # other queries first
    here = runner.run_row(*FAST, INVARIANT_OK)
    again = runner.run_row(*FAST, INVARIANT_OK)  # its mutant now cached: still counted
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        there = pool.submit(runner.run_row, *FAST, INVARIANT_OK).result()
    assert here.verdict == again.verdict == there.verdict == "proved"
    assert here.rlimit > 0
    assert here.rlimit == again.rlimit == there.rlimit
    assert here.to_json()["rlimit"] == here.rlimit


def _tiny_budgets(monkeypatch):
    # each budget where it is read: the rows' checks (runner), the
    # counterexample search and the mutant check, the case splits (solve)
    for module, names in ((runner, ("NODE_RL", "LEAF_RL")), (search, ("CHECK_RL", "LEAF_RL")),
                          (mutant_check, ("CHECK_RL",)),
                          (solve, ("ROOT_RL", "NODE_RL", "LEAF_RL"))):
        for name in names:
            monkeypatch.setattr(module, name, 200)
    _fresh_caches(monkeypatch)


def test_exhausted_budget_is_unknown_and_not_ok(monkeypatch):
    _tiny_budgets(monkeypatch)
    row = runner.run_row(*FAST, INVARIANT_OK)
    row.expected = rows.expected_table()[row.key]
    assert row.verdict == "unknown"
    assert "resource budget exhausted" in row.detail
    assert not row.ok
    assert row.rlimit > 0


def test_exhausted_budget_fails_the_run(monkeypatch):
    _tiny_budgets(monkeypatch)
    r = CliRunner().invoke(app, ["prove", "--obligation", "load-window-blocks"])
    assert r.exit_code != 0, r.output
    assert "unknown" in r.output


def test_a_proof_resting_on_an_unproved_invariant_is_not_a_proof():
    """Rows run alongside the invariant rows; a 1-step induction proof whose
    rule's invariant was not proved is reported unknown."""
    from kvreach.proofs.rows import Row
    from kvreach.proofs.runner import rest_on

    row = Row("exactly-once", "vllm-0.33", "any", "proved",
              "...; any number of steps (1-step induction, invariant obligation 'invariant')", 0.0)
    rest_on(row, {"vllm-0.33": True})
    assert row.verdict == "proved"
    rest_on(row, {"vllm-0.33": False})
    assert row.verdict == "unknown" and "invariant" in row.detail
