"""hit-preservation's counterexamples, replayed on the installed vLLM's real
scheduler (0.33.0 or 0.34.0, each with the row about it), and kvreach's rule ``lookup-window`` in the same scenarios.

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

from kvreach.vllm_harness.runner import KVREACH, STOCK, SchedulerRun, Setup, full, swa  # noqa: E402
from kvreach.vllm_harness.replay import replay  # noqa: E402

from kvreach.proofs import search  # noqa: E402
from kvreach.proofs.geometries import GEOMETRIES  # noqa: E402
from kvreach.proofs.scenarios import MEASURED_W17, PR_54362, finding  # noqa: E402

import installed_release  # noqa: E402

pytestmark = pytest.mark.vllm

_EX, _W17, _F6 = PR_54362, MEASURED_W17, finding("F6")  # proofs/scenarios.py
PR_GROUPS = (full(_EX.full_block_size), swa(_EX.swa_block_size, _EX.window))
W17_GROUPS = (full(_W17.full_block_size), swa(_W17.swa_block_size, _W17.window))


@functools.lru_cache(maxsize=None)
def counterexample(geometry_name: str, vllm: str | None = None):
    """The row's counterexample in ``geometry_name``; ``vllm``: the row about
    that release (its lookup), None: 0.33.0's."""
    g = next(x for x in GEOMETRIES if x.name == geometry_name)
    _, cex = search.find_counterexample("hit-preservation", "vllm-0.33", "any", geometry=g,
                                        vllm=vllm)
    return cex


FAILING = ["window-17 measurement", "PR example, extra_retained_tokens 5", "PR example, EAGLE group",
           "PR example, retention interval 72", "PR example, retention interval 0",
           "blocks_per_chunk 2, W - 1 a multiple of the chunk"]


@pytest.mark.parametrize("geometry", FAILING)
def test_installed_vllm_loses_the_hit_kvreach_predicts(offline_model_dir, geometry):
    """The installed vLLM's lookup loses the later request's hit where
    kvreach's row about that release says it does, by as much: the row's
    counterexample (decoded with the release's lookup, ``proofs.decode.
    later_lookup_of``) replayed on the real scheduler gives the twin's hits
    (every lookup is also checked against the release's twin), short of
    dense. On vLLM 0.33.0 it is about 0.33.0 (its row, its twin), on 0.34.0
    about 0.34.0, whose lookup applies the SWA ``-1`` before the caps."""
    cex = counterexample(geometry, installed_release.INSTALLED)
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
    rule_obs, dense_obs = replay(offline_model_dir, cex, STOCK,
                                 release=installed_release.twin_release())
    assert (rule_obs.hit_tokens, dense_obs.hit_tokens) == (
        predicted.rule.hit_tokens, predicted.dense.hit_tokens)
    assert (rule_obs.hit_tokens or 0) < (dense_obs.hit_tokens or 0)


@pytest.mark.parametrize("geometry", FAILING)
def test_lookup_window_rule_keeps_the_hit(offline_model_dir, geometry):
    cex = counterexample(geometry)
    rule_obs, dense_obs = replay(offline_model_dir, cex, KVREACH, rule="lookup-window",
                                 release=installed_release.twin_release())
    assert rule_obs.hit_tokens == dense_obs.hit_tokens


# --- the connector under lookup-window: its decisions are impl's -----------------------------

RULE_SETUPS = [
    (Setup(W17_GROUPS), _W17.prompt, {}),
    (Setup(PR_GROUPS), _EX.prompt, {"abort_after_step": 1}),
    (Setup((PR_GROUPS[0], swa(_EX.swa_block_size, _EX.window, extra=5)), budget=333), 1000, {}),
    (Setup((full(16), swa(4, 16), swa(4, 16, eagle=True)), budget=300), 900, {"decode": 5}),
    (Setup((full(16), swa(8, 17)), blocks_per_chunk=2, budget=250), 700, {}),
    (Setup((full(12), swa(4, 8)), retention_interval=48, budget=200), 600, {}),
    (Setup(PR_GROUPS, async_scheduling=True), _EX.prompt, {"abort_after_step": 1}),
]


