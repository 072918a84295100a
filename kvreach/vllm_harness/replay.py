"""Replay a decoded counterexample of an obligation against vLLM's lookup on
vLLM 0.33.0's real scheduler (used by tests/vllm and by ``kvreach
counterexample OBLIGATION --replay-vllm``; :func:`replay_on_vllm` applies the
CPU shims of :mod:`kvreach.vllm_harness.cpu_shims` around the replay).

Real: ``Scheduler``, ``KVCacheManager`` and ``OffloadingConnectorScheduler``
(the stock connector, or ``KvReachOffloadingConnector`` with a
``kvreach.rule``). Scripted: only the offload manager's answers: ``lookup``
answers HIT for exactly the keys of the chunks the world holds (what
``prepare_store`` accepted, or every key the earlier requests could offload:
dense). A later request's ``get_num_new_matched_tokens`` result is vLLM's hit,
and every lookup is checked against kvreach's twin (``lookups.check``).

One replayer per obligation (:data:`REPLAYS`), each returning what vLLM did
and what kvreach predicts under the same keys, ``{"vllm": {...}, "kvreach":
{...}}``: the replay reproduces the counterexample when the two are equal
and the witness (a shorter hit, a chunk no lookup loads) is there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from unittest import mock

from vllm.v1.kv_offload.base import LookupResult

from kvreach.impl.lookup import READ_WINDOW, VLLM_WINDOW
from kvreach.proofs.obligations import ALL
from kvreach.vllm_harness.lookups import (
    LookupRecorder,
    check,
    later_lookups,
    later_tokens,
    lookups_by_length,
    new_id,
    recorder_and_twin,
)
from kvreach.vllm_harness.replay_lifecycle import assert_rule_ran, connector_of
from kvreach.vllm_harness.runner import STOCK, SchedulerRun, Setup, drive, full, prompt_token_ids, swa


def groups_of(cex: dict) -> tuple:
    """The harness groups of a decoded counterexample: the full-attention
    group, if any, then the SWA group."""
    grp, lg = cex["config"]["group"], cex["lookup_groups"]
    sw = swa(grp["block_size"], lg["window"], eagle=grp["eagle"], extra=lg["extra_retained_tokens"])
    return (sw,) if lg["full_block_tokens"] is None else (full(lg["full_block_tokens"]), sw)


def setup_of(cex: dict) -> Setup:
    grp = cex["config"]["group"]
    return Setup(groups_of(cex), budget=cex["lifecycle"]["budget"],
                 blocks_per_chunk=grp["blocks_per_chunk"],
                 retention_interval=grp["retention_interval"],
                 offload_prompt_only=cex["config"]["request"]["offload_prompt_only"])


def _no_local_hit(cex: dict) -> None:
    lr = cex["later_request"]
    if lr.get("local_hit_tokens", 0) != 0:
        raise ValueError(f"later_request.local_hit_tokens = {lr['local_hit_tokens']}: the replay "
                         "resets vLLM's prefix cache before the later request (no GPU-local hit); "
                         "expected 0")


@contextlib.contextmanager
def lookup_variant(cex: dict):
    """The counterexample's lookup variant on vLLM: ``read-window``
    (docs/findings.md F7) patches vLLM's ``get_sliding_window_size_in_chunks``
    (``offloading/config.py``, called by ``build_offloading_config`` when the
    connector is built) to the chunks the load reads, ``max(1, ceil((W - 1 +
    extra) / C))``, and the twin every lookup is checked against
    (``lookups.lookup_groups``) to the same variant. ``vllm-0.33``:
    nothing patched."""
    variant = cex["lookup_groups"].get("lookup_variant", VLLM_WINDOW)
    if variant == VLLM_WINDOW:
        yield
        return
    if variant != READ_WINDOW:
        raise ValueError(f"lookup_groups.lookup_variant = {variant!r}: expected 'vllm-window' or "
                         "'read-window'")
    from kvreach.vllm_harness import lookups as lookup_harness
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading import config as offload_config
    from vllm.utils.math_utils import cdiv
    from vllm.v1.kv_cache_interface import SlidingWindowSpec

    stock = offload_config.get_sliding_window_size_in_chunks
    groups = lookup_harness.lookup_groups

    def read_window(kv_cache_spec, tokens_per_chunk):
        if isinstance(kv_cache_spec, SlidingWindowSpec):
            return max(1, cdiv(kv_cache_spec.sliding_window - 1
                               + kv_cache_spec.extra_retained_tokens, tokens_per_chunk))
        return stock(kv_cache_spec, tokens_per_chunk)

    with mock.patch.object(offload_config, "get_sliding_window_size_in_chunks", read_window), \
            mock.patch.object(lookup_harness, "lookup_groups", lambda setup: [
                dataclasses.replace(g, lookup_variant=READ_WINDOW) if g.is_swa else g
                for g in groups(setup)]):
        yield


def offloadable_answers(rec: LookupRecorder, setup: Setup, rid: str, offloadable_tokens: int,
                         keep=lambda gi, c: True) -> dict:
    """HIT for the keys of ``rid``'s chunks within its offloadable tokens
    (of the SWA group, only those ``keep`` admits)."""
    per_chunk = [setup.blocks_per_chunk * g.block_size for g in setup.groups]
    return {k: LookupResult.HIT for k, (gi, c) in rec.prompt_keys[rid].items()
            if (c + 1) * per_chunk[gi] <= offloadable_tokens and keep(gi, c)}


# --- world (a): one earlier request's lifecycle --------------------------------------------


def run_earlier_request(run: SchedulerRun, cex: dict) -> tuple[str, list[int]]:
    """The earlier request of a decoded two-request counterexample, run to
    completion on ``run`` as its lifecycle says (``decode`` steps and a
    finish, or an abort after ``abort_after_step`` steps; its
    ``max_offload_tokens``), with the prompt the later request shares a
    prefix of. -> (its request id, its prompt). Release-agnostic: the release
    replays (``release_replay``) run it on vLLM 0.29.0 .. 0.33.0."""
    req, lc = cex["config"]["request"], cex["lifecycle"]
    stored = prompt_token_ids(req["prompt_tokens"], seed=31)
    rid = new_id("stored-")
    params = None if req["max_offload_tokens"] is None else {
        "max_offload_tokens": req["max_offload_tokens"]}
    drive(run, rid, req["prompt_tokens"], decode=lc["decode"],
          abort_after_step=lc["abort_after_step"], kv_transfer_params=params, token_ids=stored)
    return rid, stored


def replay(model_dir: str, cex: dict, which: str, rule: str | None = None, release=None):
    """hit-preservation (and -read-window): the earlier request's decoded
    lifecycle on the scheduler, then the later request against its accepted
    keys and against every key it could offload.
    ``release`` (a ``kvreach.releases`` record: the installed vLLM's): the
    twin each lookup is checked against is that release's; None: 0.33.0's.
    -> (observations under the rule's stores, under dense stores)."""
    _no_local_hit(cex)
    setup = setup_of(cex)
    extra = None if rule is None else connector_of(rule)[1]
    with lookup_variant(cex):
        r = SchedulerRun(setup, which, model_dir, extra_config=extra)
        recorder, outcome = recorder_and_twin(release)
        rec = recorder(r)
        later = cex["later_request"]
        rid, stored = run_earlier_request(r, cex)
        tokens = later_tokens(stored, later["num_tokens"], later["shared_tokens"])
        out = []
        for content in ("rule", "dense"):
            if content == "rule":
                rec.answers = {k: LookupResult.HIT for k in rec.stored_keys.get(rid, [])}
            else:  # every chunk the earlier request could offload
                rec.answers = offloadable_answers(rec, setup, rid, offloadable_tokens_of(cex))
            assert r.scheduler.reset_prefix_cache()
            obs = later_lookups(rec, tokens, later["max_load_tokens"])
            check(setup, obs, outcome)
            out.append(obs[-1])
    assert_rule_ran(r)
    return out


def _mask_group(release, g):
    """The group as ``release``'s store mask sees it (0.30.0's mask window has
    no ``extra_retained_tokens``); ``g`` itself for vLLM 0.33.0 (None)."""
    if release is None:
        return g
    from kvreach.impl.release_rules import mask_group

    return mask_group(release, g)


def offloadable_tokens_of(cex: dict) -> int:
    return max(st["offloadable_tokens"] for st in cex["trace"]["steps"])


def replay_hit_preservation(model_dir: str, cex: dict, rule: str, load_model: str | None = None,
                            release=None) -> dict:
    which, _ = connector_of(rule)
    rule_obs, dense_obs = replay(model_dir, cex, which, None if which == STOCK else rule, release)
    ll = cex["later_lookup"]
    return {"vllm": {"hit_tokens": rule_obs.hit_tokens, "dense_hit_tokens": dense_obs.hit_tokens},
            "kvreach": {"hit_tokens": ll["hit_tokens"], "dense_hit_tokens": ll["dense_hit_tokens"]}}


# --- world (a), waste: a kept chunk no later request loads ---------------------------------


def replay_no_waste(model_dir: str, cex: dict, rule: str, load_model: str | None = None,
                    release=None, dense: bool = False) -> dict:
    """no-waste (and -read-window): the manager answers HIT for exactly the
    SWA chunks the rule keeps at the decoded final horizon (its one-shot keep
    decision, ``impl.rules.store_step``: the world the obligation states) and
    every offloadable full-attention chunk; a later request of every length 1
    .. ``H * C + 2C + 1`` tokens sharing the stored tokens (no GPU-local hit,
    no ``max_load_tokens``, as ``proofs.decode.unloaded_kept_chunk`` tries
    them) is scheduled. -> the lengths whose lookup loads the decoded chunk:
    vLLM's, and kvreach's twin's for the same answers (both empty: the chunk
    is waste), and whether the rule keeps it. ``release`` (a
    ``kvreach.releases`` record: the installed vLLM's, whichever release it
    is): the twin's lookup and the kept chunks are that release's (its lookup
    parts, its store rule over the group its mask sees), ``rule`` its store rule.
    ``dense``: the manager holds every offloadable SWA chunk instead (the
    check that a chunk some later request loads is found loaded)."""
    from kvreach.impl.rules import store_step
    from kvreach.params import GroupConfig, RequestConfig

    g = GroupConfig(**cex["config"]["group"])
    r = RequestConfig(**cex["config"]["request"])
    if r.hash_lookahead_tokens:
        return replay_no_waste_lookahead(model_dir, cex, rule, g, r)
    H, c, off = cex["final_horizon_chunks"], cex["chunk"], cex["offloadable_tokens"]
    kept = set(store_step(rule, _mask_group(release, g), r, 0, H, True).chunks)
    recorder, outcome = recorder_and_twin(release)
    groups = groups_of(cex)
    setup = Setup(groups, budget=4096, blocks_per_chunk=g.blocks_per_chunk)
    swa_gi = len(groups) - 1
    loaded = {"vllm": [], "kvreach": []}
    with lookup_variant(cex):
        run = SchedulerRun(setup, STOCK, model_dir)
        rec = recorder(run)
        longest = H * g.chunk_tokens + 2 * g.chunk_tokens + 1
        tokens = prompt_token_ids(longest, seed=31)
        rid = new_id("keys-")  # a request whose keys are the stored chunks' keys (prefix hashes)
        run.add_request(rid, longest, max_tokens=1, token_ids=tokens)
        run.run_to_completion()
        rec.answers = offloadable_answers(rec, setup, rid, off,
                                           lambda gi, ci: dense or gi != swa_gi or ci in kept)
        for T, obs, twin in lookups_by_length(rec, setup, tokens, outcome):
            check(setup, obs, outcome)  # vLLM's hit and loaded keys equal kvreach's twin
            if (swa_gi, c) in obs[-1].loaded:
                loaded["vllm"].append(T)
            if (swa_gi, c) in twin.loaded_keys():
                loaded["kvreach"].append(T)
    return {w: {"chunk_kept": c in kept, "loaded_by_later_tokens": loaded[w],
                "later_requests": longest} for w in ("vllm", "kvreach")}


def replay_no_waste_lookahead(model_dir: str, cex: dict, rule: str, g, r) -> dict:
    """no-waste's rows with vLLM 0.34.0's lookahead hashes symbolic, a
    counterexample with L >= 1 (F14's class): the stored request the row
    states (``proofs.decode.lookahead_lifecycle``: the whole prompt
    prefilled in one step, then decode to the decoded final horizon) runs on
    the real scheduler with ``num_hash_lookahead_tokens`` L, as soundness's
    0.34.0 replay runs its request (``replay_lifecycle``): its SWA stores
    per step must equal the twin's; then every later request of 1 .. ``H * C
    + 2C + 1 + L`` tokens sharing its tokens looks up against exactly the
    keys ``prepare_store`` accepted (``replay_lifecycle.later_lookups_of``,
    each lookup checked against the twin). -> the lengths whose lookup loads
    the decoded chunk (vLLM's, the twin's), whether it was stored, the
    per-step stores."""
    from kvreach.proofs.decode import lookahead_lifecycle
    from kvreach.vllm_harness.replay_lifecycle import (
        STORED, SWA_GROUP, later_lookups_of, run_request, setup_of, vllm_steps,
    )

    H, c = cex["final_horizon_chunks"], cex["chunk"]
    trace = lookahead_lifecycle(rule, g, r, H)
    if trace is None:
        raise ValueError(f"no-waste / {rule}: no lifecycle of a prompt prefilled in one step "
                         f"reaches the decoded final horizon {H} chunks")
    setup = setup_of("no-waste", rule, g, r, trace.lifecycle.budget)
    run, rec = run_request(model_dir, setup, rule, r, trace.lifecycle)
    steps, stored = vllm_steps(run), run.stored(SWA_GROUP, STORED)  # before the later requests run
    longest = (H + 2) * g.chunk_tokens + 1 + r.hash_lookahead_tokens
    lv, lk = later_lookups_of(setup, rec, run, [c], longest)
    return {
        "vllm": {"steps": steps, "chunk_kept": c in stored,
                 "loaded_by_later_tokens": [T for T, _ in lv["loads_violating"]],
                 "later_requests": longest},
        "kvreach": {"steps": [list(st.submitted) for st in trace.steps],
                    "chunk_kept": c in trace.stored,
                    "loaded_by_later_tokens": [T for T, _ in lk["loads_violating"]],
                    "later_requests": longest},
    }


# --- world (b): earlier requests under the same rule --------------------------------------


def neighbour_tokens(cex: dict) -> list[list[int]]:
    """Token ids of each earlier request and then the later request, with the
    decoded shared prefixes (``shared_between``, ``later_shared_tokens``):
    each sequence copies the earlier one it shares most with and then
    diverges with tokens of its own. Shared prefixes of token sequences
    are an ultrametric (of any three, the least is attained twice), so this
    gives every pair its decoded prefix."""
    reqs, lr = cex["requests"], cex["later_request"]
    later = len(reqs)
    sh = {(i, j): v for i, j, v in cex["shared_between"]}
    sh |= {(i, later): q["later_shared_tokens"] for i, q in enumerate(reqs)}
    lens = [q["tokens"] for q in reqs] + [lr["num_tokens"]]
    u = prompt_token_ids(max(lens), seed=31)
    seqs = [u[:lens[0]]]
    for j in range(1, len(lens)):
        i, m = max(((i, sh[i, j]) for i in range(j)), key=lambda x: x[1])
        seqs.append([seqs[i][k] if k < m else u[k] + j for k in range(lens[j])])
    for (i, j), v in sh.items():  # every pair shares exactly its decoded prefix
        a, b = seqs[i], seqs[j]
        n = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
        assert n == v, f"requests {i}, {j}: {n} shared tokens, decoded {v}"
    return seqs


def replay_neighbours(model_dir: str, cex: dict, rule: str, load_model: str | None = None,
                      release=None) -> dict:
    """hit-preservation-neighbours: each earlier request runs as a prompt
    that finishes after one prefill step (its only store: the keep decision
    at its final horizon, the world's one-shot stores;
    ``proofs.neighbours.replayable`` asks the solver for that shape), the
    prefix cache reset between them; then the later request against the
    union of the keys ``prepare_store`` accepted for them, and against every
    key any of them could offload (dense).
    -> vLLM's and the twin's (``kvreach.impl.decoded.neighbours_lookup``) hits, and each
    request's stored SWA chunks: vLLM's and the one-shot decision's.
    ``release`` (the installed vLLM's record): vLLM's stock connector, the
    twin of each lookup and the one-shot decision that release's (``rule``
    its store rule), the twin's result under that release's lookup."""
    from kvreach.impl.rules import store_step
    from kvreach.params import GroupConfig, RequestConfig
    from kvreach.impl.decoded import neighbours_lookup

    _no_local_hit(cex)
    for q in cex["requests"]:
        if q["tokens"] != q["prompt_tokens"] or q["offloadable_tokens"] != q["prompt_tokens"]:
            raise ValueError(f"request {q}: the replay runs each earlier request as one prompt "
                             "that finishes after prefill; expected tokens == offloadable_tokens "
                             "== prompt_tokens")
    req = cex["config"]["request"]
    if not req["offload_prompt_only"] or req["max_offload_tokens"] is not None:
        raise ValueError(f"config.request = {req}: expected offload_prompt_only True and no "
                         "max_offload_tokens (one store, at the prompt's final horizon)")
    g = GroupConfig(**cex["config"]["group"])
    groups = groups_of(cex)
    *earlier, later = neighbour_tokens(cex)
    setup = Setup(groups, budget=max(2048, *map(len, earlier), len(later)),
                  blocks_per_chunk=g.blocks_per_chunk)
    swa_gi = len(groups) - 1
    which, extra = connector_of(rule) if release is None else (STOCK, None)
    recorder, outcome = recorder_and_twin(release)
    run = SchedulerRun(setup, which, model_dir, extra_config=extra)
    rec = recorder(run)
    rids, dense, stored = [], {}, {"vllm": [], "kvreach": []}
    for toks, q in zip(earlier, cex["requests"]):
        rid = new_id("neighbour-")
        run.add_request(rid, len(toks), max_tokens=1, token_ids=toks)
        run.run_to_completion()
        assert run.scheduler.reset_prefix_cache()
        rids.append(rid)
        dense |= offloadable_answers(rec, setup, rid, q["offloadable_tokens"])
        pos = rec.prompt_keys[rid]
        stored["vllm"].append(sorted(c for k in rec.stored_keys.get(rid, [])
                                     for gi, c in [pos[k]] if gi == swa_gi))
        rq = RequestConfig(**(req | {"prompt_tokens": q["prompt_tokens"]}))
        stored["kvreach"].append(sorted(store_step(rule, _mask_group(release, g), rq, 0,
                                                   q["final_horizon_chunks"], True).chunks))
    hits = []
    lr = cex["later_request"]
    for answers in ({k: LookupResult.HIT for rid in rids for k in rec.stored_keys.get(rid, [])},
                    dense):
        rec.answers = answers
        assert run.scheduler.reset_prefix_cache()
        obs = later_lookups(rec, later, lr["max_load_tokens"])
        check(setup, obs, outcome)
        hits.append(obs[-1].hit_tokens)
    assert_rule_ran(run)
    if release is not None:  # the twin under the installed release's lookup
        cex = cex | {"lookup_groups": cex["lookup_groups"] | {"vllm": release.name}}
    got, dense_out, _ = neighbours_lookup(cex, rule)
    return {"vllm": {"hit_tokens": hits[0], "dense_hit_tokens": hits[1],
                     "stored_swa_chunks": stored["vllm"]},
            "kvreach": {"hit_tokens": got.hit_tokens, "dense_hit_tokens": dense_out.hit_tokens,
                        "stored_swa_chunks": stored["kvreach"]}}


def _lifecycle(obligation: str):
    """World "single"'s lifecycle and mask rows (``replay_lifecycle.py``)."""
    def replay_row(model_dir: str, cex: dict, rule: str, load_model: str | None = None) -> dict:
        from kvreach.vllm_harness.replay_lifecycle import replay_lifecycle

        return replay_lifecycle(model_dir, obligation, cex, rule, load_model)
    return replay_row


# the replayer of each kind of ``Obligation.vllm_replay`` (proofs.framework.REPLAY_KINDS)
_REPLAYERS = {
    "hit-preservation": lambda name: replay_hit_preservation,
    "no-waste": lambda name: replay_no_waste,
    "neighbours": lambda name: replay_neighbours,
    "lifecycle": _lifecycle, "mask": _lifecycle, "restarts": _lifecycle,
}
# obligation -> its replayer, from the obligations' records
REPLAY_KIND = {ob.name: ob.vllm_replay.kind for ob in ALL if ob.vllm_replay is not None}
REPLAYS = {name: _REPLAYERS[kind](name) for name, kind in REPLAY_KIND.items()}


def reproduced(obligation: str, result: dict) -> bool:
    """vLLM did what kvreach predicts, and the witness is there: a hit
    shorter than dense, a kept chunk no later request loads, or (the load
    models' rows) the chunks the obligation's witness names."""
    from kvreach.vllm_harness.replay_lifecycle import WITNESS

    v = result["vllm"]
    if result["vllm"] != result["kvreach"]:
        return False
    if obligation in WITNESS:
        return bool(v[WITNESS[obligation]])
    if REPLAY_KIND.get(obligation) == "no-waste":
        return v["chunk_kept"] and not v["loaded_by_later_tokens"]
    return (v["hit_tokens"] or 0) < (v["dense_hit_tokens"] or 0)


def replay_on_vllm(obligation: str, cex: dict, rule: str, load_model: str | None = None) -> dict:
    """Standalone (the CLI): offline model config and the hybrid KV cache
    shim, then the obligation's replayer. -> ``{"vllm": ..., "kvreach": ...}``."""
    from kvreach.vllm_harness.cpu_shims import hybrid_kv_cache_shim, write_offline_model

    if obligation not in REPLAYS:
        raise ValueError(f"obligation {obligation!r}: expected one of {', '.join(REPLAYS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as d, hybrid_kv_cache_shim():
        return REPLAYS[obligation](write_offline_model(d), cex, rule, load_model)
