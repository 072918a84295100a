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
from kvreach.vllm_harness.lookups import LookupRecorder, later_tokens, new_id
from kvreach.vllm_harness.runner import STOCK, SchedulerRun, Setup, full, swa


def record() -> R.Release:
    return R.release(vllm.__version__)


class ReleaseRecorder(LookupRecorder):
    """:class:`LookupRecorder` for any release: 0.29.0's
    ``get_num_new_matched_tokens`` takes no ``max_num_new_tokens``."""

    def __init__(self, run: SchedulerRun) -> None:
        real = run.offload.get_num_new_matched_tokens
        super().__init__(run)

        def spy(request, num_computed_tokens, *rest, **kw):
            hit, is_async = real(request, num_computed_tokens, *rest, **kw)
            self.observations.append(self._observe(request, num_computed_tokens, hit))
            return hit, is_async

        self.offload.get_num_new_matched_tokens = spy


def twin(setup: Setup, obs, r: R.Release) -> lk.LookupOutcome:
    """kvreach's lookup with release ``r``'s parts, for one of vLLM's lookups."""
    from kvreach import conform as cf

    gs = [cf._lookup_group(g.block_size * setup.dcp_world_size, setup.blocks_per_chunk,
                           g.window if g.kind == "swa" else None,
                           g.extra_retained_tokens if g.kind == "swa" else 0, g.eagle, r)
          for g in setup.groups]
    return lk.lookup(gs, obs.later_request(), obs.content, parts=cf._lookup_parts(r))


def _obs_json(setup: Setup, obs, r: R.Release) -> dict:
    t = twin(setup, obs, r)
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
        _offloadable,
        _offloadable_answers,
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
            rec.answers = _offloadable_answers(rec, setup, rid, _offloadable(cex))
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvreach.vllm_harness.release_replay")
    p.add_argument("case", choices=[*UNCHECKED, *FINISH, "hit-preservation"])
    p.add_argument("--cex", help="a counterexample JSON file (kvreach counterexample --json)")
    p.add_argument("--missing", help="JSON list of [group, chunk] missing from the store")
    p.add_argument("--decode", type=int)
    p.add_argument("--group", help="finish-store*: block_size,window,blocks_per_chunk")
    p.add_argument("--prompt", type=int, help="finish-store*: prompt tokens")
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
            out = hit_preservation(model, cex.get("counterexample", cex))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
