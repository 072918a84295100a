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
