"""Replay a decoded lifecycle / static counterexample of world "single" on vLLM
0.33.0's real scheduler (the lookup-based rows are ``replay.py``'s).

The counterexample's configuration becomes a harness :class:`Setup` (a
full-attention group whose tokens per chunk are the decoded
``alignment_tokens``, then the SWA group), its lifecycle a request that the
real ``Scheduler`` drives (``runner.drive``): chunked prefill
steps as vLLM's scheduler cuts them, decode steps, a normal finish or an
abort. The connector is vLLM's stock ``OffloadingConnector`` for rule
``vllm-0.33`` and ``KvReachOffloadingConnector`` with ``kvreach.rule`` for
the others (it replaces only the SWA groups' chunk selection of
``_build_store_jobs``). What the offload manager's ``prepare_store`` receives
(after vLLM's null-block filter) is vLLM's store decision.

:func:`replay_lifecycle` returns ``{"vllm": {...}, "kvreach": {...}}`` with the
same keys: the SWA chunks submitted per step and the obligation's witness,
each computed once from vLLM's run and once from kvreach's replay of the same
counterexample (``cex["trace"]``, ``impl.rules.store_step``), so a caller
asserts the two equal. Soundness adds a lookup-side fact: which later
requests' real lookups (``get_num_new_matched_tokens``) load a violating
chunk when the manager answers HIT for exactly the keys ``prepare_store``
accepted, against kvreach's twin (``kvreach.impl.lookup``).

A decoded scenario the real scheduler cannot run raises ``ValueError`` naming
the obligation, rule and reason (:func:`unreplayable`): a geometry no
``KVCacheConfig`` yields (DCP > 1 on an SWA group, ``alignment_tokens`` that
is no full-attention block times ``blocks_per_chunk``, no alignment); prefill
steps the scheduler does not cut; a step whose submissions depend on the old
rule's bookkeeping (vllm-0.29's finish up to ``num_tokens``, its EAGLE
exclusion never lifted), which ``KvReachOffloadingConnector`` does not
replace (:func:`check_runnable`); a world-"restarts" plan (preemptions,
lookups, the manager's outcomes), which is no lone request's lifecycle.
"""

from __future__ import annotations

import dataclasses
import math

import os
import tempfile
from itertools import accumulate

from vllm.v1.kv_offload.base import LookupResult

from kvreach.impl.lifecycle import Lifecycle, build_store_jobs, run as kvreach_run
from kvreach.impl.load import wanted_chunks
from kvreach.impl.rules import finish_tokens, store_step
from kvreach.params import GroupConfig, RequestConfig
from kvreach.proofs.obligations import ALL
from kvreach.vllm_harness.lookups import LookupRecorder, later_tokens, lookups_by_length
from kvreach.vllm_harness.runner import KVREACH, STOCK, SchedulerRun, Setup, drive, full, swa

STORED = "stored"  # the counterexample's request
# read from the obligations' records (``Obligation.vllm_replay``): the key of
# each obligation's witness in both halves of replay_lifecycle's result, and
# the obligations replayed as one request's lifecycle, as a mask at one
# horizon, as a plan with restarts
WITNESS = {ob.name: ob.vllm_replay.witness for ob in ALL
           if ob.vllm_replay is not None and ob.vllm_replay.witness is not None}
LIFECYCLE_OBLIGATIONS = tuple(ob.name for ob in ALL if ob.vllm_replay is not None
                              and ob.vllm_replay.kind == "lifecycle")
STATIC_OBLIGATIONS = tuple(ob.name for ob in ALL if ob.vllm_replay is not None
                           and ob.vllm_replay.kind == "mask")
RESTART_OBLIGATIONS = tuple(ob.name for ob in ALL if ob.vllm_replay is not None
                            and ob.vllm_replay.kind == "restarts")


def unreplayable(obligation: str, rule: str, reason: str) -> ValueError:
    return ValueError(f"{obligation} (rule {rule}): the decoded counterexample cannot run on "
                      f"vLLM 0.33.0's real scheduler: {reason}")


