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
under test) or ``python -m kvreach.vllm_harness.conform_run`` (the process
with the vLLM under test, which drives it: :mod:`kvreach.vllm_harness.
conform_run`), which prints one JSON object. This module imports no vLLM.
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

from kvreach.releases import Release

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
    dcp: int = 1  # decode_context_parallel_size (a block is block_size * dcp tokens)
    fail_store: int = -1  # the worker reports this store job of the run failed (-1: none)
    fail_load: bool = False  # the worker reports the later request's first load failed
    recompute: bool = False  # kv_load_failure_policy "recompute" (else vLLM's default "fail")

    def short(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items())


def cases(lookahead: bool, retention_default=0, failures: bool = False, dcp: bool = False):
    """The hypothesis strategy of :class:`Case` (``lookahead``: the vLLM
    under test has lookahead block hashes, so that mode is drawn too, with
    an EAGLE group, as vLLM turns it on; ``retention_default``: the tree's
    ``prefix_cache_retention_interval`` default, drawn more often;
    ``failures``: its worker can report a transfer failed
    (``OffloadingWorkerMetadata.failed_jobs``, 0.34.0), so failed stores and
    loads are drawn; ``dcp``: decode context parallelism of 2 is drawn, off
    by default: vLLM 0.34.0 refuses DCP with a sliding-window group, "DCP
    with hybrid KV cache layouts only supports full-attention, Mamba, and
    replicated draft groups", and every case has one)."""
    from hypothesis import strategies as st

    @st.composite
    def draw(d):
        fa = d(st.sampled_from([4, 8, 12, 16]))
        sb = d(st.sampled_from([2, 4, 8]))
        dcp_size = d(st.sampled_from([1, 1, 1, 2])) if dcp else 1
        window = d(st.integers(2, 40))
        extra = d(st.sampled_from([0, 0, 3]))
        eagle = d(st.booleans())
        bpc = d(st.sampled_from([1, 1, 2]))
        choices = [None, None, 0, 1, 2]
        if retention_default is None or retention_default == 0:
            choices.append(retention_default)
        retention = d(st.sampled_from(choices))
        if retention:
            retention *= math.lcm(sb * bpc * dcp_size, fa * bpc * dcp_size)
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
        head = (fa, sb, window, extra, eagle, bpc, retention, prompt, budget, decode, ending,
                end_after, d(st.booleans()), d(st.booleans()), later, max_load, max_offload, la,
                d(st.booleans()))
        fail_store, fail_load, recompute = -1, False, False
        if failures:
            fail_store = d(st.sampled_from([-1, -1, 0, 1, 2]))
            fail_load = d(st.booleans())
            recompute = fail_load and d(st.booleans())
        return Case(*head, dcp_size, fail_store, fail_load, recompute)

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
    what: str  # "stores" | "lookup hit" | "junction" | "store completion" | "run"
    detail: str
    parts: tuple[str, ...]  # the record parts that decide this event


_STORE_PARTS = ("store_rule", "mask_window_extra", "eagle_tail_lifted_at_finish", "storable_keyed_cap",
                "finish_clamp", "finish_computed_clamp", "null_block_filter", "cursor_on_lookup",
                "retention_interval", "lookahead_hashes")
_LOOKUP_PARTS = ("lookup_window_extra", "padded_initial_window", "pending", "eagle_widening",
                 "max_num_new_tokens", "max_load_tokens", "swa_reduction_before_caps",
                 "lookahead_hashes", "failed_transfers")


def _group_config(t: Trace, g: Group, r: Release, lookahead_mode: bool):
    from kvreach.params import GroupConfig

    # under lookahead hashes an EAGLE group is a plain SWA group but for its
    # final tail (GroupConfig.legacy_eagle): impl's one mapping of the mode
    if g.kind == "full":
        return GroupConfig(g.block, 1, None, t.blocks_per_chunk, 1, g.eagle,
                           lookahead_hashes=lookahead_mode)
    ri = t.retention if (r.retention_interval and t.alignment_tokens is not None) else None
    return GroupConfig(g.block, g.window, t.alignment_tokens, t.blocks_per_chunk, 1, g.eagle, ri,
                       g.extra, lookahead_hashes=lookahead_mode)


