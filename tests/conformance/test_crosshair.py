"""CrossHair can fail: it finds a counterexample to the deal contract in each
mutant of a rule (``crosshair_targets``: the pre-fix horizon,
``need = ceil(W / B)``, the dropped EAGLE shift, the lookup scan that keeps its
initial window). The real targets (``mask_real``, ``horizon_real``,
``store_real``) under the same contract and bounds are run once, by
``scripts/crosshair_check.sh`` (``test_crosshair_check.py``), which must find
no counterexample in them.

All CrossHair runs start together (module fixture) so they share the 2 cores;
each is bounded by ``--per_condition_timeout`` (CPU seconds).
"""

from __future__ import annotations

import deal
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import _crosshair
import crosshair_targets as T
from kvreach.impl import contracts, mask
from kvreach.params import GroupConfig, ParamError

# name -> per-condition CPU timeout. Mutants stop at their first
# counterexample (observed: 0.4 s to ~70 s); real targets run to the timeout.
MUTANTS = {
    "mask_need_ceil_w": 150,
    "mask_no_eagle_shift": 150,
    "horizon_prefix_frontier": 150,
    "store_prefix_frontier": 150,
    "scan_keeps_initial_window": 60,
}


@pytest.fixture(scope="module")
def crosshair_runs():
    procs = {
        name: _crosshair.start(
            ["check", "--analysis_kind=deal", f"--per_condition_timeout={t}",
             f"crosshair_targets.{name}"]
        )
        for name, t in MUTANTS.items()
    }
    return {name: _crosshair.finish(p, wall_timeout=400) for name, p in procs.items()}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_crosshair_finds_mutant(crosshair_runs, name):
    r = crosshair_runs[name]
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.errors, r.stdout
    m = _crosshair.CALL_RE.search(r.errors[0])
    assert m, r.errors[0]
    # Replay the counterexample concretely with deal on: the contract must fail.
    prev = contracts.mode()
    contracts.set_mode("raise")
    try:
        with pytest.raises(deal.ContractError):
            eval(m.group(1), vars(T))
    finally:
        contracts.set_mode(prev)


# The mask mutants call mask.reachable_block_mask_with, mask.reachable_block_mask's body
# with need/shift as parameters. With the true values it must be the real
# function, so each mutant differs from the real rule only by its injected fault.
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    B=st.integers(1, 8), W=st.integers(1, 64), A=st.none() | st.integers(1, 128),
    eagle=st.booleans(), dcp=st.sampled_from([1, 2]), R=st.none() | st.integers(0, 8),
    P=st.integers(1, 1024), start=st.integers(0, 128), span=st.integers(0, 16),
    F=st.none() | st.integers(0, 200),
)
def test_mask_body_is_faithful(B, W, A, eagle, dcp, R, P, start, span, F):
    try:
        g = GroupConfig(B, W, A, dcp_world_size=dcp, eagle=eagle,
                        retention_interval=None if R is None else R * B * dcp)
    except ParamError:
        return
    end = start + span
    assert mask.reachable_block_mask_with(start, end, g, P, F, g.need, g.shift) == mask.reachable_block_mask(
        start, end, g, P, F
    )