@pytest.mark.parametrize("setup,prompt,lc", RULE_SETUPS)
def test_connector_lookup_window_equals_impl(offline_model_dir, setup, prompt, lc):
    """``KvReachOffloadingConnector`` with ``kvreach.rule=lookup-window`` on
    the real scheduler: every SWA group's decision per step is
    ``kvreach.impl.lifecycle.run``'s under the same rule (the union of steps
    with async scheduling); what vLLM submits is that decision minus its
    null-block filter; no contract violation."""
    from kvreach.vllm_harness.runner import drive

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


# --- the load-side variant "read-window" on vLLM's real scheduler -----------------
# docs/findings.md F7: vLLM's get_sliding_window_size_in_chunks (offloading/config.py, called by
# build_offloading_config when the connector is built) patched to the variant, the chunks the
# load reads, max(1, ceil((W - 1 + extra) / C)). The twin the harness compares each lookup with
# (kvreach.vllm_harness.lookups.lookup_groups) runs the same variant. Scenarios: earlier request (geometry,
# prompt, budget, abort after step), later request (tokens, shared with the earlier prompt).
# The first four are chunk-aligned hits (obligation hit-preservation-read-window-aligned,
# proved): vLLM 0.33.0's rule then gets the dense hit. The last is a repeated prompt of a whole
# number of alignments (hit at num_tokens - 1): the variant does not fix it (a counterexample
# of hit-preservation-read-window): the load reads chunk 292, which the rule did not store.

_W17_GEOMETRY = (_W17.full_block_size, _W17.swa_block_size, _W17.window, _W17.blocks_per_chunk)

READ_WINDOW_SCENARIOS = [
    # (full block, SWA block, window, blocks_per_chunk, prompt, budget, abort, later, shared,
    #  (stock hit, dense hit), (variant hit, dense hit))
    (*_W17_GEOMETRY, 36, 36, None, 37, 36, (0, 36), (36, 36)),
    (*_W17_GEOMETRY, _EX.prompt, _EX.budget, None, _EX.prompt, _EX.budget, (0, 972), (972, 972)),
    (16, 8, 17, 2, 80, 63, 1, 34, 32, (0, 32), (32, 32)),
    (16, 8, 17, 2, 32, 32, None, 33, 32, (0, 32), (32, 32)),
    (*_W17_GEOMETRY, _W17.prompt, _W17.budget, None, _W17.prompt, _W17.prompt,
     (_F6.hit_tokens, _F6.dense_hit_tokens), (1152, _F6.dense_hit_tokens)),
]


def _scenario_cex(fb, B, W, bpc, prompt, budget, abort, later, shared) -> dict:
    """A decoded-counterexample-shaped dict for ``kvreach.vllm_harness.replay.replay``."""
    from kvreach.impl.lifecycle import Lifecycle, run
    from kvreach.params import GroupConfig, RequestConfig

    g, r = GroupConfig(B, W, fb * bpc, bpc), RequestConfig(prompt)
    lc = Lifecycle(budget=budget, abort_after_step=abort)
    trace = run("vllm-0.33", g, r, lc)
    return {"config": {"group": g.__dict__, "request": r.__dict__},
            "lifecycle": dict(lc.__dict__),
            "later_request": {"num_tokens": later, "shared_tokens": shared,
                              "local_hit_tokens": 0, "max_load_tokens": None},
            "lookup_groups": {"full_block_tokens": fb, "window": W, "extra_retained_tokens": 0},
            "trace": trace.to_json("intended")}


@pytest.mark.parametrize("scenario", READ_WINDOW_SCENARIOS,
                         ids=[f"W{s[2]}-bpc{s[3]}-P{s[4]}-later{s[7]}" for s in READ_WINDOW_SCENARIOS])
def test_read_window_lookup_on_vllm(offline_model_dir, scenario):
    """Stock vLLM 0.33.0, then the same scenario with the patched lookup
    (``kvreach.vllm_harness.replay.lookup_variant``): vLLM's hit tokens (rule's stores, dense)
    are kvreach's in both (the harness checks every lookup against the twin
    with the same variant)."""
    *args, stock, variant = scenario
    cex = _scenario_cex(*args)
    release = installed_release.twin_release()
    rule_obs, dense_obs = replay(offline_model_dir, cex, STOCK, release=release)
    assert (rule_obs.hit_tokens, dense_obs.hit_tokens) == stock
    cex["lookup_groups"]["lookup_variant"] = "read-window"
    rule_obs, dense_obs = replay(offline_model_dir, cex, STOCK, release=release)
    assert (rule_obs.hit_tokens, dense_obs.hit_tokens) == variant