def _offered(t: Trace, r: Release, gi: int, ctx: dict, cursor: int) -> tuple[tuple[int, ...], int]:
    """The chunks record ``r``'s ``_build_store_jobs`` offers group ``gi``
    of one request at one step, and the cursor after."""
    from kvreach.impl import release_rules as rel
    from kvreach.impl.lifecycle import offered_chunks
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
        after = rel.finish_tokens(r, req, ctx["nt"], ctx["computed"])
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
    if lookahead_mode:  # the step reads the request at its hashed end (RequestConfig.at)
        cap = hashed if ctx["max_offload"] is None else min(hashed, ctx["max_offload"])
        req = RequestConfig(ctx["P"], cap, t.prompt_only)
    w = rel.store_step(r, gc, req, cursor, n, finished)
    null = frozenset(i for i, b in enumerate(blocks) if b == 0)
    # the request's shared_prefix_boundary as the connector reads it (set by
    # the GPU prefix cache and, in 0.34.0, by an offload lookup's junction)
    spb = ctx.get("shared_prefix_boundary") or 0
    if r.store_rule == "lookup-window" and spb and gc.retention_interval is not None:
        w = _with_lookup_boundary(w, rel.mask_group(r, gc), spb)
    offered = offered_chunks(r.store_rule, r, rel.mask_group(r, gc), w, n, null, spb)
    return offered, max(cursor, n)


def _with_lookup_boundary(w, g, boundary_tokens: int):
    """``lookup-window``'s step ``w`` with one more boundary a later lookup
    ends at: the patch's ``lookup_boundaries`` hold the request's
    ``shared_prefix_boundary`` beside the repeated prompt's end. Each
    boundary's run is kvreach's keep decision
    (``rules.lookup_window_block_mask``, whose retention boundary is the one
    given), so the union over both, block by block, is the step's mask or
    that decision at the junction."""
    from kvreach.impl.rules import lookup_window_block_mask

    if w.block_mask is None:  # dense: every chunk already kept
        return w
    bpc = g.blocks_per_chunk
    at_junction = lookup_window_block_mask(w.start_chunk, w.end_chunk, g, boundary_tokens)
    mask = (None if at_junction is None
            else tuple(a or b for a, b in zip(w.block_mask, at_junction)))
    span = range(w.start_chunk, w.end_chunk)
    return dataclasses.replace(
        w, block_mask=mask,
        chunks=tuple(c for c in span
                     if mask is None or any(mask[(c - w.start_chunk) * bpc:(c - w.start_chunk + 1) * bpc])))


def _lookup_inputs(t: Trace, r: Release, obs: dict):
    """Record ``r``'s lookup groups, the looking-up request and the
    manager's answers of one observed lookup (impl's lookup types)."""
    from kvreach.impl import lookup as lk
    from kvreach.impl import release as release_params

    lookahead_mode = bool(t.lookahead) and r.lookahead_hashes
    groups = [release_params.lookup_group(r, g.block, t.blocks_per_chunk,
                                          g.window if g.kind == "swa" else None,
                                          g.extra if g.kind == "swa" else 0,
                                          g.eagle) for g in t.groups]
    content = lk.StoreContent(hit=frozenset(map(tuple, obs["hit"])),
                              pending=frozenset(map(tuple, obs["pending"])),
                              retry=frozenset(map(tuple, obs["retry"])))
    # under lookahead hashes the request has fewer keys and an EAGLE group
    # no widen / pop (LaterRequest.hash_lookahead_tokens: impl's one mapping)
    req = lk.LaterRequest(obs["num_tokens"], obs["local"], obs["max_load"],
                          hash_lookahead_tokens=t.lookahead if lookahead_mode else 0)
    return groups, req, content


def _twin_hit(t: Trace, r: Release, obs: dict):
    from kvreach.impl import lookup as lk
    from kvreach.impl import release as release_params

    groups, req, content = _lookup_inputs(t, r, obs)
    return lk.lookup(groups, req, content, parts=release_params.lookup_parts(r)).hit_tokens


