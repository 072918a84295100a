"""The proof result cache (proofs/cache.py): a re-run answered from it has
the same verdicts and resource counts, a changed query or limit misses, a
corrupted or forged entry is not trusted, a sat answer is never taken from
it, and ``--no-cache`` / ``CI=true`` run everything."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import z3

from kvreach.proofs import cache, mutant_check, pool, rows, runner, solve

KVREACH = shutil.which("kvreach", path=str(Path(sys.executable).parent)) or "kvreach"


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setenv(cache.ENV, "1")
    monkeypatch.delenv("CI", raising=False)
    assert cache.enabled()


def _fresh_process_state():
    """What the runner keeps per process (the mutants' results): cleared, so
    a second run checks the mutants' queries again (against the cache)."""
    mutant_check.mutant_cache.clear()
    mutant_check.mutant_use_counts.clear()


def _entries() -> list[Path]:
    return sorted(cache.cache_dir().rglob("*.json"))


def _solved(assertions, rlimit=solve.CHECK_RL):
    before = dict(solve.cache_counts)
    r, m = solve.check_terms(assertions, rlimit, meter := solve.Meter())
    return (str(r), meter.used, solve.cache_counts["solved"] - before["solved"],
            solve.cache_counts["hit"] - before["hit"])


def _facts(row):
    return (row.verdict, row.rlimit, row.non_vacuous, row.mutant_rejected, row.detail,
            row.scope, row.counterexample)


@pytest.mark.parametrize("key", [("load-window-blocks", "any", "any"),
                                 ("computed-before-stored", "vllm-0.29", "any")],
                         ids=["proved", "counterexample"])
def test_a_cached_rerun_has_the_same_verdicts_and_rlimits(on, key):
    _fresh_process_state()
    first = runner.run_row(*key, {})
    assert not first.cached and _entries()
    _fresh_process_state()
    again = runner.run_row(*key, {})
    assert again.cached, again
    assert _facts(again) == _facts(first)


def test_a_changed_query_or_limit_misses(on):
    x = z3.Int("x")
    assert _solved([x > 0, x < 0]) [::2] == ("unsat", 1)
    r, used, solved, hit = _solved([x > 0, x < 0])
    assert (r, solved, hit) == ("unsat", 0, 1)
    assert _solved([x > 0, x < -1])[2] == 1  # another query
    assert _solved([x > 0, x < 0], rlimit=solve.CHECK_RL - 1)[2] == 1  # another limit


def test_a_sat_answer_is_never_taken_from_the_cache(on):
    x = z3.Int("x")
    for _ in range(2):
        r, _, solved, hit = _solved([x > 5])
        assert r == "sat" and hit == 0
    assert not _entries()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "result-flipped", "used-changed",
                                    "z3-version", "not-a-dict"])
def test_a_corrupted_entry_is_not_trusted(on, damage):
    x = z3.Int("x")
    q = [x > 0, x < 3, x * x == 5]  # unsat
    first = _solved(q)
    assert first[0] == "unsat" and first[2] == 1
    [path] = _entries()
    text = path.read_text()
    entry = json.loads(text)
    if damage == "garbage":
        path.write_bytes(b"\xff\x00not json")
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "not-a-dict":
        path.write_text("[1, 2]")
    else:  # edited without the checksum matching (or the key fields changed)
        field, value = {"result-flipped": ("result", "unknown"), "used-changed": ("used", 1),
                        "z3-version": ("z3", "0.0.0")}[damage]
        entry[field] = value
        if damage == "z3-version":
            entry["checksum"] = cache.entry_checksum(entry)  # consistent, but another key
        path.write_text(json.dumps(entry))
    again = _solved(q)
    assert again[2] == 1 and again[3] == 0, again  # solved, not read
    assert again[:2] == first[:2]
    assert _solved(q)[3] == 1  # the fresh answer was stored again


