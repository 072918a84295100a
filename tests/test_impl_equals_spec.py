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


# ---------------------------------------------------------------------------
# the offload lookup of every vLLM release (kvreach.releases)
# ---------------------------------------------------------------------------
#
# One record's parts on both sides: the spec reads them from
# ``LookupSym.release``, the twin takes the parameters ``kvreach.conform``
# maps the record to (``kvreach.impl.release``'s ``lookup_group`` and ``lookup_parts``: the mapping
# ``kvreach conform`` checks each release's wheel against). Cases are drawn
# inside the spec's scope (one full-attention group, possibly an EAGLE group,
# and one SWA group; HIT / MISS answers; no max_num_new_tokens).

import dataclasses
import math
import random

from kvreach import releases
from kvreach.impl import lookup as ilookup
from kvreach.impl import release as release_params
from kvreach.impl import release_rules
from kvreach.spec import lookup as slookup
from kvreach.spec.config import SymConfig
from kvreach.spec.evaluate import Pinned, lookup_values

# The lookup parts the spec models, each with its other value.
LOOKUP_PART_FLIPS = {
    "lookup_window_extra": lambda v: not v,
    "padded_initial_window": lambda v: not v,
    "eagle_widening": lambda v: "SWA groups" if v == "every group" else "every group",
    "max_load_tokens": lambda v: not v,
}
RELEASE_IDS = [r.name for r in releases.RELEASES]
LOOKUP_CASES = 40 * SCALE  # compared per release
WITNESS_DRAWS = 3000  # twin-only draws searched for a case where one part matters


def _flip(r: releases.Release, part: str) -> releases.Release:
    return dataclasses.replace(r, **{part: LOOKUP_PART_FLIPS[part](getattr(r, part))})


