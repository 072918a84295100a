"""vLLM 0.34.0's lookahead block hashes (L) in the proof run: the rows that
have L symbolic (``rows.models_lookahead``), their counterexample (F14),
the EAGLE-only classes that do not occur with L >= 1, and ``kvreach
counterexample --hash-lookahead-tokens``."""

from __future__ import annotations

import dataclasses

import pytest
import z3
from typer.testing import CliRunner

from kvreach import releases as R
from kvreach.cli import app
from kvreach.proofs import mutant_check, rows, runner, scenarios, search, solve
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.scenario import run_scenario

CHECK_RL = 60_000_000


def test_soundness_rows_about_0_34_0_have_l_symbolic():
    """soundness reads the part, so 0.34.0 is its own row with L symbolic;
    an obligation that does not read it has rows about 0.34.0 at L = 0."""
    groups = [g for *_, g in rows.rows_for("soundness", "vllm-0.33", "intended")]
    assert groups == ["0.30.0/0.31.0/0.32.0/0.33.0", "0.34.0"]
    sound, masks = OBLIGATIONS["soundness"], OBLIGATIONS["mask-equivalence"]
    assert rows.models_lookahead(sound, R.V0_34_0)
    assert not rows.models_lookahead(sound, R.V0_33_0)
    assert not rows.models_lookahead(masks, R.V0_34_0)
    ctx = rows.ctx_for("vllm-0.33", "intended", True, release=R.V0_34_0)
    assert ctx.s.L is not None and rows.ctx_for("vllm-0.33", "intended").s.L is None


def test_soundness_0_34_0_counterexample_is_f14():
    """The 0.34.0 row's search decodes to F14's example: L = 1, chunk 4 of
    the 14-token prompt, replayed through the executable rule."""
    depth, cex = search.find_counterexample("soundness", "vllm-0.33", "intended", vllm="0.34.0")
    req, g = cex["config"]["request"], cex["config"]["group"]
    assert (req["hash_lookahead_tokens"], req["tokens_per_hash"], req["prompt_tokens"]) == (1, 2, 14)
    assert g["lookahead_hashes"] and (g["block_size"], g["window"], g["alignment_tokens"]) == (2, 4, 8)
    assert cex["chunk"] == 4 and cex["replayed_violation"] == [4] and depth == 2
    assert set(scenarios.finding("F14").stored_not_loadable) == {4}


def test_no_waste_rows_about_0_34_0_have_l_symbolic():
    """no-waste reads the part too: its 0.34.0 rows (vllm-0.33's and
    lookup-window's) have L symbolic, the older ones not; the scope says how
    its one-shot world reads L."""
    nw = OBLIGATIONS["no-waste"]
    groups = [g for *_, g in rows.rows_for("no-waste", "vllm-0.33", "any")]
    assert groups[-1] == "0.34.0" and all("0.34.0" not in g for g in groups[:-1])
    assert rows.models_lookahead(nw, R.V0_34_0) and not rows.models_lookahead(nw, R.V0_33_0)
    assert "prompt's hashed end" in nw.lookahead_scope


def test_no_waste_0_34_0_counterexample_is_f14():
    """The vllm-0.33 row about 0.34.0 decodes to F14's example (L = 1, the
    14-token prompt, chunk 4, kept only at the hashed end) and its replay
    runs the request (prefill {2, 3, 4, 5}, finish {6}); pinned to L = 0 it
    finds the class every release has (F7) instead."""
    row = runner.run_row("no-waste", "vllm-0.33", "any", {}, "0.34.0")
    cex = row.counterexample
    assert row.verdict == "counterexample" and not row.detail, row
    assert row.non_vacuous and row.mutant_rejected
    req = cex["config"]["request"]
    assert (req["hash_lookahead_tokens"], req["prompt_tokens"], cex["chunk"]) == (1, 14, 4)
    assert cex["replayed_violation"] == [4]
    assert cex["lookahead_trace"]["steps"] == [[2, 3, 4, 5], [6]]
    assert row.scope.endswith(OBLIGATIONS["no-waste"].lookahead_scope)
    with rows.pinned_lookahead(0):
        pinned = runner.run_row("no-waste", "vllm-0.33", "any", {}, "0.34.0")
    assert pinned.counterexample["config"]["request"]["hash_lookahead_tokens"] == 0
    assert pinned.counterexample["replayed_violation"]


