"""Recording a trace of the installed vLLM's real scheduler (0.33.0 or
0.34.0) for trace validation (:mod:`kvreach.vllm_harness.trace` holds the
format and the validator).

Many concurrent requests of random lengths run through the real ``Scheduler``
/ ``AsyncScheduler`` and ``OffloadingConnectorScheduler`` (the harness): a
GPU block pool small enough to preempt, chunked-prefill budgets, aborts and
error finishes (``FINISHED_ERROR``) at random points, decode, an EAGLE group, a retention interval, and an offload
manager (:class:`TierManager`) that stores keys, answers lookups from them
(so a request can hit its own or another request's earlier stores),
de-duplicates, sometimes drops keys or refuses, sometimes defers a lookup.

Every step of every request is recorded per SWA group as (kind, pre-state
(f, cursor), step size, post-state, chunks offered to ``prepare_store``,
chunks it accepted, the manager's outcome, chunks with a null block), from
wrappers around ``Scheduler._preempt_request``,
``OffloadingConnectorScheduler.get_num_new_matched_tokens``,
``update_state_after_alloc`` and ``_build_store_jobs``; one trace line per
step (``trace.step_line``). Run::

    python -m kvreach.vllm_harness.trace_record --seeds 0:6 --out trace.jsonl
    python -m kvreach.vllm_harness.trace validate trace.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from vllm.v1.kv_offload.base import (
    LookupResult, OffloadPolicy, PrepareStoreOutput, RequestOffloadingContext,
)
from vllm.v1.request import RequestStatus

from kvreach.spec import lifecycle as lc
from kvreach.vllm_harness.conform_run import failures_settable
from kvreach.vllm_harness.cpu_shims import hybrid_kv_cache_shim, write_offline_model
from kvreach.vllm_harness.runner import (
    STOCK, SchedulerRun, Setup, KeysSpec, full, prompt_token_ids, swa,
)
from kvreach.vllm_harness.trace import Config, Step, step_line, write

class TierManager:
    """Behaviour of the harness's mock manager, seeded."""

    def __init__(self, rng: random.Random, p_refuse=0.05, p_drop=0.05, p_retry=0.05):
        self.rng, self.stored = rng, set()
        self.p_refuse, self.p_drop, self.p_retry = p_refuse, p_drop, p_retry
        self.last_store = None  # (keys offered, output) of the last prepare_store

    def install(self, m) -> None:
        m.lookup.side_effect = self.lookup
        m.prepare_store.side_effect = self.prepare_store
        m.on_new_request.side_effect = lambda ctx: RequestOffloadingContext(
            policy=self.rng.choice([OffloadPolicy.CHUNK_LEVEL, OffloadPolicy.REQUEST_LEVEL]))
        m.prepare_load.side_effect = lambda keys, req_context: KeysSpec(keys)

    def lookup(self, key, req_context):
        if self.rng.random() < self.p_retry:
            return LookupResult.RETRY
        return LookupResult.HIT if key in self.stored else LookupResult.MISS

    def prepare_store(self, keys, req_context):
        keys = list(keys)
        if self.rng.random() < self.p_refuse:
            out = None
        else:
            fresh = [k for k in keys if k not in self.stored]  # de-duplication
            take = [k for k in fresh if self.rng.random() >= self.p_drop]
            self.stored.update(take)
            out = PrepareStoreOutput(keys_to_store=take, store_spec=KeysSpec(take),
                                     evicted_keys=[])
        self.last_store = (keys, out)
        return out


# ---------------------------------------------------------------------------
# recording
# ---------------------------------------------------------------------------


@dataclass
class ReqTrace:
    req_id: str
    prompt: int
    groups: dict[int, list[Step]] = field(default_factory=dict)


