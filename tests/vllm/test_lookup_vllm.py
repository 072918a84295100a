"""kvreach's lookup twin (``kvreach.impl.lookup``) equals the installed vLLM's own
offload lookup, run through the real ``Scheduler``.

Each example stores one request's chunks through stock vLLM (the keys its
``prepare_store`` accepted), scripts the offload manager's answers from them
(the stored keys, every prompt key, or a random subset with HIT_PENDING and
RETRY answers), optionally keeps the GPU prefix cache (a GPU-local hit), then
schedules a later request that shares a prefix. Every
``get_num_new_matched_tokens`` call vLLM makes is compared with the twin: the
same hit tokens (None when deferred) and the same keys passed to
``prepare_load``.

CI size: ``KVREACH_LOOKUP_EXAMPLES`` (default 300, derandomized). The slow run
(docs/conformance.md) sets it to 10000.
"""

from __future__ import annotations

import os
import random

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from kvreach.vllm_harness.runner import Setup, full, prompt_token_ids, swa  # noqa: E402
from kvreach.vllm_harness.lookups import (  # noqa: E402
    LookupRecorder, check, later_lookups, later_tokens, lookup_groups, new_id, new_run,
)
from vllm.v1.kv_offload.base import LookupResult  # noqa: E402

from kvreach.proofs.scenarios import MEASURED_W17, PR_54362, finding  # noqa: E402

import installed_release  # noqa: E402

# Every comparison here is with kvreach's twin of the installed release
# (0.33.0's own on 0.33.0; on another release its kvreach.releases record's,
# skipped while kvreach has none).
pytestmark = [pytest.mark.vllm, installed_release.needs_record]


def twin():
    return installed_release.recorder_and_twin()[1]

_EX, _W17, _F6 = PR_54362, MEASURED_W17, finding("F6")  # proofs/scenarios.py
PR_GROUPS = (full(_EX.full_block_size), swa(_EX.swa_block_size, _EX.window))
W17_GROUPS = (full(_W17.full_block_size), swa(_W17.swa_block_size, _W17.window))

SETUPS: dict[str, Setup] = {
    "fa36-swa4-w17": Setup(W17_GROUPS),
    "fa36-swa4-w16": Setup(PR_GROUPS),
    "fa16-swa8-w17-bpc2": Setup((full(16), swa(8, 17)), blocks_per_chunk=2),
    "fa12-swa4-w13-bpc3": Setup((full(12), swa(4, 13)), blocks_per_chunk=3),
    "fa12-two-swa": Setup((full(12), swa(4, 8), swa(4, 21))),
    "swa-only": Setup((swa(4, 16),)),
    "two-swa-only": Setup((swa(4, 9), swa(8, 33))),
    "eagle": Setup((full(16), swa(4, 16), swa(4, 16, eagle=True))),
    "extra-retained": Setup((PR_GROUPS[0], swa(_EX.swa_block_size, _EX.window, extra=5))),
    "retention": Setup((full(12), swa(4, 8)), retention_interval=48),
    "two-full-sizes": Setup((full(8), full(16), swa(4, 12))),
    "full-only": Setup((full(16),)),
}

_runs: dict[str, tuple] = {}


def recorder(name: str, model_dir: str) -> LookupRecorder:
    if name not in _runs:
        _runs[name] = new_run(SETUPS[name], model_dir)
    return _runs[name][1]


def store_request(rec: LookupRecorder, tokens: list[int], decode: int = 0) -> str:
    """Run one request to completion with stock vLLM's store rule; the
    manager accepts every key (recorded in ``rec.stored_keys``)."""
    rid = new_id("stored-")
    rec.answers = {}
    rec.run.add_request(rid, len(tokens), max_tokens=decode + 1, token_ids=tokens)
    rec.run.run_to_completion()
    return rid


def reset(rec: LookupRecorder) -> None:
    rec.answers = {}
    assert rec.run.scheduler.reset_prefix_cache()
    rec.observations.clear()


# --- the measurement of window 17 -------------------------------------------------------------


