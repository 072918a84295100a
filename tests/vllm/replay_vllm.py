"""Replay a decoded hit-preservation counterexample on vLLM 0.33.0's real
scheduler (used by tests/vllm/test_hit_preservation_vllm.py and by
``kvreach counterexample hit-preservation --replay-vllm``, which loads this
file from the checkout: the CPU shims below are test-only and stay here).

The earlier request runs through the real ``Scheduler`` (the stock connector,
or ``KvReachOffloadingConnector`` with a ``kvreach.rule``); the offload
manager's lookup answers HIT for exactly the keys its ``prepare_store``
accepted, then for every key the earlier request could offload (dense); the
later request's ``get_num_new_matched_tokens`` result is vLLM's hit.
"""

from __future__ import annotations

import os
import tempfile

from kvreach_vllm_harness import SchedulerRun, Setup, full, prompt_token_ids, swa
from lookup_harness import LookupRecorder, check, later_lookups, later_tokens, new_id
from vllm.v1.kv_offload.base import LookupResult


def setup_of(cex: dict) -> Setup:
    grp, lg = cex["config"]["group"], cex["lookup_groups"]
    sw = swa(grp["block_size"], lg["window"], eagle=grp["eagle"], extra=lg["extra_retained_tokens"])
    groups = (sw,) if lg["full_block_tokens"] is None else (full(lg["full_block_tokens"]), sw)
    return Setup(groups, budget=cex["lifecycle"]["budget"],
                 blocks_per_chunk=grp["blocks_per_chunk"],
                 retention_interval=grp["retention_interval"],
                 offload_prompt_only=cex["config"]["request"]["offload_prompt_only"])


def replay(model_dir: str, cex: dict, which: str, rule: str | None = None):
    """-> (observations under the rule's stores, under dense stores)."""
    setup = setup_of(cex)
    extra = None if rule is None else {"kvreach.rule": rule}
    r = SchedulerRun(setup, which, model_dir, extra_config=extra)
    rec = LookupRecorder(r)
    req, lc, later = cex["config"]["request"], cex["lifecycle"], cex["later_request"]
    stored = prompt_token_ids(req["prompt_tokens"], seed=31)
    rid = new_id("stored-")
    params = None if req["max_offload_tokens"] is None else {
        "max_offload_tokens": req["max_offload_tokens"]}
    r.add_request(rid, req["prompt_tokens"], max_tokens=lc["decode"] + 1,
                  kv_transfer_params=params, token_ids=stored)
    if lc["abort_after_step"] is not None:
        for _ in range(lc["abort_after_step"]):
            r.step()
        r.abort(rid)
    r.run_to_completion()
    tokens = later_tokens(stored, later["num_tokens"], later["shared_tokens"])
    out = []
    for content in ("rule", "dense"):
        if content == "rule":
            rec.answers = {k: LookupResult.HIT for k in rec.stored_keys.get(rid, [])}
        else:  # every chunk the earlier request could offload
            rec.answers = {k: LookupResult.HIT for k, (g, c) in rec.prompt_keys[rid].items()
                           if (c + 1) * setup.blocks_per_chunk * setup.groups[g].block_size
                           <= _offloadable(cex)}
        assert r.scheduler.reset_prefix_cache()
        obs = later_lookups(rec, tokens, later["max_load_tokens"])
        check(setup, obs)
        out.append(obs[-1])
    return out


def _offloadable(cex: dict) -> int:
    return max(st["offloadable_tokens"] for st in cex["trace"]["steps"])




def replay_on_vllm(cex: dict, which: str = "stock", rule: str | None = None) -> dict:
    """Standalone (the CLI): offline model config and the hybrid KV cache
    shim, then :func:`replay`. -> vLLM's hit tokens under both stores."""
    from kvreach_vllm_harness import hybrid_kv_cache_shim, write_offline_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as d, hybrid_kv_cache_shim():
        rule_obs, dense_obs = replay(write_offline_model(d), cex, which, rule)
    return {"hit_tokens": rule_obs.hit_tokens, "dense_hit_tokens": dense_obs.hit_tokens}
