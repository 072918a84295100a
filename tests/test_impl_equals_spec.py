"""The executable model (``kvreach.impl``) equals the Z3 spec (``kvreach.spec``)
at concrete values.

Every spec answer goes through ``kvreach.spec.evaluate`` (solver check and
substitution + simplify, which must agree); nothing of the spec is
re-implemented here. Configurations outside the spec's symbolic scope
(``alignment_tokens % B != 0``, window 1) are not drawn.

Sized for CI: the whole module runs in well under 90 s. ``KVREACH_EQ_SCALE=k``
multiplies every test's example count by ``k`` (a deeper search off CI).

The final-segment tail with a retention interval > 0 (``per_segment =
retention_interval // B``) was once dropped by the spec; vLLM 0.33.0 and impl
keep it. ``test_final_tail_with_retention_interval`` pins the fixed case.

Random draws seldom put a rule's edge inside the chunks they compare, so the
edges are also compared on a fixed grid (``BOUNDARY_GRID``, every rule, EAGLE
or not, retention None / 0 / > 0 with no segment run over the replay run's first chunk):
every segment boundary's run or tail, the retention replay run or tail, the
EAGLE shift of each. ``test_store_step_equals_spec_at_boundaries`` fails
when one side alone moves an edge by one chunk: planted by hand, ``b - ws <=
c`` made ``b - ws < c`` in ``lookup_window_keep``'s replay run of
``kvreach.spec.rules`` alone, then of ``kvreach.impl.rules`` alone, failed it
both times, in the 16 grid configurations with a retention interval;
``test_boundary_check_rejects_replay_run_mutants`` keeps that plant as the
mutation parameter ``replay_short_by`` of either side.
"""

from __future__ import annotations

import os

import pytest
import z3
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvreach.impl import load as iload
from kvreach.impl import mask as imask
from kvreach.impl import rules as irules
from kvreach.impl.lifecycle import Lifecycle, run
from kvreach.params import LOAD_MODELS, RULES, GroupConfig, RequestConfig
from kvreach.proofs.scenarios import PR_54362, PR_54362_FRONTIER_CHUNKS, PR_54362_WASTED
from kvreach.spec import rules as srules
from kvreach.spec.evaluate import Evaluator

SCALE = int(os.environ.get("KVREACH_EQ_SCALE", "1"))

SETTINGS = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def configs(draw, max_prompt: int = 400):
    block_size = draw(st.integers(1, 16))
    dcp = draw(st.integers(1, 2))
    B = block_size * dcp
    bpc = draw(st.integers(1, 4))
    C = B * bpc
    # Half the draws keep the window within a few blocks so that sparse
    # (non-dense) masks are common; the rest cover 2..80.
    window = draw(st.one_of(st.integers(2, 80), st.integers(2, max(2, min(80, 4 * B)))))
    alignment = draw(st.one_of(st.none(), st.integers(1, 16).map(lambda k: k * B)))
    retention = None
    if alignment is not None:
        retention = draw(st.one_of(st.none(), st.just(0), st.integers(1, 6).map(lambda k: k * C)))
    g = GroupConfig(
        block_size=block_size, window=window, alignment_tokens=alignment,
        blocks_per_chunk=bpc, dcp_world_size=dcp, eagle=draw(st.booleans()),
        retention_interval=retention,
    )
    r = RequestConfig(
        prompt_tokens=draw(st.integers(1, max_prompt)),
        max_offload_tokens=draw(st.one_of(st.none(), st.integers(0, max_prompt))),
        offload_prompt_only=draw(st.booleans()),
    )
    event("dense" if g.dense else "sparse")
    return g, r


def _replay_block(g: GroupConfig, r: RequestConfig) -> int:
    """Test-data anchor only: near the replay boundary's block."""
    if g.alignment_tokens is None:
        return 0
    return iload.replay_boundary(g, r.prompt_tokens) // g.block_tokens


def _tail_period(g: GroupConfig) -> int:
    """Test-data anchor only: the segment tails' period in blocks, 1 where
    the mask has none of whole blocks."""
    return g.per_segment if g.segment_tokens is not None and g.representable else 1


def _anchor(draw, g, r, F):
    return draw(st.sampled_from([0, F or 0, _replay_block(g, r), _tail_period(g) * 3]))