# ---------------------------------------------------------------------------
# configuration: decoded GroupConfig / RequestConfig -> harness Setup
# ---------------------------------------------------------------------------


def connector_of(rule: str) -> tuple[str, dict | None]:
    """Stock ``OffloadingConnector`` for vLLM 0.33.0's own rule, else
    ``KvReachOffloadingConnector`` under ``kvreach.rule`` (contracts off: a
    contract would make the connector fall back to stock for the very step
    the counterexample is about)."""
    if rule == "vllm-0.33":
        return STOCK, None
    return KVREACH, {"kvreach.rule": rule, "kvreach.check_contracts": "off"}


def setup_of(obligation: str, rule: str, g: GroupConfig, req: RequestConfig,
             budget: int) -> Setup:
    """The harness setup whose SWA group is ``g`` as vLLM derives it:
    ``SchedulerOffloadConfig.from_spec`` takes ``alignment_tokens`` from the
    full-attention group's tokens per chunk (block * DCP * blocks_per_chunk),
    ``build_offloading_config`` the window, EAGLE flag and retention interval
    from the ``SlidingWindowSpec`` / ``KVCacheGroupSpec`` / ``CacheConfig``."""
    why = None
    if g.dcp_world_size != 1:
        why = (f"dcp_world_size {g.dcp_world_size}: HybridKVCacheCoordinator refuses a "
               "DCP-sharded SWA group (the harness drives DCP only at class level)")
    elif g.alignment_tokens is None:
        why = ("alignment_tokens None needs full-attention groups of different chunk sizes, "
               "which this replay does not build")
    elif g.alignment_tokens % g.blocks_per_chunk:
        why = (f"alignment_tokens {g.alignment_tokens} is no full-attention block size times "
               f"blocks_per_chunk {g.blocks_per_chunk} (SchedulerOffloadConfig.from_spec "
               "derives it so), nor an SWA-only group's block times blocks_per_chunk")
    if why:
        raise unreplayable(obligation, rule, why)
    sw = swa(g.block_size, g.window, eagle=g.eagle, extra=g.extra_retained_tokens)
    full_block = g.alignment_tokens // g.blocks_per_chunk
    # vLLM 0.34.0's lookahead block hashes (L): set on the run as EngineCore
    # does; the hash block is the GCD of the groups' blocks (times DCP 1)
    L = req.hash_lookahead_tokens
    if L and math.gcd(full_block, g.block_size) != req.tokens_per_hash:
        raise unreplayable(obligation, rule, f"tokens_per_hash {req.tokens_per_hash} is not the "
                           f"GCD of the blocks {full_block} and {g.block_size} (vLLM derives it so)")
    setup = Setup((full(full_block), sw), budget=budget,
                  blocks_per_chunk=g.blocks_per_chunk, retention_interval=g.retention_interval,
                  offload_prompt_only=req.offload_prompt_only,
                  max_num_seqs=min(16, budget),  # SchedulerConfig: <= max_num_batched_tokens
                  max_model_len=max(4096, 2 * req.prompt_tokens + 64),
                  hash_lookahead_tokens=L)
    if dataclasses.replace(setup.kvreach_group(1), lookahead_hashes=L > 0) != g:
        raise unreplayable(obligation, rule, f"the setup's SWA group {setup.kvreach_group(1)} "
                           f"is not the decoded {g}")
    return setup


SWA_GROUP = 1  # setup_of's SWA group index


def lifecycle_of(cex: dict) -> Lifecycle:
    lc = cex["lifecycle"]
    return Lifecycle(budget=lc["budget"], prefill_steps=tuple(lc["prefill_steps"]),
                     decode=lc["decode"], abort_after_step=lc["abort_after_step"],
                     async_scheduling=lc["async_scheduling"])