def test_a_forged_unsat_for_a_sat_query_is_not_used(on):
    """An entry claiming ``sat`` cannot come from the cache (sat is re-solved);
    one claiming ``unsat`` must match the query's own key: stored for
    another query, it is not found for this one."""
    x = z3.Int("x")
    _solved([x > 0, x < 0])
    [path] = _entries()
    forged = json.loads(path.read_text()) | {"result": "sat"}
    forged["checksum"] = cache.entry_checksum(forged)
    path.write_text(json.dumps(forged))
    assert _solved([x > 0, x < 0])[2] == 1  # a sat entry is not an answer
    assert _solved([x > 0])[0] == "sat"


def test_the_cache_is_off_without_the_cli_switch_or_with_ci(monkeypatch):
    monkeypatch.delenv(cache.ENV, raising=False)
    assert not cache.enabled()
    monkeypatch.setenv(cache.ENV, "1")
    monkeypatch.setenv("CI", "true")
    assert not cache.enabled()


def _prove(*extra: str, env: dict | None = None) -> str:
    import os

    r = subprocess.run([KVREACH, "prove", "--obligation", "load-window-blocks", *extra],
                       capture_output=True, text=True, timeout=300,
                       env=(os.environ | (env or {})) if env else None)
    assert r.returncode == 0, r.stderr
    return r.stderr


