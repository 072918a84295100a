"""The obligation ``load-reads-checked`` per vLLM release: the load reads
only what the lookup checked (docs/findings.md F11).

Each release's query is built with ``Ctx(release=...)`` and solved per
geometry of the obligation's grid, with the solver and budget the proof run
uses (``proofs.solve.check_terms``, ``LEAF_RL``): 0.29.0 loads unchecked chunks in
F11's 0.29.0 geometry and wherever ``extra_retained_tokens`` > 0, 0.30.0 only
there, and 0.31.0/0.32.0's query is 0.33.0's (the proof run's row proves
it). Every counterexample is decoded and replayed through the twin under the
release's parameters. The issue's two cases are the spec's own answers at
those values (``spec.evaluate.lookup_values``), equal to the twin's.
"""

from __future__ import annotations

import pytest
import z3

from kvreach.proofs import decode
from kvreach.proofs.config import LEAF_RL
from kvreach.proofs.framework import Ctx
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.obligations import lookup as ob_lookup
from kvreach.proofs.solve import Meter, smtlib_text, check_terms
from kvreach.releases import V0_29_0, V0_30_0, V0_31_0, V0_33_0
from kvreach.spec.config import SymConfig
from kvreach.spec.evaluate import lookup_values

GRID = ob_lookup.GRID_LOAD
F11_029, F11_030 = ob_lookup.F11_029, ob_lookup.F11_030


def _query(release, geometry, mutant=None):
    ctx = Ctx(SymConfig.fresh(), "vllm-0.33", "intended", release=release, mutant=mutant or {})
    ctx.pins = geometry.pins(ctx)
    (q,) = ob_lookup.load_reads_checked_queries(ctx)
    return ctx, q


def _solve_query(release, geometry, mutant=None):
    ctx, q = _query(release, geometry, mutant)
    r, m = check_terms(q.premise + [q.violation], LEAF_RL, Meter())
    return ctx, q, r, m


def test_registered():
    ob = OBLIGATIONS["load-reads-checked"]
    assert ob.grid == GRID and ob.mutant.params == {"load_early_by": 1}
    assert ob.grid[:2] == (F11_029, F11_030)


@pytest.mark.parametrize("release, failing", [
    (V0_29_0, {F11_029.name, F11_030.name, "PR example, extra_retained_tokens 5"}),
    (V0_30_0, {F11_030.name, "PR example, extra_retained_tokens 5"}),
], ids=["0.29.0", "0.30.0"])
def test_unchecked_loads_per_release(release, failing):
    """0.29.0 and 0.30.0: the query is sat exactly in the geometries named
    (unsat in every other), and each model, decoded, is a load of a chunk
    the store does not hold on the twin too."""
    got = set()
    for g in GRID:
        ctx, q, r, m = _solve_query(release, g)
        assert r in (z3.sat, z3.unsat), (release.name, g.name, r)
        if r == z3.sat:
            got.add(g.name)
            cex = decode.decode_static(m, ctx, OBLIGATIONS["load-reads-checked"])
            assert cex["vllm"] == release.name
            assert OBLIGATIONS["load-reads-checked"].witness(cex), cex
    assert got == failing


def test_later_releases_share_the_query():
    """0.31.0/0.32.0's lookup parts are 0.33.0's: the same query text in
    every geometry (the proof run's 0.33.0 row proves it)."""
    for g in GRID:
        a, b = _query(V0_31_0, g)[1], _query(V0_33_0, g)[1]
        assert smtlib_text(a.premise + [a.violation]) == smtlib_text(b.premise + [b.violation])


@pytest.mark.parametrize("g", [F11_029, F11_030], ids=["F11 0.29.0", "F11 0.30.0"])
def test_033_proved_where_older_releases_fail(g):
    ctx, q, r, _ = _solve_query(V0_33_0, g)
    assert r == z3.unsat


def test_mutant_rejected_in_033():
    """The load one chunk early (``load_early_by=1``) reads a chunk the
    lookup never checked, in 0.33.0 too; the model replays as such only on
    the mutated spec, so only the solver's answer is asserted."""
    _, _, r, _ = _solve_query(V0_33_0, F11_030, {"load_early_by": 1})
    assert r == z3.sat