def test_no_waste_hashed_end_is_what_finds_f14():
    """Without the prefill's stores at the hashed end (``_kept_hashed``
    planted to False) F14's example is no counterexample: the chunk is not
    kept at the final horizon, so the term is what the row's search finds."""
    from unittest import mock

    from kvreach.proofs.obligations import lookup as ob_lookup

    nw = OBLIGATIONS["no-waste"]
    geometry, pins = nw.lookahead_example

    def first_pass():
        ctx = rows.ctx_for("vllm-0.33", "any", True, release=R.V0_34_0)
        ctx.pins = geometry.pins(ctx) + pins(ctx)
        q = nw.queries(ctx)[0]
        return _check(q.premise + [q.violation])

    assert first_pass() == z3.sat
    with mock.patch.object(ob_lookup, "_kept_hashed", lambda ctx, x: z3.BoolVal(False)):
        assert first_pass() == z3.unsat


def test_pinned_l_zero_finds_the_legacy_counterexample():
    """``pinned_lookahead(0)``: the same row searched at L = 0 finds the
    class every release since 0.30.0 has (F4's abort at the PR example)."""
    with rows.pinned_lookahead(0):
        _, cex = search.find_counterexample("soundness", "vllm-0.33", "aligned", vllm="0.34.0")
    assert cex["config"]["request"]["hash_lookahead_tokens"] == 0
    assert cex["lifecycle"]["abort_after_step"] == 1 and cex["replayed_violation"] == [246, 247]
    assert not rows.PINNED_L  # the pin ends with the block


def _check(terms) -> z3.CheckSatResult:
    """One check as the proof run does it (``solve.check_terms``: Z3's
    QF_NIA preprocessing and SMT core, no wall-clock limit, a fresh context
    from the query's text), so its answer depends on the query alone, not
    on machine load or on what the process solved before."""
    return solve.check_terms(list(terms), CHECK_RL)[0]


@pytest.mark.parametrize("model", ["aligned", "intended"])
def test_eagle_mask_findings_do_not_occur_with_lookahead(model):
    """mask-equivalence's queries (the EAGLE-only classes F3 and F5 are its
    counterexamples) with L symbolic: unsat for an EAGLE group with L >= 1
    (no mask shift, no EAGLE block, no final tail), sat with L = 0 (the
    legacy EAGLE mask: the findings); the premise with L >= 1 is
    satisfiable (not vacuous). Each check within ``CHECK_RL`` units."""
    ob = OBLIGATIONS["mask-equivalence"]
    ctx = rows.ctx_for("vllm-0.33", model, True, release=R.V0_34_0)
    s = ctx.s
    queries = ob.queries(ctx)
    assert len(queries) == 2
    for q in queries:
        assert _check([*q.premise, s.eagle, s.L >= 1]) == z3.sat
        assert _check([*q.premise, s.eagle, s.L >= 1, q.violation]) == z3.unsat
    assert z3.sat in [_check([*q.premise, s.eagle, s.L == 0, q.violation]) for q in queries]


@pytest.mark.parametrize("name", ["F3", "F5"])
def test_eagle_findings_scenarios_store_nothing_unloadable_with_lookahead(name):
    """F3's and F5's scenarios store a chunk no hit requests with legacy
    hashes (L = 0) and none with L = 1 (an EAGLE group then a plain one:
    F3's stores nothing, its replay boundary 0 has no run; F5's stores
    only wanted chunks)."""
    f = scenarios.finding(name)
    legacy = run_scenario(f.rule, f.scenario)
    assert set(legacy.stored) - legacy.wanted(f.scenario.load_model) == set(f.stored_not_loadable)
    lookahead = run_scenario(f.rule, dataclasses.replace(f.scenario, hash_lookahead_tokens=1))
    assert lookahead.group.lookahead_hashes and lookahead.request.hash_lookahead_tokens == 1
    assert set(lookahead.stored) <= lookahead.wanted(f.scenario.load_model)
    assert bool(lookahead.stored) == (name == "F5")


cli = CliRunner()


@pytest.mark.parametrize("args,says", [
    (["completeness", "--rule", "vllm-0.33", "--load-model", "aligned"],
     "its obligation does not model lookahead block hashes"),
    (["soundness", "--rule", "vllm-0.33", "--load-model", "aligned", "--vllm", "0.33.0"],
     "the row with L symbolic is about 0.34.0"),
])
def test_counterexample_refuses_l_for_a_row_about_l_zero(args, says):
    r = cli.invoke(app, ["counterexample", *args, "--hash-lookahead-tokens", "1"])
    assert r.exit_code != 0
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --hash-lookahead-tokens=1") and says in lines[0]


def test_counterexample_decodes_l_into_the_simulate_command():
    """The F14 counterexample's printed command runs the decoded scenario,
    L included, and simulate shows the same unloadable chunk."""
    r = cli.invoke(app, ["counterexample", "soundness", "--rule", "vllm-0.33", "--load-model",
                         "intended", "--vllm", "0.34.0", "--hash-lookahead-tokens", "1"])
    assert r.exit_code == 0, r.output
    command = next(ln for ln in r.output.splitlines() if ln.startswith("reproduce: "))
    argv = command.removeprefix("reproduce: ").split()
    assert argv[:2] == ["kvreach", "simulate"]
    assert argv[argv.index("--hash-lookahead-tokens") + 1] == "1"
    sim = cli.invoke(app, argv[1:])
    assert sim.exit_code == 0, sim.output
    assert "stored-not-loadable under intended (1): 4" in sim.output


