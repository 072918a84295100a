"""vLLM 0.34.0's new parts as parameters of impl's rule, lookup and
lifecycle (``kvreach.releases.V0_34_0``), each on the worked case read from
0.34.0's ``offloading/scheduler.py`` and replayed on its real scheduler
(tests/vllm/test_release_0_34_0_vllm.py)."""

from __future__ import annotations

import pytest

from kvreach import releases as R
from kvreach.impl import lookup as lk
from kvreach.impl.release import lookup_group, lookup_parts


# --- the SWA -1 before the caps (_lookup_complete_chunks) ------------------------------------


@pytest.mark.parametrize("release,hit", [(R.V0_33_0, 0), (R.V0_34_0, 4)])
def test_swa_reduction_before_the_caps_keeps_a_capped_hit(release, hit):
    """Full block 4, SWA block 4, window 4, an 8-token prompt stored (every
    chunk: the mask is dense here), the same 8 tokens looked up with
    max_load_tokens 4: 0.33.0 caps to 4 and then takes the SWA 1 off (3:
    less than a chunk, no hit); 0.34.0 takes it off 8 first (7), then caps
    to 4, a chunk."""
    groups = (lookup_group(release, 4), lookup_group(release, 4, window_tokens=4))
    content = lk.StoreContent.of_chunks([[0, 1], [0, 1]])
    req = lk.LaterRequest(8, max_load_tokens=4)
    assert lookup_parts(release).swa_reduction_before_caps is release.swa_reduction_before_caps
    out = lk.lookup(groups, req, content, parts=lookup_parts(release))
    assert out.hit_tokens == hit
    # uncapped, both releases reduce once: 7 tokens (no cap, no rounding)
    assert lk.lookup(groups, lk.LaterRequest(8), content,
                     parts=lookup_parts(release)).hit_tokens == 7


def test_swa_reduction_before_the_caps_is_the_only_lookup_part_0_34_0_changes():
    a, b = lookup_parts(R.V0_33_0), lookup_parts(R.V0_34_0)
    assert {f for f in vars(a) if getattr(a, f) != getattr(b, f)} == {"swa_reduction_before_caps"}


# --- the finish clamp per release, and the error finish (_build_store_jobs) ------------------

from kvreach.impl import lifecycle as lc_  # noqa: E402
from kvreach.impl import release as rel  # noqa: E402
from kvreach.impl import release_rules, rules  # noqa: E402
from kvreach.params import GroupConfig, ParamError, RequestConfig  # noqa: E402


def test_finish_tokens_computed_clamp():
    req = RequestConfig(8)
    # a normal finish after 3 decode steps: num_tokens 12, computed 11: both clamp to 11
    for r in (R.V0_33_0, R.V0_34_0):
        assert release_rules.finish_tokens(r, req, 12, 11) == 11
    # an error finish after 5 of 8 prompt tokens: num_tokens 8, computed 5
    assert release_rules.finish_tokens(R.V0_29_0, req, 8, 5) == 8
    assert release_rules.finish_tokens(R.V0_33_0, req, 8, 5) == 8
    assert release_rules.finish_tokens(R.V0_34_0, req, 8, 5) == 5
    assert rules.finish_tokens("vllm-0.33", req, 8) == 8
    assert rules.finish_tokens("vllm-0.33", req, 8, 5) == 5


WORKED_ERROR = (GroupConfig(block_size=2, window=4, alignment_tokens=2), RequestConfig(8),
                lc_.Lifecycle(budget=5, error_after_step=1))