def connector_selection(rule: str, g: GroupConfig, req: RequestConfig,
                        steps: list[dict]) -> list[list[int]]:
    """kvreach's chunk selection per step as the connector applies it:
    ``impl.rules.store_step`` under ``rule``, fed vLLM 0.33.0's bookkeeping,
    which ``KvReachOffloadingConnector`` keeps whatever ``kvreach.rule``
    (``num_tokens_after_batch`` of ``_build_store_jobs``, clamped to
    ``max(num_prompt_tokens, num_tokens - 1)`` at finish;
    ``RequestOffloadState.storable_chunks``, which lifts the EAGLE
    exclusion once finished). ``steps``: a trace's steps (``Trace.to_json``)."""
    cursor, out = 0, []
    for st in steps:
        ends = st["kind"] in ("finish", "abort")
        tab = (finish_tokens("vllm-0.33", req, st["num_tokens"]) if st["kind"] == "finish"
               else st["tokens_after_batch"])
        w = build_store_jobs(rule, g, req, cursor, tab, st["num_tokens"], ends,
                             bookkeeping_rule="vllm-0.33").store
        out.append(list(w.chunks))
        cursor = w.next_cursor
    return out


def check_runnable(obligation: str, rule: str, req: RequestConfig, lc: Lifecycle,
                   steps: list[dict], selection: list[list[int]]) -> None:
    """The lifecycle is one the real scheduler produces for a lone request
    (``Scheduler.schedule`` cuts prefill steps ``min(budget, remaining)``;
    synchronous scheduling, so steps line up), and the connector's selection
    (:func:`connector_selection`) submits what the trace did: else the
    trace's bookkeeping is the old rule's, which vLLM 0.33.0 no longer has."""
    cut = Lifecycle(lc.budget).chunk_sizes(req.prompt_tokens)
    if lc.chunk_sizes(req.prompt_tokens) != cut:
        raise unreplayable(obligation, rule, f"prefill steps {lc.chunk_sizes(req.prompt_tokens)} "
                           f"are not the scheduler's cut {cut} of a lone request")
    if lc.async_scheduling:
        raise unreplayable(obligation, rule, "asynchronous scheduling: the steps do not line up")
    for st, chunks in zip(steps, selection):
        if chunks != list(st["submitted"]):
            raise unreplayable(obligation, rule, (
                f"step {st['index']} ({st['kind']}) submits {list(st['submitted'])} under "
                f"{rule}'s bookkeeping ({st['tokens_after_batch']} tokens after the batch, "
                f"{st['num_chunks']} storable chunks) but {chunks} under vLLM 0.33.0's "
                "(num_tokens_after_batch clamped to the commit point at finish, EAGLE "
                "exclusion lifted once finished), which KvReachOffloadingConnector keeps: "
                "kvreach.rule replaces only the chunk selection"))


# ---------------------------------------------------------------------------
# vLLM's side: one request through the real scheduler
# ---------------------------------------------------------------------------


def run_request(model_dir: str, setup: Setup, rule: str, req: RequestConfig,
                lc: Lifecycle) -> tuple[SchedulerRun, LookupRecorder]:
    """``Scheduler.schedule`` / ``update_from_output`` per step
    (``runner.drive``); every ``_build_store_jobs`` call's
    ``prepare_store`` keys are recorded (``LookupRecorder`` keeps them per
    request for a later lookup)."""
    which, extra = connector_of(rule)
    run = SchedulerRun(setup, which, model_dir, extra_config=extra)
    rec = LookupRecorder(run)
    params = None if req.max_offload_tokens is None else {
        "max_offload_tokens": req.max_offload_tokens}
    drive(run, STORED, req.prompt_tokens, decode=lc.decode,
          abort_after_step=lc.abort_after_step, kv_transfer_params=params)
    assert_rule_ran(run)
    return run, rec


def assert_rule_ran(run: SchedulerRun) -> None:
    """``KvReachOffloadingConnector`` decided every store with its rule: it
    never fell back to stock vLLM's (a replay under kvreach's connector
    would otherwise show vLLM 0.33.0's rule)."""
    if run.which == KVREACH:
        k = run.offload
        fell_back = (k.kvreach_fallbacks, k.kvreach_contract_violations,
                     k.kvreach_unmodeled_fallbacks)
        assert fell_back == ({}, 0, 0), f"kvreach's connector fell back to stock: {fell_back}"


