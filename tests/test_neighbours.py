"""World (b), same-rule neighbours (``kvreach.proofs.neighbours``): the
obligation ``hit-preservation-neighbours`` and its twin replay.

- The vllm-0.33 row's counterexample decodes and is confirmed through the
  twin (a shorter hit against the union of the earlier requests' stores).
- Brute force through the twin, outside the obligation's encoding: for
  random triples of earlier requests and random later requests, ``lookup-window``'s
  union of stores gives the dense union's hit (what the row proves), and so
  does ``vllm-0.33``'s in the four geometries where its query is unsat.
"""

from __future__ import annotations

import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreach.impl.decoded import neighbours_lookup
from kvreach.proofs import neighbours, runner
from kvreach.proofs.config import NEIGHBOURS_REQUESTS
from kvreach.proofs.geometries import GEOMETRIES

SCALE = int(os.environ.get("KVREACH_EQ_SCALE", "1"))
GEOS = [g for g in GEOMETRIES if g.retention is None]
FAILING_VLLM_033 = {"window-17 measurement", "PR example, extra_retained_tokens 5",
                    "PR example, EAGLE group", "blocks_per_chunk 2, W - 1 a multiple of the chunk"}


def _cex(g, rule, reqs, later):
    """A world-(b) scenario in the shape :func:`neighbours.decode` gives."""
    from kvreach.params import GroupConfig

    grp = GroupConfig(g.swa_block, g.window, (g.full_block or g.swa_block) * g.bpc,
                      blocks_per_chunk=g.bpc, eagle=g.eagle, extra_retained_tokens=g.extra)
    C = grp.chunk_tokens
    return {
        "world": "neighbours", "rule": rule,
        "config": {"group": grp.__dict__, "request": {"prompt_tokens": 1, "max_offload_tokens": None,
                                                      "offload_prompt_only": True}},
        "requests": [{"prompt_tokens": P, "tokens": P, "offloadable_tokens": P,
                      "final_horizon_chunks": P // C, "later_shared_tokens": D} for P, D in reqs],
        "lookup_groups": {"full_block_tokens": g.full_block, "window": g.window,
                          "extra_retained_tokens": g.extra},
        "later_request": later,
    }


@st.composite
def scenarios(draw):
    """Three earlier requests and the later one (last): each sequence copies
    a random earlier one up to a random length, then diverges; the prefixes
    it then shares with every other are what token sequences give."""
    g = draw(st.sampled_from(GEOS))
    A = (g.full_block or g.swa_block) * g.bpc
    lens = [draw(st.integers(1, 12 * A)) for _ in range(NEIGHBOURS_REQUESTS + 1)]
    sh = {}
    for j in range(1, len(lens)):
        i = draw(st.integers(0, j - 1))
        m = draw(st.integers(0, min(lens[i], lens[j])))
        for k in range(j):
            sh[k, j] = m if k == i else min(m, sh[min(i, k), max(i, k)])
    T = lens[-1]
    reqs = [(lens[i], sh[i, len(lens) - 1]) for i in range(NEIGHBOURS_REQUESTS)]
    blocks = [b for b in (g.swa_block, g.full_block) if b]
    step = math.lcm(*blocks)
    local = draw(st.integers(0, max(D for _, D in reqs) // step)) * step
    ml = draw(st.one_of(st.none(), st.integers(0, 3 * A)))
    return g, reqs, {"num_tokens": T, "local_hit_tokens": min(local, T), "max_load_tokens": ml}


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=scenarios())
def test_lookup_window_union_hits_as_dense(case):
    g, reqs, later = case
    got, dense, _ = neighbours_lookup(_cex(g, "lookup-window", reqs, later))
    assert got.hit_tokens == dense.hit_tokens, (g.name, reqs, later)


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=scenarios())
def test_vllm_033_never_longer_and_equal_where_proved(case):
    """Never a longer hit than dense (the stores are a subset); the dense
    hit in the four geometries where the obligation's query for vllm-0.33
    is unsat (PR #54362's example, SWA only, block 16 with windows 128 and
    1024; docs/findings.md F6)."""
    g, reqs, later = case
    got, dense, _ = neighbours_lookup(_cex(g, "vllm-0.33", reqs, later))
    assert (got.hit_tokens or 0) <= (dense.hit_tokens or 0)
    if g.name not in FAILING_VLLM_033:
        assert got.hit_tokens == dense.hit_tokens, (g.name, reqs, later)


def test_vllm_033_row_counterexample_replays():
    row = runner.run_row(neighbours.NAME, "vllm-0.33", "any", {})
    assert row.verdict == "counterexample" and row.non_vacuous and row.mutant_rejected, row
    cex = row.counterexample
    assert cex["geometry"] in FAILING_VLLM_033
    assert cex["replayed_violation"] and cex["twin_hit_tokens"] < cex["twin_dense_hit_tokens"]
    assert cex["twin_dense_hit_tokens"] == cex["spec_dense_hit_tokens"]
    assert neighbours.replay(cex) == cex["replayed_violation"]


def test_the_decoder_reads_the_terms_the_queries_hold():
    """The world's decoder and its scheduler shape rebuild the queries'
    terms from the context (no state left on it by the query builder): two
    builds are the same terms, and they are the ones the queries hold."""
    from kvreach.proofs.obligations import OBLIGATIONS
    from kvreach.proofs.rows import ctx_for

    ctx = ctx_for("vllm-0.33", "any", False)
    before = vars(ctx).copy()
    (q, _) = OBLIGATIONS[neighbours.NAME].queries(ctx)
    assert vars(ctx) == before
    a, b = neighbours.terms(ctx), neighbours.terms(ctx)
    assert a["dense"].hit_tokens.eq(b["dense"].hit_tokens)
    assert all(x.eq(y) for x, y in zip(a["seen"], b["seen"]))
    # the violation: a nonzero dense hit, the chunk in its accepted SWA run, ...
    assert q.violation.arg(0).eq(a["dense"].hit_tokens > 0)
    assert q.violation.arg(1).eq(a["dense"].swa_verified[0] <= ctx.c)
