"""kvreach connector vs stock vLLM 0.33.0 vs ``kvreach.impl.lifecycle``,
through vLLM's real scheduler (see ``kvreach.vllm_harness.runner``)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness.runner import (  # noqa: E402
    KVREACH,
    STOCK,
    ClassLevelRun,
    SchedulerRun,
    Setup,
    drive,
    full,
    swa,
)

from kvreach.impl.lifecycle import Lifecycle  # noqa: E402
from kvreach.impl.lifecycle import run as predict  # noqa: E402
from kvreach.params import RequestConfig  # noqa: E402
from kvreach.proofs.scenarios import (  # noqa: E402
    PR_54362, PR_54362_FRONTIER_CHUNKS, PR_54362_PROMPT_CHUNKS, PR_54362_WASTED,
)

pytestmark = pytest.mark.vllm

_EX = PR_54362  # the worked example of vLLM PR #54362 (proofs/scenarios.py)
PR = (full(_EX.full_block_size), swa(_EX.swa_block_size, _EX.window))


def side_by_side(model_dir, setup: Setup, prompt: int, **kw):
    # kvreach runs with its contracts and its monitor raising: a violation
    # fails the test.
    extra = {KVREACH: {"kvreach.check_contracts": "raise", "kvreach.monitor": "raise"},
             STOCK: None}
    runs = {w: drive(SchedulerRun(setup, w, model_dir, extra[w]), "r", prompt, **kw)
            for w in (KVREACH, STOCK)}
    return runs[KVREACH], runs[STOCK]


def prediction(setup: Setup, group_idx: int, prompt: int, *, decode=0,
               abort_after_step=None, max_offload_tokens=None):
    return predict(
        "vllm-0.33", setup.kvreach_group(group_idx),
        RequestConfig(prompt, max_offload_tokens, setup.offload_prompt_only),
        Lifecycle(setup.budget, decode=decode, abort_after_step=abort_after_step,
                  async_scheduling=setup.async_scheduling),
    )


def check_all(model_dir, setup: Setup, prompt: int, *, decode=0, abort_after_step=None,
              max_offload_tokens=None, expect_stores=True):
    """kvreach == stock on every group, step and store job; each SWA group's
    kvreach decision (``StoreStep.chunks``) == the lifecycle prediction (per
    step with synchronous scheduling, where the steps line up; the union with
    async scheduling); what is submitted == that decision minus the chunks
    vLLM's null-block filter drops (SWA blocks already freed, which the
    lifecycle model does not simulate)."""
    params = None if max_offload_tokens is None else {"max_offload_tokens": max_offload_tokens}
    k, s = side_by_side(model_dir, setup, prompt, decode=decode,
                        abort_after_step=abort_after_step, kv_transfer_params=params)
    assert [st.stores for st in k.steps] == [st.stores for st in s.steps]
    assert [st.jobs for st in k.steps] == [st.jobs for st in s.steps]
    assert k.offload.kvreach_contract_violations == 0
    assert k.offload.kvreach_unmodeled_fallbacks == 0
    assert k.offload.kvreach_fallbacks == {} and k.offload.kvreach_monitor_violations == {}
    if expect_stores and abort_after_step != 0:
        assert any(k.stored(gi) for gi in setup.swa_groups())
    for gi in setup.swa_groups():
        assert k.offload._kvreach_groups[gi] == setup.kvreach_group(gi)
        tr = prediction(setup, gi, prompt, decode=decode,
                        abort_after_step=abort_after_step,
                        max_offload_tokens=max_offload_tokens)
        for st in k.steps:
            dropped = st.null_dropped(gi)
            assert st.chunks(gi) == [c for c in st.window_chunks(gi) if c not in dropped]
        decided = sorted(c for st in k.steps for c in st.window_chunks(gi))
        assert decided == sorted(tr.stored)
        if not setup.async_scheduling:
            assert [st.window_chunks(gi) for st in k.steps] == \
                [list(st.submitted) for st in tr.steps]
    return k, s


# --- the PR's three lifecycles ------------------------------------------------

PR_COMPLETED = sorted({9 * k + j for k in range(32) for j in (5, 6, 7, 8)} | set(range(293, PR_54362_PROMPT_CHUNKS)))
PR_ABORTED = sorted({9 * k + j for k in range(27) for j in (5, 6, 7, 8)} | set(range(PR_54362_WASTED[0], PR_54362_FRONTIER_CHUNKS)))


@pytest.mark.parametrize(
    "abort_after_step,async_scheduling,expected",
    [(None, False, PR_COMPLETED), (1, False, PR_ABORTED), (1, True, PR_ABORTED)],
    ids=["completed", "aborted-sync", "aborted-async"],
)
def test_pr_54362_lifecycles(offline_model_dir, abort_after_step, async_scheduling, expected):
    setup = Setup(PR, budget=_EX.budget, async_scheduling=async_scheduling)
    k, s = check_all(offline_model_dir, setup, _EX.prompt, abort_after_step=abort_after_step)
    assert len(PR_COMPLETED) == 135
    assert k.stored(1) == expected == s.stored(1)


# --- chunked prefill, several budgets --------------------------------------------


@pytest.mark.parametrize("budget", [37, 300, _EX.budget, _EX.prompt, 4096])
def test_completed_chunked_prefill(offline_model_dir, budget):
    check_all(offline_model_dir, Setup(PR, budget=budget), _EX.prompt)


# --- abort after every step, sync and async ----------------------------------------


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("abort_after_step", [0, 1, 2, 3, 4])
def test_abort_after_every_step(offline_model_dir, abort_after_step, async_scheduling):
    # 1150 tokens at 300 a step: four prefill steps, frontiers 300..1150.
    setup = Setup(PR, budget=300, async_scheduling=async_scheduling)
    check_all(offline_model_dir, setup, 1150, abort_after_step=abort_after_step)


# --- decode past the prompt ------------------------------------------------------------


@pytest.mark.parametrize("offload_prompt_only", [True, False])
@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_decode_past_prompt(offline_model_dir, offload_prompt_only, async_scheduling):
    setup = Setup(PR, budget=400, offload_prompt_only=offload_prompt_only,
                  async_scheduling=async_scheduling)
    k, _ = check_all(offline_model_dir, setup, 1001, decode=90)
    past = [c for c in k.stored(1) if c * 4 >= 1001]
    assert bool(past) == (not offload_prompt_only)


def test_decode_then_abort(offline_model_dir):
    setup = Setup(PR, budget=400, offload_prompt_only=False)
    check_all(offline_model_dir, setup, 1001, decode=40, abort_after_step=3 + 25)


def test_max_offload_tokens(offline_model_dir):
    check_all(offline_model_dir, Setup(PR, budget=300), _EX.prompt, max_offload_tokens=700)


# --- EAGLE draft group -------------------------------------------------------------------


@pytest.mark.parametrize("offload_prompt_only", [True, False])
@pytest.mark.parametrize("abort_after_step", [None, 2])
def test_eagle_draft_group(offline_model_dir, offload_prompt_only, abort_after_step):
    setup = Setup((*PR, swa(_EX.swa_block_size, _EX.window, eagle=True)), budget=300,
                  offload_prompt_only=offload_prompt_only)
    k, _ = check_all(offline_model_dir, setup, 1000, decode=30,
                     abort_after_step=abort_after_step)
    assert k.offload._kvreach_groups[2].eagle
    assert k.stored(1) != k.stored(2)  # the EAGLE shift moves the tails


# --- retention interval, blocks_per_chunk, extra retained tokens ---------------------------


@pytest.mark.parametrize("retention_interval", [0, 72, 144])
@pytest.mark.parametrize("abort_after_step", [None, 2])
def test_retention_interval(offline_model_dir, retention_interval, abort_after_step):
    setup = Setup(PR, budget=300, retention_interval=retention_interval)
    # R == 0 keeps only the replay boundary's tail (blocks 239..242), which an
    # abort at 600 tokens never reaches.
    k, _ = check_all(offline_model_dir, setup, 1000, abort_after_step=abort_after_step,
                     expect_stores=not (retention_interval == 0 and abort_after_step))
    if retention_interval == 0 and abort_after_step is None:
        assert k.stored(1) == [239, 240, 241, 242]


@pytest.mark.parametrize(
    "groups,blocks_per_chunk",
    [(PR, 2), (PR, 3), ((full(12), swa(4, 8)), 2), ((full(16), swa(8, 17)), 4)],
)
@pytest.mark.parametrize("abort_after_step", [None, 1, 3])
def test_blocks_per_chunk(offline_model_dir, groups, blocks_per_chunk, abort_after_step):
    setup = Setup(groups, budget=333, blocks_per_chunk=blocks_per_chunk)
    check_all(offline_model_dir, setup, 1100, abort_after_step=abort_after_step)


def test_extra_retained_tokens_widen_the_mask(offline_model_dir):
    setup = Setup((PR[0], swa(_EX.swa_block_size, _EX.window, extra=5)), budget=300)
    k, _ = check_all(offline_model_dir, setup, 1000)
    assert k.offload._kvreach_groups[1].mask_window_tokens == 21


# --- dense fallbacks -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "groups,why",
    [
        ((full(8), full(16), swa(4, 16)), "no alignment (two full-attention chunk sizes)"),
        ((full(6), swa(4, 16)), "alignment % block != 0"),
        ((full(36), swa(4, 64)), "need >= per_segment"),
    ],
)
@pytest.mark.parametrize("abort_after_step", [None, 2])
def test_dense_fallbacks(offline_model_dir, groups, why, abort_after_step):
    setup = Setup(groups, budget=300)
    gi = setup.swa_groups()[0]
    assert setup.kvreach_group(gi).dense, why
    k, _ = check_all(offline_model_dir, setup, 1000, abort_after_step=abort_after_step)
    n = len(k.stored(gi))
    frontier = 1000 if abort_after_step is None else 600
    assert n == frontier // (groups[gi].block_size)  # every chunk stored


# --- DCP world size 2 (scheduler-class level) -------------------------------------------------


def class_level(setup, prompt, prefill_steps, abort):
    runs = {}
    for w in (KVREACH, STOCK):
        r = ClassLevelRun(setup, w)
        r.drive("r", prompt, prefill_steps, abort)
        runs[w] = r
    return runs[KVREACH], runs[STOCK]


@pytest.mark.parametrize("abort", [False, True])
@pytest.mark.parametrize("prefill_steps", [[_EX.budget, _EX.prompt - _EX.budget],
                                           [300, 300, 300, 300], [_EX.prompt]])
def test_dcp2_class_level(prefill_steps, abort):
    setup = Setup(PR, budget=max(prefill_steps), dcp_world_size=2, offload_prompt_only=False)
    if abort:
        prefill_steps = prefill_steps[:-1] or prefill_steps
    k, s = class_level(setup, _EX.prompt, prefill_steps, abort)
    assert k.stored(1) and k.stored(0)
    assert [st.stores for st in k.steps] == [st.stores for st in s.steps]
    assert [st.jobs for st in k.steps] == [st.jobs for st in s.steps]
    g = setup.kvreach_group(1)
    assert g.block_tokens == 8 and k.offload._kvreach_groups[1] == g
    tr = predict("vllm-0.33", g, RequestConfig(_EX.prompt, None, False),
                 Lifecycle(setup.budget, prefill_steps=tuple(prefill_steps) if not abort else None,
                           abort_after_step=len(prefill_steps) if abort else None))
    if not abort:
        assert k.per_step(1) == [list(st.submitted) for st in tr.steps]
    assert k.stored(1) == sorted(tr.stored)


def test_dcp2_abort_reconsiders_final_swa_tail():
    """vLLM's test_dcp_abort_reconsiders_final_swa_tail, kvreach side: the
    abort at 1000 tokens submits SWA block 123 (of 8-token DCP blocks) once."""
    setup = Setup(PR, budget=_EX.budget, dcp_world_size=2, offload_prompt_only=False)
    k, s = class_level(setup, _EX.prompt, [_EX.budget], abort=True)
    assert k.steps[-1].chunks(1) == [123] == s.steps[-1].chunks(1)
    assert [j[1:3] for j in k.steps[-1].jobs] == [((0, 1), (0, 123))]


def test_freed_swa_blocks_are_not_submitted(offline_model_dir):
    """Found by the randomized test: a window of 2 tokens frees chunk 0's
    blocks while the 1-token prompt decodes, so the chunk kvreach (and vLLM's
    mask) selects is dropped by vLLM's null-block filter in both connectors.
    The lifecycle model assumes no null block; the harness accounts for it."""
    setup = Setup((full(6), full(12), swa(2, 2)), budget=16, blocks_per_chunk=3,
                  offload_prompt_only=False)
    k, s = check_all(offline_model_dir, setup, 1, decode=5, expect_stores=False)
    assert any(0 in st.null_dropped(2) for st in k.steps)
    assert k.stored(2) == [] == s.stored(2)
    assert sorted(prediction(setup, 2, 1, decode=5).stored) == [0]
