"""The roles: for each checked piece of vLLM, its seeded random inputs, the
tree's value (the extracted function driven with stubs) and a record's twin
(``kvreach.impl`` with the record's parts as parameters)."""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import operator
import random
import types
from dataclasses import dataclass
from typing import Callable

from kvreach.conform.extract import Extracted
from kvreach.conform.stubs import (
    FullAttentionSpec,
    RequestStatus,
    SlidingWindowSpec,
    Stub,
    ManagerStub,
    Quiet,
)
from kvreach.impl import lookup as lk
from kvreach.impl import release as release_params
from kvreach.impl import mask
from kvreach.impl import release_rules as rel
from kvreach.params import GroupConfig, ParamError, RequestConfig, cdiv
from kvreach.releases import Release

# Record parts no role of this layer checks: from_spec-level configuration,
# and what 0.34.0 switches in the vLLM config or in code outside the roles
# (lookahead hashes, the shared-prefix junction, failed transfers); the
# system layer (:mod:`.system`) sees them through the real scheduler.
UNCHECKED = ("retention_interval", "swa_only_alignment", "unannotated_spec_decode_eagle",
             "lookahead_hashes", "junction_on_lookup", "failed_transfers")
# 0.34.0's SWA ``-1`` before the caps: the lookup role checks it once
# impl's lookup parameters carry it (``LookupParts``); until then unchecked.
_LOOKUP_NEW = tuple(p for p in ("swa_reduction_before_caps",)
                    if p in {f.name for f in dataclasses.fields(lk.LookupParts)})
UNCHECKED += tuple(p for p in ("swa_reduction_before_caps",) if p not in _LOOKUP_NEW)


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------


def _group(rnd: random.Random, *, retention: bool = True, eagle: bool = True) -> GroupConfig:
    """A random SWA group with an alignment (the full-attention chunk)."""
    while True:
        bs = rnd.choice((1, 2, 4))
        dcp = rnd.choice((1, 1, 2))
        bpc = rnd.choice((1, 1, 2, 3))
        W = rnd.randint(1, 24)
        extra = rnd.choice((0, 0, rnd.randint(1, 8)))
        C = bs * dcp * bpc
        align = C * rnd.choice((1, 2, 3, 4, 6, 8)) if rnd.random() < 0.9 else rnd.randint(1, 40)
        ri = None
        if retention and rnd.random() < 0.3:
            ri = C * rnd.choice((0, 2, 4, 8))
        try:
            return GroupConfig(bs, W, align, bpc, dcp, eagle and rnd.random() < 0.25, ri, extra)
        except ParamError:
            continue


def _answers(rnd: random.Random, n: int, p_hit: float = 0.75) -> list[lk.Answer]:
    out = []
    for _ in range(n):
        x = rnd.random()
        out.append(lk.Answer.HIT if x < p_hit else lk.Answer.MISS if x < p_hit + 0.12
                   else lk.Answer.HIT_PENDING if x < p_hit + 0.19 else lk.Answer.RETRY)
    return out


# ---------------------------------------------------------------------------
# Roles: the tree's value and a record's twin for one input
# ---------------------------------------------------------------------------


# --- window, load window ----------------------------------------------------


def _in_window(rnd):
    return dict(W=rnd.randint(1, 40), extra=rnd.choice((0, 0, rnd.randint(1, 9))),
                C=rnd.choice((1, 2, 3, 4, 8, 16)), end=rnd.randint(0, 80))


def _tree_window(x, ex: Extracted):
    return ex.fns["window"](SlidingWindowSpec(1, x["W"], x["extra"]), x["C"])


def _twin_window(x, r: Release):
    return release_params.lookup_group(r, x["C"], 1, x["W"], x["extra"], False).window_chunks


def _tree_load_window(x, ex: Extracted):
    spec = SlidingWindowSpec(1, x["W"], x["extra"])
    if "load_window" not in ex.fns:
        return ex.fns["window"](spec, x["C"])  # every run needs the window
    self = Stub("GroupOffloadConfig", sliding_window_size_in_chunks=ex.fns["window"](spec, x["C"]),
                                 kv_cache_spec=spec, tokens_per_chunk=x["C"])
    return ex.fns["load_window"](self, x["end"])