def full_attention_hit_boundary(t: Trace, r: Release, obs: dict) -> int | None:
    """``_lookup_complete_chunks``' ``full_attention_hit_boundary`` (0.34.0):
    the hit bound the full-attention groups leave when the first
    sliding-window group is reached in the first pass (after that group's
    own key cap and ``max_load_tokens`` rounding); 0 when a full group
    deferred or there is none; None when the lookup ended before (a full
    group hit less than a chunk). Built from impl's lookup pieces (its
    caps, ``num_keys``, ``maximal_prefix_lookup``); impl's lookup itself has
    no junction, this is the one place it is computed."""
    from kvreach.impl import lookup as lk
    from kvreach.params import cdiv

    groups, req, content = _lookup_inputs(t, r, obs)
    full, swa = lk.lookup_order(groups)
    if not swa:
        return None
    local = req.local_hit_tokens
    max_load = req.max_load_tokens if r.max_load_tokens else None
    max_hit = req.num_tokens - 1 if r.swa_reduction_before_caps else req.num_tokens
    if max_load is not None:
        max_hit = min(max_hit, local + max_load)
    if not r.swa_reduction_before_caps:
        max_hit -= 1
    defer = False
    for gi in (*full, swa[0]):
        g = groups[gi]
        C = g.chunk_tokens
        n_keys = lk.num_keys(g, req)
        max_hit = min(max_hit, n_keys * C)
        if max_load is not None:
            max_hit = max_hit // C * C
        if max_hit - local < C:
            return None
        if g.is_swa:
            return max_hit if full and not defer else 0
        start = local // C
        hit_chunks = lk.maximal_prefix_lookup(
            [content.answer(gi, c) for c in range(start, min(cdiv(max_hit, C), n_keys))])
        if hit_chunks == 0:
            return None
        if hit_chunks is None:
            defer = True
            continue
        max_hit = min(max_hit, C * (start + hit_chunks))
        if max_hit - local < C:
            return None
    return None


def junction_after_lookup(t: Trace, r: Release, obs: dict, hit: int | None) -> int:
    """``Request.shared_prefix_boundary`` after the lookup ``obs`` under
    record ``r``: with ``junction_on_lookup`` and a retention interval, a
    hit a sparse group cut below the full-attention boundary pins it
    (``_maybe_register_shared_prefix_junction``, never lowering one the GPU
    prefix cache set); else as it was before."""
    before = obs.get("spb_before") or 0
    if not r.junction_on_lookup or t.retention is None or hit is None:
        return before
    b = full_attention_hit_boundary(t, r, obs)
    if b is None or b <= obs["local"] + hit:
        return before
    return max(before, b)