def vllm_steps(run: SchedulerRun) -> list[list[int]]:
    """SWA chunks ``prepare_store`` received per step (after the null-block
    filter of ``_build_store_jobs``)."""
    return run.per_step(SWA_GROUP, STORED)


def vllm_computed(run: SchedulerRun) -> list[int]:
    """``Request.num_computed_tokens`` after each step: what
    ``Scheduler._update_after_schedule`` added (the scheduled tokens)."""
    return list(accumulate(st.scheduled.get(STORED, 0) for st in run.steps))


# ---------------------------------------------------------------------------
# witnesses, per obligation: (vLLM's, kvreach's)
# ---------------------------------------------------------------------------


def soundness_witness(run: SchedulerRun, cex: dict) -> tuple[list[int], list[int]]:
    """Chunks stored that no hit boundary of the load model wants (the
    trace's ``loadable``), as soundness' ``Obligation.trace_witness`` has it."""
    wanted = set(cex["trace"]["loadable"])
    return sorted(set(run.stored(SWA_GROUP, STORED)) - wanted), list(cex["replayed_violation"])


def completeness_witness(run: SchedulerRun, cex: dict, g: GroupConfig):
    """Needed chunks, computed by the end, that were not stored."""
    needed = set(cex["trace"]["needed"])
    computed = run.requests[STORED].num_computed_tokens // g.chunk_tokens
    vllm = sorted(c for c in needed - set(run.stored(SWA_GROUP, STORED)) if c < computed)
    return vllm, list(cex["replayed_violation"])


def computed_before_stored_witness(run: SchedulerRun, cex: dict, g: GroupConfig):
    """(step, chunk, chunk's end token, num_computed_tokens at that step) of
    every chunk submitted before its tokens were computed."""
    C = g.chunk_tokens

    def early(per_step, computed):
        return [[i + 1, c, (c + 1) * C, n] for i, (chunks, n) in enumerate(zip(per_step, computed))
                for c in chunks if (c + 1) * C > n]

    steps = cex["trace"]["steps"]
    return (early(vllm_steps(run), vllm_computed(run)),
            early([s["submitted"] for s in steps], [s["num_computed_tokens"] for s in steps]))


# ---------------------------------------------------------------------------
# soundness: do later lookups load a violating chunk?
# ---------------------------------------------------------------------------


def later_lookups_of(setup: Setup, rec: LookupRecorder, run: SchedulerRun,
                     violating: list[int], longest: int) -> tuple[dict, dict]:
    """For every later request of 1 .. ``longest`` tokens sharing the stored
    request's tokens (GPU prefix cache reset: no local hit), the manager
    answering HIT for exactly the keys ``prepare_store`` accepted: the
    lengths whose lookup hits at all, and ``[T, violating chunks loaded]``
    where vLLM's ``get_num_new_matched_tokens`` / ``update_state_after_alloc``
    load any (``prepare_load``), against kvreach's twin
    (``lookups.lookups_by_length``) for the same inputs."""
    rec.answers = {k: LookupResult.HIT for k in rec.stored_keys.get(STORED, [])}
    tokens = later_tokens(list(run.requests[STORED].all_token_ids), longest, None)
    bad = set(violating)
    out = {side: {"hits": 0, "loads_violating": []} for side in ("vllm", "kvreach")}
    for T, observations, twin in lookups_by_length(rec, setup, tokens):
        obs = observations[-1]
        for side, hit, loaded in (("vllm", obs.hit_tokens, obs.loaded),
                                  ("kvreach", twin.hit_tokens, twin.loaded_keys())):
            out[side]["hits"] += bool(hit)
            chunks = sorted(c for gi, c in loaded if gi == SWA_GROUP and c in bad)
            if chunks:
                out[side]["loads_violating"].append([T, chunks])
    return out["vllm"], out["kvreach"]


# ---------------------------------------------------------------------------
# the replays
# ---------------------------------------------------------------------------


