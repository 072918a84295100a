"""hit-preservation-family's refutation of vLLM's rule, member by member,
replayed on the installed vLLM's real scheduler (0.33.0 or 0.34.0, each
with the row about it), and kvreach's rule ``lookup-window`` in the same
scenarios.

The proof run refutes ``vllm-0.33`` at 40 of the family's 60 members (the
20 block shapes with the retention interval None or 0, and again with 2 SWA
chunks; with 1 chunk the step is proved), each by a counterexample of that
member's own replayed through the executable rule
(``Obligation.confirm_each``). Here each member's counterexample (the same
search the row runs) runs through the real ``Scheduler`` with the stock
connector: vLLM's hit tokens, with the rule's stores and with dense ones,
must equal kvreach's twin's, and the first must be shorter. Then, where the
counterexample has no retention interval, the same scenario with
``KvReachOffloadingConnector`` under ``kvreach.rule=lookup-window`` gets the
dense hit. With a retention interval (None is not one; 0 is) the replay
meets a shared-prefix junction, where kvreach's connector hands the
decision to stock vLLM (it does not model the junction:
``impl/vllm/scheduler.py``), so that half would show vLLM's rule, not
kvreach's; lookup-window's keep there is the proved row
``hit-preservation-family`` (lookup-window).
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness.runner import KVREACH, STOCK  # noqa: E402
from kvreach.vllm_harness.replay import replay  # noqa: E402

from kvreach.proofs import search  # noqa: E402
from kvreach.proofs.obligations import OBLIGATIONS  # noqa: E402

import installed_release  # noqa: E402

pytestmark = pytest.mark.vllm

FAMILY = "hit-preservation-family"
REFUTED = [g for g in OBLIGATIONS[FAMILY].grid if g.retention != 1]


def _param(g):
    return pytest.param(g, id=g.name.removeprefix("family: "))


@functools.lru_cache(maxsize=None)
def counterexample(member):
    _, cex = search.find_counterexample(FAMILY, "vllm-0.33", "any", geometry=member,
                                        vllm=installed_release.INSTALLED)
    return cex


def test_the_refuted_members_are_the_family_but_its_one_chunk_retention_ones():
    grid = OBLIGATIONS[FAMILY].grid
    assert len(REFUTED) == 40 and len(grid) == 60
    assert {g.retention for g in grid if g not in REFUTED} == {1}


@pytest.mark.parametrize("member", [_param(g) for g in REFUTED])
def test_installed_vllm_loses_the_hit_at_each_refuted_member(offline_model_dir, member):
    """vLLM's hits equal the ones the counterexample's replay through the
    executable rule recorded (``cex["later_lookup"]``, the twin's under the
    row's release), and fall short of dense."""
    cex = counterexample(member)
    assert cex is not None and cex["replayed_violation"], member.name
    predicted = cex["later_lookup"]
    rule_obs, dense_obs = replay(offline_model_dir, cex, STOCK,
                                 release=installed_release.twin_release())
    assert (rule_obs.hit_tokens, dense_obs.hit_tokens) == (
        predicted["hit_tokens"], predicted["dense_hit_tokens"])
    assert (rule_obs.hit_tokens or 0) < (dense_obs.hit_tokens or 0)
    if cex["config"]["group"]["retention_interval"] is None:
        kept, dense = replay(offline_model_dir, cex, KVREACH, rule="lookup-window",
                             release=installed_release.twin_release())
        assert kept.hit_tokens == dense.hit_tokens
