"""The offload lookup: the executable twin (``kvreach.impl.lookup``) and the
Z3 model (``kvreach.spec.lookup``) agree, and the twin's scan loop equals its
closed form. (The twin equals vLLM 0.33.0's own lookup: tests/vllm/test_lookup_vllm.py.)

Every spec answer goes through ``kvreach.spec.evaluate.lookup_values`` (solver
and substitution checks); nothing of the spec is re-implemented here. The Z3
model's scope: at most one full-attention group and one SWA group, HIT / MISS
answers; cases are drawn inside it.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvreach.impl.lookup import (
    Answer, LaterRequest, LookupGroup, StoreContent, lookup, sliding_window_end,
    sliding_window_lookup,
)
from kvreach.params import ParamError
from kvreach.spec.evaluate import lookup_values

SCALE = int(os.environ.get("KVREACH_EQ_SCALE", "1"))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])

answers = st.lists(st.sampled_from(list(Answer)), max_size=30)


@settings(max_examples=500 * SCALE, **SETTINGS)
@given(answers=answers, w=st.integers(1, 8), extra=st.integers(0, 4))
def test_scan_loop_equals_closed_form(answers, w, extra):
    assert sliding_window_lookup(answers, w, w + extra) == sliding_window_end(answers, w, w + extra)


def test_scan_mutant_differs():
    """Keeping the initial window after a break is a different function."""
    H, M = Answer.HIT, Answer.MISS
    a = [M, H, H, M, H, H]
    assert sliding_window_lookup(a, 2, 3) == sliding_window_end(a, 2, 3) == 3
    assert sliding_window_end(a, 2, 3, reset_window_on_break=False) == 0


@st.composite
def lookup_cases(draw):
    B = draw(st.sampled_from([2, 3, 4, 6, 8]))
    bpc = draw(st.integers(1, 3))
    full_block = draw(st.one_of(st.none(), st.sampled_from([B, 2 * B, 3 * B, 6 * B])))
    W = draw(st.integers(1, 6 * B))
    extra = draw(st.sampled_from([0, 0, 1, 3, B]))
    eagle = draw(st.integers(0, 3)) == 0
    C = B * bpc
    T = draw(st.integers(1, 14 * C))
    unit = full_block * bpc if full_block is not None else B
    unit = max(unit, B) if full_block is None or full_block % B == 0 else unit * B
    local = draw(st.integers(0, T // unit)) * (full_block if full_block else B)
    local = local - local % B if full_block is None else local
    max_load = draw(st.one_of(st.none(), st.integers(0, T)))
    n_full = T // (full_block * bpc) if full_block else 0
    kind = draw(st.sampled_from(["dense", "random", "holes"]))
    n_swa = T // C
    if kind == "dense":
        swa = set(range(n_swa))
    elif kind == "random":
        swa = {c for c in range(n_swa) if draw(st.booleans())}
    else:
        swa = set(range(n_swa)) - set(draw(st.lists(st.integers(0, max(0, n_swa - 1)), max_size=3)))
    full = set(range(draw(st.integers(0, n_full)))) if full_block else set()
    return full_block, B, bpc, W, extra, eagle, T, local, max_load, full, swa


def twin_and_spec(case, full_set, swa_set, full_arg, swa_arg, variant="vllm-window"):
    from kvreach.impl.release import lookup_parts
    from kvreach.releases import DEFAULT

    """The twin on the chunk sets, the spec (``lookup_values``) on its
    arguments (sets, or counts for "exactly the chunks below"); ``variant``:
    the lookup variant of both."""
    full_block, B, bpc, W, extra, eagle, T, local, max_load, _, _ = case
    groups = ([LookupGroup(full_block, bpc)] if full_block else []) + [
        LookupGroup(B, bpc, window_tokens=W, extra_retained_tokens=extra, eagle=eagle,
                    lookup_variant=variant)]
    content = StoreContent.of_chunks(([full_set] if full_block else []) + [swa_set])
    # both sides the same release's lookup: the spec evaluator's default
    # (kvreach.releases.DEFAULT), the twin with that release's parts
    twin = lookup(groups, LaterRequest(T, local, max_load), content, parts=lookup_parts(DEFAULT))
    spec = lookup_values(
        full_block_tokens=full_block, swa_block_tokens=B, blocks_per_chunk=bpc, window=W,
        extra_retained_tokens=extra, eagle=eagle, num_tokens=T, local_hit_tokens=local,
        max_load_tokens=max_load, full_chunks=full_arg, swa_chunks=swa_arg,
        lookup_variant=variant)
    return twin, spec


@settings(max_examples=150 * SCALE, **SETTINGS)
@given(case=lookup_cases())
def test_spec_equals_twin(case):
    full_block, B, bpc, W, extra, eagle, T, local, max_load, full, swa = case
    twin, spec = twin_and_spec(case, sorted(full), sorted(swa), full, swa)
    assert spec["hit_tokens"] == twin.hit_tokens
    r = twin.loaded[-1]
    assert (spec["swa_loaded"] if len(r) else (0, 0)) == ((r.start, r.stop) if len(r) else (0, 0))
    if full_block:
        rf = twin.loaded[0]
        assert (spec["full_loaded"] if len(rf) else (0, 0)) == ((rf.start, rf.stop) if len(rf) else (0, 0))
    event("hit" if twin.hit_tokens else "no hit")


def test_measured_example():
    """The measurement of window 17: stock vLLM 0.33.0's stores of a 1188-token
    prompt (full-attention block 36, SWA block 4, window 17) give the same
    prompt 0 hit tokens; every chunk stored gives 1187."""
    from kvreach.impl.lifecycle import Lifecycle, run
    from kvreach.params import GroupConfig, RequestConfig

    tr = run("vllm-0.33", GroupConfig(4, 17, 36), RequestConfig(1188), Lifecycle(budget=1000))
    groups = [LookupGroup(36), LookupGroup(4, window_tokens=17)]
    req = LaterRequest(1188)
    assert lookup(groups, req, StoreContent.of_chunks([range(33), sorted(tr.stored)])).hit_tokens == 0
    assert lookup(groups, req, StoreContent.of_chunks([range(33), range(297)])).hit_tokens == 1187
    spec = lookup_values(full_block_tokens=36, swa_block_tokens=4, blocks_per_chunk=1, window=17,
                         extra_retained_tokens=0, eagle=False, num_tokens=1188,
                         local_hit_tokens=0, max_load_tokens=None, full_chunks=range(33),
                         swa_chunks=tr.stored)
    assert spec["hit_tokens"] == 0


@pytest.mark.parametrize("kw,param", [
    (dict(block_tokens=0), "block_tokens"), (dict(block_tokens=4, window_tokens=0), "window_tokens"),
    (dict(block_tokens=4, extra_retained_tokens=2), "extra_retained_tokens"),
    (dict(block_tokens=4, blocks_per_chunk=True), "blocks_per_chunk"),
])
def test_bad_group(kw, param):
    with pytest.raises(ParamError) as e:
        LookupGroup(**kw)
    assert e.value.param == param


def test_bad_request():
    with pytest.raises(ParamError) as e:
        LaterRequest(10, local_hit_tokens=11)
    assert e.value.param == "local_hit_tokens"


@settings(max_examples=150 * SCALE, **SETTINGS)
@given(case=lookup_cases(), cut=st.integers(0, 200))
def test_prefix_content_closed_form_equals_twin(case, cut):
    """``spec.lookup.prefix_keys`` (HIT exactly below a count per group, the
    single-request world's dense stores) equals the twin on those sets."""
    full_block, B, bpc, W, extra, eagle, T, local, max_load, _, _ = case
    C = B * bpc
    n_swa, n_full = min(cut, T // C), (min(cut * C, T) // (full_block * bpc)) if full_block else 0
    twin, spec = twin_and_spec(case, range(n_full), range(n_swa), n_full, n_swa)
    assert spec["hit_tokens"] == twin.hit_tokens
    r = twin.loaded[-1]
    assert (spec["swa_loaded"] if len(r) else (0, 0)) == ((r.start, r.stop) if len(r) else (0, 0))
    event("hit" if twin.hit_tokens else "no hit")


# --- the lookup variant "read-window" (docs/findings.md F7) -------------------


@settings(max_examples=100 * SCALE, **SETTINGS)
@given(case=lookup_cases())
def test_spec_equals_twin_read_window(case):
    """The variant is one parameter of both models, and they agree on it."""
    full_block, B, bpc, W, extra, eagle, T, local, max_load, full, swa = case
    twin, spec = twin_and_spec(case, sorted(full), sorted(swa), full, swa, "read-window")
    assert spec["hit_tokens"] == twin.hit_tokens
    r = twin.loaded[-1]
    assert (spec["swa_loaded"] if len(r) else (0, 0)) == ((r.start, r.stop) if len(r) else (0, 0))
    event("hit" if twin.hit_tokens else "no hit")


def test_read_window_run_lengths():
    """The variant's run is the chunks the load reads: window 17, chunk 4: 4
    (vLLM 0.33.0: 5); window 16: 4 in both; extra 5: 5 in both; window 1: 1."""
    g = lambda W, extra=0, v="read-window": LookupGroup(  # noqa: E731
        4, window_tokens=W, extra_retained_tokens=extra, lookup_variant=v)
    assert (g(17).window_chunks, g(17, v="vllm-window").window_chunks) == (4, 5)
    assert (g(16).window_chunks, g(16, v="vllm-window").window_chunks) == (4, 4)
    assert (g(16, 5).window_chunks, g(16, 5, v="vllm-window").window_chunks) == (5, 5)
    assert g(1).window_chunks == 1
    assert g(17).load_window_chunks(1187) == 5  # the padding still widens an unaligned end
    with pytest.raises(ParamError) as e:
        LookupGroup(4, window_tokens=17, lookup_variant="nope")
    assert e.value.param == "lookup_variant"


# --- worlds (b) and (c) (docs/lookup.md, Worlds) -------------------------------


def test_eviction_world_equal_hit_is_refuted():
    """World (c): evicting the same keys from the rule's stores and from
    dense ones does not leave equal hits. PR #54362's geometry (window 16,
    where the rule is hit-preserving in world (a)), the repeated 1188-token
    prompt: with SWA chunk 296 evicted the dense scan falls back to the run
    292-295 ending at the break (hit 1184), which the rule never stored (its
    next run ends at the boundary 1152). What holds is monotonicity
    (obligation lookup-monotone): eviction never lengthens a hit."""
    from kvreach.impl.lifecycle import Lifecycle, run
    from kvreach.params import GroupConfig, RequestConfig

    tr = run("vllm-0.33", GroupConfig(4, 16, 36), RequestConfig(1188), Lifecycle(budget=1000))
    groups = (LookupGroup(36), LookupGroup(4, window_tokens=16))

    def hit(swa):
        return lookup(groups, LaterRequest(1188), StoreContent.of_chunks([range(33), sorted(swa)])).hit_tokens

    evicted = {296}
    assert hit(tr.stored) == hit(range(297)) == 1187
    assert (hit(set(tr.stored) - evicted), hit(set(range(297)) - evicted)) == (1152, 1184)


def test_hit_preserving_wastes_holds_only_where_the_window_is_one_past_chunks():
    """``hit-preserving-wastes`` is a claim about its two geometries, not a
    tautology: where ``W - 1`` is not a multiple of the chunk (PR #54362's
    window 16) some dense hit loads the first chunk of the run the witness's
    lookup accepts, so the obligation's query is satisfiable there; in the
    geometry "window-17 measurement" (window 17) it is not; the premise (the witness) is satisfiable in
    both. The twin agrees on that geometry's numbers: the hit at 36 of a 37-token
    request needs chunk 4 (without it the scan falls back to the run 0-3,
    a 16-token hit) and loads 5-8."""
    import z3

    from kvreach.proofs import rows
    from kvreach.proofs import solve as proof_solve
    from kvreach.proofs.geometries import GEOMETRIES
    from kvreach.proofs.obligations.lookup import hit_preserving_wastes_queries

    def solve(name):
        ctx = rows.ctx_for("any", "any")
        ctx.pins = next(g for g in GEOMETRIES if g.name == name).pins(ctx)
        (q,) = hit_preserving_wastes_queries(ctx)
        return (proof_solve.check_terms(q.premise)[0], proof_solve.check_terms(q.premise + [q.violation])[0])

    assert solve("window-17 measurement") == (z3.sat, z3.unsat)
    assert solve("PR #54362 example") == (z3.sat, z3.sat)
    groups = (LookupGroup(36), LookupGroup(4, window_tokens=17))
    out = lookup(groups, LaterRequest(37), StoreContent.of_chunks([range(1), range(9)]))
    assert out.hit_tokens == 36 and list(out.loaded[1]) == [5, 6, 7, 8]
    without = StoreContent.of_chunks([range(1), [c for c in range(9) if c != 4]])
    assert lookup(groups, LaterRequest(37), without).hit_tokens == 16