def _twin_load_window(x, r: Release):
    return release_params.lookup_group(r, x["C"], 1, x["W"], x["extra"], False).load_window_chunks(x["end"])


# --- the two scans -------------------------------------------------------------


def _in_scan(rnd):
    n = rnd.randint(0, 14)
    w = rnd.randint(1, 5)
    return dict(answers=_answers(rnd, n), w=w, initial=w + rnd.choice((0, 0, 1, 2)))


def _tree_scan(x, ex: Extracted):
    answers = x["answers"]
    self = Stub("OffloadingConnectorScheduler", manager=ManagerStub(lambda k: answers[k]))
    keys = list(range(len(answers)))
    if "initial_window_size" in ex.params["sliding_window_lookup"]:
        return ex.fns["sliding_window_lookup"](self, keys, x["w"], None, x["initial"])
    return ex.fns["sliding_window_lookup"](self, keys, x["w"], None)


def _twin_scan(x, r: Release):
    initial = x["initial"] if r.padded_initial_window else x["w"]
    return lk.scan(x["answers"], x["w"], initial, pending=r.pending)


def _in_prefix(rnd):
    return dict(answers=_answers(rnd, rnd.randint(0, 12), 0.8))


def _tree_prefix(x, ex: Extracted):
    answers = x["answers"]
    self = Stub("OffloadingConnectorScheduler", manager=ManagerStub(lambda k: answers[k]), _events_tracker=Quiet())
    return ex.fns["maximal_prefix_lookup"](self, list(range(len(answers))), None, None, None, 0)


def _twin_prefix(x, r: Release):
    return lk.maximal_prefix_lookup(x["answers"])


# --- the whole lookup -------------------------------------------------------------


