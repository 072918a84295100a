"""The pool's order (pool.schedule): the invariant rows first, then the
rows the committed run does not have, then the largest recorded rlimit
first; the recorded figures are read from docs/proof-results.json."""

from __future__ import annotations

import json
from pathlib import Path

from kvreach.proofs import config, pool

ROOT = Path(__file__).resolve().parent.parent


def test_largest_recorded_rlimit_first_unrecorded_before_invariants_first():
    keys = [("a", "r", "m"), ("invariant", "r", "any"), ("b", "r", "m"), ("new", "r", "m"),
            ("c", "r", "m")]
    measured = {("a", "r", "m"): 5, ("b", "r", "m"): 50, ("c", "r", "m"): 7,
                ("invariant", "r", "any"): 1}
    assert [keys[i][0] for i in pool.schedule(keys, measured)] == \
        ["invariant", "new", "b", "c", "a"]


def test_the_recorded_rlimits_are_the_committed_runs():
    doc = json.loads((ROOT / "docs" / "proof-results.json").read_text())
    got = config.measured_rlimits()
    assert got and got == {(r["obligation"], r["rule"], r["load_model"], r.get("vllm", "")):
                           r["rlimit"] for r in doc["rows"]}


def test_an_unreadable_record_schedules_in_table_order(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    assert config.measured_rlimits(tmp_path / "bad.json") == {}
    assert config.measured_rlimits(tmp_path / "missing.json") == {}
    keys = [("b", "r", "m"), ("a", "r", "m")]
    assert pool.schedule(keys, {}) == [0, 1]
