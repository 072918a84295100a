"""The lookup obligations over the block-shape family (``proofs/geometries.py``
``family``) reach shapes the worked geometries do not: a lookup whose window
is one chunk wider for SWA block 32 only (a block size none of the worked
geometries has) keeps every hit in each worked geometry, and loses one in
the family's SWA-block-32 members, so ``hit-preservation``'s induction step
for ``lookup-window`` (whose stores are sized for the unplanted lookup)
rejects it there.
"""

from __future__ import annotations

import pytest
import z3

from kvreach.proofs import runner
from kvreach.proofs.geometries import GEOMETRIES, family
from kvreach.proofs.induction import lifecycle_step_query
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.solve import Meter, _decide
from kvreach.spec import lookup as spec_lookup

PLANTED_BLOCK = 32


@pytest.fixture
def window_one_chunk_wider_at_block_32(monkeypatch):
    """``spec.lookup.lookup`` with ``get_sliding_window_size_in_chunks`` one
    chunk larger when the SWA block is 32 tokens (the padded initial window
    with it: ``load_window_chunks`` reads the same function)."""
    real_lookup, real_window = spec_lookup.lookup, spec_lookup.window_chunks

    def planted(s, keys, *args, **kwargs):
        def window_chunks(W, extra, C, variant="vllm-0.33", release=spec_lookup.DEFAULT_RELEASE):
            return real_window(W, extra, C, variant, release) + z3.If(s.B == PLANTED_BLOCK, 1, 0)

        monkeypatch.setattr(spec_lookup, "window_chunks", window_chunks)
        try:
            return real_lookup(s, keys, *args, **kwargs)
        finally:
            monkeypatch.setattr(spec_lookup, "window_chunks", real_window)

    monkeypatch.setattr(spec_lookup, "lookup", planted)


def _step_verdict(geometry):
    ob = OBLIGATIONS["hit-preservation"]
    ctx = runner._ctx("lookup-window", "any", release=runner._release(
        "hit-preservation", "lookup-window", None))
    ctx.pins = geometry.pins(ctx)
    return _decide(lifecycle_step_query(ob, ctx), ctx, True, Meter(200_000_000))[0]


def test_family_has_swa_block_32_and_the_worked_geometries_do_not():
    assert PLANTED_BLOCK not in {g.swa_block for g in GEOMETRIES}
    assert PLANTED_BLOCK in {g.swa_block for g in family()}
    assert set(family()) <= set(OBLIGATIONS["hit-preservation"].grid)


def test_planted_window_change_at_block_32_is_rejected_by_the_family(
        window_one_chunk_wider_at_block_32):
    member = next(g for g in family() if g.swa_block == PLANTED_BLOCK and g.full_block is None)
    assert _step_verdict(member) == z3.sat


def test_planted_window_change_is_invisible_in_a_worked_geometry(
        window_one_chunk_wider_at_block_32):
    """The worked geometry of block 16 and window 128 does not see it (so
    the family, not the worked grid, rejects the planted change)."""
    worked = next(g for g in GEOMETRIES if g.name == "block 16, window 128")
    assert _step_verdict(worked) == z3.unsat


def test_unplanted_family_member_is_proved():
    """Without the plant the same member's step is unsat (the test above is
    about the plant, not the member)."""
    member = next(g for g in family() if g.swa_block == PLANTED_BLOCK and g.full_block is None)
    assert _step_verdict(member) == z3.unsat


def test_deep_rows_run_with_deep_or_by_name_only():
    """``kvreach prove`` leaves the deep obligations' rows out unless
    ``--deep`` or ``--obligation`` names one; ``rows_for`` (the catalog's)
    lists every row."""
    every = set(runner.rows_for(None, None, None))
    default = set(runner.selected_rows(None, None, None))
    deep = set(runner.selected_rows(None, None, None, deep=True))
    assert deep == every and default < every
    assert {k[0] for k in every - default} == {n for n, o in OBLIGATIONS.items() if o.deep}
    assert "hit-preservation" in {n for n, o in OBLIGATIONS.items() if o.deep}
    assert runner.selected_rows("hit-preservation", None, None) == list(
        runner.rows_for("hit-preservation", None, None))
