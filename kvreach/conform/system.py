"""The system layer of ``kvreach conform``, the authority: the real
``Scheduler`` and stock ``OffloadingConnector`` of the vLLM under test (the
offload manager's answers scripted, as the replays do), driven over random
lifecycles and configurations drawn with hypothesis (a fixed seed, a stated
number of cases), compared with each release record's twin.

It reads only what a connector sees: each ``SchedulerOutput`` the scheduler
hands ``build_connector_meta`` (the scheduled tokens, the finished requests,
the block ids of each request, the full table of a new or resumed one), the
``Request`` objects (status, computed, prompt and total tokens, block
hashes), the manager calls (``lookup``, ``prepare_store``, ``prepare_load``)
and what ``get_num_new_matched_tokens`` returns. A refactor inside the
scheduler or the connector does not move it.

The twin is step-local: for every ``_build_store_jobs`` moment it computes,
from those observed values and its own store cursor, the chunks the record
offers each group (``kvreach.impl.release_rules``: storable chunks, the
store rule, the finish clamps, the null-block filter); for every lookup the
hit the record's lookup gives for the manager's answers at that moment
(``kvreach.vllm_harness.lookups.release_outcome``); the cursor moves as the
record says (reset or kept at a lookup, the hit's chunks after a loaded
start). So no scheduling policy is modelled twice, and a difference is a
difference in what is stored or hit.

Run :func:`run_system` (any process; it starts one python with the vLLM
under test) or ``python -m kvreach.conform.system`` (the process with the
vLLM under test), which prints one JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from kvreach.releases import RELEASES, Release

DEFAULT_CASES = 60
DEFAULT_SEED = 0
ENDINGS = ("finish", "abort", "error", "preempt")


# ---------------------------------------------------------------------------
# A case: the configuration and lifecycle hypothesis draws
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    full_block: int
    swa_block: int
    window: int
    extra: int
    eagle: bool
    blocks_per_chunk: int
    retention: int | None  # multiple of the chunk lcm, or None
    prompt: int
    budget: int
    decode: int
    ending: str  # finish | abort | error | preempt
    end_after: int  # steps before the abort / error / preemption
    async_scheduling: bool
    prompt_only: bool
    later: int  # the later request's length (a cut or an extension of the prompt)
    max_load: int | None
    max_offload: int | None
    lookahead: int  # num_hash_lookahead_tokens (0: legacy hashes)
    publish: bool = True  # the manager answers HIT for the request's own stores while it runs

    def short(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())


def cases(lookahead: bool, retention_default=0):
    """The hypothesis strategy of :class:`Case` (``lookahead``: the vLLM
    under test has lookahead block hashes, so that mode is drawn too, with
    an EAGLE group, as vLLM turns it on; ``retention_default``: the tree's
    ``prefix_cache_retention_interval`` default, drawn more often)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        fa = d(st.sampled_from([4, 8, 12, 16]))
        sb = d(st.sampled_from([2, 4, 8]))
        window = d(st.integers(2, 40))
        extra = d(st.sampled_from([0, 0, 3]))
        eagle = d(st.booleans())
        bpc = d(st.sampled_from([1, 1, 2]))
        choices = [None, None, 0, 1, 2]
        if retention_default is None or retention_default == 0:
            choices.append(retention_default)
        retention = d(st.sampled_from(choices))
        if retention:
            retention *= math.lcm(sb * bpc, fa * bpc)
        prompt = d(st.integers(1, 240))
        budget = d(st.integers(16, 160))  # vLLM: at least max_num_seqs (16)
        decode = d(st.integers(0, 8))
        ending = d(st.sampled_from(ENDINGS))
        steps = -(-prompt // budget) + decode
        end_after = d(st.integers(0, steps))
        later = d(st.integers(1, prompt + 24))
        max_load = d(st.one_of(st.none(), st.none(), st.integers(0, prompt)))
        max_offload = d(st.one_of(st.none(), st.none(), st.none(), st.integers(0, prompt)))
        la = d(st.sampled_from([0, 1])) if lookahead and eagle else 0
        return Case(fa, sb, window, extra, eagle, bpc, retention, prompt, budget, decode,
                    ending, end_after, d(st.booleans()), d(st.booleans()), later, max_load,
                    max_offload, la, d(st.booleans()))

    return draw()


# ---------------------------------------------------------------------------
# What the run observed (plain data: it crosses the process boundary)
# ---------------------------------------------------------------------------


@dataclass
class Group:
    kind: str  # "full" | "swa"
    block: int  # tokens per block (x dcp)
    window: int | None
    extra: int
    eagle: bool


@dataclass
class Trace:
    groups: list[Group]
    blocks_per_chunk: int
    alignment_tokens: int | None
    retention: int | None
    prompt_only: bool
    hash_block: int
    lookahead: int
    events: list[dict] = field(default_factory=list)
    error: str | None = None  # the run itself failed (vLLM raised)


# ---------------------------------------------------------------------------
# The twin over a trace (no vLLM)
# ---------------------------------------------------------------------------


@dataclass
class Mismatch:
    event: int
    what: str  # "stores" | "lookup hit" | "run"
    detail: str
    parts: tuple[str, ...]  # the record parts that decide this event


_STORE_PARTS = ("store_rule", "mask_window_extra", "eagle_tail_lifted_at_finish", "storable_keyed_cap",
                "finish_clamp", "finish_computed_clamp", "null_block_filter", "cursor_on_lookup",
                "retention_interval", "lookahead_hashes")
_LOOKUP_PARTS = ("lookup_window_extra", "padded_initial_window", "pending", "eagle_widening",
                 "max_num_new_tokens", "max_load_tokens", "swa_reduction_before_caps",
                 "lookahead_hashes")


def _group_config(t: Trace, g: Group, r: Release, lookahead_mode: bool):
    from kvreach.params import GroupConfig

    eagle = g.eagle and not lookahead_mode
    if g.kind == "full":
        return GroupConfig(g.block, 1, None, t.blocks_per_chunk, 1, eagle)
    ri = t.retention if (r.retention_interval and t.alignment_tokens is not None) else None
    return GroupConfig(g.block, g.window, t.alignment_tokens, t.blocks_per_chunk, 1, eagle, ri,
                       g.extra)


def _offered(t: Trace, r: Release, gi: int, ctx: dict, cursor: int) -> tuple[tuple[int, ...], int]:
    """The chunks record ``r``'s ``_build_store_jobs`` offers group ``gi``
    of one request at one step, and the cursor after."""
    from kvreach.impl import release_rules as rel
    from kvreach.params import RequestConfig

    g = t.groups[gi]
    lookahead_mode = bool(t.lookahead) and r.lookahead_hashes
    gc = _group_config(t, g, r, lookahead_mode)
    bpc = t.blocks_per_chunk
    C = g.block * bpc
    req = RequestConfig(ctx["P"], ctx["max_offload"], t.prompt_only)
    kind = ctx["state"]
    if kind == "aborted":
        after = ctx["computed"]
    elif kind == "finished":
        after = rel.finish_tokens(r, req, ctx["nt"])
        if r.finish_computed_clamp:
            after = min(ctx["computed"], after)
    else:
        after = ctx["computed"] + ctx["sched"]
    hashed = ctx["hashes"] * t.hash_block
    off = req.offloadable(after, ctx["nt"])
    if lookahead_mode:
        off = min(off, hashed)
    finished = kind != "running"
    n = rel.storable_chunks(r, gc, req, off, finished)
    blocks = ctx["blocks"][gi]
    n = min(n, len(blocks) // bpc)
    if r.storable_keyed_cap:
        n = min(n, hashed // C)
    if g.kind == "full":
        chunks = tuple(c for c in range(cursor, n) if blocks[(c + 1) * bpc - 1] != 0)
        return chunks, max(cursor, n)
    w = rel.store_step(r, gc, req, cursor, n, finished)
    null = frozenset(i for i, b in enumerate(blocks) if b == 0)
    return rel.offered_chunks(r, w, null, bpc), max(cursor, n)


def _twin_hit(t: Trace, r: Release, obs: dict):
    from kvreach.impl import lookup as lk
    from kvreach.impl import release as release_params

    lookahead_mode = bool(t.lookahead) and r.lookahead_hashes
    groups = [release_params.lookup_group(r, g.block, t.blocks_per_chunk,
                                          g.window if g.kind == "swa" else None,
                                          g.extra if g.kind == "swa" else 0,
                                          g.eagle and not lookahead_mode) for g in t.groups]
    content = lk.StoreContent(hit=frozenset(map(tuple, obs["hit"])),
                              pending=frozenset(map(tuple, obs["pending"])),
                              retry=frozenset(map(tuple, obs["retry"])))
    req = lk.LaterRequest(obs["num_tokens"], obs["local"], obs["max_load"])
    return lk.lookup(groups, req, content, parts=release_params.lookup_parts(r)).hit_tokens


def explaining_parts(t: Trace, r: Release) -> list[str]:
    """The parts of record ``r`` that explain its first difference on ``t``:
    each ``part=value`` for which ``r`` with that one part changed agrees
    with the whole trace (values: the other records' and the flipped bool)."""
    from kvreach import releases as R

    known = [v for v in vars(R).values() if isinstance(v, Release)]
    out = []
    for part, value in r.parts().items():
        alts = {getattr(k, part) for k in known} | ({not value} if isinstance(value, bool) else set())
        for alt in sorted(alts - {value}, key=repr):
            if explain(t, dataclasses.replace(r, **{part: alt})) is None:
                out.append(f"{part}={alt!r} (the record has {value!r})")
    return out


def explain(t: Trace, r: Release) -> Mismatch | None:
    """The first event of ``t`` on which record ``r``'s twin differs from
    what vLLM did (None: every store and every hit agrees)."""
    if t.error is not None:
        return Mismatch(-1, "run", t.error, ())
    cursors: dict[str, list[int]] = {}
    for i, ev in enumerate(t.events):
        rid = ev["req"]
        cur = cursors.setdefault(rid, [0] * len(t.groups))
        if ev["kind"] == "lookup":
            cur[:] = [0 if r.cursor_on_lookup == "reset to 0" else c for c in cur]
            try:
                want = _twin_hit(t, r, ev)
            except Exception as e:  # noqa: BLE001 (a record the twin refuses is a difference)
                want = f"twin raised {type(e).__name__}: {e}"
            if want != ev["hit_tokens"]:
                return Mismatch(i, "lookup hit", f"request {rid} ({ev['num_tokens']} tokens, "
                                f"{ev['local']} local, max_load_tokens {ev['max_load']}): vLLM "
                                f"{ev['hit_tokens']}, {r.name} {want}", _LOOKUP_PARTS)
            if ev["hit_tokens"]:
                cached = ev["local"] + ev["hit_tokens"]
                cur[:] = [-(-cached // (g.block * t.blocks_per_chunk)) for g in t.groups]
        elif ev["kind"] == "reset":  # the preemption: the cursor moves at the next lookup
            continue
        else:  # a request's stores at one build_connector_meta
            for gi in range(len(t.groups)):
                try:
                    want, nxt = _offered(t, r, gi, ev, cur[gi])
                except Exception as e:  # noqa: BLE001
                    return Mismatch(i, "stores", f"twin raised {type(e).__name__}: {e}", _STORE_PARTS)
                got = tuple(sorted(ev["stored"].get(str(gi), ())))
                if got != tuple(want):
                    return Mismatch(i, "stores", f"request {rid} ({ev['state']}, {ev['P']}-token "
                                    f"prompt, {ev['nt']} tokens, {ev['computed']} computed, "
                                    f"{ev['sched']} scheduled), group {gi} "
                                    f"({t.groups[gi].kind}): vLLM offers chunks {list(got)}, "
                                    f"{r.name} {list(want)}", _STORE_PARTS)
                cur[gi] = nxt
    return None


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

    _lookahead_api_fix()
    groups = [full(case.full_block), swa(case.swa_block, case.window, extra=case.extra)]
    if case.eagle:
        groups.append(swa(case.swa_block, case.window, eagle=True, extra=case.extra))
    kw = {"hash_lookahead_tokens": case.lookahead} if lookahead_settable() else {}
    setup = Setup(tuple(groups), budget=case.budget, blocks_per_chunk=case.blocks_per_chunk,
                  async_scheduling=case.async_scheduling, retention_interval=case.retention,
                  offload_prompt_only=case.prompt_only, num_gpu_blocks=2000, **kw)
    try:
        run = SchedulerRun(setup, STOCK, model_dir)
    except Exception as e:  # noqa: BLE001 (a configuration vLLM refuses: not a case)
        t = Trace([], 1, None, None, True, 1, 0)
        t.error = f"skipped: vLLM refuses the configuration ({type(e).__name__}: {e})"
        return t
    hash_block = _hash_block(run)
    trace = Trace([Group(g.kind, g.block_size, g.window, g.extra_retained_tokens, g.eagle)
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
                           retry=sorted(o.content.retry)))
        return o

    rec._observe = observe
    connector = run.connector
    real_build = connector.build_connector_meta

    def build(scheduler_output):
        for rid, ids, full_table in _yield_req_data(scheduler_output):
            if full_table or rid not in tables:
                tables[rid] = [list(g) for g in ids] if ids else [[] for _ in setup.groups]
            elif ids:
                for t_, new in zip(tables[rid], ids):
                    t_.extend(new)
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

    def refresh(publish=case.publish):
        if not publish:
            return
        rec.answers.update({k: LookupResult.HIT for ks in rec.stored_keys.values() for k in ks})

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
        for _ in range(10_000):
            if not run.busy():
                break
            if not run.scheduler.requests and not run.scheduler.finished_req_ids:
                run.flush()
                if not run.busy():
                    break
            run.step()
            refresh()
        # the later request: the prompt cut or extended, the GPU prefix cache reset
        refresh(True)
        run.scheduler.reset_prefix_cache()
        tokens = prompt_token_ids(case.prompt)
        later = (tokens + prompt_token_ids(case.later, seed=7919))[:case.later]
        p2 = {} if case.max_load is None else {"max_load_tokens": case.max_load}
        run.add_request("later", case.later, max_tokens=1, kv_transfer_params=p2 or None,
                        token_ids=later)
        for _ in range(10_000):
            if not run.busy():
                break
            if not run.scheduler.requests and not run.scheduler.finished_req_ids:
                run.flush()
                if not run.busy():
                    break
            run.step()
            refresh()
    except Exception as e:  # noqa: BLE001 (vLLM under test raised: reported)
        trace.error = f"vLLM raised {type(e).__name__}: {e}"
    return trace


def lookahead_settable() -> bool:
    """The vLLM here has a lookahead-hash mode an offloading connector can
    run in: 0.34.0's ``VllmConfig.num_hash_lookahead_tokens`` is a field
    (resolved from the drafter and the connector's
    ``supports_lookahead_block_hashes``); 0.33.0's is a read-only property
    that is 0 under any KV connector."""
    from vllm.config import VllmConfig

    return not isinstance(getattr(VllmConfig, "num_hash_lookahead_tokens", None), property)


def _lookahead_api_fix() -> None:
    """The harness's ``vllm_api.HAS_HASH_LOOKAHEAD`` is True on 0.33.0 too
    (its block hasher takes the argument), where the config attribute is a
    read-only property: there, setting 0 is a no-op."""
    from kvreach.vllm_harness import vllm_api

    if not lookahead_settable() and vllm_api.HAS_HASH_LOOKAHEAD:
        vllm_api.HAS_HASH_LOOKAHEAD = False


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


def run_here(n: int, seed: int, records: tuple[Release, ...] = RELEASES,
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
    strategy = cases(drawn, retention_default)
    out: dict = {"vllm": vllm.__version__, "cases": n, "seed": seed,
                 "lookahead_mode_drawn": drawn,
                 "lookahead_unchecked": lookahead_reachable and not drawn}
    with tempfile.TemporaryDirectory() as d, hybrid_kv_cache_shim():
        model_dir = write_offline_model(d)
        seen: list[tuple[Case, dict[str, Mismatch | None]]] = []
        skipped: list[str] = []

        @hseed(seed)
        @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def collect(case):
            t = run_case(case, model_dir)
            if t.error and t.error.startswith("skipped"):
                skipped.append(t.error)
                return
            seen.append((case, {r.name: explain(t, r) for r in records}))

        collect()
        out["ran"] = len(seen)
        out["skipped"] = len(skipped)
        out["skipped_why"] = sorted(set(skipped))[:3]
        out["endings"] = {e: sum(c.ending == e for c, _ in seen) for e in ENDINGS}
        out["lookahead_cases"] = sum(c.lookahead > 0 for c, _ in seen)
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
                             "explained_by": explaining_parts(t, near) if m else [],
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
    records = RELEASES
    if a.records:
        mod, attr = a.records.split(":")
        records = getattr(__import__(mod, fromlist=[attr]), attr)
    la = {"auto": None, "yes": True, "no": False}[a.lookahead]
    rd = None if a.retention_default == "None" else int(a.retention_default) \
        if a.retention_default.isdigit() else 0
    sys.stdout.write(json.dumps(run_here(a.cases, a.seed, records, la, rd)) + "\n")
    return 0


# ---------------------------------------------------------------------------
# From any process: a python with the vLLM under test
# ---------------------------------------------------------------------------


@dataclass
class SystemVerdict:
    data: dict | None
    missing: str | None = None  # why it could not run (cannot decide)
    switches: object = None  # kvreach.conform.switches.Switches of the tree

    @property
    def agree(self) -> list[str]:
        return [] if self.data is None else self.data["agree"]


def _overlay(tree_root: Path, installed: Path, dest: Path) -> Path:
    """``dest/vllm``: the tree's Python files laid over the installed vLLM
    (whose compiled parts and data files it reuses)."""
    out = dest / "vllm"
    for p in installed.rglob("*"):
        if p.is_dir() or "__pycache__" in p.parts:
            continue
        rel = p.relative_to(installed)
        q = out / rel
        q.parent.mkdir(parents=True, exist_ok=True)
        mine = tree_root / "vllm" / rel
        if p.suffix == ".py" and mine.is_file():
            q.write_bytes(mine.read_bytes())
        elif p.suffix == ".py" and not mine.exists():
            q.symlink_to(p)
        else:
            q.symlink_to(p)
    for p in (tree_root / "vllm").rglob("*.py"):
        q = out / p.relative_to(tree_root / "vllm")
        if not q.exists():
            q.parent.mkdir(parents=True, exist_ok=True)
            q.write_bytes(p.read_bytes())
    return dest


def unpack_wheel(wheel: Path, dest: Path) -> Path:
    """The wheel's Python files under ``dest`` (``dest/vllm/...``)."""
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                z.extract(name, dest)
    return dest


def run_system(tree_root: Path | None, cases: int = DEFAULT_CASES, seed: int = DEFAULT_SEED,
               python: str | None = None, records: str = "", switches=None) -> SystemVerdict:
    """The system layer on ``tree_root`` (a directory with ``vllm/`` at its
    top: a source tree or an unpacked wheel; None: the installed vLLM) laid
    over the vLLM installed for ``python`` (default: this one)."""
    import importlib.util

    python = python or sys.executable
    spec = importlib.util.find_spec("vllm")
    if python == sys.executable and spec is None:
        return SystemVerdict(None, "no vLLM installed to run the tree on (the system layer "
                             "drives a real Scheduler)")
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        if tree_root is not None:
            installed = Path(list(spec.submodule_search_locations)[0])
            _overlay(Path(tree_root), installed, Path(tmp))
            env["PYTHONPATH"] = tmp + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [python, "-m", "kvreach.conform.system", "--cases", str(cases), "--seed", str(seed)]
        if records:
            cmd += ["--records", records]
        if switches is not None:
            cmd += ["--lookahead", "yes" if switches.lookahead_reachable else "no",
                    "--retention-default", str(switches.retention_default)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
    if p.returncode != 0 or not p.stdout.strip():
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return SystemVerdict(None, f"the vLLM under test does not run here: {last}", switches)
    return SystemVerdict(json.loads(p.stdout.strip().splitlines()[-1]), switches=switches)


if __name__ == "__main__":
    raise SystemExit(main())
