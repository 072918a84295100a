"""no-waste's counterexamples, replayed on vLLM 0.33.0's real lookup.

For each rule, ``kvreach prove``'s ``no-waste`` row decodes a chunk the rule
keeps at its request's final horizon that no later request's lookup loads.
Here the later requests are vLLM's: a request of every length 1 .. ``H * C +
2C + 1`` tokens sharing the stored tokens (no GPU-local hit, no
``max_load_tokens``), as ``proofs.decode.unloaded_kept_chunk`` tries them,
is scheduled by the real ``Scheduler``; the offload manager answers HIT for
the keys of exactly the chunks the rule kept (SWA) and every offloadable
full-attention chunk (scripted: only its answers), and
``get_num_new_matched_tokens`` / ``update_state_after_alloc`` decide the hit
and the keys loaded. vLLM must load the decoded chunk for none of them, and
each lookup must equal kvreach's twin (``kvreach.vllm_harness.lookups.check``).
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness.replay import replay_no_waste, reproduced  # noqa: E402

from kvreach.params import GroupConfig  # noqa: E402
from kvreach.proofs import rows, runner  # noqa: E402

import installed_release  # noqa: E402

pytestmark = pytest.mark.vllm

RULES = ("vllm-0.29", "vllm-0.33", "lookup-window")


@functools.lru_cache(maxsize=None)
def counterexample(rule: str, vllm: str | None = None) -> dict:
    """The row's counterexample: the row about ``vllm`` (a release group),
    default the row about the installed release (the runner's default row
    where the rule has none about it: lookup-window's)."""
    if vllm is None:
        vllm = next((g for *_, g in rows.rows_for("no-waste", rule, "any",
                                                  installed_release.INSTALLED)), None)
    row = runner.run_row("no-waste", rule, "any", {}, vllm)
    assert row.verdict == "counterexample" and row.counterexample, row
    return row.counterexample


@pytest.mark.parametrize("rule", RULES)
def test_no_lookup_on_vllm_loads_the_kept_chunk(offline_model_dir, rule):
    got = replay_no_waste(offline_model_dir, counterexample(rule), rule,
                          release=installed_release.twin_release())
    assert reproduced("no-waste", got), got


@pytest.mark.parametrize("rule", ("vllm-0.33", "lookup-window"))
def test_no_waste_read_window_on_vllm(offline_model_dir, rule):
    """``no-waste-read-window``'s counterexamples, with vLLM's lookup patched
    to the variant (``kvreach.vllm_harness.replay.lookup_variant``)."""
    row = runner.run_row("no-waste-read-window", rule, "any", {})
    assert row.verdict == "counterexample" and row.counterexample, row
    cex = row.counterexample
    assert cex["lookup_groups"]["lookup_variant"] == "read-window"
    got = replay_no_waste(offline_model_dir, cex, rule, release=installed_release.twin_release())
    assert reproduced("no-waste-read-window", got), got


def test_lookahead_counterexample_on_vllm(offline_model_dir):
    """no-waste's row about 0.34.0 (L symbolic) decodes to F14 (full 8, SWA
    2, window 4, prompt 14, L = 1: chunk 4, kept only at the prompt's hashed
    end); on vLLM 0.34.0's scheduler with ``num_hash_lookahead_tokens`` 1
    and the stock connector the request stores what kvreach's twin stores
    per step ({2, 3, 4, 5} at the prefill, 6 at the finish), and no later
    request of any length loads chunk 4."""
    from kvreach.impl.vllm.vllm_release import LOOKAHEAD_HASHES

    if not LOOKAHEAD_HASHES:
        pytest.skip("vLLM before 0.34.0 has no lookahead block hashes")
    cex = counterexample("vllm-0.33", "0.34.0")
    assert cex["config"]["request"]["hash_lookahead_tokens"] == 1 and cex["chunk"] == 4
    got = replay_no_waste(offline_model_dir, cex, "vllm-0.33",
                          release=installed_release.twin_release())
    assert got["vllm"]["steps"] == [[2, 3, 4, 5], [6]], got
    assert reproduced("no-waste", got), got


def test_lookahead_replay_can_fail(offline_model_dir):
    """Pointed at chunk 3 of the same request (the run before the first
    alignment boundary, 8 tokens, which later requests hitting 8 tokens
    load), the lookahead replay reports the lengths that load it."""
    from kvreach.impl.vllm.vllm_release import LOOKAHEAD_HASHES

    if not LOOKAHEAD_HASHES:
        pytest.skip("vLLM before 0.34.0 has no lookahead block hashes")
    cex = dict(counterexample("vllm-0.33", "0.34.0")) | {"chunk": 3}
    got = replay_no_waste(offline_model_dir, cex, "vllm-0.33",
                          release=installed_release.twin_release())
    assert got["vllm"] == got["kvreach"] and got["vllm"]["chunk_kept"]
    assert got["vllm"]["loaded_by_later_tokens"]
    assert not reproduced("no-waste", got)


def test_no_waste_replay_can_fail(offline_model_dir):
    """Pointed at a kept chunk that a later lookup does load (the last chunk
    of the run before the first alignment boundary, which the request of
    exactly that many tokens loads), the replay reports the loading lengths."""
    cex = dict(counterexample("lookup-window"))
    g = GroupConfig(**cex["config"]["group"])
    A = g.alignment_tokens // g.chunk_tokens
    cex |= {"chunk": A - 1, "final_horizon_chunks": A, "offloadable_tokens": A * g.chunk_tokens}
    got = replay_no_waste(offline_model_dir, cex, "lookup-window",
                          release=installed_release.twin_release())
    assert got["vllm"] == got["kvreach"] and got["vllm"]["chunk_kept"]
    assert got["vllm"]["loaded_by_later_tokens"]
    assert not reproduced("no-waste", got)
