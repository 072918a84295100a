"""hypothesis-crosshair backend on a core property (marked slow; not for CI).

Property: ``reachable_block_mask`` keeps exactly the blocks some hit boundary
reads (``oracles.mask_matches_hits``), for both the real rule and the
``need = ceil(W / B)`` mutant (which must fail). Run with
``pytest -m slow tests/conformance/test_hypothesis_crosshair.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreach.impl import mask, oracles
from kvreach.params import GroupConfig

pytest.importorskip("hypothesis_crosshair_provider")

CFG = settings(
    backend="crosshair", max_examples=200, deadline=None, database=None,
    suppress_health_check=list(HealthCheck),
)
inputs = dict(
    B=st.integers(1, 8), W=st.integers(1, 64), m=st.integers(1, 16),
    eagle=st.booleans(), start=st.integers(0, 128), span=st.integers(0, 8),
    F=st.none() | st.integers(0, 200),
)


def _case(B, W, m, eagle, start, span, F):
    g = GroupConfig(B, W, m * B, eagle=eagle)  # representable alignment
    end = start + span
    return g, end, (None if F is None else max(F, end))


@pytest.mark.slow
@CFG
@given(**inputs)
def test_mask_keeps_exactly_hit_blocks_crosshair(B, W, m, eagle, start, span, F):
    g, end, F = _case(B, W, m, eagle, start, span, F)
    res = mask.reachable_block_mask(start, end, g, 1, F)
    assert oracles.mask_matches_hits(start, end, g, 1, F, res)


@pytest.mark.slow
def test_mutant_fails_under_crosshair_backend():
    @CFG
    @given(**inputs)
    def prop(B, W, m, eagle, start, span, F):
        g, end, F = _case(B, W, m, eagle, start, span, F)
        need = -(-W // g.block_tokens) + g.shift
        res = mask.reachable_block_mask_with(start, end, g, 1, F, need, g.shift)
        assert oracles.mask_matches_hits(start, end, g, 1, F, res)

    with pytest.raises(AssertionError):
        prop()
