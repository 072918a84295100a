"""vLLM 0.34.0's lookahead block hashes (``num_hash_lookahead_tokens`` L >= 1):
the kvreach connector stores exactly what stock stores, through vLLM's real
scheduler, and the two ways it follows vLLM's ``use_lookahead_block_hashes``
matter (each test shows the stores it would get wrong otherwise):

- an EAGLE group keeps vLLM's selection (a plain SWA mask, no trailing drop,
  no final tail), never kvreach's legacy EAGLE mask;
- the prompt horizon kvreach's rule gets for the other SWA groups is vLLM's
  hashed end (``_calc_num_offloadable_tokens`` capped by the hashed tokens).

The harness sets L on the ``VllmConfig`` and the block hasher itself, as
``EngineCore`` does (vLLM derives it from a drafter, which the harness has
not). vLLM 0.33.0 has no such mode (it forces lookahead hashes off under any
connector): these tests are about 0.34.0 and are skipped on 0.33.0.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness import vllm_api  # noqa: E402
from kvreach.vllm_harness.runner import KVREACH, STOCK, SchedulerRun, Setup, drive, full, swa  # noqa: E402

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_api.HAS_HASH_LOOKAHEAD,
                       reason="lookahead block hashes are vLLM 0.34.0's (the installed "
                              "release has none: 0.33.0 forces them off under a connector)"),
]


def run(model_dir, setup: Setup, prompt: int, which: str, monitor: str = "off",
        **kw) -> SchedulerRun:
    """The monitor is off by default here: under lookahead it flags vLLM's
    own hashed-end horizon (:func:`test_monitor_flags_the_hashed_end_horizon`),
    and in ``raise`` mode that stops the run."""
    extra = {"kvreach.check_contracts": "raise", "kvreach.monitor": monitor} \
        if which == KVREACH else None
    return drive(SchedulerRun(setup, which, model_dir, extra), "r", prompt, **kw)


def same_as_stock(model_dir, setup: Setup, prompt: int, **kw):
    k = run(model_dir, setup, prompt, KVREACH, **kw)
    s = run(model_dir, setup, prompt, STOCK, **kw)
    assert k.offload.use_lookahead_block_hashes == (setup.hash_lookahead_tokens > 0)
    assert [st.stores for st in k.steps] == [st.stores for st in s.steps]
    assert [st.jobs for st in k.steps] == [st.jobs for st in s.steps]
    assert k.offload.kvreach_contract_violations == 0
    assert k.offload.kvreach_fallbacks == {} and k.offload.kvreach_monitor_violations == {}
    return k, s


def test_hashed_end_horizon_is_stocks(offline_model_dir):
    """Full 8, SWA 2, window 4, prompt 14, budget 100 (the hashed-end case):
    L=0 stores SWA chunks {2,3,5,6}; L=1 stores {2,3,4,5} in the prefill
    step and 6 at finish, on stock and on kvreach's connector alike."""
    groups = (full(8), swa(2, 4))
    got = {}
    for L in (0, 1):
        setup = Setup(groups, budget=100, hash_lookahead_tokens=L)
        k, s = same_as_stock(offline_model_dir, setup, 14)
        assert k.offload._kvreach_groups[1] is not None  # kvreach decides the SWA group
        got[L] = (k.stored(1), [c for c in k.per_step(1) if c])
    assert got[0][0] == [2, 3, 5, 6]
    assert got[1] == ([2, 3, 4, 5, 6], [[2, 3, 4, 5], [6]])


@pytest.mark.parametrize("L", [1, 3])
@pytest.mark.parametrize("prompt,decode,abort", [(14, 0, None), (61, 9, None), (61, 9, 1),
                                                 (200, 30, None), (37, 5, 2)])
def test_eagle_group_keeps_vllms_selection(offline_model_dir, L, prompt, decode, abort):
    """An EAGLE group beside full attention and a plain SWA group: equal to
    stock at every step, the EAGLE group left to vLLM's selection, the plain
    SWA group decided by kvreach."""
    setup = Setup((full(8), swa(2, 6), swa(2, 6, eagle=True)), budget=24,
                  hash_lookahead_tokens=L)
    k, _ = same_as_stock(offline_model_dir, setup, prompt, decode=decode,
                         abort_after_step=abort)
    assert k.offload._kvreach_groups[1] is not None
    assert k.offload._kvreach_groups[2] is None


def test_the_legacy_eagle_mask_would_store_otherwise(offline_model_dir):
    """Non-vacuity of following vLLM: the same EAGLE run without lookahead
    (the legacy EAGLE mask, which kvreach decides) stores other EAGLE chunks
    than stock stores with L=1."""
    groups = (full(8), swa(2, 6), swa(2, 6, eagle=True))
    legacy = run(offline_model_dir, Setup(groups, budget=24), 61, STOCK, decode=9)
    ahead = run(offline_model_dir, Setup(groups, budget=24, hash_lookahead_tokens=1), 61,
                STOCK, decode=9)
    assert legacy.stored(2) != ahead.stored(2), (legacy.stored(2), ahead.stored(2))
    kv = run(offline_model_dir, Setup(groups, budget=24), 61, KVREACH, decode=9)
    assert kv.offload._kvreach_groups[2] is not None and kv.offload._kvreach_groups[2].eagle
    assert kv.stored(2) == legacy.stored(2)


def test_monitor_flags_the_hashed_end_horizon(offline_model_dir):
    """kvreach's runtime monitor, in ``log`` mode, flags ``horizon_final``
    under lookahead: vLLM 0.34.0 hands its mask the hashed end as the
    prompt's final horizon while the prompt's last blocks have no hash yet,
    and the end moves on as tokens are sampled (the hashed-end class of
    finding F1). The flagged steps fall back to stock's selection, so the
    stores stay stock's; without lookahead the same run flags nothing."""
    groups = (full(8), swa(2, 6), swa(2, 6, eagle=True))
    counts = {}
    for L in (0, 3):
        setup = Setup(groups, budget=24, hash_lookahead_tokens=L)
        k = run(offline_model_dir, setup, 61, KVREACH, monitor="log", decode=9)
        s = run(offline_model_dir, setup, 61, STOCK, decode=9)
        assert [st.stores for st in k.steps] == [st.stores for st in s.steps]
        counts[L] = dict(k.offload.kvreach_monitor_violations)
    assert counts[0] == {}
    assert counts[3].get("horizon_final", 0) >= 1, counts
    assert set(counts[3]) == {"horizon_final"}, counts