def test_prove_reports_cached_rows_and_no_cache_runs_everything(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert "(cached)" not in _prove()
    assert "load-window-blocks any any vllm 0.29.0/0.30.0/0.31.0/0.32.0/0.33.0/0.34.0: proved (cached) (ok)" in _prove()
    assert "(cached)" not in _prove("--no-cache")
    assert "(cached)" not in _prove(env={"CI": "true"})


def _rows_dir() -> Path:
    return cache.cache_dir().parent / "rows"


def _run(name: str) -> list:
    _fresh_process_state()
    return list(pool.run(name, jobs=1))


def _count_run_row(monkeypatch) -> list:
    ran, real = [], pool.run_row

    def counted(name, rule, model, inv, vllm=None):
        ran.append((name, rule, model))
        return real(name, rule, model, inv, vllm)
    monkeypatch.setattr(pool, "run_row", counted)
    return ran


def test_a_proved_row_is_kept_whole_and_its_sat_checks_solved_again(on, monkeypatch):
    [first] = _run("load-window-blocks")
    [entry_path] = sorted(_rows_dir().rglob("*.json"))
    entry = json.loads(entry_path.read_text())
    assert entry["sat"], "non-vacuity and the mutant are sat checks: kept to be solved again"
    ran = _count_run_row(monkeypatch)
    [again] = _run("load-window-blocks")
    assert ran == [] and again.cached and _facts(again) == _facts(first)
    assert again.solver_seconds > 0  # the sat checks ran


@pytest.mark.parametrize("damage", ["garbage", "checksum", "sat-now-unsat", "other-source"])
def test_a_damaged_row_entry_is_not_trusted(on, damage, monkeypatch):
    [first] = _run("load-window-blocks")
    [path] = sorted(_rows_dir().rglob("*.json"))
    entry = json.loads(path.read_text())
    if damage == "garbage":
        path.write_text("{")
    elif damage == "checksum":
        entry["fields"]["rlimit"] += 1
        path.write_text(json.dumps(entry))
    else:
        if damage == "sat-now-unsat":  # a kept sat check that is no longer sat
            entry["sat"][0][0] += "\n(assert false)"
        else:
            entry["source"] = "0" * 64
        entry["checksum"] = cache.entry_checksum(entry)
        path.write_text(json.dumps(entry))
    assert runner.cached_row("load-window-blocks", "any", "any") is None
    ran = _count_run_row(monkeypatch)
    [again] = _run("load-window-blocks")
    assert ran == [("load-window-blocks", "any", "any")]  # run, not taken whole
    assert _facts(again) == _facts(first)


def test_a_changed_source_misses_the_row(on, monkeypatch):
    _run("load-window-blocks")
    assert runner.cached_row("load-window-blocks", "any", "any") is not None
    monkeypatch.setattr(cache, "_source", "another tree")
    assert runner.cached_row("load-window-blocks", "any", "any") is None


def test_the_source_digest_covers_the_obligations_subpackage(monkeypatch):
    """An edit under proofs/obligations/ (where the obligations' scopes and
    queries live) is a changed source: a kept row is not taken whole."""
    monkeypatch.setattr(cache, "_source", None)
    before = cache.source_digest()
    real = Path.read_bytes

    def edited(self):
        data = real(self)
        return data + b"\n# edited" if self.parent.name == "obligations" else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    monkeypatch.setattr(cache, "_source", None)
    assert cache.source_digest() != before


def test_prove_sets_the_cache_switch_for_its_run_only(monkeypatch):
    import os

    from typer.testing import CliRunner

    from kvreach.cli import app

    monkeypatch.delenv(cache.ENV, raising=False)
    r = CliRunner().invoke(app, ["prove", "--obligation", "lookup-prefix-scan"])
    assert r.exit_code == 0, r.output
    assert cache.ENV not in os.environ


def test_a_kept_counterexample_row_is_rechecked_by_evaluation(on, monkeypatch):
    """A counterexample row kept whole: every kept model is checked against
    its query with its values fixed; a model that no longer satisfies its
    query (here: a pin contradicting the query) sends the row back to be run."""
    [first] = [r for r in _run("computed-before-stored") if r.rule == "vllm-0.29"]
    assert first.verdict == "counterexample"
    assert runner.cached_row("computed-before-stored", "vllm-0.29", "any").counterexample \
        == json.loads(json.dumps(first.counterexample))
    path, _ = cache.row_path(("computed-before-stored", "vllm-0.29", "any", "0.29.0"))
    entry = json.loads(path.read_text())
    assert all(pins for _, _, pins in entry["sat"])  # each sat check kept with its model
    for check in entry["sat"]:
        check[0] += "\n(assert false)"  # no model satisfies it any more
    entry["checksum"] = cache.entry_checksum(entry)
    path.write_text(json.dumps(entry))
    assert runner.cached_row("computed-before-stored", "vllm-0.29", "any") is None


def test_the_query_text_composed_per_assertion_is_the_solvers_own():
    """``solve.smtlib_text`` composes a query's text from each assertion's text
    (kept across checks); it must be byte for byte what a solver holding the
    whole query prints (the text the cache keys by and the solver parses)."""
    from kvreach.proofs.config import cube, splits
    from kvreach.proofs.induction import bmc_query, lifecycle_step_query
    from kvreach.proofs.obligations import OBLIGATIONS

    queries = []
    for name in ("soundness", "lookup-monotone", "exactly-once-restarts"):
        ob = OBLIGATIONS[name]
        ctx = rows.ctx_for("vllm-0.33", "intended", lookup_variant=ob.lookup_variant)
        qs = ob.queries(ctx) if ob.kind == "static" else [lifecycle_step_query(ob, ctx),
                                                           bmc_query(ob, ctx, 2)[0]]
        lifecycle = ob.kind != "static"
        for q in qs:
            base = q.premise + [q.violation]
            queries += [base, q.premise, base + cube(ctx, lifecycle)[1],
                        base + cube(ctx, lifecycle)[2] + splits(ctx, lifecycle)[:2]]
    x = z3.Int("x")
    queries += [[], [x > 1, x > 1], [z3.ForAll([x], x * x >= 0), z3.Bool("b")]]
    for terms in queries + queries:  # the second time from the kept texts
        assert solve.smtlib_text(terms) == solve.smtlib_text_whole(terms)
    assert any(len(solve.smtlib_text(t)) > 10_000 for t in queries)  # real queries among them