@pytest.mark.parametrize("release,at_error", [(R.V0_33_0, (2,)), (R.V0_34_0, ())])
def test_error_finish_before_the_prompt_is_computed(release, at_error):
    """FINISHED_ERROR after a 5-token step of an 8-token prompt (full 2, SWA
    2, window 4, budget 5): 0.33.0's clamp max(P, num_tokens - 1) = 8 reads
    past the 5 computed tokens and stores chunk 2 (tokens 4-5: token 5 never
    computed; the chunks are capped by the 3 allocated blocks); 0.34.0 caps
    by num_computed_tokens and stores nothing more."""
    g, req, lc = WORKED_ERROR
    t = rel.run(release, g, req, lc)
    assert [s.kind for s in t.steps] == ["prefill", "error"]
    assert t.steps[0].submitted == (0, 1)
    assert t.steps[1].submitted == at_error
    assert t.computed_tokens == 5
    uncomputed = [c for c in t.stored if (c + 1) * g.chunk_tokens > t.computed_tokens]
    assert uncomputed == list(at_error)


def test_error_finish_after_the_prompt_is_a_normal_finish():
    g, req, _ = WORKED_ERROR
    for r in (R.V0_33_0, R.V0_34_0):
        err = rel.run(r, g, req, lc_.Lifecycle(budget=5, decode=3, error_after_step=5))
        ok = rel.run(r, g, req, lc_.Lifecycle(budget=5, decode=3))
        assert err.stored == ok.stored
        assert err.steps[-1].tokens_after_batch == ok.steps[-1].tokens_after_batch == 11


def test_error_finish_bad_input():
    with pytest.raises(ParamError, match="error_after_step"):
        lc_.Lifecycle(budget=5, error_after_step=1, abort_after_step=1)
    with pytest.raises(ParamError, match="error_after_step"):
        lc_.Lifecycle(budget=5, error_after_step=-1)
    g, req, _ = WORKED_ERROR
    with pytest.raises(ParamError, match="error_after_step"):
        rel.run(R.V0_34_0, g, req, lc_.Lifecycle(budget=5, error_after_step=3))


# --- lookahead block hashes (num_hash_lookahead_tokens, L) ------------------------------------

import dataclasses  # noqa: E402

from kvreach.impl.worlds import later_lookup  # noqa: E402
from kvreach.scenario import (Scenario, derived_hash_lookahead_tokens, lookup_groups,  # noqa: E402
                              run_scenario, tokens_per_hash)


def _lookahead(L: int, **kw) -> tuple[GroupConfig, RequestConfig]:
    g = GroupConfig(block_size=2, window=4, alignment_tokens=8, lookahead_hashes=L > 0, **kw)
    return g, RequestConfig(14, hash_lookahead_tokens=L, tokens_per_hash=2)


def test_hashed_tokens_and_the_offloadable_cap():
    req = RequestConfig(14, hash_lookahead_tokens=1, tokens_per_hash=2)
    # (num_tokens - L) // tokens_per_hash hashes (get_request_block_hasher)
    assert [req.hashed_tokens(n) for n in (14, 15, 16, 1, 0)] == [12, 14, 14, 0, 0]
    assert req.offloadable(14, 14) == 12 and req.offloadable(14, 15) == 14
    assert req.at(14).prompt_offloadable_tokens == 12
    assert req.at(15).prompt_offloadable_tokens == 14
    assert RequestConfig(14).hashed_tokens(14) is None and RequestConfig(14).at(14) == RequestConfig(14)
    capped = dataclasses.replace(req, max_offload_tokens=10)
    assert capped.at(15).prompt_offloadable_tokens == 10


@pytest.mark.parametrize("L,steps", [(0, [(2, 3, 5, 6), ()]), (1, [(2, 3, 4, 5), (6,)])])
def test_lookahead_prompt_horizon_is_the_hashed_end(L, steps):
    """Full 8, SWA 2, window 4, prompt 14, budget 100: with L=0 the prompt
    step stores SWA chunks {2,3,5,6} (the final horizon 7's tail); with L=1
    the prompt's last block has no hash yet (13 tokens hashed to 12), the
    prompt horizon is 6 chunks, the step stores {2,3,4,5} and the finish
    (15 tokens: 14 hashed) chunk 6; chunk 4 is the tail of a horizon that was
    not final."""
    g, req = _lookahead(L)
    t = rel.run(R.V0_34_0, g, req, lc_.Lifecycle(budget=100))
    assert [s.submitted for s in t.steps] == steps
    assert t.steps[0].offloadable_tokens == (14 if L == 0 else 12)