# --- the issue's two cases, as the spec and the twin answer them -------------


def _case_029(release, full_eagle=False):
    """Full block 2, SWA block 4, window 8, a 24-token request, SWA chunk 3
    and full-attention chunk 11 missing. ``full_eagle``: all 12 full chunks
    stored, the full-attention group an EAGLE group instead (0.29.0's spec
    decode with no annotated group makes every group one): its popped chunk
    ends the hit at 22 the same way."""
    return lookup_values(full_block_tokens=2, swa_block_tokens=4, blocks_per_chunk=1, window=8,
                         extra_retained_tokens=0, eagle=False, num_tokens=24, local_hit_tokens=0,
                         max_load_tokens=None, full_chunks=range(12 if full_eagle else 11),
                         swa_chunks=[0, 1, 2, 4, 5], release=release, full_eagle=full_eagle)


def _case_030(release):
    """SWA only, block 2, window 4, extra 4, a 7-token request, chunk 0 missing."""
    return lookup_values(full_block_tokens=None, swa_block_tokens=2, blocks_per_chunk=1, window=4,
                         extra_retained_tokens=4, eagle=False, num_tokens=7, local_hit_tokens=0,
                         max_load_tokens=None, full_chunks=[], swa_chunks=[1, 2], release=release)


@pytest.mark.parametrize("full_eagle", [False, True], ids=["full chunk 11 missing", "full EAGLE"])
def test_issue_case_029(full_eagle):
    v = _case_029(V0_29_0, full_eagle)
    assert v["hit_tokens"] == 22 and v["swa_loaded"] == (3, 6)  # chunk 3: a MISS
    for r in (V0_30_0, V0_31_0, V0_33_0):
        w = _case_029(r, full_eagle)
        assert w["hit_tokens"] == 12 and w["swa_loaded"] == (1, 3)


def test_issue_case_030():
    v = _case_030(V0_30_0)
    assert v["hit_tokens"] == 6 and v["swa_loaded"] == (0, 3)  # chunk 0: a MISS
    assert _case_030(V0_29_0)["swa_loaded"] == (0, 3)
    for r in (V0_31_0, V0_33_0):
        assert _case_030(r)["hit_tokens"] == 0


@pytest.mark.parametrize("case, release, unchecked", [
    ("029", V0_29_0, [3]), ("030", V0_30_0, [0]),
    ("029", V0_33_0, []), ("030", V0_33_0, []),
], ids=["0.29.0 case on 0.29.0", "0.30.0 case on 0.30.0", "0.29.0 case on 0.33.0",
        "0.30.0 case on 0.33.0"])
def test_issue_cases_replay_on_the_twin(case, release, unchecked):
    """The cases as ``load-reads-checked`` counterexamples: the twin under
    the release's parameters answers as the spec and loads exactly the
    unchecked chunks named."""
    v = (_case_029 if case == "029" else _case_030)(release)
    groups = ({"full_block_tokens": 2, "full_eagle": False, "swa_block_tokens": 4,
               "blocks_per_chunk": 1, "window": 8, "extra_retained_tokens": 0, "eagle": False}
              if case == "029" else
              {"full_block_tokens": None, "full_eagle": False, "swa_block_tokens": 2,
               "blocks_per_chunk": 1, "window": 4, "extra_retained_tokens": 4, "eagle": False})
    cex = {"vllm": release.name, "lookup_groups": groups,
           "later_request": {"num_tokens": 24 if case == "029" else 7, "local_hit_tokens": 0,
                             "max_load_tokens": None},
           "store": {"full_hit_chunks": list(range(11)) if case == "029" else [],
                     "swa_hit_chunks": [0, 1, 2, 4, 5] if case == "029" else [1, 2]},
           "spec": {"hit_tokens": v["hit_tokens"], "swa_loaded": list(v["swa_loaded"]),
                    "full_loaded": list(v["full_loaded"])}}
    assert ob_lookup.replay_load_reads_checked(cex) == unchecked
    assert cex["twin"]["hit_tokens"] == v["hit_tokens"]
    assert cex["twin"]["swa_loaded"] == (list(v["swa_loaded"]) if v["hit_tokens"] else [0, 0])
