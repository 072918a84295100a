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