class Recorder:
    def __init__(self, run: SchedulerRun, tier: TierManager):
        self.run, self.tier = run, tier
        self.off = run.offload
        self.traces: dict[str, ReqTrace] = {}
        self.swa = run.setup.swa_groups()
        self.cfg = {gi: i for i, gc in enumerate(self.off.config.kv_group_configs)
                    for gi in [gc.group_idx]}
        self.in_store = False
        self.load_failed: dict[tuple[str, int], bool] = {}  # the last step's, per group
        self._wrap()

    def _cursor(self, st, gi):
        return st.group_states[self.cfg[gi]].next_stored_chunk_idx

    def _emit(self, req_id, gi, step):
        """Append the step, with ``RequestOffloadState.load_failed`` (vLLM
        0.34.0) before it (the group's previous step's after) and now."""
        st = self.off._req_status.get(req_id)
        if st is not None and hasattr(st, "load_failed"):
            now = bool(st.load_failed)
            step = dataclasses.replace(step, load_failed=(self.load_failed.get((req_id, gi), False),
                                                          now))
            self.load_failed[(req_id, gi)] = now
        self.traces[req_id].groups.setdefault(gi, []).append(step)

    def _wrap(self):
        off, sched = self.off, self.run.scheduler
        real_preempt = sched._preempt_request
        real_lookup = off.get_num_new_matched_tokens
        real_alloc = off.update_state_after_alloc
        real_store = off._build_store_jobs
        rec = self

        def preempt(request, *a, **k):
            st = off._req_status.get(request.request_id)
            f0 = request.num_computed_tokens
            pre = {gi: rec._cursor(st, gi) for gi in rec.swa}
            out = real_preempt(request, *a, **k)
            for gi in rec.swa:
                rec._emit(request.request_id, gi, Step(
                    "preempt", 0, (f0, pre[gi]), (request.num_computed_tokens, rec._cursor(st, gi))))
            return out

        def lookup(request, num_computed_tokens, *a, **k):
            rid = request.request_id
            rec.traces.setdefault(rid, ReqTrace(rid, request.num_prompt_tokens))
            st = off._req_status[rid]
            f0 = request.num_computed_tokens
            pre = {gi: rec._cursor(st, gi) for gi in rec.swa}
            out = real_lookup(request, num_computed_tokens, *a, **k)
            note = "deferred" if out[0] is None else f"local={num_computed_tokens} ext={out[0]}"
            for gi in rec.swa:
                rec._emit(rid, gi, Step("lookup", 0, (f0, pre[gi]),
                                        (request.num_computed_tokens, rec._cursor(st, gi)), note=note))
            return out

        def alloc(request, blocks, num_external_tokens):
            rid = request.request_id
            st = off._req_status[rid]
            last = rec.traces[rid].groups.get(rec.swa[0], [None])[-1] if rid in rec.traces else None
            if num_external_tokens == 0 and (last is None or last.kind != "lookup"):
                # a later call with no external tokens (e.g. the request re-admitted
                # after its async load): vLLM returns before touching the state
                return real_alloc(request, blocks, num_external_tokens)
            pre = {gi: rec._cursor(st, gi) for gi in rec.swa}
            out = real_alloc(request, blocks, num_external_tokens)
            h = st.num_locally_computed_tokens + num_external_tokens
            loaded = (num_external_tokens > 0
                      and st.offloading_context.policy == OffloadPolicy.CHUNK_LEVEL)
            kind = "loaded" if loaded else "start"
            note = (f"local={st.num_locally_computed_tokens} ext={num_external_tokens} "
                    f"policy={st.offloading_context.policy.name}")
            for gi in rec.swa:
                rec._emit(rid, gi, Step(kind, h, (request.num_computed_tokens, pre[gi]),
                                        (h, rec._cursor(st, gi)), note=note))
            return out

        def build_store_jobs(scheduler_output):
            pre = {}
            for rid in [*scheduler_output.num_scheduled_tokens,
                        *(scheduler_output.finished_req_ids or ())]:
                st = off._req_status.get(rid)
                if st is None or rid in pre:
                    continue
                req = st.req
                pre[rid] = (st, req.num_computed_tokens,
                            scheduler_output.num_scheduled_tokens.get(rid, 0),
                            {gi: rec._cursor(st, gi) for gi in rec.swa},
                            {gi: (list(st.group_states[rec.cfg[gi]].block_ids),
                                  len(st.group_states[rec.cfg[gi]].offload_keys)) for gi in rec.swa},
                            req.status, req.is_finished(), req.num_tokens)
            calls: dict[str, tuple] = {}
            real_ps = off.manager.prepare_store.side_effect

            def ps(keys, req_context):
                out = real_ps(keys, req_context)
                calls[req_context.req_id] = (list(keys), out)
                return out

            off.manager.prepare_store.side_effect = ps
            try:
                jobs = real_store(scheduler_output)
            finally:
                off.manager.prepare_store.side_effect = real_ps
            for rid, (st, f, s, cur, ids, status, fin, ntok) in pre.items():
                P = st.req.num_prompt_tokens
                if status == RequestStatus.FINISHED_ABORTED:
                    kind, s = "abort", 0
                elif status == RequestStatus.FINISHED_ERROR:
                    kind, s = "error", 0  # finish_requests(..., FINISHED_ERROR) at any point
                elif fin:
                    kind, s = "finish", 0
                elif f + s <= P:
                    kind = "prefill"
                elif s == 1 and f >= P and ntok == f + 1:
                    kind = "decode"
                elif s == 1 and f >= P and ntok == f:
                    kind = "decode-async"  # the sampled token not appended yet (F9)
                else:
                    kind = "recompute"
                keys, out = calls.get(rid, ([], "none"))
                if out == "none":
                    outcome = lc.O_ACCEPT
                elif out is None:
                    outcome = lc.O_REFUSED
                elif set(out.keys_to_store) == set(keys):
                    outcome = lc.O_ACCEPT
                else:
                    outcome = lc.O_PARTIAL
                acc = set(out.keys_to_store) if out not in (None, "none") else set()
                for gi in rec.swa:
                    gs = st.group_states[rec.cfg[gi]]
                    where = {k: c for c, k in enumerate(gs.offload_keys)}
                    offered = frozenset(where[k] for k in keys if k in where)
                    accepted = frozenset(where[k] for k in acc if k in where)
                    bpc = off.config.blocks_per_chunk
                    b, n_keys = ids[gi]
                    null = frozenset(c for c in range(len(b) // bpc)
                                     if any(x == 0 for x in b[c * bpc:(c + 1) * bpc]))
                    post_f = f if kind in ("abort", "finish", "error") else f + s
                    rec.traces.setdefault(rid, ReqTrace(rid, P))
                    rec._emit(rid, gi, Step(kind, s, (f, cur[gi]), (post_f, rec._cursor(st, gi)),
                                            outcome, offered, accepted, null,
                                            note=f"num_tokens={ntok} shared_prefix_boundary="
                                                 f"{st.req.shared_prefix_boundary or 0}",
                                            shared_prefix_boundary=st.req.shared_prefix_boundary or 0,
                                            allocated_chunks=min(len(b) // bpc, n_keys)))
            return jobs

        sched._preempt_request = preempt
        off.get_num_new_matched_tokens = lookup
        off.update_state_after_alloc = alloc
        off._build_store_jobs = build_store_jobs

    def inject_failures(self, rng: random.Random, p_store: float = 0.04,
                        p_load: float = 0.3) -> None:
        """vLLM 0.34.0's failed transfers (``failures_settable``): the worker
        reports a store job failed with probability ``p_store``, a load job
        with ``p_load`` (``failed_jobs``; a failed load also in
        ``failed_recving``, as 0.34.0's worker reports it, like
        ``conform_run._inject_failures``). After ``update_from_output`` each
        request with a failed job gets a ``store-failed`` / ``load-failed``
        step per SWA group, its pre-state observed before the update and its
        post-state after; a failed load whose request the update reset
        (``"recompute"``) a ``load-failed`` step then ``load-recompute``, one
        the update finished (``"fail"``) none (its ``error`` step is the next
        store step's)."""
        run, off, rec = self.run, self.off, self
        real = run._update

        def update(out, mro):
            meta = out.kv_connector_metadata
            wm = mro.kv_connector_output.kv_connector_worker_meta
            kco = mro.kv_connector_output
            failed: list[tuple[str, str]] = []
            for jid, job in meta.store_jobs.items():
                if rng.random() < p_store:
                    wm.failed_jobs.add(jid)
                    failed.append((job.req_id, "store-failed"))
            for jid, job in meta.load_jobs.items():
                if rng.random() < p_load:
                    wm.failed_jobs.add(jid)
                    kco.failed_recving = set(kco.failed_recving or ()) | {job.req_id}
                    failed.append((job.req_id, "load-failed"))
            pre = {}
            for rid, _ in failed:
                st = off._req_status.get(rid)
                if st is not None and rid in rec.traces and rid not in pre:
                    pre[rid] = (st, st.req, st.req.num_computed_tokens,
                                {gi: rec._cursor(st, gi) for gi in rec.swa})
            real(out, mro)
            for rid, kind in failed:
                if rid not in pre:
                    continue
                st, req, f0, cur = pre[rid]
                if kind == "load-failed" and req.is_finished():
                    # kv_load_failure_policy "fail": FINISHED_ERROR, the next
                    # store step's error (the ghost no longer matters)
                    for gi in rec.swa:
                        rec.load_failed[(rid, gi)] = True
                    continue
                f1 = req.num_computed_tokens
                for gi in rec.swa:
                    c1 = rec._cursor(st, gi)
                    if f1 == f0:
                        rec._emit(rid, gi, Step(kind, 0, (f0, cur[gi]), (f1, c1),
                                                note=f"status={req.status.name}"))
                    else:  # the report, then _handle_failed_recving's reset (recompute)
                        rec._emit(rid, gi, Step(kind, 0, (f0, cur[gi]), (f0, c1),
                                                note="the worker's report"))
                        rec._emit(rid, gi, Step("load-recompute", 0, (f0, c1), (f1, c1),
                                                note=f"status={req.status.name}"))

        run._update = update


def random_setup(rng: random.Random) -> Setup:
    """A random setup inside the spec's scope (alignment_tokens % B == 0)."""
    while True:
        setup = _random_setup(rng)
        if all(setup.kvreach_group(gi).alignment_tokens is None
               or setup.kvreach_group(gi).representable for gi in setup.swa_groups()):
            return setup


def _random_setup(rng: random.Random) -> Setup:
    fa = rng.choice([8, 12, 16])
    sb = rng.choice([4, 8])
    window = rng.randint(4, 48)
    groups = [full(fa), swa(sb, window)]
    if rng.random() < 0.3:
        groups.append(swa(sb, window, eagle=True))
    bpc = rng.choice([1, 1, 2])
    retention = rng.choice([None, None, None, 0, 1])
    if retention:
        retention *= math.lcm(sb * bpc, fa * bpc)
    return Setup(tuple(groups), budget=rng.choice([32, 64, 96, 128, 256]),
                 blocks_per_chunk=bpc, async_scheduling=rng.random() < 0.4,
                 retention_interval=retention, offload_prompt_only=rng.random() < 0.6,
                 num_gpu_blocks=rng.choice([48, 64, 96]), max_num_seqs=8,
                 max_model_len=4096)


def record_run(model_dir: str, seed: int, n_requests: int = 30) -> Iterator[dict]:
    """One seeded workload on vLLM's scheduler. -> its trace lines, request by
    request, each request's SWA groups in turn."""
    rng = random.Random(seed)
    setup = random_setup(rng)
    run = SchedulerRun(setup, STOCK, model_dir, record=False)
    tier = TierManager(rng)
    tier.install(run.manager)
    rec = Recorder(run, tier)
    if failures_settable():  # vLLM 0.34.0: failed transfers, either load-failure policy
        run.scheduler.recompute_kv_load_failures = rng.random() < 0.5
        rec.inject_failures(rng)
    pending = [(f"r{seed}-{i}", rng.randint(1, 160), rng.choice([0, 2, 20, 60, 120]),
                rng.randint(0, 4)) for i in range(n_requests)]
    # a request ended early: aborted, or finished with FINISHED_ERROR (a
    # grammar or encoder error, a failed load under kv_load_failure_policy
    # "fail"), at a random step
    ends: dict[str, tuple[int, RequestStatus]] = {}
    for step in range(5000):
        while pending and rng.random() < 0.5:
            rid, P, dec, pseed = pending.pop()
            toks = prompt_token_ids(P, pseed)
            run.add_request(rid, P, max_tokens=dec + 1, token_ids=toks)
            if rng.random() < 0.3:
                ends[rid] = (step + rng.randint(0, 12),
                             rng.choice([RequestStatus.FINISHED_ABORTED] * 3
                                        + [RequestStatus.FINISHED_ERROR]))
        for rid, (at, status) in list(ends.items()):
            if at <= step:
                del ends[rid]
                if rid in run.scheduler.requests:
                    run.scheduler.finish_requests((rid,), status)
        if not pending and not run.busy():
            break
        if run.busy():
            run.step()
        elif not pending:
            run.flush()
    run.flush()
    for rid, t in rec.traces.items():
        for gi, steps in t.groups.items():
            config = Config(setup.kvreach_group(gi), t.prompt, setup.offload_prompt_only,
                            setup.budget, setup.async_scheduling)
            for i, st in enumerate(steps):
                yield step_line(seed, rid, gi, i, config, st)


def record(model_dir: str, seeds: Iterable[int], n_requests: int = 30) -> Iterator[dict]:
    """The trace lines of the seeded workloads, one after the other."""
    for seed in seeds:
        yield from record_run(model_dir, seed, n_requests)


def _seeds(text: str) -> range:
    lo, _, hi = text.partition(":")
    try:
        return range(int(lo), int(hi)) if hi else range(int(lo), int(lo) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--seeds {text!r}: expected N or LO:HI (integers, HI exclusive)") from None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvreach.vllm_harness.trace_record",
                                description="Record a trace of vLLM's scheduler (one JSON line per step).")
    p.add_argument("--seeds", type=_seeds, default=range(6), help="N or LO:HI (default 0:6)")
    p.add_argument("--requests", type=int, default=30, help="requests per seed (default 30)")
    p.add_argument("--out", required=True, help="the trace file to write")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d, hybrid_kv_cache_shim():
        n = write(a.out, record(write_offline_model(d), a.seeds, a.requests))
    print(f"{n} steps written to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
