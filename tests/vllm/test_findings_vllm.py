"""Each finding's scenario (``proofs/scenarios.py`` ``FINDINGS``) on vLLM
0.33.0's real scheduler, through the replay helpers of
``kvreach.vllm_harness.replay_lifecycle``: the request runs under the record's rule (stock
``OffloadingConnector`` for vllm-0.33, else ``KvReachOffloadingConnector``
under ``kvreach.rule``), ``prepare_store`` receives per step what the
executable rule submits, and the record's outcome holds for what vLLM
stored: the chunks no hit boundary requests (``simulate`` records), or the
hit and SWA load of a later request repeating the prompt against the keys
``prepare_store`` accepted (``lookup`` records; the offload manager's
answers are scripted from those keys). The same records through the
executable rule and the spec evaluator: ``tests/test_scenarios.py``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness.lookups import later_lookups, later_tokens  # noqa: E402
from kvreach.vllm_harness.replay_lifecycle import (  # noqa: E402
    STORED, SWA_GROUP, check_runnable, connector_selection, run_request, setup_of, vllm_steps,
)
from kvreach.vllm_harness.vllm_api import HAS_HASH_LOOKAHEAD  # noqa: E402
from vllm.v1.kv_offload.base import LookupResult  # noqa: E402

from kvreach.proofs import scenarios  # noqa: E402
from kvreach.scenario import run_scenario  # noqa: E402

pytestmark = pytest.mark.vllm

REPLAYED = [f for f in scenarios.FINDINGS if f.command is not None]


@pytest.mark.parametrize("f", REPLAYED, ids=lambda f: f.finding)
def test_finding_on_vllm(offline_model_dir, f):
    trace = run_scenario(f.rule, f.scenario)
    if trace.request.hash_lookahead_tokens and not HAS_HASH_LOOKAHEAD:
        pytest.skip(f"{f.finding} runs with lookahead block hashes (L = "
                    f"{trace.request.hash_lookahead_tokens}, vLLM 0.34.0 on); the installed "
                    "vLLM has none")
    steps = trace.to_json(f.scenario.load_model)["steps"]
    name = f"finding {f.finding}"
    check_runnable(name, f.rule, trace.request, trace.lifecycle, steps,
                   connector_selection(f.rule, trace.group, trace.request, steps))
    setup = setup_of(name, f.rule, trace.group, trace.request, f.scenario.budget)
    run, rec = run_request(offline_model_dir, setup, f.rule, trace.request, trace.lifecycle)
    assert vllm_steps(run) == [list(st["submitted"]) for st in steps]
    stored = set(run.stored(SWA_GROUP, STORED))
    if f.command == "simulate":
        assert stored - set(trace.wanted(f.scenario.load_model)) == set(f.stored_not_loadable)
        return
    rec.answers = {k: LookupResult.HIT for k in rec.stored_keys.get(STORED, [])}
    assert run.scheduler.reset_prefix_cache()
    tokens = later_tokens(list(run.requests[STORED].all_token_ids), f.scenario.prompt, None)
    obs = later_lookups(rec, tokens)[-1]
    assert obs.hit_tokens == f.hit_tokens
    assert sorted(c for g, c in obs.loaded if g == SWA_GROUP) == list(f.swa_loaded)


def test_f11_release_replays_run_the_proof_rows_geometries():
    """F11's release replay cases (``release_replay.UNCHECKED``) are the
    ``load-reads-checked`` rows' F11 geometries (the proof's grid pins them):
    one configuration, read from its two uses, not two that drift."""
    from kvreach.proofs.obligations.lookup import F11_029, F11_030
    from kvreach.vllm_harness.config import full, swa
    from kvreach.vllm_harness.release_replay import UNCHECKED

    def groups(g):
        s = swa(g.swa_block, g.window, g.eagle, g.extra)
        return (s,) if g.full_block is None else (full(g.full_block), s)

    f11 = scenarios.finding("F11")
    cases = {rr.case for rr in f11.release_replays}
    assert cases == {"unchecked-load-029", "unchecked-load-030"} == set(UNCHECKED)
    assert UNCHECKED["unchecked-load-029"][0] == groups(F11_029)
    assert UNCHECKED["unchecked-load-030"][0] == groups(F11_030)
    assert (F11_029.bpc, F11_030.bpc) == (1, 1)  # the replay's blocks_per_chunk
