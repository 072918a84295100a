"""Replays on the vLLM release that is installed, whichever of 0.29.0 .. 0.33.0
it is: the cases whose outcome depends on the release's own code, run on its
real ``Scheduler``, ``KVCacheManager`` and stock ``OffloadingConnector`` /
``OffloadingConnectorScheduler``.

Run with that release's python (tests/vllm/test_release_replays.py does, in a
venv per release made by tests/vllm_releases.py)::

    python -m kvreach.vllm_harness.release_replay CASE [--json-file FILE]

and it prints one JSON object. ``CASE``:

- ``unchecked-load-029`` / ``unchecked-load-030``: the two lookups that load
  chunks they never checked (docs/versions.md). The offload manager answers
  ``lookup`` HIT for every key of the request but the missing chunks'
  (scripted); vLLM's ``get_num_new_matched_tokens`` gives the hit and the
  ``prepare_load`` call of ``update_state_after_alloc`` the keys loaded. The
  result names the loaded chunks the manager answered MISS.
- ``finish-store``: a request whose finish step makes ``_build_store_jobs``
  offload up to ``num_tokens`` (0.29.0) or ``max(num_prompt_tokens,
  num_tokens - 1)`` (0.30.0 on): the chunks each step's ``prepare_store``
  receives, beside the request's ``num_computed_tokens`` at that step.
- ``finish-store-restart``: the same after the request was preempted
  (``reset_prefix_cache(reset_running_requests=True)``) and recomputed with
  the manager refusing every store of the recompute (``prepare_store``
  returns None).
- ``hit-preservation`` (``--cex FILE``): a decoded hit-preservation
  counterexample (``kvreach counterexample hit-preservation --json``): the
  earlier request's lifecycle stores through the release's own store rule,
  then the later request's hit through the release's own lookup, against
  those stores and against dense ones.
- ``no-waste`` (``--cex FILE``, ``--dense``): a decoded no-waste
  counterexample: which later requests' lookups load the decoded chunk when
  the manager holds the chunks the release's store rule keeps at the final
  horizon (``--dense``: every offloadable chunk).
- ``hit-preservation-neighbours`` (``--cex FILE``): the earlier requests'
  one-shot stores, then the later request against their union and dense.
- ``exactly-once-restarts`` (``--cex FILE``, ``--load-chunks K``,
  ``--same-step``): prefill, preemption, a loaded start, recompute, finish;
  the chunks ``prepare_store`` receives in each incarnation.

The ``--cex`` cases are the obligations whose record says so
(``Replay.on_releases`` of ``Obligation.vllm_replay``), each run by the
release replayer of its replay kind (:data:`RELEASE_REPLAYERS`).

Every lookup vLLM makes is also given to kvreach's twin with that release's
record (``kvreach.releases``: the lookup's window, padded initial window,
pending handling, EAGLE widening, caps), and the result carries both.

Scripted: only the offload manager's answers (``lookup``, ``prepare_store``,
``prepare_load``), as in :mod:`kvreach.vllm_harness.runner`. The two CPU
shims of :mod:`kvreach.vllm_harness.cpu_shims` are applied around the run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import vllm
from vllm.v1.kv_offload.base import LookupResult

from kvreach import releases as R
from kvreach.impl import lookup as lk
from kvreach.vllm_harness.lookups import ReleaseRecorder, later_tokens, new_id, release_outcome
from kvreach.vllm_harness.runner import STOCK, SchedulerRun, Setup, full, swa


def record() -> R.Release:
    return R.release(vllm.__version__)


def _obs_json(setup: Setup, obs, r: R.Release) -> dict:
    t = release_outcome(setup, obs, r)  # kvreach's lookup with the release's parts
    return {"num_tokens": obs.num_tokens, "hit_tokens": obs.hit_tokens,
            "loaded": sorted(obs.loaded),
            "loaded_miss": sorted(p for p in obs.loaded if p not in obs.content.hit),
            "twin_hit_tokens": t.hit_tokens, "twin_loaded": sorted(t.loaded_keys())}


# --- the two lookups that load chunks they never checked ----------------------------------

UNCHECKED = {
    # full-attention block 2, SWA block 4, window 8, a 24-token request; SWA
    # chunk 3 and full-attention chunk 11 missing from the store
    "unchecked-load-029": ((full(2), swa(4, 8)), 24, ((1, 3), (0, 11))),
    # SWA block 2, window 4, extra_retained_tokens 4, a 7-token request; chunk 0 missing
    "unchecked-load-030": ((swa(2, 4, extra=4),), 7, ((0, 0),)),
}


def unchecked_load(model_dir: str, case: str, missing=None) -> dict:
    """One request against a store holding every chunk but ``missing``
    (default: the case's). -> vLLM's hit, the loaded chunks, those answered MISS."""
    groups, n, case_missing = UNCHECKED[case]
    missing = set(case_missing if missing is None else map(tuple, missing))
    setup = Setup(groups, budget=64, max_num_seqs=16, max_model_len=4096)
    run = SchedulerRun(setup, STOCK, model_dir)
    rec = ReleaseRecorder(run)

    def answer(key, req_context):
        pos = rec.key_positions(req_context.req_id)[key]
        return LookupResult.MISS if pos in missing else LookupResult.HIT

    run.manager.lookup.side_effect = answer
    loads: list[tuple[list, object]] = []
    recorded_load = run.manager.prepare_load

    def prepare_load(keys, req_context):
        loads.append((list(keys), req_context))
        return recorded_load(keys, req_context)

    run.manager.prepare_load = prepare_load
    rid = new_id("later-")
    run.add_request(rid, n, max_tokens=1, seed=3)
    run.step()
    positions = rec.key_positions(rid)
    cpu_load = [cpu_manager_load([k for k, p in positions.items() if p not in missing], keys, ctx)
                for keys, ctx in loads]
    obs = [o for o in rec.observations if o.req_id == rid]
    # the observation's content: what the manager answered for each key
    for o in obs:
        keys = rec.key_positions(rid).values()
        o.content = lk.StoreContent(hit=frozenset(p for p in keys if p not in missing))
    run.run_to_completion()
    r = record()
    return {"vllm": vllm.__version__, "record": r.name, "case": case,
            "missing": sorted(missing), "lookups": [_obs_json(setup, o, r) for o in obs],
            "cpu_manager_load": cpu_load}


def cpu_manager_load(held: list, keys: list, req_context) -> str:
    """What the release's own ``CPUOffloadingManager`` (the manager of the
    default ``CPUOffloadingSpec``) does with this ``prepare_load``: a real
    manager (LRU) that stored and completed exactly ``held``, then asked to
    load ``keys``. -> ``"ok"`` or the exception it raises, ``"Type: message"``."""
    from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager

    m = CPUOffloadingManager(4 * len(held) + 16)
    out = m.prepare_store(held, req_context)
    assert out is not None and set(out.keys_to_store) == set(held)
    m.complete_store(held, req_context)
    try:
        m.prepare_load(keys, req_context)
    except Exception as e:  # the answer under test: which exception, if any
        return f"{type(e).__name__}: {e}"
    return "ok"


# --- the finish step's stores ---------------------------------------------------------------

FINISH = {
    # computed-before-stored (vllm-0.29)'s decoded scenario (window 4, 4-token
    # chunks, a 7-token prompt offloaded past the prompt, one prefill step, no
    # decode) with the chunk one 4-token block: the block holding the sampled
    # token's slot is allocated, so storable_chunks' allocated-chunk cap admits
    # the chunk (with 1-token blocks, the decoded geometry, it does not)
    "finish-store": (swa(4, 4), 1, 7),
    # computed-before-stored-restarts (vllm-0.29)'s: window 3, a 1-token prompt,
    # with 2-token blocks (the decoded 1-token blocks: see above)
    "finish-store-restart": (swa(2, 3), 1, 1),
}


def finish_store(model_dir: str, case: str, decode: int | None = None,
                 group: tuple[int, int, int] | None = None, prompt: int | None = None) -> dict:
    """Per step: the SWA chunks ``prepare_store`` received, each chunk's end
    token, the request's ``num_computed_tokens`` when the step's stores were
    built and the tokens computed once the step's batch ran. A chunk whose
    end is past the latter is stored before it was computed.
    ``finish-store-restart``: after ``decode`` steps the running request is
    preempted, and every store offered in its first recompute step is
    refused. ``group`` (block_size, window, blocks_per_chunk) and ``prompt``
    replace the case's."""
    g, bpc, case_prompt = FINISH[case]
    if group is not None:  # (block_size, window, blocks_per_chunk)
        g, bpc = swa(group[0], group[1]), group[2]
    prompt = case_prompt if prompt is None else prompt
    restart = case == "finish-store-restart"
    decode = (2 if restart else 0) if decode is None else decode
    setup = Setup((g,), budget=64, blocks_per_chunk=bpc, offload_prompt_only=False,
                  max_num_seqs=16, max_model_len=4096)
    run = SchedulerRun(setup, STOCK, model_dir)
    tpc = g.block_size * bpc
    rid = "stored"
    req = run.add_request(rid, prompt, max_tokens=decode + 1, seed=5)
    offload = run.offload
    real_build = offload._build_store_jobs
    steps: list[dict] = []
    refuse = {"on": False}
    store = run.manager.prepare_store.side_effect

    def prepare_store(keys, req_context):
        if refuse["on"]:
            steps[-1]["refused"].extend(_chunks(run, rid, keys))
            return None
        return store(keys, req_context)

    run.manager.prepare_store.side_effect = prepare_store

    def build(*a, **kw):
        steps.append({"num_tokens": req.num_tokens, "num_computed_tokens": req.num_computed_tokens,
                      "status": str(req.status), "refused": []})
        return real_build(*a, **kw)

    offload._build_store_jobs = build
    preempted = False
    for _ in range(200):
        if not (run.scheduler.requests or run.scheduler.finished_req_ids):
            break
        rec = run.step()
        if steps:
            steps[-1]["stored"] = rec.chunks(0, rid)
            steps[-1]["scheduled"] = rec.scheduled.get(rid, 0)
            # the tokens computed once this step's batch ran (the stores run after it)
            steps[-1]["computed_after_batch"] = (steps[-1]["num_computed_tokens"]
                                                 + steps[-1]["scheduled"])
        if restart and not preempted and len(run.steps) == decode:
            assert run.scheduler.reset_prefix_cache(reset_running_requests=True)
            preempted, refuse["on"] = True, True
        elif restart and preempted and rec.scheduled.get(rid):
            refuse["on"] = False
    uncomputed = sorted({c for st in steps for c in st.get("stored", [])
                         if (c + 1) * tpc > st["computed_after_batch"]})
    return {"vllm": vllm.__version__, "record": record().name, "case": case,
            "tokens_per_chunk": tpc, "prompt_tokens": prompt, "decode": decode,
            "steps": steps, "uncomputed": uncomputed, "preempted": preempted}


