"""The system layer's vLLM side (``kvreach.conform.system``): one case on
this process's vLLM (:func:`run_case`: the real ``Scheduler`` and stock
``OffloadingConnector``, recording what a connector sees), and the run over
hypothesis cases compared with every record (:func:`run_here`;
``python -m kvreach.vllm_harness.conform_run`` prints its JSON)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile

from kvreach.conform.system import (
    DEFAULT_CASES,
    DEFAULT_SEED,
    ENDINGS,
    EDGE_CASES,
    Case,
    Group,
    Mismatch,
    Trace,
    cases,
    explain,
    explaining_parts,
)
from kvreach.conform.records import RECORDS
from kvreach.releases import Release


# ---------------------------------------------------------------------------
# One case on the installed vLLM (this process)
# ---------------------------------------------------------------------------


def run_case(case: Case, model_dir: str) -> Trace:
    from vllm.v1.kv_offload.base import LookupResult
    from vllm.v1.request import RequestStatus

    from kvreach.vllm_harness.config import Setup, full, swa
    from kvreach.vllm_harness.lookups import ReleaseRecorder
    from kvreach.vllm_harness.config import STOCK
    from kvreach.vllm_harness.scheduler_run import SchedulerRun, prompt_token_ids

    groups = [full(case.full_block), swa(case.swa_block, case.window, extra=case.extra)]
    if case.eagle:
        groups.append(swa(case.swa_block, case.window, eagle=True, extra=case.extra))
    kw = {"hash_lookahead_tokens": case.lookahead} if lookahead_settable() else {}
    setup = Setup(tuple(groups), budget=case.budget, blocks_per_chunk=case.blocks_per_chunk,
                  async_scheduling=case.async_scheduling, retention_interval=case.retention,
                  offload_prompt_only=case.prompt_only, num_gpu_blocks=2000,
                  dcp_world_size=case.dcp, **kw)
    try:
        run = SchedulerRun(setup, STOCK, model_dir)
    except Exception as e:  # noqa: BLE001 (a configuration vLLM refuses: not a case)
        t = Trace([], 1, None, None, True, 1, 0)
        t.error = f"skipped: vLLM refuses the configuration ({type(e).__name__}: {e})"
        return t
    hash_block = _hash_block(run)
    if case.recompute:  # kv_load_failure_policy "recompute", as Scheduler.__init__ derives it
        run.scheduler.recompute_kv_load_failures = True
    trace = Trace([Group(g.kind, g.block_size * case.dcp, g.window, g.extra_retained_tokens,
                         g.eagle)
                   for g in setup.groups], setup.blocks_per_chunk, setup.alignment_tokens(),
                  case.retention, case.prompt_only, hash_block, case.lookahead)
    rec = ReleaseRecorder(run)
    tables: dict[str, list[list[int]]] = {}
    events = trace.events

    def observe(request, local, hit, _orig=rec._observe):
        o = _orig(request, local, hit)
        events.append(dict(kind="lookup", req=request.request_id, num_tokens=o.num_tokens,
                           local=local, max_load=o.max_load_tokens, hit_tokens=o.hit_tokens,
                           hit=sorted(o.content.hit), pending=sorted(o.content.pending),
                           retry=sorted(o.content.retry),
                           # Request.shared_prefix_boundary around the lookup (a
                           # junction the lookup registers, 0.34.0)
                           spb_before=spb_before.get(request.request_id, 0),
                           spb_after=getattr(request, "shared_prefix_boundary", 0) or 0))
        return o

    rec._observe = observe
    spb_before: dict[str, int] = {}
    inner_lookup = run.offload.get_num_new_matched_tokens

    def lookup(request, *a, **kw):
        spb_before[request.request_id] = getattr(request, "shared_prefix_boundary", 0) or 0
        return inner_lookup(request, *a, **kw)

    run.offload.get_num_new_matched_tokens = lookup
    connector = run.connector
    real_build = connector.build_connector_meta

    def build(scheduler_output):
        data = list(_yield_req_data(scheduler_output))
        # the block ids this batch allocates (the connector's
        # _current_batch_allocated_block_ids) and each table's end before it
        alloc = {b for _, ids, _ in data for g in (ids or ()) for b in g if b}
        alloc |= {c.dst_block_id for c in getattr(scheduler_output, "kv_cache_block_copies",
                                                   None) or ()}
        ends: dict[str, list[int]] = {}
        for rid, ids, full_table in data:
            if full_table or rid not in tables:
                tables[rid] = [list(g) for g in ids] if ids else [[] for _ in setup.groups]
                ends[rid] = [0] * len(setup.groups)
            elif ids:
                ends[rid] = [len(t_) for t_ in tables[rid]]
                for t_, new in zip(tables[rid], ids):
                    t_.extend(new)
        # a sliding-window block released and handed out again in this batch:
        # the connector zeroes its stale entry from its store cursor on
        # (build_connector_meta, "Zero out stale block_ids"); the twin applies
        # it from its own cursor
        for rid, table in tables.items():
            for gi, g in enumerate(setup.groups):
                end = ends.get(rid, [len(t_) for t_ in table])[gi]
                stale = [(j, table[gi][j]) for j in range(end)
                         if g.kind == "swa" and table[gi][j] in alloc] if alloc else []
                if stale:
                    events.append(dict(kind="stale", req=rid, group=gi, blocks=stale))
        ctxs = {}
        for rid in (*scheduler_output.num_scheduled_tokens, *scheduler_output.finished_req_ids):
            req = run.requests.get(rid)
            if req is None or rid in ctxs:
                continue
            st = req.status
            kind = ("aborted" if st is RequestStatus.FINISHED_ABORTED
                    else "finished" if req.is_finished() else "running")
            ctxs[rid] = dict(kind="stores", state=kind, req=rid, P=req.num_prompt_tokens, nt=req.num_tokens,
                             computed=req.num_computed_tokens,
                             sched=scheduler_output.num_scheduled_tokens.get(rid, 0),
                             hashes=len(req.block_hashes),
                             shared_prefix_boundary=getattr(req, "shared_prefix_boundary", 0),
                             max_offload=(req.kv_transfer_params or {}).get("max_offload_tokens"),
                             blocks=[list(g) for g in tables.get(rid, [[] for _ in setup.groups])],
                             status=st.name)
        before = len(run._current.stores) if run._current is not None else 0
        meta = real_build(scheduler_output)
        stores = run._current.stores[before:] if run._current is not None else []
        for rid, ctx in ctxs.items():
            out: dict[str, list[int]] = {}
            for r_, gi, c in stores:
                if r_ == rid:
                    out.setdefault(str(gi), []).append(c)
            ctx["stored"] = out
            events.append(ctx)
        return meta

    connector.build_connector_meta = build
    failed_jobs = _inject_failures(run, case, events)

    def complete_store(keys, req_context=None, success=True, **_):
        keys = list(keys)
        # the failed job's completion: its keys, once (a later job may store
        # the same keys again, and complete them)
        failed_job = tuple(keys) in failed_jobs
        if failed_job:
            failed_jobs.remove(tuple(keys))
        events.append(dict(kind="store completed", req=getattr(req_context, "req_id", "?"),
                           keys=len(keys), success=bool(success), failed_job=failed_job))
        if success:  # a manager publishes what completed, drops what failed
            dropped.difference_update(keys)
        else:
            dropped.update(keys)

    dropped: set = set()
    run.manager.complete_store.side_effect = complete_store

    def drain() -> None:
        """Step until the scheduler is idle (the transfers flushed)."""
        for _ in range(10_000):
            if not run.busy():
                break
            if not run.scheduler.requests and not run.scheduler.finished_req_ids:
                run.flush()
                if not run.busy():
                    break
            run.step()
            refresh()

    def refresh(publish=case.publish):
        if not publish:
            return
        rec.answers.update({k: LookupResult.HIT for ks in rec.stored_keys.values() for k in ks
                            if k not in dropped})

    params = {}
    if case.max_offload is not None:
        params["max_offload_tokens"] = case.max_offload
    try:
        run.add_request("r", case.prompt, max_tokens=case.decode + 1,
                        kv_transfer_params=params or None)
        for _ in range(case.end_after):
            if not run.busy():
                break
            run.step()
            refresh()
        if "r" in run.scheduler.requests:
            if case.ending == "abort":
                run.abort("r")
            elif case.ending == "error":
                run.scheduler.finish_requests(("r",), RequestStatus.FINISHED_ERROR)
            elif case.ending == "preempt":
                run.flush()
                if run.scheduler.reset_prefix_cache(reset_running_requests=True):
                    events.append(dict(kind="reset", req="r"))
        drain()
        # the later request: the prompt cut or extended, the GPU prefix cache reset
        refresh(True)
        run.scheduler.reset_prefix_cache()
        tokens = prompt_token_ids(case.prompt)
        later = (tokens + prompt_token_ids(case.later, seed=7919))[:case.later]
        p2 = {} if case.max_load is None else {"max_load_tokens": case.max_load}
        run.add_request("later", case.later, max_tokens=1, kv_transfer_params=p2 or None,
                        token_ids=later)
        drain()
    except Exception as e:  # noqa: BLE001 (vLLM under test raised: reported)
        trace.error = f"vLLM raised {type(e).__name__}: {e}"
    return trace


def failures_settable() -> bool:
    """The vLLM here has a worker report of failed transfers (0.34.0's
    ``OffloadingWorkerMetadata.failed_jobs``, read into ``TransferJob.failed``
    and ``RequestOffloadState.load_failed``); before 0.34.0 a job is only
    completed."""
    import dataclasses as dc

    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
        OffloadingWorkerMetadata,
    )

    return "failed_jobs" in {f.name for f in dc.fields(OffloadingWorkerMetadata)}


def _inject_failures(run, case: Case, events: list) -> set:
    """The worker's answers of ``case``: its ``fail_store``-th store job of
    the run and (``fail_load``) the later request's first load reported
    failed (``failed_jobs``; a failed load also in ``failed_recving``, as
    0.34.0's worker reports it). -> the failed store jobs' keys (a list of
    key tuples, one per job not completed yet)."""
    failed_jobs: list = []
    if case.fail_store < 0 and not case.fail_load:
        return failed_jobs
    real = run._update
    count = [0]
    load_done = [False]

    def update(out, mro):
        meta = out.kv_connector_metadata
        kco = mro.kv_connector_output
        wm = kco.kv_connector_worker_meta
        for jid, job in meta.store_jobs.items():
            if count[0] == case.fail_store:
                wm.failed_jobs.add(jid)
                failed_jobs.append(tuple(run.offload._jobs[jid].keys))
                events.append(dict(kind="transfer failed", req=job.req_id, job="store"))
            count[0] += 1
        for jid, job in meta.load_jobs.items():
            if case.fail_load and job.req_id == "later" and not load_done[0]:
                load_done[0] = True
                wm.failed_jobs.add(jid)
                kco.failed_recving = set(kco.failed_recving or ()) | {job.req_id}
                events.append(dict(kind="transfer failed", req=job.req_id, job="load"))
        return real(out, mro)

    run._update = update
    return failed_jobs


def lookahead_settable() -> bool:
    """The vLLM here has a lookahead-hash mode an offloading connector can
    run in: 0.34.0's ``VllmConfig.num_hash_lookahead_tokens`` is a field
    (resolved from the drafter and the connector's
    ``supports_lookahead_block_hashes``); 0.33.0's is a read-only property
    that is 0 under any KV connector."""
    from vllm.config import VllmConfig

    return not isinstance(getattr(VllmConfig, "num_hash_lookahead_tokens", None), property)


def _yield_req_data(out):
    """(req_id, block id groups, full table) of a ``SchedulerOutput``: new
    requests' whole tables, cached requests' new blocks (a resumed one's
    whole table)."""
    for nr in out.scheduled_new_reqs:
        yield nr.req_id, nr.block_ids, True
    cr = out.scheduled_cached_reqs
    resumed = getattr(cr, "resumed_req_ids", None)
    if resumed is None:  # older releases: a list of flags
        flags = list(getattr(cr, "resumed_from_preemption", [False] * len(cr.req_ids)))
    else:
        flags = [rid in resumed for rid in cr.req_ids]
    yield from zip(cr.req_ids, cr.new_block_ids, flags)


def _hash_block(run) -> int:
    from vllm.v1.core.kv_cache_utils import resolve_kv_cache_block_sizes

    return resolve_kv_cache_block_sizes(run.kv_cache_config, run.vllm_config)[1]


# ---------------------------------------------------------------------------
# The run over hypothesis cases (this process)
# ---------------------------------------------------------------------------


def _trace_json(t: Trace) -> dict:
    return dataclasses.asdict(t)


def _trace_of(d: dict) -> Trace:
    d = dict(d)
    d["groups"] = [Group(**g) for g in d["groups"]]
    return Trace(**d)


def run_here(n: int, seed: int, records: tuple[Release, ...] = RECORDS,
             lookahead_reachable: bool | None = None, retention_default=0) -> dict:
    """Draw ``n`` cases (hypothesis, seed ``seed``), run each on this
    process's vLLM, and compare with every record; for the nearest record
    when none agrees, shrink the first differing case (hypothesis). JSON."""
    import time

    import vllm
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import find

    from kvreach.vllm_harness.cpu_shims import hybrid_kv_cache_shim, write_offline_model

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    t0 = time.monotonic()
    if lookahead_reachable is None:
        lookahead_reachable = lookahead_settable()
    drawn = lookahead_reachable and lookahead_settable()
    failures = failures_settable()
    strategy = cases(drawn, retention_default, failures)
    out: dict = {"vllm": vllm.__version__, "cases": n, "seed": seed,
                 "lookahead_mode_drawn": drawn,
                 "lookahead_unchecked": lookahead_reachable and not drawn}
    with tempfile.TemporaryDirectory() as d, hybrid_kv_cache_shim():
        model_dir = write_offline_model(d)
        seen: list[tuple[Case, dict[str, Mismatch | None]]] = []
        skipped: list[str] = []

        junctions = [0]  # cases in which a lookup moved shared_prefix_boundary

        def collect(case):
            t = run_case(case, model_dir)
            if t.error and t.error.startswith("skipped"):
                skipped.append(t.error)
                return
            junctions[0] += any(e["kind"] == "lookup" and e["spb_after"] != e["spb_before"]
                                for e in t.events)
            seen.append((case, {r.name: explain(t, r) for r in records}))

        for edge in EDGE_CASES:  # the records' known edges first, then n drawn cases
            collect(edge)
        hseed(seed)(settings(max_examples=n, database=None, deadline=None,
                             phases=[Phase.generate],
                             suppress_health_check=list(HealthCheck))(given(case=strategy)(collect)))()
        out["ran"] = len(seen)
        out["skipped"] = len(skipped)
        out["skipped_why"] = sorted(set(skipped))[:3]
        out["endings"] = {e: sum(c.ending == e for c, _ in seen) for e in ENDINGS}
        out["lookahead_cases"] = sum(c.lookahead > 0 for c, _ in seen)
        out["dcp_cases"] = sum(c.dcp > 1 for c, _ in seen)
        out["junction_cases"] = junctions[0]
        out["failures_drawn"] = failures
        out["failed_store_cases"] = sum(c.fail_store >= 0 for c, _ in seen)
        out["failed_load_cases"] = sum(c.fail_load for c, _ in seen)
        out["errors"] = sum(1 for _, m in seen if any(x is not None and x.what == "run"
                                                      for x in m.values()))
        out["differing"] = {r.name: sum(m[r.name] is not None for _, m in seen) for r in records}
        agree = [r.name for r in records if out["differing"][r.name] == 0] if seen else []
        out["agree"] = agree
        out["first"] = {r.name: next((dict(case=c.short(), **dataclasses.asdict(m[r.name]))
                                      for c, m in seen if m[r.name] is not None), None)
                        for r in records}
        if seen and not agree:
            near = min(reversed(records), key=lambda r: out["differing"][r.name])
            out["nearest"] = near.name
            first = next(c for c, m in seen if m[near.name] is not None)
            try:
                def differs(c):
                    t = run_case(c, model_dir)
                    return not (t.error or "").startswith("skipped") and explain(t, near) is not None

                small = find(strategy, differs,
                             settings=settings(max_examples=n, database=None, deadline=None,
                                               suppress_health_check=list(HealthCheck)),
                             random=__import__("random").Random(seed))
            except Exception:  # noqa: BLE001 (no shrink found: the first one)
                small = first
            t = run_case(small, model_dir)
            m = explain(t, near)
            out["shrunk"] = {"case": dataclasses.asdict(small), "short": small.short(),
                             "mismatch": dataclasses.asdict(m) if m else None,
                             "explained_by": explaining_parts(t, near, records) if m else [],
                             "others": {r.name: (lambda x: x and x.detail)(explain(t, r))
                                        for r in records}}
    out["wall_s"] = round(time.monotonic() - t0, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m kvreach.conform.system")
    ap.add_argument("--cases", type=int, default=DEFAULT_CASES)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--records", default="", help="record module:attribute (tests plant one)")
    ap.add_argument("--lookahead", choices=("auto", "yes", "no"), default="auto",
                    help="the tree can run with lookahead hashes (read by kvreach.conform.switches)")
    ap.add_argument("--retention-default", default="0", help="the tree's retention default")
    a = ap.parse_args(argv)
    records = RECORDS
    if a.records:
        mod, attr = a.records.split(":")
        records = getattr(__import__(mod, fromlist=[attr]), attr)
    la = {"auto": None, "yes": True, "no": False}[a.lookahead]
    rd = None if a.retention_default == "None" else int(a.retention_default) \
        if a.retention_default.isdigit() else 0
    sys.stdout.write(json.dumps(run_here(a.cases, a.seed, records, la, rd)) + "\n")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