def _lookup_case(rnd: random.Random) -> dict:
    """A later request, its groups and the store's HIT chunks. The full
    block is not always a multiple of the SWA block (a hit ending inside an
    SWA chunk), extra_retained_tokens often > 0, the full group sometimes an
    EAGLE group, max_load_tokens sometimes set."""
    B = rnd.choice([2, 3, 4, 6, 8])
    bpc = rnd.randint(1, 3)
    C = B * bpc
    fb = rnd.choice([None, B, 2 * B, 3 * B, 1, 2, 3, 6])
    T = rnd.randint(1, 14 * C)
    unit = B if fb is None else math.lcm(B, fb)
    local = rnd.randint(0, T // unit) * unit if rnd.random() < 0.3 else 0
    n_swa, n_full = T // C, (T // (fb * bpc) if fb else 0)
    kind = rnd.choice(["dense", "random", "holes"])
    if kind == "dense":
        swa = set(range(n_swa))
    elif kind == "random":
        swa = {c for c in range(n_swa) if rnd.random() < 0.7}
    else:
        swa = set(range(n_swa)) - {rnd.randrange(max(1, n_swa)) for _ in range(rnd.randint(1, 2))}
    full = set(range(n_full)) if rnd.random() < 0.7 else set(range(rnd.randint(0, n_full)))
    return dict(
        full_block=fb, B=B, bpc=bpc, W=rnd.randint(1, 6 * B),
        extra=rnd.choice([0, 0, 1, 3, B, 2 * B]), eagle=rnd.random() < 0.25,
        full_eagle=(rnd.random() < 0.3) if fb else None, T=T, local=local,
        max_load=rnd.randint(0, T) if rnd.random() < 0.4 else None,
        full=sorted(full), swa=sorted(swa))


def _rng(x: range) -> tuple[int, int]:
    return (x.start, x.stop) if len(x) else (0, 0)


def _twin_lookup(x: dict, r: releases.Release) -> tuple:
    """(hit tokens, SWA loaded chunks, full loaded chunks) of the twin with
    the record's parameters."""
    groups = ([release_params.lookup_group(r, x["full_block"], x["bpc"], None, 0, bool(x["full_eagle"]))]
              if x["full_block"] else []) + [
        release_params.lookup_group(r, x["B"], x["bpc"], x["W"], x["extra"], x["eagle"])]
    req = ilookup.LaterRequest(x["T"], x["local"], x["max_load"])
    content = ilookup.StoreContent.of_chunks(([x["full"]] if x["full_block"] else []) + [x["swa"]])
    hit = ilookup.lookup_hit_tokens(groups, req, content, release_params.lookup_parts(r))
    loaded = ilookup.loaded_chunks(groups, req, hit) if hit else tuple(range(0) for _ in groups)
    return hit, _rng(loaded[-1]), (_rng(loaded[0]) if x["full_block"] else (0, 0))


def _spec_lookup(x: dict, r: releases.Release) -> tuple:
    v = lookup_values(
        full_block_tokens=x["full_block"], swa_block_tokens=x["B"], blocks_per_chunk=x["bpc"],
        window=x["W"], extra_retained_tokens=x["extra"], eagle=x["eagle"], num_tokens=x["T"],
        local_hit_tokens=x["local"], max_load_tokens=x["max_load"], full_chunks=x["full"],
        swa_chunks=x["swa"], release=r, full_eagle=x["full_eagle"])
    hit = v["hit_tokens"]
    swa = v["swa_loaded"] if v["swa_loaded"][0] < v["swa_loaded"][1] else (0, 0)
    fl = v["full_loaded"]
    full = fl if x["full_block"] and fl[0] < fl[1] else (0, 0)
    return hit, swa, full


def _first_difference(cases, spec_release, impl_release):
    """The first case where the spec under ``spec_release`` and the twin
    under ``impl_release`` differ (hit or a loaded range), or None."""
    for x in cases:
        s, t = _spec_lookup(x, spec_release), _twin_lookup(x, impl_release)
        if s != t:
            return x, s, t
    return None


def _witnesses(r: releases.Release, part: str, k: int = 2) -> list[dict]:
    """Up to ``k`` drawn cases where flipping ``part`` changes the twin's
    answer under ``r`` (twin only: cheap)."""
    rnd, out = random.Random(f"{r.name}/{part}"), []
    flipped = _flip(r, part)
    for _ in range(WITNESS_DRAWS):
        x = _lookup_case(rnd)
        if _twin_lookup(x, r) != _twin_lookup(x, flipped):
            out.append(x)
            if len(out) == k:
                break
    return out


@pytest.mark.parametrize("r", releases.RELEASES, ids=RELEASE_IDS)
def test_lookup_equals_spec_per_release(r):
    """Every release record: the spec's lookup equals the twin's on random
    cases and on cases where each lookup part matters (found by flipping it
    in the twin: the part changes the answer there)."""
    rnd = random.Random(f"lookup/{r.name}")
    cases = [_lookup_case(rnd) for _ in range(LOOKUP_CASES)]
    for part in LOOKUP_PART_FLIPS:
        cases += _witnesses(r, part)
    assert _first_difference(cases, r, r) is None


@pytest.mark.parametrize("side", ["spec", "impl"])
@pytest.mark.parametrize("part", list(LOOKUP_PART_FLIPS))
def test_lookup_comparison_rejects_one_part_plants(part, side):
    """A one-part change of a record on one side only (the spec's
    ``LookupSym.release``, or the record the twin's parameters are mapped
    from) is told apart, for every release, on drawn cases where the part
    changes the twin's answer (``eagle_widening`` only where the
    full-attention group is an EAGLE group whose unwidened query stops short
    of its last key: a ``max_load_tokens`` cap, or a one-token chunk)."""
    for r in releases.RELEASES:
        ws = _witnesses(r, part)
        assert ws, f"no drawn case where {part} matters for {r.name}"
        plant = _flip(r, part)
        spec_r, impl_r = (plant, r) if side == "spec" else (r, plant)
        assert _first_difference(ws, spec_r, impl_r) is not None, (r.name, part, side)


def _spec_mask_window(r: releases.Release, W: int, extra: int) -> int:
    """``SymConfig.W`` under ``spec.lookup.link`` for a lookup group of
    window ``W`` and ``extra`` (evaluated, both checks)."""
    s = SymConfig.fresh("mw_")
    lk = slookup.LookupSym.fresh("mw_lk_", release=r)
    ev = Pinned(z3.And(s.well_formed(), lk.well_formed(), slookup.link(s, lk), lk.W == W,
                       lk.extra == extra), f"window {W}, extra {extra}")
    return ev.value(s.W)


@pytest.mark.parametrize("plant", [None, "spec", "impl"])
def test_mask_window_equals_spec_per_release(plant):
    """The store mask's window: ``spec.lookup.link``'s ``SymConfig.W`` equals
    ``impl.release_rules.mask_group``'s ``mask_window_tokens`` for every
    record (window + extra from 0.31.0 on, the window alone before); a
    flipped ``mask_window_extra`` on one side differs wherever extra > 0."""
    for r in releases.RELEASES:
        other = dataclasses.replace(r, mask_window_extra=not r.mask_window_extra)
        spec_r, impl_r = {None: (r, r), "spec": (other, r), "impl": (r, other)}[plant]
        for W, extra in [(2, 0), (17, 0), (4, 4), (17, 5), (128, 3)]:
            g = GroupConfig(block_size=4, window=W, alignment_tokens=4,
                            extra_retained_tokens=extra)
            same = _spec_mask_window(spec_r, W, extra) == \
                release_rules.mask_group(impl_r, g).mask_window_tokens
            assert same == (plant is None or extra == 0), (r.name, W, extra, plant)