# ---------------------------------------------------------------------------
# masks
# ---------------------------------------------------------------------------


@settings(max_examples=70 * SCALE, **SETTINGS)
@given(cfg=configs(), data=st.data())
def test_block_mask_equals_spec(cfg, data):
    g, r = cfg
    ev = Evaluator(g, r)
    assert ev.dense == g.dense
    F = data.draw(st.one_of(st.none(), st.integers(0, 120)), label="final_block")
    lo = max(0, _anchor(data.draw, g, r, F) - data.draw(st.integers(0, 12), label="back"))
    hi = lo + data.draw(st.integers(0, 30), label="span")
    got = imask.reachable_block_mask(lo, hi, g, r.prompt_tokens, F)
    if g.dense:
        assert got is None
        # The spec's block_reachable includes the dense fallback.
        assert all(ev.block_reachable(i, F) for i in range(lo, min(hi, lo + 3)))
        return
    assert got is not None and len(got) == hi - lo
    for i in range(lo, hi):
        spec = ev.block_reachable(i, F)
        assert imask.block_reachable(i, g, r.prompt_tokens, F) == spec, (i, F)
        assert got[i - lo] == spec, (i, F)


@settings(max_examples=50 * SCALE, **SETTINGS)
@given(cfg=configs(), data=st.data())
def test_chunk_mask_equals_spec(cfg, data):
    g, r = cfg
    ev = Evaluator(g, r)
    F = data.draw(st.one_of(st.none(), st.integers(0, 60)), label="final_chunk")
    anchor = _anchor(data.draw, g, r, None if F is None else F * g.blocks_per_chunk)
    lo = max(0, anchor // g.blocks_per_chunk - data.draw(st.integers(0, 8), label="back"))
    for c in range(lo, lo + data.draw(st.integers(1, 20), label="span")):
        spec = ev.chunk_reachable(c, None if F is None else F * g.blocks_per_chunk)
        assert imask.chunk_reachable(c, g, r.prompt_tokens, F) == spec, (c, F)


# ---------------------------------------------------------------------------
# one store step (both rules, running and finished, several cursors)
# ---------------------------------------------------------------------------


@settings(max_examples=40 * SCALE, **SETTINGS)
@given(cfg=configs(max_prompt=300), data=st.data())
def test_store_step_equals_spec(cfg, data):
    g, r = cfg
    ev = Evaluator(g, r)
    prompt_h = irules.prompt_horizon_chunks(g, r)
    n = data.draw(st.one_of(st.integers(0, 40), st.integers(max(0, prompt_h - 3), prompt_h + 3)),
                  label="num_chunks")
    cursors = data.draw(
        st.lists(st.integers(0, n + 2), min_size=1, max_size=3, unique=True), label="cursors"
    )
    seg_chunks = (_tail_period(g) + g.blocks_per_chunk - 1) // g.blocks_per_chunk
    for rule in RULES:
        for finished in (False, True):
            for cursor in cursors:
                w = irules.store_step(rule, g, r, cursor, n, finished)
                assert ev.next_cursor(rule, cursor, n, finished) == w.next_cursor
                lo = max(0, min(cursor, n) - seg_chunks - 2)
                for c in range(lo, n + 2):
                    spec = ev.submitted(rule, cursor, n, finished, c)
                    assert (c in w.chunks) == spec, (rule, finished, cursor, n, c)


# ---------------------------------------------------------------------------
# load models
# ---------------------------------------------------------------------------


@settings(max_examples=30 * SCALE, **SETTINGS)
@given(cfg=configs(max_prompt=200), H=st.integers(0, 14))
def test_load_sets_equal_spec(cfg, H):
    g, r = cfg
    ev = Evaluator(g, r)
    for model in LOAD_MODELS:
        cs = range(-1, H + 2)
        spec_wanted = {c for c in cs if ev.wanted(model, c, H)}
        assert iload.wanted_chunks(model, g, r, H) == spec_wanted, model
        spec_needed = {c for c in cs if ev.needed(model, c, H)}
        assert iload.needed_chunks(model, g, r, H) == spec_needed, model


# ---------------------------------------------------------------------------
# lifecycle: per step, impl's storable count and decisions = the spec's
# ---------------------------------------------------------------------------

_MAX_CHUNKS_CHECKED = 24


@st.composite
def lifecycles(draw, prompt_tokens: int):
    budget = draw(st.integers(1, max(1, prompt_tokens)))
    decode = draw(st.integers(0, 3))
    steps = -(-prompt_tokens // budget) + decode
    abort = draw(st.one_of(st.none(), st.integers(0, min(steps, 4))))
    return Lifecycle(budget=budget, decode=decode, abort_after_step=abort,
                     async_scheduling=draw(st.booleans()))


@settings(max_examples=25 * SCALE, **SETTINGS)
@given(cfg=configs(max_prompt=120), data=st.data())
def test_lifecycle_steps_equal_spec(cfg, data):
    g, r = cfg
    lc = data.draw(lifecycles(r.prompt_tokens), label="lifecycle")
    ev = Evaluator(g, r)
    for rule in RULES:
        trace = run(rule, g, r, lc)
        pre_f = 0
        for stp in trace.steps[:6]:
            finished = stp.kind in ("finish", "abort")
            # The brief's check: storable_chunks(offloadable(step tokens)).
            assert ev.storable_chunks(
                rule, stp.tokens_after_batch, stp.num_tokens, finished
            ) == stp.num_chunks, (rule, stp)
            # The spec's transition from the step's pre-state.
            t = ev.transition(rule, pre_f, stp.cursor_before, stp.kind,
                              stp.scheduled_tokens, lc.budget)
            assert (t.tokens_after, t.n, t.finished, t.cursor, t.f) == (
                stp.tokens_after_batch, stp.num_chunks, finished, stp.cursor_after,
                stp.num_computed_tokens,
            ), (rule, stp)
            lo = max(0, stp.num_chunks + 1 - _MAX_CHUNKS_CHECKED)
            for c in range(lo, stp.num_chunks + 1):
                assert t.submitted(c) == (c in stp.submitted), (rule, stp, c)
            pre_f = stp.num_computed_tokens


# ---------------------------------------------------------------------------
# the PR's worked example, through the same mechanism
# ---------------------------------------------------------------------------


def test_pr_example_masks_through_spec():
    g = GroupConfig(block_size=4, window=16, alignment_tokens=36)
    ge = GroupConfig(block_size=4, window=16, alignment_tokens=36, eagle=True)
    r = RequestConfig(prompt_tokens=PR_54362.prompt)
    ev, eve = Evaluator(g, r), Evaluator(ge, r)
    blocks = range(243, 250)
    assert {i for i in blocks if ev.block_reachable(i, 300)} == {248, 249}
    # at the frontier's end (F1's chunks and the tail of boundary 252)
    assert {i for i in blocks if ev.block_reachable(i, PR_54362_FRONTIER_CHUNKS)} == \
        set(PR_54362_WASTED) | {248, 249}
    for F in (250, 300):
        assert {i for i in blocks if eve.block_reachable(i, F)} == {243, 248, 249}


def test_evaluator_refuses_out_of_scope():
    from kvreach.spec.evaluate import EvalError

    r = RequestConfig(prompt_tokens=10)
    with pytest.raises(EvalError):
        Evaluator(GroupConfig(block_size=8, window=16, alignment_tokens=36), r)
    with pytest.raises(EvalError):
        Evaluator(GroupConfig(block_size=4, window=1, alignment_tokens=36), r)


def test_final_tail_with_retention_interval():
    # PR group with retention 72 tokens (18 blocks per segment), final end 250:
    # the final partial segment 234..249 keeps [max(234, 250 - 4), 250).
    # vLLM 0.33.0 SlidingWindowManager.reachable_block_mask(243, 250, 36, spec,
    # False, retention_interval=72, reachable_boundaries=(1199,),
    # final_segment_end_block=250) returns 246..249 (run on 0.33.0).
    g = GroupConfig(block_size=4, window=16, alignment_tokens=36, retention_interval=72)
    r = RequestConfig(prompt_tokens=PR_54362.prompt)
    impl = {i for i in range(243, 250) if imask.block_reachable(i, g, PR_54362.prompt, 250)}
    assert impl == {246, 247, 248, 249}
    ev = Evaluator(g, r)
    assert {i for i in range(243, 250) if ev.block_reachable(i, 250)} == impl


# ---------------------------------------------------------------------------
# every rule's edges on a fixed grid: segment boundaries, the retention replay
# run / tail, the EAGLE shift (a one-chunk change on either side fails these)
# ---------------------------------------------------------------------------

# B = 4, W = 8 (need0 2), A = 32 (8 blocks): sparse for vllm-0.33 at 1 or 2
# blocks per chunk. The replay boundary of lookup-window, floor(P' / A) * A,
# is 96 tokens (P' = 100) or 64 (max_offload_tokens 70); the retention
# interval 9 chunks puts no segment run over
# the replay run's first chunk in any of them.
BOUNDARY_GRID = [
    (GroupConfig(block_size=4, window=8, alignment_tokens=32, blocks_per_chunk=bpc,
                 eagle=eagle, retention_interval=None if R is None else R * 4 * bpc),
     RequestConfig(prompt_tokens=100, max_offload_tokens=max_off))
    for bpc in (1, 2) for eagle in (False, True) for R in (None, 0, 9)
    for max_off in ((None,) if R is None else (None, 70))
]


def _grid_id(cfg) -> str:
    g, r = cfg
    return (f"bpc{g.blocks_per_chunk}-{'eagle' if g.eagle else 'plain'}-R{g.retention_interval}"
            f"-maxoff{r.max_offload_tokens}")


def _grid_num_chunks(g: GroupConfig, r: RequestConfig) -> int:
    """Chunks past every edge of the grid's rules: the prompt horizon plus
    the replay run's EAGLE chunk and a margin."""
    return irules.prompt_horizon_chunks(g, r) + irules.lookup_window_chunks(g) + 3


def _replay_run_first_chunk(g: GroupConfig, r: RequestConfig) -> int:
    """``b - ws`` of lookup-window's replay run (test-data anchor only)."""
    A, C = g.alignment_tokens, g.chunk_tokens
    return r.prompt_offloadable_tokens // A * (A // C) - irules.lookup_window_chunks(g)


@pytest.mark.parametrize("cfg", BOUNDARY_GRID, ids=_grid_id)
def test_store_step_equals_spec_at_boundaries(cfg):
    """Every chunk of one store step, for every rule, on the grid: running
    from cursor 0, finished from cursor 0 and finished from a late cursor
    (the end-of-request reconsideration)."""
    g, r = cfg
    ev = Evaluator(g, r)
    n = _grid_num_chunks(g, r)
    for rule in RULES:
        steps = [(True, 0)] if rule == "lookup-window" else [(False, 0), (True, 0), (True, n - 4)]
        for finished, cursor in steps:
            w = irules.store_step(rule, g, r, cursor, n, finished)
            got = {c for c in range(n + 2) if ev.submitted(rule, cursor, n, finished, c)}
            assert set(w.chunks) == got, (rule, finished, cursor, n)


def _keep_differs(g: GroupConfig, r: RequestConfig, ev: Evaluator,
                  impl_short_by: int = 0, spec_short_by: int = 0) -> list[int]:
    """Chunks where impl's and the spec's ``lookup_window_keep`` differ,
    either side's replay run started late by its ``*_short_by``."""
    P = r.prompt_offloadable_tokens
    return [c for c in range(_grid_num_chunks(g, r) + 2)
            if irules.lookup_window_keep(c, g, P, replay_short_by=impl_short_by)
            != ev.value(srules.lookup_window_keep(ev.s, z3.IntVal(c),
                                                  replay_short_by=spec_short_by))]


@pytest.mark.parametrize("side", ["spec", "impl"])
def test_boundary_check_rejects_replay_run_mutants(side):
    """The plant ``b - ws <= c`` -> ``<`` in lookup-window's replay run, on one
    side only, is told apart on the grid (at the run's first chunk ``b - ws``,
    for every configuration with a retention interval), and the true rules
    agree there."""
    caught = 0
    for g, r in BOUNDARY_GRID:
        if g.retention_interval is None:
            continue
        ev = Evaluator(g, r)
        assert _keep_differs(g, r, ev) == []
        short = {"impl_short_by": 1} if side == "impl" else {"spec_short_by": 1}
        assert _keep_differs(g, r, ev, **short) == [_replay_run_first_chunk(g, r)], (g, r)
        caught += 1
    assert caught == 16
