"""kvreach.impl.monitor: the loadability predicate against the lookup twin
(brute force over later requests), the incremental state, each property."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreach.impl.lookup import LaterRequest, LookupGroup, StoreContent, lookup_hit_tokens
from kvreach.impl.monitor import (
    GroupMonitor,
    Loadability,
    RequestGroupState,
    loadable_chunk,
    lookup_group,
)
from kvreach.params import GroupConfig
from kvreach.proofs.scenarios import PR_54362


def needed_by_some_later_request(full: LookupGroup, sw: LookupGroup, K: int) -> set[int]:
    """SWA chunks whose removal from the dense single-request store changes
    some later request's hit (``lookup_hit_tokens``): N tokens, sharing S,
    GPU hit ``local``, ``max_load_tokens``."""
    A, C = full.chunk_tokens, sw.chunk_tokens
    nf, ns = K // A, K // C
    lb = math.lcm(full.block_tokens, sw.block_tokens)
    out: set[int] = set()
    for N in range(1, K + 2 * A + 2):
        for S in sorted({min(s, N, K) for s in (N, K, *range(0, min(N, K) + 1, C))}):
            for local in range(0, S + 1, lb):
                for mlt in (None, 0, C, A, 2 * A + 1):
                    req = LaterRequest(N, local, mlt)
                    fs = [c for c in range(nf) if (c + 1) * A <= S]
                    ss = [c for c in range(ns) if (c + 1) * C <= S]
                    h0 = lookup_hit_tokens((full, sw), req, StoreContent.of_chunks([fs, ss]))
                    if not h0:
                        continue
                    for c in ss:
                        if c not in out and lookup_hit_tokens(
                            (full, sw), req, StoreContent.of_chunks([fs, [x for x in ss if x != c]])
                        ) != h0:
                            out.add(c)
    return out


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(fb=st.integers(2, 12), sb=st.integers(1, 4), W=st.integers(1, 9),
       extra=st.sampled_from([0, 0, 1, 3]), bpc=st.sampled_from([1, 1, 2]),
       K=st.integers(1, 60))
def test_loadable_chunk_is_the_lookup_twins_need(fb, sb, W, extra, bpc, K):
    full, sw = LookupGroup(fb, bpc), LookupGroup(sb, bpc, W, extra)
    truth = needed_by_some_later_request(full, sw, K)
    pred = {c for c in range(K // sw.chunk_tokens)
            if loadable_chunk(sw, full.chunk_tokens, c, K)}
    assert pred == truth


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(fb=st.integers(2, 40), sb=st.integers(1, 8), W=st.integers(1, 60),
       bpc=st.sampled_from([1, 2, 3]), K=st.one_of(st.none(), st.integers(0, 3000)),
       chunks=st.lists(st.integers(0, 900), max_size=40))
def test_cached_pattern_equals_the_exact_predicate(fb, sb, W, bpc, K, chunks):
    lg = LookupGroup(sb, bpc, W)
    lo = Loadability(lg, fb * bpc)
    exact = sum(not loadable_chunk(lg, fb * bpc, c, K) for c in chunks)
    assert lo.count_unloadable(chunks, max(chunks, default=0), K) == exact


PR_G = GroupConfig(block_size=4, window=16, alignment_tokens=36)


def test_pr_final_tail_is_unloadable_with_a_full_attention_group():
    """vLLM 0.33.0's final partial-segment tail of the PR's example (chunks
    297..299 of a 1200-token prompt) lies beyond the last full-attention
    chunk (1188 tokens): no later request of the single-request world hits
    there, so the lookup never needs them."""
    lg = lookup_group(PR_G)
    assert [c for c in range(300) if loadable_chunk(lg, 36, c, PR_54362.prompt)] == \
        [9 * k + j for k in range(33) for j in (5, 6, 7, 8)]


def _mon():
    return GroupMonitor(PR_G, Loadability(lookup_group(PR_G), 36))


def test_each_property():
    m, st_ = _mon(), RequestGroupState()
    ok = dict(num_chunks=250, offloadable_tokens=PR_54362.budget, prompt_horizon_chunks=300,
              finished=False, horizon=300, horizon_tokens=PR_54362.prompt)
    st_.sync(0)
    assert m.check(st_, 0, (5, 6, 7, 8), **ok) == (None, 0)
    assert m.check(st_, 0, (250,), **ok)[0] == "in_range"
    assert m.check(st_, 0, (-1,), **ok)[0] == "in_range"
    assert m.check(st_, 0, (5, 5), **ok)[0] == "once_per_incarnation"
    assert m.check(st_, 0, (5,), **{**ok, "offloadable_tokens": 20})[0] == "computed_before_stored"
    assert m.check(st_, 0, (5,), **{**ok, "horizon": 250})[0] == "horizon_final"
    assert m.check(st_, 0, (5,), **{**ok, "horizon": 200})[0] == "horizon_final"
    assert m.check(st_, 0, (0, 1), **ok) == (None, 2)  # a finding, not a violation
    st_.stage((5, 6, 7, 8), 250, 300)
    st_.sync(250)  # stored: committed
    assert st_.hw == 250
    assert m.check(st_, 250, (5,), **ok)[0] == "in_range"  # below the cursor while running
    fin = {**ok, "num_chunks": 300, "offloadable_tokens": PR_54362.prompt, "finished": True,
           "horizon": 300}
    assert m.check(st_, 250, (6,), **fin)[0] == "once_per_incarnation"
    assert m.check(st_, 250, (248,), **fin) == (None, 0)  # reconsidered, never decided
    st_.sync(0)  # the cursor went back: a new incarnation
    assert st_.hw == 0 and st_.decided == []


def test_uncommitted_step_is_not_counted_as_submitted():
    m, st_ = _mon(), RequestGroupState()
    args = dict(num_chunks=250, offloadable_tokens=PR_54362.budget, prompt_horizon_chunks=300,
                finished=False, horizon=300, horizon_tokens=PR_54362.prompt)
    st_.sync(0)
    st_.stage((5, 6), 250, 300)
    st_.sync(0)  # prepare_store failed: the cursor did not move
    assert m.check(st_, 0, (5, 6), **args) == (None, 0)
