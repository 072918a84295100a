"""Counterexamples as scenarios: a Z3 model decoded into a concrete
configuration and lifecycle, replayed through the executable rule
(``kvreach.impl.lifecycle.run``), so the violation is shown by code that runs
without a solver."""

from __future__ import annotations

import z3

from kvreach.impl.decoded import lookup_groups_of, lookup_parts_of
from kvreach.impl.lifecycle import OUTCOMES, Lifecycle, Trace, VllmStep, run, run_vllm
from kvreach.impl.lookup import VLLM_WINDOW, LaterRequest, StoreContent, lookup
from kvreach.impl.load import wanted_chunks
from kvreach.impl.rules import store_step
from kvreach.impl.worlds import later_lookup
from kvreach.params import GroupConfig, ParamError, RequestConfig, RetentionMode
from kvreach.proofs.config import READABLE_BOUNDS, READABLE_BUDGET
from kvreach.proofs.geometries import BlockShape
from kvreach.proofs.scenarios import LOOKAHEAD_HASHED_END, PR_54362
from kvreach.releases import DEFAULT as DEFAULT_RELEASE
from kvreach.scenario import tokens_per_hash
from kvreach.spec.config import to_concrete
from kvreach.spec.lifecycle import K_ABORT, K_PREFILL, K_START, K_START_LOADED, KINDS, O_ACCEPT

def pr_example_pins(ctx) -> list:
    """PR #54362's worked example (``scenarios.PR_54362``): full-attention
    block 36 (alignment 36), SWA block 4, window 16, 1200-token prompt,
    1000-token budget, prefill chunks as the scheduler cuts them
    (min(budget, remaining))."""
    s, ex = ctx.s, PR_54362
    return [
        s.B == ex.swa_block_size, s.W == ex.window, s.has_align, s.A == ex.alignment_tokens,
        s.bpc == ex.blocks_per_chunk, z3.Not(s.eagle), s.retention_mode == RetentionMode.NONE, s.P == ex.prompt,
        s.prompt_only, z3.Not(s.has_max), ctx.budget == ex.budget,
    ]


def lookahead_example_pins(ctx, trs) -> list:
    """F14's example (``scenarios.LOOKAHEAD_HASHED_END``, vLLM 0.34.0 with
    lookahead block hashes): full-attention block 8 (alignment 8), SWA block
    2, window 4, a 14-token prompt, budget 100, L = 1 (``tokens_per_hash``
    2, the GCD of the blocks); a finished request (the last step not an
    abort). Only for a configuration with the mode (``ctx.s.L``)."""
    s, ex = ctx.s, LOOKAHEAD_HASHED_END
    assert s.L is not None
    return [
        s.B == ex.swa_block_size, s.W == ex.window, s.has_align, s.A == ex.full_block_size,
        s.bpc == 1, z3.Not(s.eagle), s.retention_mode == RetentionMode.NONE, s.P == ex.prompt,
        s.prompt_only, z3.Not(s.has_max), ctx.budget == ex.budget,
        s.L == ex.hash_lookahead_tokens, s.tokens_per_hash == tokens_per_hash(ex),
        trs[-1].kind != K_ABORT,
    ]


def scheduler_cut(ctx, sts, trs) -> list:
    """Prefill steps take ``min(budget, remaining)`` tokens, as vLLM's
    scheduler does for a lone request. World "restarts": a plain manager and
    request first (every store accepted, no null block, blocks allocated for
    every storable chunk, no shared-prefix boundary)."""
    s = ctx.s
    out = []
    for pre, t in zip(sts, trs):
        rem = s.P - pre.f
        out.append(z3.Implies(
            t.kind == K_PREFILL, t.sched == z3.If(ctx.budget <= rem, ctx.budget, rem),
        ))
        if t.outcome is not None:
            out += [t.outcome == O_ACCEPT, z3.Not(t.null), t.shared_prefix_boundary == 0,
                    t.allocated_chunks >= s.P + ctx.budget,
                    # a hit of at most num_tokens - 1 of a request not past its prompt
                    z3.Implies(z3.Or(t.kind == K_START, t.kind == K_START_LOADED),
                               t.sched <= s.P - 1)]
    return out