# the single-request lifecycle rows of vLLM's own rules with L symbolic:
# store.LIFECYCLE_LOOKAHEAD, read by the deep companions (store.with_lookahead)
LIFECYCLE_L = ("invariant", "completeness", "exactly-once", "computed-before-stored")


def _reading(monkeypatch, name):
    """``name`` as it is with store.LIFECYCLE_LOOKAHEAD set, in the table."""
    from kvreach.proofs.obligations.store import LIFECYCLE_LOOKAHEAD

    ob = dataclasses.replace(OBLIGATIONS[name], **LIFECYCLE_LOOKAHEAD)
    monkeypatch.setitem(OBLIGATIONS, name, ob)
    return ob


@pytest.mark.parametrize("name", LIFECYCLE_L)
def test_lifecycle_rows_with_the_part_have_l_symbolic_for_vllm_rules(monkeypatch, name):
    """Reading the part, the single-request lifecycle obligations get a
    0.34.0 row of vllm-0.33 with L symbolic; kvreach's lookup-window keeps
    its one row at L = 0 (the spec's keep decision reads the prompt without
    the mode); the rows before 0.34.0 have no L. As committed they do not
    read it (every 0.34.0 row of theirs is L = 0)."""
    assert not rows.models_lookahead(OBLIGATIONS[name], R.V0_34_0, "vllm-0.33")
    ob = _reading(monkeypatch, name)
    model = "aligned" if ob.model_specific else "any"
    groups = [g for *_, g in rows.rows_for(name, "vllm-0.33", model)]
    assert groups == ["0.30.0/0.31.0/0.32.0/0.33.0", "0.34.0"]
    assert rows.models_lookahead(ob, R.V0_34_0, "vllm-0.33")
    assert not rows.models_lookahead(ob, R.V0_33_0, "vllm-0.33")
    if ob.rule_specific and "lookup-window" in (ob.rules or ("lookup-window",)):
        assert not rows.models_lookahead(ob, R.V0_34_0, "lookup-window")
        assert [g for *_, g in rows.rows_for(name, "lookup-window", model)] == [
            "0.29.0/0.30.0/0.31.0/0.32.0/0.33.0/0.34.0"]


def test_lifecycle_row_scope_says_l_symbolic(monkeypatch):
    """A 0.34.0 row with L symbolic states it in its scope (and the
    invariant how its keep decision reads L); the rows before 0.34.0 and
    lookup-window's do not claim it. The scope is the runner's, read from a
    row run with the budgets cut (the verdict is not what is checked)."""
    from kvreach.proofs import config
    from kvreach.proofs.obligations.store import INVARIANT_LOOKAHEAD_SCOPE

    _reading(monkeypatch, "invariant")
    for module, names in ((runner, ("NODE_RL", "LEAF_RL", "ROW_RL")),
                          (search, ("CHECK_RL", "LEAF_RL", "ROW_RL")),
                          (solve, ("ROOT_RL", "NODE_RL", "LEAF_RL"))):
        for n in names:
            monkeypatch.setattr(module, n, 200)
    monkeypatch.setattr(mutant_check, "mutant_cache", {"invariant": ("stuck-cursor", True)})
    monkeypatch.setattr(mutant_check, "mutant_use_counts", {})
    ok = {"vllm-0.33": True, ("vllm-0.33", "lookahead"): True, "lookup-window": True}
    row = runner.run_row("invariant", "vllm-0.33", "any", ok, "0.34.0")
    assert config.SCOPE_LOOKAHEAD_SYMBOLIC in row.scope and INVARIANT_LOOKAHEAD_SCOPE in row.scope
    assert config.SCOPE_LOOKAHEAD_OFF not in row.scope
    old = runner.run_row("invariant", "vllm-0.33", "any", ok, "0.30.0/0.31.0/0.32.0/0.33.0")
    assert config.SCOPE_LOOKAHEAD_SYMBOLIC not in old.scope and config.SCOPE_LOOKAHEAD_OFF not in old.scope
    lw = runner.run_row("invariant", "lookup-window", "any", ok,
                        "0.29.0/0.30.0/0.31.0/0.32.0/0.33.0/0.34.0")
    assert config.SCOPE_LOOKAHEAD_OFF in lw.scope and config.SCOPE_LOOKAHEAD_SYMBOLIC not in lw.scope


