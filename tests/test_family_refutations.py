"""The family rows refute a rule member by member.

``hit-preservation-family`` and its read-window twin run for vLLM's rule
too (``Obligation.confirm_each``): at every member whose step fails, a BMC
counterexample of that member's own, replayed through the executable rule;
a member whose step fails without one makes the row unknown (a failing step
alone may be an unreachable state). The counterexample search's readable
bounds are scaled to contain each geometry's fixed sizes (unscaled, the
members with SWA block 32 or 64 contradicted them and the search found
nothing there).
"""

from __future__ import annotations

import dataclasses

import pytest
import z3

from kvreach.proofs import decode, rows, runner
from kvreach.proofs.geometries import GEOMETRIES, family
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.solve import check_terms

FAMILY = "hit-preservation-family"


def _member(swa_block, full_block="same", retention="none-or-zero"):
    full = swa_block if full_block == "same" else full_block
    kw = {} if retention == "none-or-zero" else {"retention": retention}
    return next(g for g in family(**kw) if g.swa_block == swa_block and g.full_block == full
                and g.bpc == 1)


@pytest.mark.parametrize("geometry", GEOMETRIES + OBLIGATIONS[FAMILY].grid,
                         ids=lambda g: g.name)
def test_readable_bounds_hold_each_geometry(geometry):
    """The search's bounds and a geometry's pins are satisfiable together
    (the premise a counterexample search at that geometry adds)."""
    ctx = rows.ctx_for("vllm-0.33", "any", release=rows.release_for(FAMILY, "vllm-0.33", None))
    terms = geometry.pins(ctx) + decode.readable_bounds(ctx, geometry)
    assert check_terms(terms, 5_000_000)[0] == z3.sat


def test_unscaled_bounds_contradict_a_block_64_member():
    """The check above can fail: the bounds of every other search (scale 1)
    exclude SWA block 64."""
    g = _member(64)
    assert decode.readable_scale(g) == 4
    ctx = rows.ctx_for("vllm-0.33", "any")
    assert check_terms(g.pins(ctx) + decode.readable_bounds(ctx), 5_000_000)[0] == z3.unsat


def test_worked_geometries_keep_their_bounds():
    """Scaled only where the bounds do not hold the geometry: the worked
    geometries' searches are the ones they were, but for the windows 128
    and 1024 and the retention interval of 72 tokens."""
    scaled = {g.name: decode.readable_scale(g) for g in GEOMETRIES if decode.readable_scale(g) > 1}
    assert scaled == {"block 16, window 128": 2, "block 16, window 1024": 16,
                      "PR example, retention interval 72": 5}


def _row_over(monkeypatch, grid, rule="vllm-0.33", vllm="0.34.0"):
    monkeypatch.setitem(OBLIGATIONS, FAMILY, dataclasses.replace(OBLIGATIONS[FAMILY], grid=grid))
    return runner.run_row(FAMILY, rule, "any", {}, vllm)


def test_vllm_rule_is_refuted_at_each_failing_member_with_its_own_counterexample(monkeypatch):
    """vLLM 0.34.0's rule at SWA block 32 (no member of the worked
    geometries' sizes): the step fails, and that member's own BMC
    counterexample replays; with a retention interval of one chunk the step
    holds (no proof here: the invariant is not run)."""
    lost, kept = _member(32), _member(32, retention=1)
    row = _row_over(monkeypatch, (lost, kept))
    assert row.verdict == "counterexample", row.detail
    cex = row.counterexample
    assert cex["geometry"] == lost.name and cex["replayed_violation"]
    assert cex["geometries_failing"] == [lost.name] == cex["geometries_confirmed"]
    assert "a counterexample by BMC at each of the 1 geometries where the step fails" in row.scope
    assert "at the other 1 the step holds: no proof" in row.scope


def test_a_failing_member_without_a_counterexample_makes_the_row_unknown(monkeypatch):
    """The confirmation can fail: a member whose search finds nothing."""
    monkeypatch.setattr(runner, "grid_counterexample", lambda *a, **k: ((None, None), None))
    g = _member(32)
    row = _row_over(monkeypatch, (g,))
    assert row.verdict == "unknown"
    assert g.name + " (BMC found none)" in row.detail


def test_each_confirmed_member_records_its_witness(monkeypatch):
    """The row keeps, per member, what its counterexample chose (the
    window, extra_retained_tokens, EAGLE and retention interval are the
    member's symbolic parameters)."""
    g = _member(16, full_block=None)
    row = _row_over(monkeypatch, (g,))
    w = row.counterexample["witnesses"][g.name]
    group = row.counterexample["config"]["group"]
    assert set(w) == {"steps", "chunk", "window", "extra_retained_tokens", "eagle",
                      "retention_interval"}
    assert (w["window"], w["chunk"]) == (group["window"], row.counterexample["chunk"])


def test_param_error_survives_the_proof_pool():
    """A ParamError raised in a proof-run worker reaches the parent whole
    (before, it failed to unpickle and broke the process pool)."""
    import pickle

    from kvreach.params import ParamError

    e = pickle.loads(pickle.dumps(ParamError("later_diverges_at", 12, "at most 11")))
    assert (e.param, e.value, e.expected) == ("later_diverges_at", 12, "at most 11")
    assert str(e) == "later_diverges_at=12: expected at most 11"


def test_load_reads_checked_family_runs_for_the_releases_it_proves():
    """The family row is about the releases whose per-geometry row is
    proved; the others' per-geometry rows are F11's counterexamples."""
    from kvreach.proofs import matrix

    family_rows = list(rows.rows_for("load-reads-checked-family", None, None))
    covered = {v for _, _, _, g in family_rows for v in matrix.versions(g)}
    assert covered == set(OBLIGATIONS["load-reads-checked-family"].releases)
    expected = rows.expected_table()
    for _, _, _, g in rows.rows_for("load-reads-checked", None, None):
        in_family = bool(set(matrix.versions(g)) & covered)
        verdict = expected[("load-reads-checked", "any", "any", g)]
        assert verdict == ("proved" if in_family else "counterexample"), g
    assert all(expected[k] == "proved" for k in family_rows)