def test_measured_zero_hit_with_sparse_stores(offline_model_dir):
    """Full-attention block 36, SWA block 4, window 17: a 1188-token prompt
    stored by stock vLLM, then the same prompt again. vLLM's lookup hits 0
    tokens (it asks for 5 consecutive SWA chunks; the mask keeps runs of 4)
    and 1187 with every chunk stored; the twin says the same."""
    rec = recorder("fa36-swa4-w17", offline_model_dir)
    reset(rec)
    tokens = prompt_token_ids(_W17.prompt, seed=3)
    rid = store_request(rec, tokens)
    rec.answers = {k: LookupResult.HIT for k in rec.stored_keys[rid]}
    rec.run.scheduler.reset_prefix_cache()
    sparse = later_lookups(rec, tokens)
    check(SETUPS["fa36-swa4-w17"], sparse, twin())
    assert sparse[-1].hit_tokens == _F6.hit_tokens
    rec.answers = {k: LookupResult.HIT for k in rec.prompt_keys[rid]}
    rec.run.scheduler.reset_prefix_cache()
    dense = later_lookups(rec, tokens)
    check(SETUPS["fa36-swa4-w17"], dense, twin())
    assert dense[-1].hit_tokens == _F6.dense_hit_tokens
    reset(rec)


def test_gpu_local_hit_then_offload_hit(offline_model_dir):
    """The GPU prefix cache keeps the stored request's blocks: the later
    request starts with a local hit, and the lookup runs from there."""
    rec = recorder("fa36-swa4-w16", offline_model_dir)
    reset(rec)
    tokens = prompt_token_ids(_EX.prompt, seed=5)
    rid = store_request(rec, tokens[:700])
    rec.answers = {k: LookupResult.HIT for k in rec.prompt_keys[rid]}
    obs = later_lookups(rec, tokens)  # prefix cache not reset
    check(SETUPS["fa36-swa4-w16"], obs, twin())
    assert obs[-1].local_hit_tokens > 0
    reset(rec)


def test_deferred_lookup_then_hit(offline_model_dir):
    """HIT_PENDING answers defer the lookup (None); once HIT, it hits."""
    rec = recorder("fa36-swa4-w16", offline_model_dir)
    reset(rec)
    tokens = prompt_token_ids(600, seed=11)
    rid = store_request(rec, tokens)
    rec.run.scheduler.reset_prefix_cache()
    rec.answers = {k: LookupResult.HIT_PENDING for k in rec.prompt_keys[rid]}
    obs = later_lookups(rec, tokens)
    check(SETUPS["fa36-swa4-w16"], obs, twin())
    assert [o.hit_tokens for o in obs] == [None, 576]  # 16 full-attention chunks of 36
    reset(rec)


# --- random cases ------------------------------------------------------------------------


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(SETUPS)))
    stored_len = draw(st.integers(1, 600))
    later_len = draw(st.one_of(st.just(stored_len), st.integers(1, 700)))
    diverges = draw(st.one_of(st.none(), st.none(), st.integers(0, stored_len)))
    content = draw(st.sampled_from(
        ["rule", "rule", "dense", "dense", "dense", "subset", "rule+deferred"]))
    keep_gpu = draw(st.integers(0, 3)) == 0
    max_load = draw(st.one_of(st.none(), st.none(), st.integers(0, 700)))
    seed = draw(st.integers(0, 1 << 30))
    return name, stored_len, later_len, diverges, content, keep_gpu, max_load, seed


EXAMPLES = int(os.environ.get("KVREACH_LOOKUP_EXAMPLES", "300"))


def _twin_equals_vllm_lookup(offline_model_dir, case):
    name, stored_len, later_len, diverges, content, keep_gpu, max_load, seed = case
    rng = random.Random(seed)
    rec = recorder(name, offline_model_dir)
    reset(rec)
    stored = prompt_token_ids(stored_len, seed=seed % 97)
    rid = store_request(rec, stored)
    keys = rec.stored_keys.get(rid, []) if content.startswith("rule") else rec.prompt_keys[rid]
    answers = {}
    for k in keys:
        if content == "subset":
            answers[k] = rng.choice([LookupResult.HIT] * 5 + [LookupResult.MISS,
                                    LookupResult.HIT_PENDING, LookupResult.RETRY])
        elif content == "rule+deferred" and rng.random() < 0.1:
            answers[k] = rng.choice([LookupResult.HIT_PENDING, LookupResult.RETRY])
        else:
            answers[k] = LookupResult.HIT
    rec.answers = answers
    if not keep_gpu:
        rec.run.scheduler.reset_prefix_cache()
    obs = later_lookups(rec, later_tokens(stored, later_len, diverges), max_load)
    check(SETUPS[name], obs, twin())
    last = obs[-1]
    event("hit" if last.hit_tokens else "no hit")
    event("deferred first" if obs[0].hit_tokens is None else "settled first")
    event("gpu-local hit" if last.local_hit_tokens else "no local hit")
    reset(rec)


