"""The lookup obligations over the block-shape family (``proofs/geometries.py``
``family``) reach shapes the worked geometries do not: a lookup whose window
is one chunk wider for SWA block 32 only (a block size none of the worked
geometries has) keeps every hit in each worked geometry, and loses one in
the family's SWA-block-32 members, so ``hit-preservation-neighbours``' query
for ``lookup-window`` (whose stores are sized for the unplanted lookup)
rejects it there: in the member full block 64 / SWA block 32 (with the
full-attention block the SWA block's, or SWA only, the alignment is one
chunk and lookup-window stores every chunk, so no window change loses a hit
there). ``hit-preservation``'s step rejects it there too, and so does
``hit-preservation-family`` (that step over the family).
"""

from __future__ import annotations

import pytest
import z3

from kvreach.params import RULES
from kvreach.proofs import neighbours, rows
from kvreach.proofs.geometries import FAMILY_RETENTION_CHUNKS, GEOMETRIES, family
from kvreach.proofs.induction import lifecycle_step_query
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.solve import Meter, check_terms, decide
from kvreach.spec import lookup as spec_lookup

PLANTED_BLOCK = 32


@pytest.fixture
def window_one_chunk_wider_at_block_32(monkeypatch):
    """``spec.lookup.lookup`` with ``get_sliding_window_size_in_chunks`` one
    chunk larger when the SWA block is 32 tokens (the padded initial window
    with it: ``load_window_chunks`` reads the same function)."""
    real_lookup, real_window = spec_lookup.lookup, spec_lookup.window_chunks

    def planted(s, keys, *args, **kwargs):
        def window_chunks(W, extra, C, variant="vllm-window", release=spec_lookup.DEFAULT_RELEASE):
            return real_window(W, extra, C, variant, release) + z3.If(s.B == PLANTED_BLOCK, 1, 0)

        monkeypatch.setattr(spec_lookup, "window_chunks", window_chunks)
        try:
            return real_lookup(s, keys, *args, **kwargs)
        finally:
            monkeypatch.setattr(spec_lookup, "window_chunks", real_window)

    monkeypatch.setattr(spec_lookup, "lookup", planted)


def _step_verdict(geometry, name="hit-preservation", rule="lookup-window"):
    ob = OBLIGATIONS[name]
    ctx = rows.ctx_for(rule, "any", lookup_variant=ob.lookup_variant,
                       release=rows.release_for(name, rule, None))
    ctx.pins = geometry.pins(ctx)
    return decide(lifecycle_step_query(ob, ctx), ctx, True, Meter(200_000_000),
                  not getattr(geometry, "cube_only", False))[0]


def _neighbours_verdict(geometry):
    """``hit-preservation-neighbours``' queries for lookup-window (0.34.0)
    in one geometry: sat if either is."""
    ctx = rows.ctx_for("lookup-window", "any", release=rows.release_for(
        "hit-preservation-neighbours", "lookup-window", None))
    ctx.pins = geometry.pins(ctx)
    verdicts = [check_terms(q.premise + [q.violation], 60_000_000)[0]
                for q in neighbours.neighbour_queries(ctx)]
    return z3.sat if z3.sat in verdicts else (z3.unsat if all(
        v == z3.unsat for v in verdicts) else z3.unknown)


MEMBER_32 = next(g for g in family(retention="none")
                 if g.swa_block == PLANTED_BLOCK and (g.full_block or 0) > PLANTED_BLOCK)


# hit-preservation-family's member of SWA block 32 (the retention interval None or 0)
FAMILY_ROW_MEMBER_32 = next(g for g in OBLIGATIONS["hit-preservation-family"].grid
                            if g.swa_block == PLANTED_BLOCK and (g.full_block or 0) > PLANTED_BLOCK)


def test_family_has_swa_block_32_and_the_worked_geometries_do_not():
    assert PLANTED_BLOCK not in {g.swa_block for g in GEOMETRIES}
    assert MEMBER_32 in OBLIGATIONS["hit-preservation-neighbours"].grid


def test_planted_window_change_at_block_32_is_rejected_by_the_family(
        window_one_chunk_wider_at_block_32):
    assert _neighbours_verdict(MEMBER_32) == z3.sat
    assert _step_verdict(MEMBER_32) == z3.sat  # world (a)'s step too


def test_planted_window_change_at_block_32_is_rejected_by_the_family_row(
        window_one_chunk_wider_at_block_32):
    """hit-preservation-family (the per-geometry row's step over the family)
    rejects the plant at its member full block 64 / SWA block 32."""
    assert _step_verdict(FAMILY_ROW_MEMBER_32, "hit-preservation-family") == z3.sat