def _chunks(run: SchedulerRun, rid: str, keys) -> list[int]:
    st = run.offload._req_status[rid]
    pos = {k: c for gs in st.group_states for c, k in enumerate(gs.offload_keys)}
    return sorted(pos[k] for k in keys)


# --- hit-preservation on the release's own store rule and lookup ----------------------------


def hit_preservation(model_dir: str, cex: dict) -> dict:
    """The earlier request of a decoded hit-preservation counterexample, then
    its later request, against the keys ``prepare_store`` accepted and
    against every key the earlier request could offload (dense)."""
    from kvreach.vllm_harness.replay import (
        offloadable_tokens_of,
        offloadable_answers,
        run_earlier_request,
        setup_of,
    )

    lr = cex["later_request"]
    if lr.get("local_hit_tokens", 0):
        raise ValueError(f"later_request.local_hit_tokens = {lr['local_hit_tokens']}: expected 0 "
                         "(the replay resets the GPU prefix cache)")
    setup = setup_of(cex)
    run = SchedulerRun(setup, STOCK, model_dir)
    rec = ReleaseRecorder(run)
    rid, stored = run_earlier_request(run, cex)
    swa_idx = setup.swa_groups()[-1]
    stored_chunks = sorted(c for st in run.steps for (r_, g, c) in st.stores
                           if r_ == rid and g == swa_idx)
    tokens = later_tokens(stored, lr["num_tokens"], lr["shared_tokens"])
    r = record()
    out = {"vllm": vllm.__version__, "record": r.name, "stored_swa_chunks": stored_chunks}
    for content in ("rule", "dense"):
        if content == "rule":
            rec.answers = {k: LookupResult.HIT for k in rec.stored_keys.get(rid, [])}
        else:
            rec.answers = offloadable_answers(rec, setup, rid, offloadable_tokens_of(cex))
        assert run.scheduler.reset_prefix_cache()
        lid = new_id("later-")
        params = None if lr["max_load_tokens"] is None else {"max_load_tokens": lr["max_load_tokens"]}
        run.add_request(lid, len(tokens), max_tokens=1, kv_transfer_params=params,
                        token_ids=tokens)
        run.step()
        obs = [o for o in rec.observations if o.req_id == lid]
        run.run_to_completion()
        out[content] = _obs_json(setup, obs[-1], r)
    return out