def replay_lifecycle(model_dir: str, obligation: str, cex: dict, rule: str,
                     load_model: str | None = None) -> dict:
    """The counterexample through vLLM's real scheduler under ``rule``'s
    connector (normally the row's rule; the counterexample's own rule,
    ``cex["trace"]["rule"]``, decides whether it can run) -> ``{"vllm":
    {...}, "kvreach": {...}}`` with the same keys. ``load_model``: the
    row's (a static counterexample does not name it; default
    ``cex["load_model"]``)."""
    if obligation in RESTART_OBLIGATIONS:
        return replay_restarts(model_dir, obligation, cex, rule)
    if cex.get("world", "single") != "single":
        raise unreplayable(obligation, rule, (
            f"world {cex['world']!r}: its plan's preemptions, lookups and manager outcomes "
            "are not events a lone request produces on the real scheduler (vLLM preempts "
            "only when a step cannot allocate, and SlidingWindowManager frees the "
            "out-of-window blocks, so the next step of a lone request always allocates)"))
    if obligation in STATIC_OBLIGATIONS:
        model = load_model or cex.get("load_model")
        if model is None:
            raise unreplayable(obligation, rule, "no load model given (load_model=...)")
        return replay_mask_on_scheduler(model_dir, obligation, cex, rule, model)
    if obligation not in LIFECYCLE_OBLIGATIONS:
        raise unreplayable(obligation, rule, "not one of the supported rows ("
                           + ", ".join(LIFECYCLE_OBLIGATIONS + STATIC_OBLIGATIONS) + ")")
    g = GroupConfig(**cex["config"]["group"])
    req = RequestConfig(**cex["config"]["request"])
    lc = lifecycle_of(cex)
    steps = cex["trace"]["steps"]
    own = cex["trace"]["rule"]
    check_runnable(obligation, own, req, lc, steps, connector_selection(own, g, req, steps))
    setup = setup_of(obligation, rule, g, req, lc.budget)
    run, rec = run_request(model_dir, setup, rule, req, lc)
    out = {"vllm": {"steps": vllm_steps(run)},
           "kvreach": {"steps": [list(s["submitted"]) for s in steps]}}
    witness = WITNESS[obligation]  # the obligation record's (``Replay.witness``)
    if witness == "violating":
        v, k = soundness_witness(run, cex)
        H = cex["trace"]["final_chunks"]
        lv, lk = later_lookups_of(setup, rec, run, k, (H + 2) * g.chunk_tokens + 1)
        out["vllm"] |= {"violating": v, "later": lv}
        out["kvreach"] |= {"violating": k, "later": lk}
    elif witness == "missing":
        out["vllm"]["missing"], out["kvreach"]["missing"] = completeness_witness(run, cex, g)
    else:  # "uncomputed"
        out["vllm"]["uncomputed"], out["kvreach"]["uncomputed"] = \
            computed_before_stored_witness(run, cex, g)
    return out


def mask_requests(g: GroupConfig, decoded: RequestConfig, H: int):
    """Requests whose only store decision at the final horizon ``H`` is the
    one-shot mask: a prompt of the horizon's tokens prefilled in one step,
    then the decoded request decoding up to the horizon (an EAGLE group
    stores nothing before the finish lifts its exclusion)."""
    P = H * g.chunk_tokens
    yield RequestConfig(P, None, decoded.offload_prompt_only), Lifecycle(max(P, 16))
    if not decoded.offload_prompt_only and decoded.prompt_tokens < P:
        yield decoded, Lifecycle(max(decoded.prompt_tokens, 16), decode=P - decoded.prompt_tokens)