def test_unplanted_family_row_member_is_proved():
    assert _step_verdict(FAMILY_ROW_MEMBER_32, "hit-preservation-family") == z3.unsat


def test_planted_window_change_at_block_32_is_rejected_by_the_read_window_family_row(
        window_one_chunk_wider_at_block_32):
    """The same plant under the lookup variant 'read-window' (its window
    function is the one planted): hit-preservation-read-window-family
    rejects it at the same member, which is proved without it."""
    name = "hit-preservation-read-window-family"
    assert FAMILY_ROW_MEMBER_32 in OBLIGATIONS[name].grid
    assert _step_verdict(FAMILY_ROW_MEMBER_32, name) == z3.sat


def test_unplanted_read_window_family_row_member_is_proved():
    name = "hit-preservation-read-window-family"
    assert _step_verdict(FAMILY_ROW_MEMBER_32, name) == z3.unsat


ALIGNED_FAMILY = "hit-preservation-read-window-aligned-family"
ALIGNED_MEMBER_32 = next(g for g in OBLIGATIONS[ALIGNED_FAMILY].grid
                         if g.swa_block == PLANTED_BLOCK and (g.full_block or 0) > PLANTED_BLOCK)


def test_planted_window_change_at_block_32_is_rejected_by_the_aligned_family_row(
        window_one_chunk_wider_at_block_32):
    """The aligned row's step (rule vllm-0.33, no EAGLE, no retention
    interval) over the family rejects the plant at full 64 / SWA 32."""
    assert _step_verdict(ALIGNED_MEMBER_32, ALIGNED_FAMILY, "vllm-0.33") == z3.sat


def test_unplanted_aligned_family_row_member_is_proved():
    assert _step_verdict(ALIGNED_MEMBER_32, ALIGNED_FAMILY, "vllm-0.33") == z3.unsat


def test_planted_window_change_is_invisible_in_a_worked_geometry(
        window_one_chunk_wider_at_block_32):
    """The worked geometry of block 16 and window 128 does not see it (so
    the family, not the worked grid, rejects the planted change)."""
    worked = next(g for g in GEOMETRIES if g.name == "block 16, window 128")
    assert _neighbours_verdict(worked) == z3.unsat
    assert _step_verdict(worked) == z3.unsat


def test_unplanted_family_member_is_proved():
    """Without the plant the same member's queries are unsat (the test above
    is about the plant, not the member)."""
    assert _neighbours_verdict(MEMBER_32) == z3.unsat
    assert _step_verdict(MEMBER_32) == z3.unsat


def test_deep_rows_run_with_deep_or_by_name_only():
    """``kvreach prove`` leaves the deep obligations' rows out unless
    ``--deep`` or ``--obligation`` names one; ``rows_for`` (the catalog's)
    lists every row."""
    every = set(rows.rows_for(None, None, None))
    default = set(rows.selected_rows(None, None, None))
    deep = set(rows.selected_rows(None, None, None, deep=True))
    assert deep == every and default < every
    assert {k[0] for k in every - default} == {n for n, o in OBLIGATIONS.items() if o.deep}
    assert "hit-preservation-neighbours" in {n for n, o in OBLIGATIONS.items() if o.deep}
    assert rows.selected_rows("hit-preservation-neighbours", None, None) == list(
        rows.rows_for("hit-preservation-neighbours", None, None))