def _in_lookup(rnd):
    groups = []
    if rnd.random() < 0.7:
        groups.append(dict(b=rnd.choice((1, 2, 4, 8, 16)), W=None, extra=0, eagle=rnd.random() < 0.25))
    for _ in range(rnd.choice((1, 1, 2))):
        groups.append(dict(b=rnd.choice((1, 2, 4)), W=rnd.randint(1, 20),
                           extra=rnd.choice((0, 0, rnd.randint(1, 6))), eagle=rnd.random() < 0.2))
    bpc = rnd.choice((1, 1, 2))
    lcm = 1
    for g in groups:
        lcm = lcm * g["b"] * bpc // _gcd(lcm, g["b"] * bpc)
    n = rnd.randint(1, 64)
    local = lcm * rnd.randint(0, n // lcm) if rnd.random() < 0.3 else 0
    local = min(local, n)
    keys = {(gi, c): a for gi, g in enumerate(groups)
            for c, a in enumerate(_answers(rnd, n // (g["b"] * bpc), rnd.choice((0.7, 0.9, 1.0))))}
    return dict(groups=groups, bpc=bpc, n=n, local=local, keys=keys,
                max_load=rnd.choice((None, None, rnd.randint(0, 40))),
                max_new=rnd.choice((None, None, rnd.randint(0, 40))))


def _gcd(a, b):
    while b:
        a, b = b, a % b
    return a


def _tree_lookup(x, ex: Extracted):
    bpc = x["bpc"]
    gcs = []
    for gi, g in enumerate(x["groups"]):
        C = g["b"] * bpc
        spec = FullAttentionSpec() if g["W"] is None else SlidingWindowSpec(g["b"], g["W"], g["extra"])
        sw = None if g["W"] is None else ex.fns["window"](spec, C)
        gc = Stub("GroupOffloadConfig", group_idx=gi, tokens_per_block=g["b"], tokens_per_chunk=C,
                                   sliding_window_size_in_chunks=sw, kv_cache_spec=spec,
                                   is_eagle_group=g["eagle"])
        if "load_window" in ex.fns:
            gc.load_window_size_in_chunks = types.MethodType(ex.fns["load_window"], gc)
        gcs.append(gc)
    # OffloadingConnectorScheduler.__init__: full-attention groups, then SWA
    # groups by decreasing window (a stable sort)
    full = [gc.group_idx for gc in gcs if gc.sliding_window_size_in_chunks is None]
    swa = sorted((gc.group_idx for gc in gcs if gc.sliding_window_size_in_chunks is not None),
                 key=lambda i: gcs[i].sliding_window_size_in_chunks, reverse=True)
    keys = x["keys"]
    self = Stub("OffloadingConnectorScheduler",
        config=Stub("SchedulerOffloadConfig", kv_group_configs=tuple(gcs)),
        manager=ManagerStub(lambda k: keys.get(k, lk.Answer.MISS)), _events_tracker=Quiet(),
        _sliding_window_groups=tuple(swa), _lookup_groups=tuple(full) + tuple(swa),
        _mamba_align_size=None, _chunks_being_loaded=None)
    # the scans the lookup calls: bound when found by name; a renamed one is
    # found by the stub as a member of the tree's class
    for role, attr in (("maximal_prefix_lookup", "_maximal_prefix_lookup"),
                       ("sliding_window_lookup", "_sliding_window_lookup")):
        if role in ex.fns:
            setattr(self, attr, types.MethodType(ex.fns[role], self))
    states = [Stub("RequestGroupState", offload_keys=[(gi, c) for c in range(x["n"] // gc.tokens_per_chunk)],
                                    lookup_hit_end_chunk_idx=0) for gi, gc in enumerate(gcs)]
    req_status = Stub("RequestOffloadState",
        num_locally_computed_tokens=x["local"], max_load_tokens=x["max_load"],
        req=Stub("Request", num_tokens=x["n"], request_id="r"), req_context=None,
        group_states=tuple(states))
    fn = ex.fns["lookup_complete_chunks"]
    if "max_num_new_tokens" in ex.params["lookup_complete_chunks"]:
        return fn(self, req_status, x["max_new"])
    return fn(self, req_status)


def _twin_lookup(x, r: Release):
    groups = [release_params.lookup_group(r, g["b"], x["bpc"], g["W"], g["extra"], g["eagle"]) for g in x["groups"]]
    req = lk.LaterRequest(x["n"], x["local"], x["max_load"], x["max_new"])
    content = lk.StoreContent(
        hit=frozenset(k for k, a in x["keys"].items() if a is lk.Answer.HIT),
        pending=frozenset(k for k, a in x["keys"].items() if a is lk.Answer.HIT_PENDING),
        retry=frozenset(k for k, a in x["keys"].items() if a is lk.Answer.RETRY))
    return lk.lookup_hit_tokens(groups, req, content, release_params.lookup_parts(r))


# --- storable chunks ---------------------------------------------------------------


def _in_storable(rnd):
    C = rnd.choice((1, 2, 4, 8))
    bpc = rnd.choice((1, 2))
    P = rnd.randint(1, 60)
    return dict(C=C, bpc=bpc, P=P, off=rnd.randint(0, 90), eagle=rnd.random() < 0.5,
                finished=rnd.random() < 0.5, blocks=rnd.randint(0, 100), keys=rnd.randint(0, 50))


def _tree_storable(x, ex: Extracted):
    self = Stub("RequestOffloadState",
        req=Stub("Request", num_prompt_tokens=x["P"], is_finished=lambda: x["finished"]),
        config=Stub("SchedulerOffloadConfig", blocks_per_chunk=x["bpc"]))
    gc = Stub("GroupOffloadConfig", tokens_per_chunk=x["C"], is_eagle_group=x["eagle"])
    gs = Stub("RequestGroupState", block_ids=[1] * x["blocks"], offload_keys=[0] * x["keys"])
    return ex.fns["storable_chunks"](self, gc, gs, x["off"])


def _twin_storable(x, r: Release):
    g = GroupConfig(x["C"], 1, None, 1, 1, x["eagle"])
    n = rel.storable_chunks(r, g, RequestConfig(x["P"]), x["off"], x["finished"])
    n = min(n, x["blocks"] // x["bpc"])
    return min(n, x["keys"]) if r.storable_keyed_cap else n


# --- the store rule (0.29.0's chunk rule, or the block mask) -----------------------


def _in_store(rnd):
    g = _group(rnd)
    lo = rnd.randint(0, 30)
    hi = lo + rnd.randint(0, 30)
    return dict(g=g, lo=lo, hi=hi, final=rnd.choice((None, hi, hi + rnd.randint(0, 9))),
                P=rnd.randint(1, 200), chunk=rnd.randint(0, 40), count=rnd.randint(0, 50))


def _tree_store(x, ex: Extracted):
    g: GroupConfig = x["g"]
    if "store_mask" in ex.fns:
        mgr = type("SlidingWindowManager", (), {
            "reachable_block_mask": classmethod(ex.fns["block_mask"]),
            "_contiguous_blocks_for_hit": classmethod(ex.fns["contiguous_blocks"])})
        # legacy block hashes: the mode every record has (the system layer
        # draws lookahead hashes through the real scheduler)
        self = Stub("OffloadingConnectorScheduler", config=Stub("SchedulerOffloadConfig",
            blocks_per_chunk=g.blocks_per_chunk, alignment_tokens=g.alignment_tokens,
            retention_interval=g.retention_interval, dcp_world_size=g.dcp_world_size),
            use_lookahead_block_hashes=False)
        gc = Stub("GroupOffloadConfig",
            kv_cache_spec=SlidingWindowSpec(g.block_size, g.window, g.extra_retained_tokens),
            is_eagle_group=g.eagle, manager_cls=mgr, tokens_per_block=g.block_tokens,
            tokens_per_chunk=g.chunk_tokens)
        boundaries = (x["P"] - 1,) if g.retention_interval is not None else ()
        kw = {}
        if "lookup_boundaries" in inspect.signature(ex.fns["store_mask"]).parameters:
            # the lookup-window patch: where a later lookup ends besides the
            # retention segments, as its _build_store_jobs passes them (the
            # repeated prompt's offloadable tokens; no shared-prefix junction)
            kw["lookup_boundaries"] = (x["P"],) if g.retention_interval is not None else ()
        m = ex.fns["store_mask"](self, gc, x["lo"], x["hi"], x["final"], boundaries, **kw)
        return ("mask", None if m is None else tuple(m))
    acc = mask.v029_alignment_chunk_count(g)  # from_spec's nested helper (see the module doc)
    w = ex.fns["window"](SlidingWindowSpec(g.block_size, g.window, g.extra_retained_tokens),
                         g.chunk_tokens)
    return ("chunk", ex.fns["store_rule"](x["chunk"], x["count"], acc, w, g.eagle))


def _twin_store(x, r: Release):
    g: GroupConfig = x["g"]
    if r.store_rule == "vllm-0.29":
        return ("chunk", mask.v029_chunk_reachable(x["chunk"], x["count"], g))
    if r.store_rule == "lookup-window":  # kvreach's rule: the blocks its lookups read
        w = rel.store_step(r, g, RequestConfig(x["P"]), x["lo"], x["hi"], False)
        return ("mask", w.block_mask)
    gm = rel.mask_group(r, g)
    bpc = g.blocks_per_chunk
    m = mask.reachable_block_mask(x["lo"] * bpc, x["hi"] * bpc, gm, x["P"],
                                   None if x["final"] is None else x["final"] * bpc)
    return ("mask", None if m is None else tuple(m))


# --- one _build_store_jobs call: finish clamp, null blocks, cursor ---------------


def _in_store_jobs(rnd):
    g = _group(rnd, retention=False)
    P = rnd.randint(1, 80)
    d = rnd.choice((0, 0, rnd.randint(1, 20)))
    kind = rnd.choice(("running", "finished", "aborted"))
    computed = rnd.randint(0, P + d)
    sched = rnd.randint(0, P + d - computed) if kind == "running" else 0
    nt = P + d + (1 if kind == "finished" else 0)
    nblocks = cdiv(nt, g.block_tokens) + g.blocks_per_chunk
    null = frozenset(b for b in range(nblocks) if rnd.random() < 0.15)
    return dict(g=g, P=P, nt=nt, kind=kind, computed=computed, sched=sched,
                cursor=rnd.randint(0, cdiv(nt, g.chunk_tokens)), null=null, nblocks=nblocks,
                prompt_only=rnd.random() < 0.5)


def _tree_store_jobs(x, ex: Extracted):
    g: GroupConfig = x["g"]
    bpc, C = g.blocks_per_chunk, g.chunk_tokens
    spec = SlidingWindowSpec(g.block_size, g.window, g.extra_retained_tokens)
    mgr = type("SlidingWindowManager", (), {
        "reachable_block_mask": classmethod(ex.fns["block_mask"]),
        "_contiguous_blocks_for_hit": classmethod(ex.fns["contiguous_blocks"])}) \
        if "block_mask" in ex.fns else None
    window = ex.fns["window"](spec, C)
    gc = Stub("GroupOffloadConfig",
        group_idx=0, tokens_per_block=g.block_tokens, tokens_per_chunk=C,
        sliding_window_size_in_chunks=window, kv_cache_spec=spec, manager_cls=mgr,
        is_eagle_group=g.eagle, requires_cow_source=False,
        alignment_chunk_count=mask.v029_alignment_chunk_count(g))
    config = Stub("SchedulerOffloadConfig",
        blocks_per_chunk=bpc, kv_group_configs=(gc,), alignment_tokens=g.alignment_tokens,
        retention_interval=None, dcp_world_size=g.dcp_world_size,
        offload_prompt_only=x["prompt_only"],
        num_workers=1)
    finished = x["kind"] != "running"
    status = {"running": RequestStatus.RUNNING, "finished": RequestStatus.FINISHED_STOPPED,
              "aborted": RequestStatus.FINISHED_ABORTED}[x["kind"]]
    req = Stub("Request",
        request_id="r", status=status, is_finished=lambda: finished,
        num_computed_tokens=x["computed"], num_tokens=x["nt"], num_prompt_tokens=x["P"],
        shared_prefix_boundary=0)
    gs = Stub("RequestGroupState",
        offload_keys=[(0, c) for c in range(x["nt"] // C)],
        block_ids=[0 if b in x["null"] else b + 1 for b in range(x["nblocks"])],
        next_stored_chunk_idx=x["cursor"])
    rs = Stub("RequestOffloadState", config=config, req=req, group_states=(gs,), max_offload_tokens=None,
                               transfer_jobs=set(), req_context=None)
    rs.storable_chunks = types.MethodType(ex.fns["storable_chunks"], rs)
    rs.advance_stored_idx = types.MethodType(ex.fns["advance_stored_idx"], rs)
    manager = ManagerStub(lambda k: lk.Answer.MISS)
    counter = itertools.count()
    self = Stub("OffloadingConnectorScheduler",
        config=config, _req_status={"r": rs}, manager=manager, _connector_stats=Quiet(),
        _events_tracker=Quiet(), _block_id_to_pending_jobs={}, _jobs={},
        _current_batch_allocated_block_ids=set(), _current_batch_jobs_to_flush=set(),
        _generate_job_id=lambda: next(counter), _touch=lambda rs: None)
    for role, attr in (("offloadable", "_calc_num_offloadable_tokens"),
                       ("store_mask", "_reachable_store_block_mask"),
                       ("final_alignment", "_final_swa_alignment_blocks")):
        if role in ex.fns:
            setattr(self, attr, types.MethodType(ex.fns[role], self))
    out = Stub("SchedulerOutput", num_scheduled_tokens={} if finished else {"r": x["sched"]},
                                finished_req_ids={"r"} if finished else set())
    ex.fns["build_store_jobs"](self, out)
    return (tuple(sorted(c for _, c in manager.stored)), gs.next_stored_chunk_idx)


def _twin_store_jobs(x, r: Release):
    g: GroupConfig = x["g"]
    req = RequestConfig(x["P"], offload_prompt_only=x["prompt_only"])
    finished = x["kind"] != "running"
    if x["kind"] == "aborted":
        after = x["computed"]
    elif x["kind"] == "finished":
        after = rel.finish_tokens(r, req, x["nt"], x["computed"])
    else:
        after = x["computed"] + x["sched"]
    off = req.offloadable(after, x["nt"])
    n = rel.storable_chunks(r, g, req, off, finished)
    # RequestOffloadState.storable_chunks' caps: allocated blocks, keyed chunks
    n = min(n, x["nblocks"] // g.blocks_per_chunk, x["nt"] // g.chunk_tokens)
    cursor = x["cursor"]
    w = rel.store_step(r, g, req, cursor, n, finished)
    return (rel.offered_chunks(r, w, x["null"], g.blocks_per_chunk), max(cursor, n))


# --- the cursor on a lookup --------------------------------------------------------


def _in_cursor(rnd):
    return dict(cursor=rnd.randint(0, 30), hit=rnd.choice((0, 4, None)))


def _tree_cursor(x, ex: Extracted):
    gs = Stub("RequestGroupState", block_ids=[1, 2], next_stored_chunk_idx=x["cursor"], offload_keys=[])
    rs = Stub("RequestOffloadState", group_states=(gs,), transfer_jobs=set(), num_locally_computed_tokens=0,
                               deferred_lookup_start_time=None, update_offload_keys=lambda: None,
                               update_num_hit_chunks=lambda n: None)
    self = Stub("OffloadingConnectorScheduler",
        _req_status={"r": rs}, _acquire_step=lambda: None, _lookup=lambda *a: x["hit"],
        _connector_stats=Quiet(), _maybe_observe_lookup_async_delay=lambda rs: None,
        _touch=lambda rs: None, _reserve_sync_load=lambda *a: False)
    request = Stub("Request", request_id="r", skip_reading_prefix_cache=False)
    ex.fns["get_num_new_matched_tokens"](self, request, 0)
    return gs.next_stored_chunk_idx


def _twin_cursor(x, r: Release):
    return rel.cursor_after_lookup(r, x["cursor"])


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_or_none(v) -> bool:
    return v is None or _int(v)


def _tagged(v) -> bool:
    return isinstance(v, tuple) and len(v) == 2 and v[0] in ("mask", "chunk")


def _same_store(tree_value, twin_value) -> bool:
    """Equal values, a block mask of None (every block kept) being the same
    as one keeping every block (kvreach's ``lookup-window`` says None where
    the patch may list them)."""
    if tree_value[0] == twin_value[0] == "mask":
        dense = lambda m: m is None or all(m)  # noqa: E731
        return tree_value[1] == twin_value[1] or (dense(tree_value[1]) and dense(twin_value[1]))
    return tree_value == twin_value


@dataclass(frozen=True)
class Role:
    """One checked piece: the tree functions it needs, the record parts it
    covers, its inputs, the tree's value and a record's twin. ``shape``: what
    the tree's value must be for the harness to read it (a value of another
    shape, e.g. a pair where an int was returned, is a changed interface,
    which the role cannot check, not a difference)."""

    name: str
    needs: tuple[str, ...]
    parts: tuple[str, ...]
    inputs: Callable
    tree: Callable
    twin: Callable
    shape: Callable = _int_or_none
    shape_text: str = "an int or None"
    same: Callable = operator.eq  # (tree value, twin value) -> they agree


CHECKS: tuple[Role, ...] = (
    Role("window", ("window",), ("lookup_window_extra",), _in_window, _tree_window, _twin_window),
    Role("load window", ("window",), ("padded_initial_window", "lookup_window_extra"),
         _in_window, _tree_load_window, _twin_load_window),
    Role("sliding-window scan", ("sliding_window_lookup",), ("pending", "padded_initial_window"),
         _in_scan, _tree_scan, _twin_scan),
    Role("prefix scan", ("maximal_prefix_lookup",), (), _in_prefix, _tree_prefix, _twin_prefix),
    Role("lookup", ("window", "lookup_complete_chunks"),
         ("eagle_widening", "max_num_new_tokens", "max_load_tokens", "lookup_window_extra",
          "padded_initial_window", "pending", *_LOOKUP_NEW), _in_lookup, _tree_lookup, _twin_lookup),
    Role("storable chunks", ("storable_chunks",), ("eagle_tail_lifted_at_finish", "storable_keyed_cap"),
         _in_storable, _tree_storable, _twin_storable),
    Role("store rule", ("window",), ("store_rule", "mask_window_extra"), _in_store, _tree_store, _twin_store,
         _tagged, "a block mask or a chunk's verdict", _same_store),
    Role("store step", ("window", "build_store_jobs", "storable_chunks", "advance_stored_idx",
                        "offloadable"),
         ("finish_clamp", "null_block_filter", "store_rule", "mask_window_extra",
          "finish_computed_clamp"),
         _in_store_jobs, _tree_store_jobs, _twin_store_jobs,
         lambda v: isinstance(v, tuple), "(stored chunks, cursor)"),
    Role("cursor on lookup", ("get_num_new_matched_tokens",), ("cursor_on_lookup",),
         _in_cursor, _tree_cursor, _twin_cursor),
)