def test_a_row_with_l_symbolic_rests_on_the_invariant_with_l_symbolic(monkeypatch):
    """The invariant rows' verdicts per rule and mode (``rows.invariant_status``):
    a 0.34.0 row with L symbolic needs the invariant row with L symbolic;
    a row at L = 0 the L = 0 row."""
    _reading(monkeypatch, "invariant")
    _reading(monkeypatch, "exactly-once")

    def row(vllm, verdict):
        return rows.Row("invariant", "vllm-0.33", "any", verdict, "", 0.0, vllm=vllm)
    st = rows.invariant_status([row("0.30.0/0.31.0/0.32.0/0.33.0", "proved"), row("0.34.0", "unknown")])
    assert rows.invariant_holds(st, "vllm-0.33", False)
    assert not rows.invariant_holds(st, "vllm-0.33", True)
    st = rows.invariant_status([row("0.30.0/0.31.0/0.32.0/0.33.0", "unknown"), row("0.34.0", "proved")])
    assert not rows.invariant_holds(st, "vllm-0.33", False) and rows.invariant_holds(st, "vllm-0.33", True)
    proved = rows.Row("exactly-once", "vllm-0.33", "any", "proved", "", 0.0, vllm="0.34.0")
    runner.rest_on(proved, rows.invariant_status([row("0.30.0/0.31.0/0.32.0/0.33.0", "proved"),
                                                  row("0.34.0", "unknown")]))
    assert proved.verdict == "unknown" and "lookahead" in proved.detail


def test_invariant_lookahead_lemmas_hold_and_are_cheap():
    """The invariant's step lemmas with L symbolic (``store.lookahead_lemmas``:
    a decode step's storable count exceeds the cursor by at most one chunk)
    are each unsat from the step and the ones before, in under 1 M units
    (measured 0.01 to 0.44 M); without L there are none (the rows' queries
    are as before)."""
    from kvreach.proofs.induction import lemma_queries
    from kvreach.proofs.solve import Meter, check_terms

    ob = OBLIGATIONS["invariant"]
    assert lemma_queries(ob, rows.ctx_for("vllm-0.33", "any")) == []
    qs = lemma_queries(ob, rows.ctx_for("vllm-0.33", "any", True, release=R.V0_34_0))
    assert len(qs) == 5
    for q in qs:
        m = Meter()
        assert check_terms(q.premise + [q.violation], 1_000_000, m)[0] == z3.unsat


LOOKAHEAD_COMPANIONS = ("invariant-lookahead", "exactly-once-lookahead",
                        "computed-before-stored-lookahead")


def test_lookahead_companions_are_deep_rows_about_0_34_0_only():
    """Each companion has one row, vllm-0.33 about 0.34.0 with L symbolic,
    run by the deep run only; its base obligation keeps every release's rows
    at L = 0 in the default run."""
    from kvreach.proofs import matrix
    from kvreach.proofs.rows import models_lookahead, rows_for, selected_rows

    for name in LOOKAHEAD_COMPANIONS:
        ob = OBLIGATIONS[name]
        assert list(rows_for(name, None, None)) == [(name, "vllm-0.33", "any", "0.34.0")]
        assert models_lookahead(ob, matrix.representative("0.34.0"), "vllm-0.33")
        base = OBLIGATIONS[name.removesuffix("-lookahead")]
        assert not base.deep and "lookahead_hashes" not in base.reads
        assert ob.mutant == base.mutant and ob.step_violation is base.step_violation
    default = selected_rows(None, None, None)
    deep = selected_rows(None, None, None, deep=True)
    assert not any(k[0] in LOOKAHEAD_COMPANIONS for k in default)
    assert {k[0] for k in deep} >= set(LOOKAHEAD_COMPANIONS)


def test_the_invariant_with_l_runs_only_where_a_row_needs_it(monkeypatch):
    """pool.run's invariant rows: the companion invariant only in a deep run
    or for a selected obligation reading L (its rows rest on it)."""
    from kvreach.proofs import pool

    seen = []
    monkeypatch.setattr(pool, "_run_row", lambda key, ok: seen.append(key) or _row(key))
    monkeypatch.setattr(pool.cache, "enabled", lambda: False)

    def invariants(**kw):
        seen.clear()
        list(pool.run(jobs=1, **kw))
        return {k[0] for k in seen if k[0].startswith("invariant")}

    assert invariants(obligation="exactly-once", rule="vllm-0.33") == {"invariant"}
    assert invariants(obligation="exactly-once-lookahead") == {"invariant",
                                                               "invariant-lookahead"}


def _row(key):
    from kvreach.proofs.rows import Row

    name, rule, model, vllm = key
    return Row(name, rule, model, "proved", "", 0.0, vllm=vllm)