def _bench_shapes():
    """bench/bench_hits.py's shapes as (full block, SWA block, blocks_per_chunk):
    every real model's groups (kvreach.models' presets) and offload chunks."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "bench_hits.py"
    spec = importlib.util.spec_from_file_location("bench_hits", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return {(fb, sb, bpc) for _, fb, sb, _w, _extra, bpc, _eagle in bench.SHAPES}


def _shapes(grid):
    return {(g.full_block, g.swa_block, g.bpc) for g in grid if not hasattr(g, "window")}


def test_every_bench_shape_is_a_family_member_of_each_row_over_it():
    """Each real shape bench/bench_hits.py measures (DeepSeek-V4-Flash's
    compressor states, full block 256 over SWA block 8 and 4, among them) is
    a member of the family, and of every row's grid over it;
    hit-preserving-wastes' members are those with a full-attention block
    larger than the SWA block (its premise)."""
    bench = _bench_shapes()
    assert {(256, 8, 1), (256, 4, 1)} <= bench
    assert bench <= _shapes(family())
    for name in ("hit-preservation-neighbours", "lookup-run-stored",
                 "lookup-run-stored-read-window", "lookup-monotone", "hit-preservation-family",
                 "hit-preservation-read-window-family", ALIGNED_FAMILY):
        assert bench <= _shapes(OBLIGATIONS[name].grid), name
    wider = {x for x in bench if x[0] is not None and x[0] > x[1]}
    assert wider <= _shapes(OBLIGATIONS["hit-preserving-wastes"].grid)


def test_family_row_has_every_member_again_with_each_positive_retention_interval():
    """hit-preservation-family's grid: every member with the retention
    interval None or 0, and every member again with a positive one of k SWA
    chunks for each k of ``FAMILY_RETENTION_CHUNKS``."""
    grid = OBLIGATIONS["hit-preservation-family"].grid
    assert _shapes(g for g in grid if g.retention == "none-or-zero") == _shapes(family())
    for k in FAMILY_RETENTION_CHUNKS:
        assert _shapes(g for g in grid if g.retention == k) == _shapes(family()), k
    assert len(grid) == len(family()) * (1 + len(FAMILY_RETENTION_CHUNKS))


RETENTION_MEMBER_32 = next(
    g for g in OBLIGATIONS["hit-preservation-family"].grid
    if g.swa_block == PLANTED_BLOCK and (g.full_block or 0) > PLANTED_BLOCK
    and g.retention == max(FAMILY_RETENTION_CHUNKS))


def test_planted_window_change_at_block_32_is_rejected_with_a_retention_interval(
        window_one_chunk_wider_at_block_32):
    """The plant at the member full block 64 / SWA block 32 with a positive
    retention interval (its longest k): a later request the interval
    promises loses a hit."""
    assert _step_verdict(RETENTION_MEMBER_32, "hit-preservation-family") == z3.sat


def test_unplanted_retention_member_is_proved():
    assert _step_verdict(RETENTION_MEMBER_32, "hit-preservation-family") == z3.unsat


def _family_rows():
    return [ob for ob in OBLIGATIONS.values()
            if ob.grid and any(not hasattr(g, "window") for g in ob.grid)]


def test_each_family_rows_scope_says_what_its_members_fix():
    """A row over the family says a positive retention interval of k chunks
    exactly when its grid has such members, and EAGLE off exactly when every
    member fixes it off (its scope is built from its grid's flags, not edited
    from another row's)."""
    rows_ = _family_rows()
    assert {ob.name for ob in rows_} >= {"hit-preservation-family",
                                         "hit-preservation-read-window-family",
                                         "hit-preservation-read-window-aligned-family"}
    for ob in rows_:
        members = [g for g in ob.grid if not hasattr(g, "window")]
        positive = any(isinstance(g.retention, int) for g in members)
        assert ("positive retention interval of k SWA chunks" in ob.scope) == positive, ob.name
        no_eagle = all(g.no_eagle or g.window_one_past_chunks for g in members)
        assert ("EAGLE off" in ob.scope) == no_eagle, ob.name


def test_per_geometry_rows_name_their_geometries_and_their_family_row():
    for name, family_row in (("hit-preservation", "hit-preservation-family"),
                             ("hit-preservation-read-window", "hit-preservation-read-window-family"),
                             ("hit-preservation-read-window-aligned",
                              "hit-preservation-read-window-aligned-family")):
        ob = OBLIGATIONS[name]
        assert f"each of the {len(ob.grid)} worked geometries" in ob.scope, name
        assert all(g.name in ob.scope for g in ob.grid), name
        assert f"the deep row {family_row} " in ob.scope and family_row in OBLIGATIONS, name


def test_per_geometry_rows_name_the_rules_their_family_row_runs_for():
    """A per-geometry row's scope says for which of its rules the family
    row runs: every rule it names is one of the family row's, and a rule of
    the per-geometry row the family row lacks is named as not run."""
    for name, family_row in (("hit-preservation", "hit-preservation-family"),
                             ("hit-preservation-read-window", "hit-preservation-read-window-family")):
        ob, fam = OBLIGATIONS[name], OBLIGATIONS[family_row]
        said = ob.scope.split(f"the deep row {family_row} ")[1].split(";")[0]
        for rule in ob.rules or RULES:
            if rule in fam.rules:
                assert rule in said or "for the same rule" in said, (name, rule)
            else:
                assert f"{rule} is not run over the family" in said, (name, rule)