def readable_scale(geometry) -> int:
    """How many times ``config.READABLE_BOUNDS`` a counterexample search at
    ``geometry`` (a worked geometry or a family member; None: none) scales
    them so that they contain its fixed SWA block, ``blocks_per_chunk``,
    alignment, retention interval and (a worked geometry's) window: 1 wherever
    they already do (every worked geometry but the windows 128 and 1024 and
    the retention interval of 72 tokens); 2 for SWA block 32,
    4 for 64 or an alignment of 256 tokens at SWA block 4. Unscaled, a
    member's pins contradict the bounds and the search finds nothing."""
    if geometry is None:
        return 1
    bpc, B = geometry.bpc, geometry.swa_block
    retention = geometry.retention if isinstance(geometry.retention, int) else 0
    fixed = {"B": B, "bpc": bpc, "alignment_blocks": (geometry.full_block or B) * bpc // B,
             "W": getattr(geometry, "window", 0),
             # a worked geometry's interval is in tokens, a member's in chunks
             "Rc": retention if isinstance(geometry, BlockShape) else retention // (B * bpc)}
    return max(1, *(-(-v // READABLE_BOUNDS[f]) for f, v in fixed.items()))


def readable_bounds(ctx, geometry=None) -> list:
    """Small numbers for readable scenarios (counterexample search only; a
    counterexample within bounds is a counterexample): ``config.READABLE_BOUNDS``
    and ``READABLE_BUDGET``, each times :func:`readable_scale` of ``geometry``."""
    s, k = ctx.s, readable_scale(geometry)
    return [getattr(s, f) <= k * v for f, v in READABLE_BOUNDS.items()] + [
        ctx.budget <= k * READABLE_BUDGET]


def _v(m, x) -> int:
    return m.eval(x, model_completion=True).as_long()


def _record_release(lg: dict, lk) -> None:
    if lk.release.names != DEFAULT_RELEASE.names:
        lg["vllm"] = lk.release.name


def later_lookup_of(trace: Trace, cex: dict):
    """The decoded later request's lookup (``kvreach.impl.worlds``) against the
    replayed trace's stores and dense ones."""

    lr = cex["later_request"]
    groups = lookup_groups_of(cex["lookup_groups"], trace.group)
    return later_lookup(groups, trace, lr["num_tokens"], lr["shared_tokens"],
                        lr["local_hit_tokens"], lr["max_load_tokens"],
                        parts=lookup_parts_of(cex["lookup_groups"]))


def violation_in(trace, ob, model: str, cex: dict | None = None) -> list[int]:
    """Chunks witnessing the obligation ``ob``'s violation (its record's
    ``witness`` of the decoded counterexample, else its ``trace_witness`` of
    the replayed trace); [] if neither shows it, or if the executable model
    refuses the decoded scenario (a later request sharing decoded tokens
    beyond the prompt, which ``impl.worlds.later_lookup`` does not replay):
    then ``cex["replay_refused"]`` says why."""
    try:
        if ob.witness is not None:
            return ob.witness(cex)
        if ob.trace_witness is not None and trace is not None:
            return ob.trace_witness(trace, model, cex)
    except ParamError as e:
        if cex is not None:
            cex["replay_refused"] = str(e)
        return []
    return []


def lost_hit_chunks(trace: Trace, model: str, cex: dict) -> list[int]:
    """The hit-preservation witness: the decoded later request's lookup
    against the replayed stores and dense ones (recorded in
    ``cex["later_lookup"]``); the chunks missing from its run and the
    decoded chunk if its hit is shorter than dense, else []."""
    r = later_lookup_of(trace, cex)
    span = lambda rg: [rg.start, rg.stop] if len(rg) else []  # noqa: E731
    cex["later_lookup"] = {"hit_tokens": r.rule.hit_tokens,
                           "dense_hit_tokens": r.dense.hit_tokens,
                           "missing_chunks": list(r.missing[-1]),
                           # the SWA group's runs: loaded with the rule's stores, with dense
                           "loaded": span(r.rule.loaded[-1]),
                           "dense_loaded": span(r.dense.loaded[-1])}
    lost = (r.dense.hit_tokens or 0) > (r.rule.hit_tokens or 0)
    return sorted(set(r.missing[-1]) | {cex["chunk"]}) if lost else []


def decode_bmc(m, ctx, sts, trs, depth: int, replay: bool = True) -> dict:
    g, r = to_concrete(m, ctx.s)
    budget = _v(m, ctx.budget)
    kinds = [KINDS[_v(m, t.kind)] for t in trs]
    scheds = [_v(m, t.sched) for t in trs]
    prefill = [x for k, x in zip(kinds, scheds) if k == "prefill"]
    n_decode = sum(1 for k in kinds if k == "decode")
    aborted = kinds[-1] == "abort"
    left = r.prompt_tokens - sum(prefill)
    while left > 0:  # steps after an abort are never run
        prefill.append(min(budget, left))
        left -= prefill[-1]
    lc = Lifecycle(
        budget=budget, prefill_steps=tuple(prefill), decode=n_decode,
        abort_after_step=depth - 1 if aborted else None,
    )
    out = {
        "chunk": _v(m, ctx.c),
        "config": {"group": g.__dict__, "request": r.__dict__},
        "lifecycle": lc.__dict__ | {"prefill_steps": list(lc.prefill_steps)},
        "spec_steps": [
            {"kind": k, "scheduled_tokens": x, "num_chunks": _v(m, t.n),
             "submitted_tracked_chunk": z3.is_true(m.eval(t.submitted, model_completion=True))}
            for k, x, t in zip(kinds, scheds, trs)
        ],
    }
    lk = getattr(ctx, "lk", None)
    if lk is not None and m.eval(lk.num_tokens, model_completion=True).as_long() >= 1:
        has_full = z3.is_true(m.eval(lk.has_full, model_completion=True))
        has_ml = z3.is_true(m.eval(lk.has_max_load, model_completion=True))
        out["lookup_groups"] = {
            "full_block_tokens": _v(m, lk.full_block_tokens) if has_full else None,
            "window": _v(m, lk.W), "extra_retained_tokens": _v(m, lk.extra)}
        if lk.variant != VLLM_WINDOW:
            out["lookup_groups"]["lookup_variant"] = lk.variant
        _record_release(out["lookup_groups"], lk)
        out["later_request"] = {
            "num_tokens": _v(m, lk.num_tokens), "shared_tokens": _v(m, ctx.shared),
            "local_hit_tokens": _v(m, lk.local_hit_tokens),
            "max_load_tokens": _v(m, lk.max_load_tokens) if has_ml else None}
        if out["lookup_groups"]["extra_retained_tokens"]:  # the replay's group, split as vLLM has it
            g = GroupConfig(**(g.__dict__ | {"window": _v(m, lk.W),
                                             "extra_retained_tokens": _v(m, lk.extra)}))
            out["config"]["group"] = g.__dict__
    if replay:
        trace = run(ctx.rule, g, r, lc)
        out["trace"] = trace.to_json(ctx.model)
        out["_trace"] = trace
    return out


def decode_bmc_restarts(m, ctx, sts, trs, depth: int, replay: bool = True) -> dict:
    """A world-"restarts" counterexample (``proofs/obligations/restarts.py``): the steps with
    their kinds, sizes, the manager's answers and the tracked chunk's null
    block, replayed through ``kvreach.impl.lifecycle.run_vllm``."""

    g, r = to_concrete(m, ctx.s)
    c = _v(m, ctx.c)
    def yes(b) -> bool:
        return z3.is_true(m.eval(b, model_completion=True))

    plan = []
    for t in trs:
        plan.append(VllmStep(
            KINDS[_v(m, t.kind)], _v(m, t.sched), OUTCOMES[_v(m, t.outcome)],
            frozenset([c]) if yes(t.accepted) else frozenset(),
            frozenset([c]) if yes(t.null) else frozenset(),
            _v(m, t.shared_prefix_boundary), _v(m, t.allocated_chunks)))
    out = {
        "chunk": c, "budget": _v(m, ctx.budget),
        "config": {"group": g.__dict__, "request": r.__dict__},
        "world": "restarts",
        # the spec's null blocks are chunk-level (``null``): no ``null_blocks``
        "plan": [{k: v for k, v in st.__dict__.items() if k != "null_blocks"}
                 | {"accepted": sorted(st.accepted), "null": sorted(st.null)} for st in plan],
        "spec_steps": [
            {"kind": st.kind, "scheduled_tokens": st.scheduled_tokens,
             "num_chunks": _v(m, t.n),
             "submitted_tracked_chunk": z3.is_true(m.eval(t.submitted, model_completion=True))}
            for st, t in zip(plan, trs)
        ],
    }
    if replay:
        steps = run_vllm(ctx.rule, g, r, plan, ctx.release)
        out["replay"] = [{"kind": x.step.kind, "incarnation": x.incarnation,
                          "f": [x.f_before, x.f_after], "cursor": [x.cursor_before, x.cursor_after],
                          "offered": list(x.offered), "submitted": list(x.submitted)}
                         for x in steps]
        out["_trace"] = steps
    return out


def lookahead_lifecycle(rule: str, g: GroupConfig, r: RequestConfig, H: int):
    """vLLM 0.34.0 with lookahead hashes (L >= 1): the request no-waste's
    rows with L symbolic state (``_kept_hashed``): its whole prompt prefilled
    in one step, then the fewest decode steps whose finish reaches the
    final horizon ``H`` (chunks), replayed through ``impl.lifecycle.run``
    (the finish clamp of 0.34.0 on). -> the trace, or None if no decode
    count up to ``H`` chunks past the prompt reaches ``H``."""
    C = g.chunk_tokens
    for decode in range(0, max(0, H * C - r.prompt_tokens) + r.hash_lookahead_tokens + C + 1):
        lc = Lifecycle(budget=r.prompt_tokens, decode=decode)
        trace = run(rule, g, r, lc, finish_computed_clamp=True)
        if trace.final_horizon_chunks == H:
            return trace
        if trace.final_horizon_chunks > H:
            return None
    return None


def unloaded_kept_chunk(cex: dict) -> list[int]:
    """A no-waste counterexample replayed: the rule's one-shot stores at the
    decoded final horizon (with lookahead hashes, L >= 1: the stores of
    :func:`lookahead_lifecycle`'s request, recorded in
    ``cex["lookahead_trace"]``), then every later request of 1 .. H*C + 2C
    + 1 + L tokens sharing the stored tokens (no GPU-local hit, no
    max_load_tokens; with L its chunk keys cover the L tokens after each
    chunk, ``LaterRequest.hash_lookahead_tokens``) looks up; ``[chunk]`` if
    none of them loads the decoded chunk."""

    g = GroupConfig(**cex["config"]["group"])
    r = RequestConfig(**cex["config"]["request"])
    lg, H, c, off = cex["lookup_groups"], cex["final_horizon_chunks"], cex["chunk"], cex["offloadable_tokens"]
    L = r.hash_lookahead_tokens
    if L:
        trace = lookahead_lifecycle(cex["rule"], g, r, H)
        if trace is None:
            return []
        kept = trace.stored
        cex["lookahead_trace"] = {"decode": trace.lifecycle.decode,
                                  "steps": [list(st.submitted) for st in trace.steps]}
    else:
        kept = store_step(cex["rule"], g, r, 0, H, True).chunks
    if c not in kept:
        return []
    groups = lookup_groups_of(lg, g)
    for T in range(1, H * g.chunk_tokens + 2 * g.chunk_tokens + 2 + L):
        shared = min(T - L, off)  # the tokens its keys cover, as far as they are stored
        content = StoreContent.of_chunks(
            [range(max(0, shared) // gr.chunk_tokens) for gr in groups[:-1]]
            + [[k for k in kept if (k + 1) * g.chunk_tokens <= shared]])
        req = LaterRequest(T, hash_lookahead_tokens=L)
        if c in lookup(groups, req, content, parts=lookup_parts_of(lg)).loaded[-1]:
            return []
    return [c]


def decode_static(m, ctx, ob) -> dict:
    """Obligation ``ob``'s static model ``m`` decoded: by the decoder its
    record declares (``Obligation.cex_decoder``), else as the store
    configuration, the chunk and its final horizon (:func:`decode_chunk`)."""
    if ob.cex_decoder is not None:
        return ob.cex_decoder(m, ctx)
    return decode_chunk(m, ctx)


# no-waste's symbol: the tokens the request could offload (its final horizon
# is this over the chunk)
OFFLOADABLE_TOKENS = "offloadable_tokens"


def decode_no_waste(m, ctx) -> dict:
    """A no-waste model (either lookup variant): the offloadable tokens and
    the later requests' lookup groups, then :func:`decode_chunk`'s."""
    lk = ctx.lk
    has_full = z3.is_true(m.eval(lk.has_full, model_completion=True))
    extra = {"offloadable_tokens": _v(m, z3.Int(OFFLOADABLE_TOKENS)),
             "lookup_groups": {
                 "full_block_tokens": _v(m, lk.full_block_tokens) if has_full else None,
                 "window": _v(m, lk.W), "extra_retained_tokens": _v(m, lk.extra)}}
    if lk.variant != VLLM_WINDOW:
        extra["lookup_groups"]["lookup_variant"] = lk.variant
    _record_release(extra["lookup_groups"], lk)
    return extra | decode_chunk(m, ctx)


def decode_chunk(m, ctx) -> dict:
    """The store configuration, the chunk and its final horizon."""
    g, r = to_concrete(m, ctx.s)
    return {
        "config": {"group": g.__dict__, "request": r.__dict__},
        "chunk": _v(m, ctx.c), "final_horizon_chunks": _v(m, ctx.final_horizon_chunks),
        "boundary_block": _v(m, ctx.boundary_block),
    }



def replay_mask(cex: dict, rule: str, model: str) -> tuple[frozenset[int], frozenset[int]]:
    """A static counterexample (``decode_static``) replayed through the
    executable rule: the chunks a request whose final horizon is the decoded
    one keeps (one finishing step from cursor 0, the one-shot mask) and the
    chunks the load model wants there. Their difference shows the violation."""
    g = GroupConfig(**cex["config"]["group"])
    r = RequestConfig(**cex["config"]["request"])
    H = cex["final_horizon_chunks"]
    kept = store_step(rule, g, r, 0, H, True).chunks
    return frozenset(kept), wanted_chunks(model, g, r, H)