def test_lookahead_eagle_group_is_a_plain_group_without_a_final_tail():
    """Under lookahead hashes an EAGLE group has no mask shift and no
    trailing drop (it is stored as a plain group), but still no final
    horizon: it equals the plain group except the final-segment tail."""
    g, req = _lookahead(1)
    eagle = dataclasses.replace(g, eagle=True)
    assert eagle.shift == 0 and eagle.need == g.need and not eagle.legacy_eagle
    assert eagle.final_alignment_blocks is None
    lc = lc_.Lifecycle(budget=5, decode=6)
    te, tp = rel.run(R.V0_34_0, eagle, req, lc), rel.run(R.V0_34_0, g, req, lc)
    assert rules.store_step("vllm-0.33", eagle, req.at(14), 0, 6, False).horizon_chunks is None
    assert rules.store_step("vllm-0.33", g, req.at(14), 0, 6, False).horizon_chunks == 6
    # the EAGLE group keeps only the segment tails (blocks 2-3 and 6-7 of the
    # 4-block segments); the plain one also the final tail 4-5 of the prompt
    # horizon (6 chunks: 12 hashed tokens); no drop of the trailing chunk
    # while decoding
    assert te.stored == (2, 3, 6) and tp.stored == (2, 3, 4, 5, 6)
    assert [s.num_chunks for s in te.steps] == [s.num_chunks for s in tp.steps]
    legacy = rel.run(R.V0_34_0, dataclasses.replace(eagle, lookahead_hashes=False),
                     RequestConfig(14), lc)
    assert [s.num_chunks for s in legacy.steps] != [s.num_chunks for s in te.steps]


def test_lookahead_mode_is_the_requests():
    g, req = _lookahead(1)
    with pytest.raises(ParamError, match="lookahead_hashes"):
        rel.run(R.V0_34_0, dataclasses.replace(g, lookahead_hashes=False), req,
                lc_.Lifecycle(budget=100))
    with pytest.raises(ParamError, match="hash_lookahead_tokens"):
        rel.run(R.V0_33_0, g, req, lc_.Lifecycle(budget=100))


PR_W17 = Scenario(swa_block_size=4, window=17, prompt=1188, budget=1000, full_block_size=36)


@pytest.mark.parametrize("L,dense", [(0, 1187), (1, 1152)])
def test_lookahead_exact_repeat_loses_the_last_chunk(L, dense):
    """PR #54362's geometry (full 36, SWA 4, window 17), a 1188-token prompt
    stored and looked up again: with L=1 every key covers one token past its
    chunk, the stored prompt's last full chunk keys its first sampled token,
    which the repeat lacks: dense hit 1152 (32 full chunks), not 1187."""
    s = dataclasses.replace(PR_W17, hash_lookahead_tokens=L)
    trace = run_scenario(R.V0_34_0, s)
    r = later_lookup(lookup_groups(s, R.V0_34_0), trace, 1188, parts=lookup_parts(R.V0_34_0))
    assert r.dense.hit_tokens == dense
    assert r.rule.hit_tokens == 0  # F6's window-17 loss under both modes


def test_lookahead_lookup_eagle_group_is_not_widened():
    """An EAGLE group under L >= 1 is looked up as a plain SWA group: the
    lookup equals that of the group with eagle=False; with legacy hashes
    (L = 0) it pops its trailing chunk."""
    groups = (lk.LookupGroup(16), lk.LookupGroup(4, 1, 16, eagle=True))
    plain = (lk.LookupGroup(16), lk.LookupGroup(4, 1, 16))
    content = lk.StoreContent.of_chunks([range(40), range(160)])
    req = lk.LaterRequest(641, hash_lookahead_tokens=1)
    parts = lookup_parts(R.V0_34_0)
    assert lk.lookup(groups, req, content, parts=parts) == lk.lookup(plain, req, content, parts=parts)
    legacy = lk.lookup(groups, lk.LaterRequest(641), content, parts=parts).hit_tokens
    assert legacy < lk.lookup(plain, lk.LaterRequest(641), content, parts=parts).hit_tokens
    assert lk.num_keys(groups[1], req) == 160 and lk.num_keys(groups[1], lk.LaterRequest(641)) == 160
    assert lk.num_keys(groups[0], lk.LaterRequest(640, hash_lookahead_tokens=1)) == 39