# --- no-waste and hit-preservation-neighbours on the release's own code ---------------------


def no_waste(model_dir: str, cex: dict, dense: bool = False) -> dict:
    """A decoded no-waste counterexample (``replay.replay_no_waste``) on the
    installed release: the manager answers HIT for the SWA chunks the
    release's store rule keeps at the decoded final horizon; every later
    request of 1 .. ``H * C + 2C + 1`` tokens; each lookup against the
    release's twin. ``dense``: the manager holds every offloadable SWA chunk (the check that a chunk some
    later request loads is reported loaded)."""
    from kvreach.vllm_harness.replay import replay_no_waste

    r = record()
    out = replay_no_waste(model_dir, cex, r.store_rule, release=r, dense=dense)
    return {"vllm": vllm.__version__, "record": r.name, "chunk": cex["chunk"], "dense": dense,
            "on_vllm": out["vllm"], "kvreach": out["kvreach"]}


def neighbours(model_dir: str, cex: dict) -> dict:
    """A decoded hit-preservation-neighbours counterexample
    (``replay.replay_neighbours``) on the installed release's stock
    connector: each earlier request's one-shot stores, then the later
    request against their union and against dense stores; every lookup
    against the release's twin, the result against
    ``kvreach.impl.decoded.neighbours_lookup`` under the release's lookup."""
    from kvreach.vllm_harness.replay import replay_neighbours

    r = record()
    out = replay_neighbours(model_dir, cex, r.store_rule, release=r)
    return {"vllm": vllm.__version__, "record": r.name,
            "max_load_tokens": cex["later_request"]["max_load_tokens"],
            "on_vllm": out["vllm"], "kvreach": out["kvreach"]}


