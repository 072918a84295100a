"""hit-preservation's counterexamples, replayed on vLLM 0.33.0's real
scheduler, and kvreach's rule ``lookup-window`` in the same scenarios.

For each geometry of ``proofs/geometries.py`` where ``kvreach prove`` finds
that vLLM 0.33.0's rule loses a later request's hit, the counterexample the
runner decodes (the stored request's configuration and lifecycle, the later
request) runs through the real ``Scheduler`` with the stock connector: the
earlier request stores, the offload manager's lookup answers HIT for exactly
the keys its ``prepare_store`` accepted (then for every offloadable key:
dense), and the later request's hit is vLLM's. vLLM's numbers must equal
kvreach's (``kvreach.impl.worlds``), and the hit must be shorter than dense.
Then the same scenario with ``KvReachOffloadingConnector`` under
``kvreach.rule=lookup-window``: the later request's hit equals dense.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach_vllm_harness import KVREACH, STOCK, SchedulerRun, Setup, full, prompt_token_ids, swa  # noqa: E402
from lookup_harness import LookupRecorder, later_tokens, new_id  # noqa: E402
from test_lookup_vllm import check, later_lookups  # noqa: E402
from vllm.v1.kv_offload.base import LookupResult  # noqa: E402

from kvreach.proofs import runner  # noqa: E402
from kvreach.proofs.geometries import GEOMETRIES  # noqa: E402

pytestmark = pytest.mark.vllm


@functools.lru_cache(maxsize=None)
def counterexample(geometry_name: str):
    g = next(x for x in GEOMETRIES if x.name == geometry_name)
    _, cex = runner.find_counterexample("hit-preservation", "vllm-0.33", "any", geometry=g)
    return cex


FAILING = ["issue-9 measurement", "PR example, extra_retained_tokens 5", "PR example, EAGLE group",
           "PR example, retention interval 72", "PR example, retention interval 0",
           "blocks_per_chunk 2, W - 1 a multiple of the chunk"]


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


@pytest.mark.parametrize("geometry", FAILING)
def test_vllm_033_loses_the_hit_kvreach_predicts(offline_model_dir, geometry):
    cex = counterexample(geometry)
    assert cex is not None and cex["replayed_violation"], geometry
    from kvreach.proofs.decode import later_lookup_of
    from kvreach.impl.lifecycle import Lifecycle, run
    from kvreach.params import GroupConfig, RequestConfig

    lc = cex["lifecycle"]
    trace = run("vllm-0.33", GroupConfig(**cex["config"]["group"]),
                RequestConfig(**cex["config"]["request"]),
                Lifecycle(budget=lc["budget"], prefill_steps=tuple(lc["prefill_steps"]),
                          decode=lc["decode"], abort_after_step=lc["abort_after_step"]))
    predicted = later_lookup_of(trace, cex)
    rule_obs, dense_obs = replay(offline_model_dir, cex, STOCK)
    assert (rule_obs.hit_tokens, dense_obs.hit_tokens) == (
        predicted.rule.hit_tokens, predicted.dense.hit_tokens)
    assert (rule_obs.hit_tokens or 0) < (dense_obs.hit_tokens or 0)


@pytest.mark.parametrize("geometry", FAILING)
def test_lookup_window_rule_keeps_the_hit(offline_model_dir, geometry):
    cex = counterexample(geometry)
    rule_obs, dense_obs = replay(offline_model_dir, cex, KVREACH, rule="lookup-window")
    assert rule_obs.hit_tokens == dense_obs.hit_tokens
