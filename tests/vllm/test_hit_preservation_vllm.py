"""hit-preservation's counterexamples, replayed on vLLM 0.33.0's real
scheduler, and kvreach's rule ``lookup-window`` in the same scenarios.

For each geometry of ``proofs/geometries.py`` where ``kvreach prove`` finds
that vLLM 0.33.0's rule loses a later request's hit, the counterexample the
runner decodes (the stored request's configuration and lifecycle, the later
request) runs through the real ``Scheduler`` with the stock connector: the
earlier request stores, the offload manager's lookup answers HIT for exactly
the keys its ``prepare_store`` accepted (then for every offloadable key:
dense), and the later request's hit is vLLM's. vLLM's numbers must equal
kvreach's (``kvreach.impl.worlds``), and the hit must be shorter than dense.
Then the same scenario with ``KvReachOffloadingConnector`` under
``kvreach.rule=lookup-window``: the later request's hit equals dense.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach_vllm_harness import KVREACH, STOCK, SchedulerRun, Setup, full, swa  # noqa: E402
from replay_vllm import replay  # noqa: E402

from kvreach.proofs import runner  # noqa: E402
from kvreach.proofs.geometries import GEOMETRIES  # noqa: E402

pytestmark = pytest.mark.vllm


@functools.lru_cache(maxsize=None)
def counterexample(geometry_name: str):
    g = next(x for x in GEOMETRIES if x.name == geometry_name)
    _, cex = runner.find_counterexample("hit-preservation", "vllm-0.33", "any", geometry=g)
    return cex


FAILING = ["issue-9 measurement", "PR example, extra_retained_tokens 5", "PR example, EAGLE group",
           "PR example, retention interval 72", "PR example, retention interval 0",
           "blocks_per_chunk 2, W - 1 a multiple of the chunk"]


@pytest.mark.parametrize("geometry", FAILING)
def test_vllm_033_loses_the_hit_kvreach_predicts(offline_model_dir, geometry):
    cex = counterexample(geometry)
    assert cex is not None and cex["replayed_violation"], geometry
    from kvreach.proofs.decode import later_lookup_of
    from kvreach.impl.lifecycle import Lifecycle, run
    from kvreach.params import GroupConfig, RequestConfig

    lc = cex["lifecycle"]
    trace = run("vllm-0.33", GroupConfig(**cex["config"]["group"]),
                RequestConfig(**cex["config"]["request"]),
                Lifecycle(budget=lc["budget"], prefill_steps=tuple(lc["prefill_steps"]),
                          decode=lc["decode"], abort_after_step=lc["abort_after_step"]))
    predicted = later_lookup_of(trace, cex)
    rule_obs, dense_obs = replay(offline_model_dir, cex, STOCK)
    assert (rule_obs.hit_tokens, dense_obs.hit_tokens) == (
        predicted.rule.hit_tokens, predicted.dense.hit_tokens)
    assert (rule_obs.hit_tokens or 0) < (dense_obs.hit_tokens or 0)


@pytest.mark.parametrize("geometry", FAILING)
def test_lookup_window_rule_keeps_the_hit(offline_model_dir, geometry):
    cex = counterexample(geometry)
    rule_obs, dense_obs = replay(offline_model_dir, cex, KVREACH, rule="lookup-window")
    assert rule_obs.hit_tokens == dense_obs.hit_tokens


# --- the connector under lookup-window: its decisions are impl's -----------------------------

RULE_SETUPS = [
    (Setup((full(36), swa(4, 17))), 1188, {}),
    (Setup((full(36), swa(4, 16))), 1200, {"abort_after_step": 1}),
    (Setup((full(36), swa(4, 16, extra=5)), budget=333), 1000, {}),
    (Setup((full(16), swa(4, 16), swa(4, 16, eagle=True)), budget=300), 900, {"decode": 5}),
    (Setup((full(16), swa(8, 17)), blocks_per_chunk=2, budget=250), 700, {}),
    (Setup((full(12), swa(4, 8)), retention_interval=48, budget=200), 600, {}),
    (Setup((full(36), swa(4, 16)), async_scheduling=True), 1200, {"abort_after_step": 1}),
]


@pytest.mark.parametrize("setup,prompt,lc", RULE_SETUPS)
def test_connector_lookup_window_equals_impl(offline_model_dir, setup, prompt, lc):
    """``KvReachOffloadingConnector`` with ``kvreach.rule=lookup-window`` on
    the real scheduler: every SWA group's decision per step is
    ``kvreach.impl.lifecycle.run``'s under the same rule (the union of steps
    with async scheduling); what vLLM submits is that decision minus its
    null-block filter; no contract violation."""
    from kvreach_vllm_harness import drive

    from kvreach.impl.lifecycle import Lifecycle, run
    from kvreach.params import RequestConfig

    k = drive(SchedulerRun(setup, KVREACH, offline_model_dir,
                           {"kvreach.rule": "lookup-window", "kvreach.check_contracts": "raise"}),
              "r", prompt, **lc)
    assert k.offload.kvreach_contract_violations == 0
    for gi in setup.swa_groups():
        tr = run("lookup-window", setup.kvreach_group(gi),
                 RequestConfig(prompt, None, setup.offload_prompt_only),
                 Lifecycle(setup.budget, decode=lc.get("decode", 0),
                           abort_after_step=lc.get("abort_after_step"),
                           async_scheduling=setup.async_scheduling))
        for st in k.steps:
            assert st.chunks(gi) == [c for c in st.window_chunks(gi) if c not in st.null_dropped(gi)]
        assert sorted(c for st in k.steps for c in st.window_chunks(gi)) == sorted(tr.stored)
        if not setup.async_scheduling:
            assert [st.window_chunks(gi) for st in k.steps] == [list(s.submitted) for s in tr.steps]