_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
test_twin_equals_vllm_lookup = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=_HEALTH,
    derandomize="KVREACH_LOOKUP_EXAMPLES" not in os.environ,
)(given(case=cases())(_twin_equals_vllm_lookup))

# The slow suite (pytest -m slow): 10,000 random cases, figures in docs/conformance.md.
test_twin_equals_vllm_lookup_10k = pytest.mark.slow(settings(
    max_examples=10_000, deadline=None, suppress_health_check=_HEALTH,
)(given(case=cases())(_twin_equals_vllm_lookup)))


# --- DCP 2, at the OffloadingConnectorScheduler level ------------------------------------
# vLLM's KVCacheManager refuses a DCP-sharded SWA group, so no Scheduler can
# run one; the real OffloadingConnectorScheduler still can. Its lookup
# (get_num_new_matched_tokens) is called directly with a mocked Request; only
# the hit is compared (update_state_after_alloc needs the KV manager's blocks).

DCP_SETUPS = {
    "dcp2-fa16-swa4-w17": Setup((full(16), swa(4, 17)), dcp_world_size=2),
    "dcp2-fa8-swa4-w9-bpc2": Setup((full(8), swa(4, 9)), dcp_world_size=2, blocks_per_chunk=2),
}
_class_runs: dict[str, object] = {}