def test_read_window_row_counterexample_on_vllm(offline_model_dir):
    """``hit-preservation-read-window``'s own counterexample for vLLM 0.33.0's
    rule (the row ``kvreach prove`` decodes, ``--replay-vllm``'s scenario):
    with the patched lookup vLLM's hits equal kvreach's and stay short of dense."""
    from kvreach.vllm_harness.replay import replay_hit_preservation, reproduced

    _, cex = search.find_counterexample("hit-preservation-read-window", "vllm-0.33", "any")
    assert cex["lookup_groups"]["lookup_variant"] == "read-window"
    got = replay_hit_preservation(offline_model_dir, cex, "vllm-0.33",
                                  release=installed_release.twin_release())
    assert reproduced("hit-preservation-read-window", got), got


# --- world (b): hit-preservation-neighbours' counterexamples on vLLM -------------------------

NEIGHBOURS_FAILING = ["window-17 measurement", "PR example, extra_retained_tokens 5",
                      "PR example, EAGLE group", "blocks_per_chunk 2, W - 1 a multiple of the chunk"]


@functools.lru_cache(maxsize=None)
def neighbours_counterexample(geometry_name: str):
    from kvreach.proofs.neighbours import neighbour_geometries

    import vllm

    g = next(x for x in neighbour_geometries() if x.name == geometry_name)
    # the row about the installed release, the one the replay runs on
    return search.static_counterexample("hit-preservation-neighbours", "vllm-0.33", "any", g,
                                        vllm=vllm.__version__)


def test_neighbours_counterexamples_are_the_failing_geometries():
    """The geometries replayed below are exactly those where the obligation
    fails for vLLM 0.33.0's rule (none for lookup-window)."""
    from kvreach.proofs.neighbours import neighbour_geometries

    failing = [g.name for g in neighbour_geometries() if search.static_counterexample(
        "hit-preservation-neighbours", "vllm-0.33", "any", g) is not None]
    assert failing == NEIGHBOURS_FAILING
    assert not any(search.static_counterexample("hit-preservation-neighbours", "lookup-window",
                                                "any", g) for g in neighbour_geometries())


@pytest.mark.parametrize("geometry", NEIGHBOURS_FAILING)
def test_vllm_033_neighbours_lose_the_hit_kvreach_predicts(offline_model_dir, geometry):
    """The earlier requests (one prefill step each) on the real scheduler,
    then the later request: vLLM's stored SWA chunks per request
    are the world's one-shot keep decisions, its hits under the union of the
    accepted keys and under dense are the twin's, and shorter than dense."""
    from kvreach.vllm_harness.replay import replay_neighbours, reproduced

    cex = neighbours_counterexample(geometry)
    assert cex["later_request"]["local_hit_tokens"] == 0  # the replayable shape was found
    P = [q["prompt_tokens"] for q in cex["requests"]]
    assert all(d < min(P[i], P[j]) for i, j, d in cex["shared_between"])  # distinct prompts
    got = replay_neighbours(offline_model_dir, cex, "vllm-0.33")
    assert reproduced("hit-preservation-neighbours", got), got


@pytest.mark.parametrize("geometry", NEIGHBOURS_FAILING)
def test_lookup_window_rule_keeps_the_neighbours_hit(offline_model_dir, geometry):
    """The same requests with ``KvReachOffloadingConnector`` under
    ``kvreach.rule=lookup-window``: the later request gets the dense hit (so
    the check above can tell the rules apart)."""
    from kvreach.vllm_harness.replay import replay_neighbours, reproduced

    got = replay_neighbours(offline_model_dir, neighbours_counterexample(geometry), "lookup-window")
    assert got["vllm"] == got["kvreach"]
    assert got["vllm"]["hit_tokens"] == got["vllm"]["dense_hit_tokens"] > 0
    assert not reproduced("hit-preservation-neighbours", got)