# --- exactly-once-restarts: a loaded start below the kept cursor ----------------------------


def _where(e: BaseException) -> str:
    """``"Type: message at file:line in function"`` of the innermost frame."""
    import traceback

    fr = traceback.extract_tb(e.__traceback__)[-1]
    path = fr.filename.split("site-packages/")[-1]
    return f"{type(e).__name__}: {e} at {path}:{fr.lineno} in {fr.name}: {fr.line}"


def restarts(model_dir: str, cex: dict, load_chunks: int | None = None,
             defer: bool = True) -> dict:
    """exactly-once-restarts' decoded plan (prefill, preemption, a loaded
    start, the recompute, finish) on the installed release's own scheduler
    and stock connector. The preemption is vLLM's
    ``reset_prefix_cache(reset_running_requests=True)``; the loaded start is
    the request's next ``schedule``: ``get_num_new_matched_tokens`` against
    a manager holding the first ``load_chunks`` full-attention chunks and
    every SWA chunk ``prepare_store`` accepted (default: the decoded loaded
    tokens over the full-attention chunk, the lookup's granularity here;
    0: nothing held, no load), ``update_state_after_alloc`` moving the
    cursor to the hit's chunks, the load completed by the harness's worker;
    then the scheduler's own recompute steps to the finish.

    ``defer``: the manager's first answer after the preemption is
    HIT_PENDING for the keys it holds (the lookup defers, the request waits
    one step), so the step whose ``SchedulerOutput`` names the preempted
    request carries no load of it. Without it (``defer=False``) the
    preemption and the loaded start are one step, and 0.29.0 .. 0.32.0's
    ``build_connector_meta`` (its flush of the preempted request's jobs)
    asserts that every job of the request is a store, which its new load is
    not (0.33.0 excludes the step's new loads: "A cache reset can preempt
    and reload a request in the same step"): the result is then only that
    assertion, ``same_step_error``.

    -> per step the SWA chunks ``prepare_store`` received, with the
    incarnation (preemptions before it), vLLM's lookup beside the release's
    twin, and the chunks submitted again in a later incarnation: vLLM's, and
    kvreach's (``impl.lifecycle.run_vllm`` under the release's record over
    the plan vLLM ran: prefill, preempt, lookup, the loaded start, the
    scheduler's steps, finish)."""
    from kvreach.impl.lifecycle import VllmStep, run_vllm
    from kvreach.params import GroupConfig, RequestConfig, cdiv
    from kvreach.proofs.obligations.restarts import RELEASE_REPLAYED_KINDS
    from kvreach.spec.lifecycle import KINDS
    from kvreach.vllm_harness.replay_lifecycle import SWA_GROUP, restart_offers, setup_of

    restart_plan = [KINDS[k] for k in RELEASE_REPLAYED_KINDS]  # what the search asks for
    r = record()
    plan = cex["plan"]
    kinds = [st["kind"] for st in plan]
    for i, st in enumerate(plan, 1):
        if st["kind"] not in restart_plan or st["outcome"] != "accept" or st["null"] \
                or st["shared_prefix_boundary"]:
            raise ValueError(f"plan step {i} {st}: expected a {', '.join(restart_plan)} step, "
                             "every store accepted, no null block, no shared-prefix boundary")
    if kinds.count("preempt") != 1 or kinds.count("loaded") != 1 or kinds[-1] != "finish" \
            or kinds.index("loaded") != kinds.index("preempt") + 1:
        raise ValueError(f"plan kinds {kinds}: expected prefill steps, one preemption, a "
                         "loaded start right after it, the recompute and a finish")
    g = GroupConfig(**cex["config"]["group"])
    req = RequestConfig(**cex["config"]["request"])
    setup = setup_of("exactly-once-restarts", r.store_rule, g, req, cex["budget"])
    full_chunk = setup.groups[0].block_size * setup.blocks_per_chunk
    loaded_tokens = plan[kinds.index("loaded")]["scheduled_tokens"]
    k = loaded_tokens // full_chunk if load_chunks is None else load_chunks
    run = SchedulerRun(setup, STOCK, model_dir)
    rec = ReleaseRecorder(run)
    rid = "stored"
    params = None if req.max_offload_tokens is None else {
        "max_offload_tokens": req.max_offload_tokens}
    run.add_request(rid, req.prompt_tokens, max_tokens=1, kv_transfer_params=params)
    steps, inc = [], 0
    for i, st in enumerate(plan[:kinds.index("preempt")], 1):
        got = run.step()
        if got.scheduled.get(rid, 0) != st["scheduled_tokens"]:
            raise ValueError(f"plan step {i} ({st['kind']}) schedules {st['scheduled_tokens']} "
                             f"tokens, the scheduler {got.scheduled.get(rid, 0)}")
        steps.append({"incarnation": inc, "scheduled": st["scheduled_tokens"],
                      "swa_chunks": sorted(got.chunks(SWA_GROUP, rid))})
    cursor_before = [gs.next_stored_chunk_idx for gs in run.offload._req_status[rid].group_states]
    assert run.scheduler.reset_prefix_cache(reset_running_requests=True)
    inc += 1
    stored = set(rec.stored_keys.get(rid, []))
    held = LookupResult.HIT_PENDING if defer else LookupResult.HIT
    rec.answers = {key: held for key, (gi, c) in rec.key_positions(rid).items()
                   if k and (c < k if gi != SWA_GROUP else key in stored)}
    first = len(rec.observations)
    for _ in range(4 * cdiv(req.prompt_tokens, cex["budget"]) + 4):
        if rid not in run.scheduler.requests:
            break
        try:
            got = run.step()
        except AssertionError as e:  # vLLM's own assertion (0.29.0 .. 0.32.0: see docstring)
            return {"vllm": vllm.__version__, "record": r.name, "load_chunks": k,
                    "same_step_error": _where(e)}
        rec.answers = {key: LookupResult.HIT for key in rec.answers}
        steps.append({"incarnation": inc, "scheduled": got.scheduled.get(rid, 0),
                      "swa_chunks": sorted(got.chunks(SWA_GROUP, rid))})
    else:
        raise AssertionError(f"request {rid} still scheduled after {len(run.steps)} steps")
    done = len(run.steps)
    run.run_to_completion()
    tail = sorted(c for st in run.steps[done:] for c in st.chunks(SWA_GROUP, rid))
    if tail:
        steps.append({"incarnation": inc, "scheduled": 0, "swa_chunks": tail})
    lookups = [o for o in rec.observations[first:] if o.req_id == rid]
    hit = lookups[-1].hit_tokens or 0
    # kvreach: the plan as vLLM ran it
    n0 = kinds.index("preempt")
    twin_plan = [VllmStep(st["kind"], st["scheduled_tokens"]) for st in plan[:n0]]
    twin_plan += [VllmStep("preempt"), VllmStep("lookup")]
    twin_plan += [VllmStep("loaded", hit)] if hit else []
    twin_plan += [VllmStep("prefill", st["scheduled"]) for st in steps[n0:] if st["scheduled"]]
    twin_plan.append(VllmStep("finish"))
    ran = run_vllm(r.store_rule, g, req, twin_plan, r)
    twin_steps = [{"kind": x.step.kind, "scheduled": x.step.scheduled_tokens,
                   "cursor": [x.cursor_before, x.cursor_after], "swa_chunks": list(x.submitted)}
                  for x in ran]
    return {
        "vllm": vllm.__version__, "record": r.name, "rule": r.store_rule,
        "load_chunks": k, "decoded_loaded_tokens": loaded_tokens,
        "cursor_before_preemption": cursor_before,
        "lookups": [_obs_json(setup, o, r) for o in lookups],
        "steps": steps,
        "offered_again": restart_offers([("", st["incarnation"], st["swa_chunks"])
                                         for st in steps]),
        "twin_steps": twin_steps,
        "twin_offered_again": restart_offers([("", x.incarnation, list(x.submitted))
                                              for x in ran]),
    }


