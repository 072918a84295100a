"""Unit tests of the executable model (``kvreach.impl``) on the numbers of
PR #54362's worked example (measured on vLLM 0.33.0, see the domain brief),
the dense fallbacks of ``reachable_block_mask`` and the parameter errors."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvreach.impl import load as iload
from kvreach.impl.lifecycle import Lifecycle, run
from kvreach.impl.mask import block_reachable, chunk_reachable, reachable_block_mask
from kvreach.impl.rules import store_horizon_chunks, store_step
from kvreach.proofs.scenarios import (
    PR_54362, PR_54362_FRONTIER_CHUNKS, PR_54362_PROMPT_CHUNKS, PR_54362_WASTED,
)
from kvreach.params import (
    GroupConfig, ParamError, RequestConfig, check_load_model, check_rule,
)

# PR #54362 (proofs/scenarios.py): full-attention block 36 (alignment 36),
# SWA block 4, window 16, one block per chunk, a 1200-token prompt, a
# 1000-token budget.
_EX = PR_54362
PR = GroupConfig(block_size=_EX.swa_block_size, window=_EX.window,
                 alignment_tokens=_EX.alignment_tokens)
PR_EAGLE = GroupConfig(block_size=_EX.swa_block_size, window=_EX.window,
                       alignment_tokens=_EX.alignment_tokens, eagle=True)
PR_REQ = RequestConfig(prompt_tokens=_EX.prompt)
PR_LC = Lifecycle(budget=_EX.budget)
P = _EX.prompt  # tokens
FRONTIER, PROMPT_CHUNKS = PR_54362_FRONTIER_CHUNKS, PR_54362_PROMPT_CHUNKS  # chunks
WASTED = set(PR_54362_WASTED)  # F1: vllm-0.29 stores them at the frontier, no hit loads them


def _set(mask, start):
    return {start + i for i, keep in enumerate(mask) if keep}


def _tails(k_max: int) -> set[int]:
    return {9 * k + j for k in range(k_max + 1) for j in range(5, 9)}


# ---------------------------------------------------------------------------
# reachable_block_mask
# ---------------------------------------------------------------------------


def test_pr_group_derived_quantities():
    assert (PR.block_tokens, PR.need, PR.per_segment, PR.dense) == (4, 4, 9, False)
    assert (PR_EAGLE.need, PR_EAGLE.shift, PR_EAGLE.final_alignment_blocks) == (5, 1, None)
    assert PR.final_alignment_blocks == 9


@pytest.mark.parametrize("final_end,expected",
                         [(PROMPT_CHUNKS, {248, 249}), (FRONTIER, WASTED | {248, 249})])
def test_pr_mask_final_end(final_end, expected):
    mask = reachable_block_mask(243, FRONTIER, PR, P, final_segment_end_block=final_end)
    assert _set(mask, 243) == expected
    assert {i for i in range(243, FRONTIER) if block_reachable(i, PR, P, final_end)} == expected


@pytest.mark.parametrize("final_end", [None, FRONTIER, PROMPT_CHUNKS])
def test_pr_mask_eagle(final_end):
    mask = reachable_block_mask(243, FRONTIER, PR_EAGLE, P, final_segment_end_block=final_end)
    assert _set(mask, 243) == {243, 248, 249}


def test_pr_mask_without_final_end_is_aligned_tails_only():
    assert _set(reachable_block_mask(0, 27, PR, P), 0) == _tails(2)


def test_chunk_reachable_any_block_of_chunk():
    g = replace(PR, blocks_per_chunk=2)
    # Tails are blocks 5..8 and 14..17: chunks 2 (blocks 4,5), 3 (6,7), 4 (8,9),
    # 7 (14,15), 8 (16,17); chunks 5 (10,11) and 6 (12,13) hold none.
    assert [c for c in range(9) if chunk_reachable(c, g, P, None)] == [2, 3, 4, 7, 8]


@pytest.mark.parametrize(
    "g",
    [
        pytest.param(GroupConfig(block_size=4, window=16, alignment_tokens=None), id="no-alignment"),
        pytest.param(GroupConfig(block_size=8, window=16, alignment_tokens=36), id="36%8!=0"),
        pytest.param(replace(PR, dcp_world_size=2), id="36%(4*dcp2)!=0"),
        pytest.param(GroupConfig(block_size=4, window=16, alignment_tokens=16), id="need4>=ps4"),
        pytest.param(GroupConfig(block_size=4, window=16, alignment_tokens=20, eagle=True),
                     id="eagle-need5>=ps5"),
        pytest.param(replace(PR, retention_interval=8),
                     id="retention-ps2"),
    ],
)
def test_dense_fallbacks(g):
    assert g.dense
    assert reachable_block_mask(0, 50, g, P, final_segment_end_block=50) is None
    assert all(chunk_reachable(c, g, P, 50) for c in range(50))
    w = store_step("vllm-0.33", g, PR_REQ, 0, 50, False)
    assert w.block_mask is None and w.chunks == tuple(range(50))


def test_not_dense_just_below_threshold():
    g = GroupConfig(block_size=4, window=16, alignment_tokens=20)  # need 4 < per_segment 5
    assert not g.dense
    assert _set(reachable_block_mask(0, 10, g, 100), 0) == {1, 2, 3, 4, 6, 7, 8, 9}


def test_retention_zero_keeps_only_replay_tail():
    # R = 0: no segment tails; the replay boundary 1199 aligns down to 1188
    # (block 297), whose need-block tail is 293..296.
    g = replace(PR, retention_interval=0)
    assert not g.dense
    assert _set(reachable_block_mask(0, PROMPT_CHUNKS, g, P, None), 0) == {293, 294, 295, 296}


# ---------------------------------------------------------------------------
# the store horizon (PR #54362)
# ---------------------------------------------------------------------------


def test_store_horizon():
    F, PC = FRONTIER, PROMPT_CHUNKS
    assert store_horizon_chunks(PR, False, F, PC) == PC  # prefill: prompt horizon
    assert store_horizon_chunks(PR, True, F, PC) == F  # finished: current
    assert store_horizon_chunks(PR, False, PC + 1, PC) is None  # decode past prompt
    assert store_horizon_chunks(PR_EAGLE, False, F, PC) is None
    g_r = replace(PR, retention_interval=_EX.alignment_tokens)  # one segment
    assert store_horizon_chunks(g_r, True, F, PC) is None


# ---------------------------------------------------------------------------
# lifecycle: the PR's measured sets
# ---------------------------------------------------------------------------

COMPLETED = _tails(31) | set(range(293, PROMPT_CHUNKS))
ABORTED = _tails(26) | WASTED | {248, 249}


def test_pr_completed_prompt_033():
    t = run("vllm-0.33", PR, PR_REQ, PR_LC)
    assert [s.num_chunks for s in t.steps] == [FRONTIER, PROMPT_CHUNKS, PROMPT_CHUNKS]
    assert len(t.stored) == 135 == len(set(t.stored))
    assert set(t.stored) == COMPLETED
    assert t.final_horizon_chunks == PROMPT_CHUNKS


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_pr_aborted_after_first_step_033(async_scheduling):
    lc = Lifecycle(budget=_EX.budget, abort_after_step=1, async_scheduling=async_scheduling)
    t = run("vllm-0.33", PR, PR_REQ, lc)
    assert [s.kind for s in t.steps] == ["prefill", "abort"]
    assert len(t.stored) == 112 == len(set(t.stored))
    assert set(t.stored) == ABORTED
    # The abort reconsiders the final tail once: 246, 247 (248, 249 were
    # stored under the prompt horizon in step 1).
    assert t.steps[-1].submitted == tuple(sorted(WASTED))
    assert t.steps[-1].in_flight is async_scheduling


def test_pr_completed_prompt_029_adds_intermediate_tail():
    t = run("vllm-0.29", PR, PR_REQ, PR_LC)
    assert set(t.stored) == COMPLETED | WASTED
    assert len(t.stored) == 137
    assert WASTED <= set(t.steps[0].submitted)  # stored at the 1000-token frontier


def test_pr_loadable_sets():
    t = run("vllm-0.33", PR, PR_REQ, PR_LC)
    assert t.wanted("intended") == COMPLETED
    assert t.needed("intended") == COMPLETED
    assert t.wanted("aligned") == _tails(32)  # no boundary at the prompt horizon
    assert iload.needed_chunks("aligned", PR, PR_REQ, PROMPT_CHUNKS) == _tails(31) | {293, 294, 295, 296}


# ---------------------------------------------------------------------------
# parameter errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make,param,value,expected",
    [
        (lambda: GroupConfig(block_size=0, window=16, alignment_tokens=36),
         "block_size", 0, "an integer >= 1"),
        (lambda: GroupConfig(block_size=4, window=0, alignment_tokens=36),
         "window", 0, "an integer >= 1"),
        (lambda: GroupConfig(block_size=4, window=16, alignment_tokens=36, blocks_per_chunk=2,
                             retention_interval=12),
         "retention_interval", 12, "a multiple of the SWA chunk size (8 tokens)"),
        (lambda: GroupConfig(block_size=4, window=16, alignment_tokens=None, retention_interval=8),
         "retention_interval", 8, "None when there is no alignment (alignment_tokens is None)"),
        (lambda: GroupConfig(block_size=True, window=16, alignment_tokens=36),
         "block_size", True, "an integer >= 1"),
        (lambda: RequestConfig(prompt_tokens=-5), "prompt_tokens", -5, "an integer >= 1"),
        (lambda: RequestConfig(prompt_tokens=10, max_offload_tokens=-1),
         "max_offload_tokens", -1, "an integer >= 0"),
        (lambda: check_rule("vllm-0.30"), "rule", "vllm-0.30", "one of vllm-0.29, vllm-0.33, lookup-window"),
        (lambda: run("vllm-0.30", PR, PR_REQ, PR_LC), "rule", "vllm-0.30",
         "one of vllm-0.29, vllm-0.33, lookup-window"),
        (lambda: check_load_model("exact"), "load_model", "exact", "one of aligned, intended"),
        (lambda: iload.wanted_chunks("exact", PR, PR_REQ, 10), "load_model", "exact",
         "one of aligned, intended"),
        (lambda: Lifecycle(budget=0), "budget", 0, "an integer >= 1"),
        (lambda: run("vllm-0.33", PR, PR_REQ, Lifecycle(budget=_EX.budget, abort_after_step=9)),
         "abort_after_step", 9, "at most the number of scheduled steps (2)"),
    ],
)
def test_param_errors(make, param, value, expected):
    with pytest.raises(ParamError) as ei:
        make()
    e = ei.value
    assert (e.param, e.value, e.expected) == (param, value, expected)
    assert str(e) == f"{param}={value!r}: expected {expected}"


# lookup-window's mask block by block: SWA block 2, window 2, alignment 8,
# two blocks per chunk (chunk 4 tokens). The run before boundary 8 is chunk 1
# (tokens 4..7) and the later request's attention reads from token 8 - 2 = 6
# on: block 3 only, so block 2 (tokens 4, 5) is not kept. vLLM's null-block
# filter looks at kept blocks only: a null (freed) block 2 leaves the chunk
# storable, a null block 3 does not (the patched 0.34.0 decides the same,
# scripts/upstream_check.py part (c) block by block).
BLOCKWISE = GroupConfig(block_size=2, window=2, alignment_tokens=8, blocks_per_chunk=2)


def test_lookup_window_mask_keeps_the_blocks_the_lookup_reads():
    from kvreach.impl.rules import lookup_window_block_mask, lookup_window_first_block, lookup_window_keep

    w = store_step("lookup-window", BLOCKWISE, RequestConfig(prompt_tokens=16), 0, 4, False)
    assert w.chunks == (1, 3)
    assert w.block_mask == (False, False, False, True, False, False, False, True)
    assert lookup_window_block_mask(0, 4, BLOCKWISE, 16) == w.block_mask
    assert [lookup_window_first_block(c, BLOCKWISE, 16) for c in range(4)] == [None, 3, None, 7]
    # the chunk decision is "any block kept", for every chunk of a wider window
    g = replace(BLOCKWISE, window=5)
    for c in range(12):
        first = lookup_window_first_block(c, g, 16)
        assert lookup_window_keep(c, g, 16) == (first is not None)
        assert first is None or 2 * c <= first < 2 * c + 2
    assert lookup_window_first_block(1, g, 16) == 2  # tokens 3.. of the run: all of chunk 1


@pytest.mark.parametrize("null_block, offered", [(2, (1, 3)), (3, (3,))])
def test_null_block_filter_reads_lookup_window_kept_blocks(null_block, offered):
    from kvreach.impl.release_rules import offered_chunks
    from kvreach.releases import release

    w = store_step("lookup-window", BLOCKWISE, RequestConfig(prompt_tokens=16), 0, 4, False)
    assert offered_chunks(release("0.34.0"), w, frozenset({null_block}), 2) == offered