def explaining_parts(t: Trace, r: Release, records: tuple[Release, ...] | None = None) -> list[str]:
    """The parts of record ``r`` that explain its first difference on ``t``:
    each ``part=value`` for which ``r`` with that one part changed agrees
    with the whole trace (values: those of the release records and rule
    twins, ``kvreach.conform.records``, and of ``records``, and the flipped
    bool)."""
    from kvreach.conform.records import RECORDS

    known = (*RECORDS, *(records or ()))
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
    load_failed: set[str] = set()
    zeroed: dict[str, set[tuple[int, int, int]]] = {}  # (group, position, block id)
    for i, ev in enumerate(t.events):
        rid = ev["req"]
        cur = cursors.setdefault(rid, [0] * len(t.groups))
        if ev["kind"] == "stale":  # the connector zeroes them from its store cursor on
            start = cur[ev["group"]] * t.blocks_per_chunk
            zeroed.setdefault(rid, set()).update(
                (ev["group"], j, b) for j, b in ev["blocks"] if j >= start)
            continue
        if ev["kind"] == "transfer failed":  # the worker's report (0.34.0's failed_jobs)
            if ev["job"] == "load" and r.failed_transfers:
                load_failed.add(rid)  # RequestOffloadState.load_failed
            continue
        if ev["kind"] == "store completed":
            # a failed store job is dropped (complete_store(success=False)),
            # else published
            want_ok = not (ev["failed_job"] and r.failed_transfers)
            if ev["success"] != want_ok:
                return Mismatch(i, "store completion", f"request {rid}: vLLM completes "
                                f"{ev['keys']} key(s) of a store job the worker reported "
                                f"{'failed' if ev['failed_job'] else 'done'} with success="
                                f"{ev['success']}, {r.name} success={want_ok}",
                                ("failed_transfers",))
            continue
        if ev["kind"] == "lookup":
            cur[:] = [0 if r.cursor_on_lookup == "reset to 0" else c for c in cur]
            try:
                # after a failed load every lookup of the request is 0
                want = 0 if rid in load_failed else _twin_hit(t, r, ev)
            except Exception as e:  # noqa: BLE001 (a record the twin refuses is a difference)
                want = f"twin raised {type(e).__name__}: {e}"
            if want != ev["hit_tokens"]:
                return Mismatch(i, "lookup hit", f"request {rid} ({ev['num_tokens']} tokens, "
                                f"{ev['local']} local, max_load_tokens {ev['max_load']}): vLLM "
                                f"{ev['hit_tokens']}, {r.name} {want}", _LOOKUP_PARTS)
            if "spb_after" in ev and rid not in load_failed:
                spb = junction_after_lookup(t, r, ev, want)
                if spb != ev["spb_after"]:
                    return Mismatch(i, "junction", f"request {rid} ({ev['num_tokens']} tokens, "
                                    f"{ev['local']} local, hit {want}, retention interval "
                                    f"{t.retention}): vLLM leaves shared_prefix_boundary "
                                    f"{ev['spb_after']}, {r.name} {spb} (it was "
                                    f"{ev['spb_before']})", ("junction_on_lookup",))
            if ev["hit_tokens"]:
                cached = ev["local"] + ev["hit_tokens"]
                cur[:] = [-(-cached // (g.block * t.blocks_per_chunk)) for g in t.groups]
        elif ev["kind"] == "reset":  # the preemption: the cursor moves at the next lookup
            continue
        else:  # a request's stores at one build_connector_meta
            blocks = [list(b) for b in ev["blocks"]]
            for g_, j, b in zeroed.get(rid, ()):
                if j < len(blocks[g_]) and blocks[g_][j] == b:  # still that stale entry
                    blocks[g_][j] = 0
            ev = dict(ev, blocks=blocks)
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
        cmd = [python, "-m", "kvreach.vllm_harness.conform_run", "--cases", str(cases), "--seed", str(seed)]
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


# Cases every system run starts with, before the drawn ones: the edges on
# which the records are known to differ, so that a tree of either side is
# told apart whatever the draw (etcd-io/raft's scripted scenarios beside its
# random traces). Each is what a connector sees of one release change.
EDGE_CASES = (
    # FINISHED_ERROR after a 17-token step of a 24-token prompt (blocks of 2):
    # 0.29.0 .. 0.33.0 store chunk 8, whose token 17 was never computed
    # (F13); 0.34.0's finish clamp by num_computed_tokens stores nothing then.
    Case(2, 2, 4, 0, False, 1, None, 24, 17, 0, "error", 1, False, True, 24, None, None, 0),
    # an 8-token prompt stored, the same 8 tokens looked up with
    # max_load_tokens 4 (full 4, SWA 4, window 4): 0.33.0 takes the SWA 1
    # after the cap (hit 0), 0.34.0 before it (hit 4).
    Case(4, 4, 4, 0, False, 1, None, 8, 16, 0, "finish", 0, False, True, 8, 4, None, 0),
    # kvreach's lookup-window patch against the release's mask: a 1-token
    # request, then a 2-token one (full 4, SWA 2, window 2, no alignment
    # chunk reached): 0.34.0's mask offers SWA chunk 0 of the later request,
    # lookup-window keeps only the runs before a boundary a lookup ends at.
    Case(4, 2, 2, 0, False, 1, None, 1, 16, 0, "finish", 0, False, False, 2, None, None, 0, False),
    # a 4-token prompt stored under retention interval 0 (nothing published
    # while it runs), then a 5-token request whose SWA group hits nothing
    # below the full-attention boundary 4: 0.34.0's lookup pins that
    # boundary as the junction (shared_prefix_boundary 4), 0.33.0's does not.
    Case(4, 2, 2, 0, False, 1, 0, 4, 16, 0, "finish", 0, False, False, 5, None, None, 0, False),
)