def test_derived_hash_lookahead_tokens():
    """VllmConfig._resolve_num_hash_lookahead_tokens under the offloading
    connector: the drafter's num_prefill_lookahead_tokens (EAGLE/MTP 1,
    multi-module MTP num_speculative_tokens = extra_retained_tokens + 1),
    0 without a drafter and before 0.34.0."""
    base = Scenario(swa_block_size=4, window=16, prompt=100, budget=100, full_block_size=12)
    eagle = dataclasses.replace(base, eagle=True)
    mtp = dataclasses.replace(base, extra_retained_tokens=3)
    assert [derived_hash_lookahead_tokens(s) for s in (base, eagle, mtp)] == [0, 1, 4]
    assert derived_hash_lookahead_tokens(eagle, R.V0_33_0) == 0
    assert tokens_per_hash(base) == 4 and tokens_per_hash(dataclasses.replace(base, dcp=2)) == 8
    assert tokens_per_hash(dataclasses.replace(base, full_block_size=None)) == 4
    t = run_scenario(R.V0_34_0, eagle)
    assert t.request.hash_lookahead_tokens == 1 and t.group.lookahead_hashes
    assert run_scenario(R.V0_33_0, eagle).request.hash_lookahead_tokens == 0


# lookup-window under 0.34.0's lookahead block hashes: not proved (its rows
# read L = 0), measured on the twin. Seeded random scenarios, L 0 .. 3, EAGLE
# and extra_retained_tokens drawn; the later request repeats the prompt, cuts
# it or continues it; its hit under the rule's stores equals the dense hit.
SWEEP_SCENARIOS = 400


def _sweep_scenarios(seed: int):
    import random

    rnd = random.Random(seed)
    for _ in range(SWEEP_SCENARIOS):
        sb = rnd.choice([1, 2, 4, 8, 16])
        yield Scenario(swa_block_size=sb, window=rnd.randint(2, 40), prompt=rnd.randint(1, 120),
                       budget=rnd.randint(1, 130), full_block_size=rnd.choice([None, sb, 2 * sb, 36]),
                       eagle=rnd.random() < 0.3, extra_retained_tokens=rnd.choice([0, 0, 3]),
                       hash_lookahead_tokens=rnd.choice([0, 1, 1, 2, 3])), rnd


def test_lookup_window_loses_no_hit_under_lookahead_hashes_on_the_twin():
    release = R.release("0.34.0")
    later_requests = lookahead = 0
    for sc, rnd in _sweep_scenarios(1):
        groups = lookup_groups(sc, release)
        trace = run_scenario("lookup-window", sc, release)
        for n in sorted({sc.prompt, sc.prompt + rnd.randint(1, 30), max(1, sc.prompt - rnd.randint(0, 10))}):
            r = later_lookup(groups, trace, n, None, 0, None, parts=lookup_parts(release))
            later_requests += 1
            lookahead += bool(sc.hash_lookahead_tokens)
            assert r.rule.hit_tokens == r.dense.hit_tokens, (sc, n, r.rule.hit_tokens, r.dense.hit_tokens)
    assert later_requests > 1000 and lookahead > 700, (later_requests, lookahead)


def test_the_lookahead_sweep_can_fail():
    """The same sweep under vLLM 0.34.0's own store side loses hits (F6)."""
    release = R.release("0.34.0")
    lost = 0
    for sc, rnd in _sweep_scenarios(1):
        groups = lookup_groups(sc, release)
        trace = run_scenario(release, sc, release)
        r = later_lookup(groups, trace, sc.prompt, None, 0, None, parts=lookup_parts(release))
        lost += r.rule.hit_tokens != r.dense.hit_tokens
    assert lost > 0
