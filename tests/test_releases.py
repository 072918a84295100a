"""The release records (``kvreach.releases``) and the lookup's release parts
(``kvreach.impl.lookup``): distinct records, defaults equal to 0.33.0's,
the 0.29.0 scan's closed form, and the two released lookups that load chunks
they never checked."""

from __future__ import annotations

import random

import pytest

from kvreach import releases as R
from kvreach.impl import lookup as lk
from kvreach.impl import release as release_params
from kvreach.params import ParamError


def test_every_release_of_the_range_has_one_record():
    for v in ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0"):
        assert v in R.release(v).names
    assert R.release("0.32.0") is R.release("0.31.0")
    assert R.DEFAULT is R.release("0.34.0")
    with pytest.raises(ValueError, match="expected one of 0.29.0, 0.30.0"):
        R.release("0.28.0")


def test_records_are_distinct_and_0_33_0_differs_from_0_31_0_in_two_parts():
    parts = [r.parts() | {"window_module": r.window_module} for r in R.RELEASES]
    for i, a in enumerate(parts):
        for b in parts[i + 1:]:
            assert a != b
    diff = {k for k, v in R.V0_33_0.parts().items() if R.V0_31_0.parts()[k] != v}
    assert diff == {"null_block_filter", "cursor_on_lookup"}
    assert R.V0_33_0.window_module != R.V0_31_0.window_module


def test_lookup_defaults_are_0_33_0s_record():
    """Every lookup parameter's default is the 0.33.0 record's part, so the
    existing callers run 0.33.0's lookup."""
    assert lk.LookupParts() == release_params.lookup_parts(R.V0_33_0) == lk.VLLM_0_33
    g = lk.LookupGroup(4, 1, 17, 3)
    assert g == release_params.lookup_group(R.V0_33_0, 4, 1, 17, 3, False)
    with pytest.raises(ParamError):
        lk.LookupParts(pending="never")
    with pytest.raises(ParamError):
        lk.LookupParts(eagle_widening="none")


@pytest.mark.parametrize("pending", lk.PENDING)
def test_scan_closed_form_equals_the_loop_for_each_pending_rule(pending):
    rnd = random.Random(1)
    kinds = list(lk.Answer)
    for _ in range(3000):
        answers = [rnd.choice(kinds) for _ in range(rnd.randint(0, 12))]
        w = rnd.randint(1, 4)
        init = w + rnd.randint(0, 2)
        assert lk.scan(answers, w, init, pending=pending) == \
            lk.sliding_window_end(answers, w, init, pending=pending), (answers, w, init)


def test_the_0_29_0_scan_defers_for_a_pending_key_past_a_miss():
    """0.29.0 keeps ``defer_lookup`` once a HIT_PENDING was read; 0.30.0 on
    clears it at the MISS that ends the pending run."""
    A = lk.Answer
    answers = [A.HIT, A.HIT, A.MISS, A.HIT_PENDING]
    assert lk.scan(answers, 2, 2) == 2
    assert lk.scan(answers, 2, 2, pending="any scanned") is None


def _outcome(groups, n, missing, r: R.Release):
    gs = [release_params.lookup_group(r, b, 1, W, extra, False) for b, W, extra in groups]
    keys = {(gi, c) for gi, g in enumerate(gs) for c in range(n // g.chunk_tokens)}
    content = lk.StoreContent(hit=frozenset(keys - set(missing)))
    req = lk.LaterRequest(n)
    hit = lk.lookup_hit_tokens(gs, req, content, release_params.lookup_parts(r))
    loaded = lk.loaded_chunks(gs, req, hit) if hit else ()
    unchecked = sorted((gi, c) for gi, rg in enumerate(loaded) for c in rg if (gi, c) in missing)
    return hit, unchecked


# full-attention block 2, SWA block 4, window 8, a 24-token request; the SWA
# group's chunk 3 and the full group's chunk 11 missing (the hit then ends at
# token 22, half-way into SWA chunk 5, and its window reaches into chunk 3)
CASE_029 = (((2, None, 0), (4, 8, 0)), 24, ((1, 3), (0, 11)))
# SWA block 2, window 4, extra 4, a 7-token request; chunk 0 missing
CASE_030 = (((2, 4, 4),), 7, ((0, 0),))


@pytest.mark.parametrize("r", R.RELEASES, ids=lambda r: r.name)
def test_two_released_lookups_load_chunks_they_never_checked(r):
    hit, unchecked = _outcome(*CASE_029, r)
    if r is R.V0_29_0:
        assert (hit, unchecked) == (22, [(1, 3)])
    else:
        assert (hit, unchecked) == (12, [])
    hit, unchecked = _outcome(*CASE_030, r)
    if r in (R.V0_29_0, R.V0_30_0):  # no extra in the window: a run of 2 chunks
        assert (hit, unchecked) == (6, [(0, 0)])
    else:
        assert (hit, unchecked) == (0, [])


def test_with_only_the_swa_chunk_missing_no_release_loads_it():
    """The first case needs the hit to end off the SWA chunk grid: with every
    full-attention chunk stored each release hits 23 tokens and loads SWA
    chunks 4-5 only."""
    groups, n, _ = CASE_029
    for r in R.RELEASES:
        assert _outcome(groups, n, ((1, 3),), r) == (23, [])


def test_the_0_33_0_contract_still_holds_and_older_parts_are_exempt():
    """``lookup``'s contract that the load reads only HIT keys is checked
    for 0.33.0's parts; a 0.29.0 lookup runs (its violation is the data of
    the case above, not an exception)."""
    from kvreach.impl import contracts
    old = contracts.mode()
    contracts.set_mode("raise")
    try:
        groups, n, missing = CASE_029
        gs = [release_params.lookup_group(R.V0_29_0, b, 1, W, e, False) for b, W, e in groups]
        keys = {(gi, c) for gi, g in enumerate(gs) for c in range(n // g.chunk_tokens)}
        content = lk.StoreContent(hit=frozenset(keys - set(missing)))
        out = lk.lookup(gs, lk.LaterRequest(n), content, parts=release_params.lookup_parts(R.V0_29_0))
        assert out.hit_tokens == 22 and 3 in out.loaded[1]
    finally:
        contracts.set_mode(old)