def mask_scenario(obligation: str, rule: str, model: str, g: GroupConfig, cex: dict):
    """The first of :func:`mask_requests` whose connector selection
    (:func:`connector_selection`) stores exactly the one-shot mask at the
    horizon (``store_step`` from cursor 0, finished: ``proofs.decode.replay_mask``)
    and shows the violation (kept != wanted) -> (request, lifecycle, per-step
    selection, kept, wanted)."""
    H = cex["final_horizon_chunks"]
    decoded = RequestConfig(**cex["config"]["request"])
    tried = []
    for req, lc in mask_requests(g, decoded, H):
        steps = kvreach_run(rule, g, req, lc).to_json()["steps"]
        selection = connector_selection(rule, g, req, steps)
        kept = sorted(store_step(rule, g, req, 0, H, True).chunks)
        wanted = wanted_chunks(model, g, req, H)
        union = sorted(c for chunks in selection for c in chunks)
        if union == kept and set(kept) != wanted:
            return req, lc, selection, kept, wanted
        tried.append(f"prompt {req.prompt_tokens} + {lc.decode} decode: stores {union}, "
                     f"one-shot {kept}, wanted {sorted(wanted)}")
    raise unreplayable(obligation, rule, f"no request reaching horizon {H} stores the one-shot "
                       "mask with the violation (" + "; ".join(tried) + ")")


def replay_mask_on_scheduler(model_dir: str, obligation: str, cex: dict, rule: str,
                             model: str) -> dict:
    """mask-equivalence's static counterexample: a request reaching the
    decoded final horizon whose stores are the one-shot mask there
    (:func:`mask_scenario`) runs on the real scheduler; what vLLM stores per
    step and in all (``kept``), and ``kept ^ wanted`` (the chunks the mask
    and the load model's hits disagree on), against kvreach's per-step
    selection and one-shot ``store_step`` at the horizon."""
    g = GroupConfig(**cex["config"]["group"])
    setup_of(obligation, rule, g, RequestConfig(**cex["config"]["request"]), 16)
    req, lc, selection, kept, wanted = mask_scenario(obligation, rule, model, g, cex)
    setup = setup_of(obligation, rule, g, req, lc.budget)
    run, _ = run_request(model_dir, setup, rule, req, lc)
    vkept = sorted(run.stored(SWA_GROUP, STORED))
    scenario = {"prompt_tokens": req.prompt_tokens, "decode": lc.decode}
    return {
        "vllm": scenario | {"steps": vllm_steps(run), "kept": vkept,
                            "mask_violation": sorted(set(vkept) ^ wanted)},
        "kvreach": scenario | {"steps": selection, "kept": kept,
                               "mask_violation": sorted(set(kept) ^ wanted)},
    }


# ---------------------------------------------------------------------------
# world "restarts": a plan with restarts (exactly-once-restarts)
# ---------------------------------------------------------------------------

def check_restart_plan(obligation: str, rule: str, cex: dict) -> None:
    """The plan is one the real scheduler runs for a lone request whose
    offload manager accepts every store: prefill / decode steps of the
    scheduler's cut, preemptions, the lookup that resumes the request, and
    a finish or an abort; no refused or partial ``prepare_store``, no
    ``shared_prefix_boundary``, no null blocks, no offload hit (the manager's
    lookup answers MISS): the step kinds of
    ``proofs.obligations.restarts.REPLAYED_KINDS``, the shape the named
    counterexample search asks for first."""
    from kvreach.proofs.obligations.restarts import REPLAYED_KINDS
    from kvreach.spec.lifecycle import KINDS

    restart_kinds = [KINDS[k] for k in REPLAYED_KINDS]
    for i, st in enumerate(cex["plan"], 1):
        why = None
        if st["kind"] not in restart_kinds:
            why = f"step {i} is a {st['kind']!r} step (replayed: {', '.join(restart_kinds)})"
        elif st["outcome"] != "accept" or st["null"] or st["shared_prefix_boundary"]:
            why = (f"step {i}: outcome {st['outcome']!r}, null {st['null']}, "
                   f"shared_prefix_boundary {st['shared_prefix_boundary']} (replayed: every "
                   "store accepted, no null block, no shared-prefix boundary)")
        if why:
            raise unreplayable(obligation, rule, why)


def restart_offers(steps: list[tuple[str, int, list[int]]]) -> list[list[int]]:
    """Chunks offered in a later incarnation that ``prepare_store`` accepted
    in an earlier one (every offer accepted): the witness of
    ``exactly-once-restarts``."""
    accepted: dict[int, int] = {}  # chunk -> incarnation it was first accepted in
    out = set()
    for _, inc, chunks in steps:
        for c in chunks:
            if accepted.setdefault(c, inc) < inc:
                out.add(c)
    return sorted(out)