def class_level_hit(name: str, num_tokens: int, local: int, content, max_load: int | None):
    from unittest.mock import MagicMock

    from kvreach.vllm_harness.runner import STOCK, ClassLevelRun
    from vllm.v1.core.kv_cache_utils import BlockHash

    from kvreach.impl.lookup import Answer

    if name not in _class_runs:
        _class_runs[name] = ClassLevelRun(DCP_SETUPS[name], STOCK)
    off = _class_runs[name].offload
    req = MagicMock()
    req.request_id = new_id("dcp-")
    req.kv_transfer_params = None if max_load is None else {"max_load_tokens": max_load}
    req.num_prompt_tokens = req.num_tokens = num_tokens
    req.skip_reading_prefix_cache = False
    req.skip_reading_external_kv = False  # vLLM 0.34.0 reads this name
    hash_tokens = off.config.tokens_per_hash
    req.block_hashes = [BlockHash(f"{req.request_id}-{i}".encode())
                        for i in range(num_tokens // hash_tokens)]
    off.on_new_request(req)
    positions = {}

    def answer(key, req_context):
        if not positions:
            st_ = off._req_status[req.request_id]
            positions.update({k: (g, c) for g, gs in enumerate(st_.group_states)
                              for c, k in enumerate(gs.offload_keys)})
        a = content.answer(*positions[key])
        return {Answer.HIT: LookupResult.HIT, Answer.MISS: LookupResult.MISS,
                Answer.HIT_PENDING: LookupResult.HIT_PENDING,
                Answer.RETRY: LookupResult.RETRY}[a]

    off.manager.lookup.side_effect = answer
    hit, _ = off.get_num_new_matched_tokens(req, local)
    off._release_step()
    del off._req_status[req.request_id]
    return hit


@settings(max_examples=max(20, EXAMPLES // 5), deadline=None,
          derandomize="KVREACH_LOOKUP_EXAMPLES" not in os.environ,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_twin_equals_vllm_lookup_dcp2(data):
    from kvreach.impl.lookup import LaterRequest, StoreContent

    name = data.draw(st.sampled_from(sorted(DCP_SETUPS)))
    setup = DCP_SETUPS[name]
    groups = lookup_groups(setup)
    num_tokens = data.draw(st.integers(1, 600))
    local_blocks = data.draw(st.integers(0, num_tokens // 32))
    local = local_blocks * 32  # block-aligned for every group here
    dense_upto = data.draw(st.integers(0, 40))
    hole = data.draw(st.one_of(st.none(), st.integers(0, 40)))
    content = StoreContent.of_chunks([
        [c for c in range(num_tokens // g.chunk_tokens) if c < dense_upto * (64 // g.chunk_tokens)
         and c != hole] for g in groups])
    max_load = data.draw(st.one_of(st.none(), st.integers(0, 600)))
    vllm_hit = class_level_hit(name, num_tokens, local, content, max_load)
    twin_hit = installed_release.twin_hit(groups, LaterRequest(num_tokens, local, max_load), content)
    event("hit" if vllm_hit else "no hit")
    assert twin_hit == vllm_hit


# --- kvreach lookup's scenarios, replayed on vLLM -----------------------------------------

SCENARIOS = [
    # (name, setup, prompt, budget-steps kwargs, later_prompt, diverges_at)
    ("measured window 17", Setup(W17_GROUPS), _W17.prompt, {}, _W17.prompt, None),
    ("PR #54362 example", Setup(PR_GROUPS), _EX.prompt, {}, _EX.prompt, None),
    ("PR example, aborted after step 1", Setup(PR_GROUPS), _EX.prompt,
     {"abort_after_step": 1}, _EX.prompt, None),
    ("later request diverges inside a segment", Setup(PR_GROUPS), _EX.prompt, {}, 1500, 1001),
    ("later request shorter", Setup(PR_GROUPS), _EX.prompt, {}, 1003, None),
    ("extra retained tokens", Setup((PR_GROUPS[0], swa(_EX.swa_block_size, _EX.window, extra=5))),
     1000, {}, 1000, None),
    ("SWA only", Setup((swa(4, 16),)), 777, {}, 900, None),
    ("blocks_per_chunk 2", Setup((full(16), swa(8, 17)), blocks_per_chunk=2), 900, {}, 900, None),
]


@pytest.mark.parametrize("name,setup,prompt,lc,later,diverges", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_kvreach_lookup_scenario_replays_on_vllm(offline_model_dir, name, setup, prompt, lc,
                                                  later, diverges):
    """``kvreach.impl.worlds.later_lookup`` (what ``kvreach lookup`` prints)
    against vLLM: the earlier request runs through the real scheduler with the
    stock 0.33 connector (budget 1000), the manager answers HIT for exactly the
    keys its prepare_store accepted (then: for every offloadable key, dense), and
    the later request's hit is vLLM's."""
    from kvreach.vllm_harness.runner import SchedulerRun, STOCK

    from kvreach.impl.lifecycle import Lifecycle, run
    from kvreach.impl.worlds import later_lookup, offloadable_tokens
    from kvreach.params import RequestConfig

    swa_idx = setup.swa_groups()[0]
    trace = run("vllm-0.33", setup.kvreach_group(swa_idx), RequestConfig(prompt),
                Lifecycle(budget=setup.budget, **lc))
    predicted = later_lookup(tuple(lookup_groups(setup)), trace, later, diverges)
    r = SchedulerRun(setup, STOCK, offline_model_dir)
    rec = LookupRecorder(r)
    stored = prompt_token_ids(prompt, seed=21)
    rid = new_id("stored-")
    r.add_request(rid, prompt, max_tokens=1, token_ids=stored)
    if "abort_after_step" in lc:
        for _ in range(lc["abort_after_step"]):
            r.step()
        r.abort(rid)
    r.run_to_completion()
    assert sorted(c for k, (g, c) in rec.prompt_keys[rid].items()
                  if g == swa_idx and k in set(rec.stored_keys[rid])) == sorted(trace.stored)
    later_ids = later_tokens(stored, later, diverges)
    for content, want in (("rule", predicted.rule), ("dense", predicted.dense)):
        if content == "rule":
            rec.answers = {k: LookupResult.HIT for k in rec.stored_keys[rid]}
        else:
            rec.answers = {k: LookupResult.HIT for k, (g, c) in rec.prompt_keys[rid].items()
                           if (c + 1) * lookup_groups(setup)[g].chunk_tokens
                           <= offloadable_tokens(trace)}
        assert r.scheduler.reset_prefix_cache()
        obs = later_lookups(rec, later_ids)
        check(setup, obs, twin())
        assert obs[-1].hit_tokens == want.hit_tokens, content
        assert obs[-1].loaded == want.loaded_keys(), content
