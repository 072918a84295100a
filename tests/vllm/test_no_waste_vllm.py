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
each lookup must equal kvreach's twin (``lookup_harness.check``).
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach_vllm_harness import STOCK, SchedulerRun, Setup, full, prompt_token_ids, swa  # noqa: E402
from lookup_harness import LookupRecorder, check, later_lookups, new_id  # noqa: E402
from vllm.v1.kv_offload.base import LookupResult  # noqa: E402

from kvreach.impl.rules import store_step  # noqa: E402
from kvreach.params import GroupConfig, RequestConfig  # noqa: E402
from kvreach.proofs import runner  # noqa: E402

pytestmark = pytest.mark.vllm

RULES = ("vllm-0.29", "vllm-0.33", "lookup-window")


@functools.lru_cache(maxsize=None)
def counterexample(rule: str) -> dict:
    row = runner.run_row("no-waste", rule, "any", {})
    assert row.verdict == "counterexample" and row.counterexample, row
    return row.counterexample


@pytest.mark.parametrize("rule", RULES)
def test_no_lookup_on_vllm_loads_the_kept_chunk(offline_model_dir, rule):
    cex = counterexample(rule)
    g = GroupConfig(**cex["config"]["group"])
    r = RequestConfig(**cex["config"]["request"])
    lg, H, c, off = (cex["lookup_groups"], cex["final_horizon_chunks"], cex["chunk"],
                     cex["offloadable_tokens"])
    kept = set(store_step(rule, g, r, 0, H, True).chunks)
    assert c in kept
    sw = swa(g.block_size, lg["window"], eagle=g.eagle, extra=lg["extra_retained_tokens"])
    groups = (sw,) if lg["full_block_tokens"] is None else (full(lg["full_block_tokens"]), sw)
    setup = Setup(groups, budget=4096, blocks_per_chunk=g.blocks_per_chunk)
    swa_gi = len(groups) - 1
    run = SchedulerRun(setup, STOCK, offline_model_dir)
    rec = LookupRecorder(run)
    longest = H * g.chunk_tokens + 2 * g.chunk_tokens + 1
    tokens = prompt_token_ids(longest, seed=31)
    rid = new_id("keys-")  # a request whose keys are the stored chunks' keys (prefix hashes)
    run.add_request(rid, longest, max_tokens=1, token_ids=tokens)
    run.run_to_completion()
    per_chunk = [setup.blocks_per_chunk * gr.block_size for gr in groups]
    rec.answers = {
        k: LookupResult.HIT for k, (gi, ci) in rec.prompt_keys[rid].items()
        if (ci + 1) * per_chunk[gi] <= off and (gi != swa_gi or ci in kept)
    }
    loaded_by = []
    for T in range(1, longest + 1):
        assert run.scheduler.reset_prefix_cache()
        obs = later_lookups(rec, tokens[:T])
        check(setup, obs)  # vLLM's hit and loaded keys equal kvreach's twin
        if (swa_gi, c) in obs[-1].loaded:
            loaded_by.append(T)
    assert not loaded_by, (rule, c, loaded_by)