def replay_restarts(model_dir: str, obligation: str, cex: dict, rule: str) -> dict:
    """``exactly-once-restarts``'s plan on the real scheduler. A ``preempt``
    step is vLLM's own ``Scheduler.reset_prefix_cache(reset_running_requests=True)``
    (``_preempt_request`` on the running request: blocks freed,
    ``num_computed_tokens = 0``, back to the waiting queue, its id in the next
    ``SchedulerOutput.preempted_req_ids``); the ``lookup`` that resumes it and
    the prefill after it are one ``Scheduler.schedule`` (which calls
    ``get_num_new_matched_tokens``: the cursor ``next_stored_chunk_idx`` goes
    back to 0); ``abort`` is ``finish_requests``. -> per store-bearing step
    (kind, incarnation, chunks ``prepare_store`` was offered), and the chunks
    offered again in a later incarnation, vLLM's beside kvreach's
    (``cex["replay"]``, ``impl.lifecycle.run_vllm``)."""
    check_restart_plan(obligation, rule, cex)
    g = GroupConfig(**cex["config"]["group"])
    req = RequestConfig(**cex["config"]["request"])
    setup = setup_of(obligation, rule, g, req, cex["budget"])
    which, extra = connector_of(rule)
    run = SchedulerRun(setup, which, model_dir, extra_config=extra)
    plan = cex["plan"]
    decode = sum(st["kind"] == "decode" for st in plan)
    params = None if req.max_offload_tokens is None else {
        "max_offload_tokens": req.max_offload_tokens}
    run.add_request(STORED, req.prompt_tokens, max_tokens=decode + 1, kv_transfer_params=params)
    vllm, inc = [], 0
    for i, st in enumerate(plan, 1):
        kind = st["kind"]
        if kind == "preempt":
            assert run.scheduler.reset_prefix_cache(reset_running_requests=True)
            inc += 1
        elif kind in ("prefill", "decode"):
            rec = run.step()
            got = rec.scheduled.get(STORED, 0)
            if got != st["scheduled_tokens"]:
                raise unreplayable(obligation, rule, f"step {i} ({kind}) schedules "
                                   f"{st['scheduled_tokens']} tokens, the scheduler {got}")
            vllm.append((kind, inc, sorted(rec.chunks(SWA_GROUP, STORED))))
        elif kind in ("finish", "abort"):
            if kind == "abort":
                run.abort(STORED)
            first = len(run.steps)
            run.run_to_completion()
            vllm.append((kind, inc, sorted(c for rec in run.steps[first:]
                                           for c in rec.chunks(SWA_GROUP, STORED))))
    # a store-bearing step's incarnation: the spec counts the resuming lookups, vLLM's side
    # above the preemptions before it (one lookup resumes each preempted request)
    assert_rule_ran(run)
    kvreach = [(x["kind"], x["incarnation"], sorted(x["offered"])) for x in cex["replay"]
               if x["kind"] in ("prefill", "decode", "finish", "abort")]
    as_lists = lambda steps: [[k, i, c] for k, i, c in steps]  # noqa: E731  (JSON-like)
    return {"vllm": {"steps": as_lists(vllm), "offered_again": restart_offers(vllm)},
            "kvreach": {"steps": as_lists(kvreach), "offered_again": restart_offers(kvreach)}}


def replay_lifecycle_on_vllm(obligation: str, cex: dict, rule: str,
                             load_model: str | None = None) -> dict:
    """Standalone: offline model config and the hybrid KV cache shim (as
    ``replay.replay_on_vllm``), then :func:`replay_lifecycle`."""
    from kvreach.vllm_harness.cpu_shims import hybrid_kv_cache_shim, write_offline_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as d, hybrid_kv_cache_shim():
        return replay_lifecycle(write_offline_model(d), obligation, cex, rule, load_model)