# the release replayer of each kind of ``Obligation.vllm_replay``
# (proofs.framework.REPLAY_KINDS) whose record says ``on_releases``
RELEASE_REPLAYERS = {"hit-preservation": hit_preservation, "no-waste": no_waste,
                     "neighbours": neighbours, "restarts": restarts}


def cex_kinds() -> dict[str, str]:
    """Obligation -> the kind of its release replay, from the obligations'
    records (``Replay.on_releases``): the CASEs that take ``--cex FILE``."""
    from kvreach.proofs.obligations import ALL

    out = {ob.name: ob.vllm_replay.kind for ob in ALL
           if ob.vllm_replay is not None and ob.vllm_replay.on_releases}
    assert set(out.values()) <= set(RELEASE_REPLAYERS), out
    return out


def main(argv: list[str] | None = None) -> int:
    cex_kind = cex_kinds()
    p = argparse.ArgumentParser(prog="python -m kvreach.vllm_harness.release_replay")
    p.add_argument("case", choices=[*UNCHECKED, *FINISH, *cex_kind])
    p.add_argument("--cex", help="a counterexample JSON file (kvreach counterexample --json)")
    p.add_argument("--missing", help="JSON list of [group, chunk] missing from the store")
    p.add_argument("--decode", type=int)
    p.add_argument("--group", help="finish-store*: block_size,window,blocks_per_chunk")
    p.add_argument("--prompt", type=int, help="finish-store*: prompt tokens")
    p.add_argument("--load-chunks", type=int,
                   help="exactly-once-restarts: full-attention chunks the manager holds at the "
                        "loaded start (0: none, no load)")
    p.add_argument("--dense", action="store_true",
                   help="no-waste: the manager holds every offloadable SWA chunk")
    p.add_argument("--same-step", action="store_true",
                   help="exactly-once-restarts: the loaded start in the preemption's step")
    a = p.parse_args(argv)
    from kvreach.vllm_harness.cpu_shims import hybrid_kv_cache_shim, write_offline_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as d, hybrid_kv_cache_shim():
        model = write_offline_model(d)
        if a.case in UNCHECKED:
            out = unchecked_load(model, a.case, json.loads(a.missing) if a.missing else None)
        elif a.case in FINISH:
            group = tuple(int(x) for x in a.group.split(",")) if a.group else None
            out = finish_store(model, a.case, a.decode, group, a.prompt)
        else:
            if not a.cex:
                print("--cex: missing; expected a counterexample JSON file", file=sys.stderr)
                return 2
            with open(a.cex) as f:
                cex = json.load(f)
            cex = cex.get("counterexample", cex)
            try:
                kind = cex_kind[a.case]
                if kind == "no-waste":
                    out = no_waste(model, cex, a.dense)
                elif kind == "restarts":
                    out = restarts(model, cex, a.load_chunks, not a.same_step)
                else:
                    out = RELEASE_REPLAYERS[kind](model, cex)
            except ValueError as e:  # a counterexample this replay cannot run
                print(f"--cex: {e}", file=sys.stderr)
                return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
