"""The request lifecycle as a transition system (Z3), for one tracked chunk.

State (after a scheduler step): ``f`` = ``Request.num_computed_tokens``,
``cursor`` = ``RequestGroupState.next_stored_chunk_idx``, ``stored`` = the
tracked chunk ``c`` was submitted before, ``ended``.

The transitions are data: :data:`TRANSITIONS`, one :class:`TransitionDef` per
kind, says what vLLM function the kind models, when it is enabled (its guard,
the scheduled token count included), the frontier after it, the
``num_tokens_after_batch`` and ``Request.num_tokens`` the store side
(``OffloadingConnectorScheduler._build_store_jobs``) sees, the request status
it leads to and whether it ends the request. :func:`transition` is built from
that table only, and so is the lifecycle diagram (``kvreach.diagram``,
docs/lifecycle.md): a change in the table changes both.

- ``prefill``: ``1 <= s <= budget`` prompt tokens; the store side sees
  ``num_computed_tokens + s`` with ``num_tokens = P``;
- ``decode``: after the prompt, one token; ``num_tokens = f + 1``;
- ``finish``: normal finish after the prompt (``num_tokens = f + 1``: the last
  sampled token is never fed); tokens per ``finish_tokens``;
- ``abort``: ``FINISHED_ABORTED`` at any point; the store side reads
  ``num_computed_tokens = f``.
- ``store-failed``, ``load-failed``, ``load-recompute`` (world "restarts", a release with
  ``failed_transfers``, 0.34.0): the worker reports a transfer job of the
  request failed (``_update_connector_output``, ``TransferJob.failed``). A
  failed store job is dropped (``complete_store(success=False)``): its
  chunks were submitted and the cursor passed them, so the incarnation never
  offers them again; the step changes no request state. A failed load sets
  ``RequestOffloadState.load_failed`` (the ghost ``State.load_failed``):
  every later lookup of the request answers 0, so no later start loads
  from the offload tier (``loaded`` is disabled); under
  the frontier as it was (a synchronous load's request runs on); then, for
  a request waiting for its asynchronous load, ``load-recompute`` under
  ``kv_load_failure_policy="recompute"`` (``Scheduler._handle_failed_recving``:
  ``num_computed_tokens = 0``, the request waits for its next lookup;
  enabled only after a failed load) or an ``error`` step under ``"fail"``
  (below).
- ``error`` (world "restarts"): ``FINISHED_ERROR`` at any point (a grammar or
  encoder error, or from 0.34.0 a failed offload load under
  ``kv_load_failure_policy="fail"``), before the prompt is computed too; the
  store side reads a finished request's tokens, ``finish_tokens`` (0.34.0
  also caps them by ``num_computed_tokens``: ``Release.finish_computed_clamp``). vLLM advances ``num_computed_tokens`` when it
  schedules, in synchronous and asynchronous scheduling alike, so both modes
  give the store side the same value (async only has the last step's output in
  flight); the transition covers both.

Every transition then runs the store step (``StoreStep`` of the rule): ``n =
storable_chunks(offloadable(num_tokens_after_batch, num_tokens))``, the
tracked chunk is submitted or not, and the cursor moves to ``max(cursor, n)``
(the manager accepts every store).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import z3

from kvreach.releases import DEFAULT as DEFAULT_RELEASE, Release
from kvreach.spec.config import SymConfig, z3_max
from kvreach.spec.rules import (
    RULES, STATIC_KEEP, final_segment_end, finish_tokens, storable_chunks,
)

K_PREFILL, K_DECODE, K_FINISH, K_ABORT = range(4)
# vLLM 0.33.0's further steps (world "restarts", docs/lifecycle.md): a resumed
# request recomputing past its prompt, preemption, the offload lookup's reset,
# the start of an incarnation with a hit (cursor 0, or the loaded chunk count
# under OffloadPolicy.CHUNK_LEVEL).
K_RECOMPUTE, K_PREEMPT, K_LOOKUP, K_START, K_START_LOADED = range(4, 9)
# A decode step under AsyncScheduler: the store side's Request.num_tokens is
# one behind (the step's sampled token is not appended yet; finding F9).
K_DECODE_ASYNC = 9
# Scheduler.finish_requests(..., FINISHED_ERROR): a finish at any point, the
# store side treating it as a finished request, not an aborted one.
K_ERROR = 10
# The worker reports a store job / a load job of the request failed
# (vLLM 0.34.0's failed transfers: Release.failed_transfers).
# Scheduler._handle_failed_recving under kv_load_failure_policy="recompute".
K_STORE_FAILED, K_LOAD_FAILED, K_LOAD_RECOMPUTE = 11, 12, 13
FAILURE_KINDS = (K_STORE_FAILED, K_LOAD_FAILED, K_LOAD_RECOMPUTE)
# The manager's answer to prepare_store (world "restarts"): every key accepted,
# some keys (PARTIAL; de-duplication or capacity), or None (REFUSED).
O_ACCEPT, O_PARTIAL, O_REFUSED = range(3)
OUTCOMES = ("accept", "partial", "refused")
# The worlds transition() is built for: "single" is one incarnation of one
# request from zero computed tokens whose every store the manager accepts
# (the existing obligations); "restarts" adds the kinds and outcomes above.
BASE_KINDS = (K_PREFILL, K_DECODE, K_FINISH, K_ABORT)


@dataclass
class State:
    f: z3.ArithRef
    cursor: z3.ArithRef
    stored: z3.BoolRef
    ended: z3.BoolRef
    # world "restarts" ghost: the tracked chunk was submitted in this incarnation
    # (since the last get_num_new_matched_tokens); None in world "single"
    stored_inc: z3.BoolRef | None = None
    # world "restarts" of a release with failed transfers: a load of the request
    # failed (RequestOffloadState.load_failed); None otherwise
    load_failed: z3.BoolRef | None = None

    @staticmethod
    def fresh(tag: str, world: str = "single", failures: bool = False) -> "State":
        """``failures``: the state has :attr:`load_failed` (world "restarts" of a
        release with ``failed_transfers``)."""
        return State(
            z3.Int(f"f_{tag}"), z3.Int(f"cursor_{tag}"),
            z3.Bool(f"stored_{tag}"), z3.Bool(f"ended_{tag}"),
            z3.Bool(f"stored_inc_{tag}") if world == "restarts" else None,
            z3.Bool(f"load_failed_{tag}") if world == "restarts" and failures else None,
        )


@dataclass
class Transition:
    kind: z3.ArithRef  # one of K_*
    sched: z3.ArithRef  # tokens scheduled
    tokens_after: z3.ArithRef  # num_tokens_after_batch
    n: z3.ArithRef  # storable_chunks
    submitted: z3.BoolRef
    finished: z3.BoolRef
    constraints: z3.BoolRef
    off: z3.ArithRef | None = None  # offloadable tokens of the step
    # world "restarts": the chunk is offered to prepare_store (the rule keeps it
    # and none of its reachable blocks is null), the manager's outcome, the
    # manager accepts the chunk (PARTIAL), a reachable block of it is null
    offered: z3.BoolRef | None = None
    outcome: z3.ArithRef | None = None
    accepted: z3.BoolRef | None = None
    null: z3.BoolRef | None = None
    shared_prefix_boundary: z3.ArithRef | None = None  # tokens, world "restarts"
    allocated_chunks: z3.ArithRef | None = None  # world "restarts": the cap on n


def init(st: State) -> z3.BoolRef:
    inc = [] if st.stored_inc is None else [z3.Not(st.stored_inc)]
    inc += [] if st.load_failed is None else [z3.Not(st.load_failed)]
    return z3.And(st.f == 0, st.cursor == 0, z3.Not(st.stored), z3.Not(st.ended), *inc)


def num_tokens(s: SymConfig, f) -> z3.ArithRef:
    """``Request.num_tokens`` between steps: the prompt, then one sampled
    token not yet fed."""
    return z3.If(f < s.P, s.P, f + 1)


@dataclass(frozen=True)
class TransitionDef:
    """One kind of scheduler step, as data.

    ``sched``: the number of tokens the step schedules, or None when the
    scheduler chooses it (then the guard bounds it). ``guard(s, pre, sched,
    budget)``: when the step is possible. ``new_f(s, pre, sched)``: the frontier
    (``num_computed_tokens``) after it. ``tokens_after(s, rule, pre, sched)``:
    ``num_tokens_after_batch`` in ``_build_store_jobs``. ``num_tokens(s,
    pre)``: the ``Request.num_tokens`` the store side sees (it caps the
    offloadable tokens). ``status``: vLLM's ``RequestStatus`` after the step.
    ``ends``: the request is finished (``req.is_finished()``).
    """

    kind: int
    name: str
    vllm_module: str
    vllm_function: str
    sched: int | None
    guard: Callable[..., z3.BoolRef]
    new_f: Callable[..., z3.ArithRef]
    tokens_after: Callable[..., z3.ArithRef]
    num_tokens: Callable[..., z3.ArithRef]
    status: str
    ends: bool
    # False: the step runs no _build_store_jobs for the request; the cursor
    # after it is new_cursor(s, pre, sched) (world "restarts" only)
    stores: bool = True
    new_cursor: Callable[..., z3.ArithRef] | None = None


_SCHED = "vllm.v1.core.sched.scheduler"
_CONN = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler"

TRANSITIONS: tuple[TransitionDef, ...] = (
    TransitionDef(
        K_PREFILL, "prefill", _SCHED, "Scheduler.schedule", sched=None,
        guard=lambda s, pre, sched, budget: z3.And(
            1 <= sched, sched <= budget, pre.f + sched <= s.P),
        new_f=lambda s, pre, sched: pre.f + sched,
        tokens_after=lambda s, rule, pre, sched: pre.f + sched,
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="RUNNING", ends=False,
    ),
    TransitionDef(
        K_DECODE, "decode", _SCHED, "Scheduler.schedule", sched=1,
        guard=lambda s, pre, sched, budget: pre.f >= s.P,
        new_f=lambda s, pre, sched: pre.f + 1,
        tokens_after=lambda s, rule, pre, sched: pre.f + 1,
        num_tokens=lambda s, pre: pre.f + 1,
        status="RUNNING", ends=False,
    ),
    TransitionDef(
        K_FINISH, "finish", _SCHED, "Scheduler.update_from_output", sched=0,
        guard=lambda s, pre, sched, budget: pre.f >= s.P,
        new_f=lambda s, pre, sched: pre.f,
        tokens_after=lambda s, rule, pre, sched: finish_tokens(s, rule, num_tokens(s, pre.f)),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="FINISHED_STOPPED", ends=True,
    ),
    TransitionDef(
        K_ABORT, "abort", _SCHED, "Scheduler.finish_requests", sched=0,
        guard=lambda s, pre, sched, budget: z3.BoolVal(True),
        new_f=lambda s, pre, sched: pre.f,
        tokens_after=lambda s, rule, pre, sched: pre.f,
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="FINISHED_ABORTED", ends=True,
    ),
    # --- world "restarts" only ------------------------------------------------
    TransitionDef(
        # a resumed request recomputes its prompt and earlier outputs as
        # prefill; a step reaching past the prompt is this kind. The store side
        # sees num_tokens_after_batch = f + sched <= Request.num_tokens, so the
        # offloadable tokens are min(f + sched, caps) whatever num_tokens is.
        K_RECOMPUTE, "recompute", _SCHED, "Scheduler.schedule", sched=None,
        guard=lambda s, pre, sched, budget: z3.And(
            1 <= sched, sched <= budget, pre.f + sched > s.P),
        new_f=lambda s, pre, sched: pre.f + sched,
        tokens_after=lambda s, rule, pre, sched: pre.f + sched,
        num_tokens=lambda s, pre, sched: pre.f + sched,  # takes sched: step_num_tokens
        status="RUNNING", ends=False,
    ),
    TransitionDef(
        # Scheduler._preempt_request: num_computed_tokens = 0, PREEMPTED; the
        # connector's cursor is left as it was (no store step for the request)
        K_PREEMPT, "preempt", _SCHED, "Scheduler._preempt_request", sched=0,
        guard=lambda s, pre, sched, budget: z3.BoolVal(True),
        new_f=lambda s, pre, sched: z3.IntVal(0),
        tokens_after=lambda s, rule, pre, sched: z3.IntVal(0),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="PREEMPTED", ends=False, stores=False,
        new_cursor=lambda s, pre, sched: pre.cursor,
    ),
    TransitionDef(
        # get_num_new_matched_tokens (new request, resumed after preemption,
        # retried after a deferred lookup): block ids cleared, cursor 0
        K_LOOKUP, "lookup", _CONN, "OffloadingConnectorScheduler.get_num_new_matched_tokens",
        sched=0,
        guard=lambda s, pre, sched, budget: pre.f == 0,
        new_f=lambda s, pre, sched: z3.IntVal(0),
        tokens_after=lambda s, rule, pre, sched: z3.IntVal(0),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="WAITING", ends=False, stores=False,
        new_cursor=lambda s, pre, sched: z3.IntVal(0),
    ),
    TransitionDef(
        # Scheduler.schedule admits the request with sched = the hit tokens
        # (GPU-local, plus an offload load under REQUEST_LEVEL, or none):
        # num_computed_tokens = hit; update_state_after_alloc leaves cursor 0
        K_START, "start", _SCHED, "Scheduler.schedule", sched=None,
        guard=lambda s, pre, sched, budget: z3.And(pre.f == 0, pre.cursor == 0, sched >= 0),
        new_f=lambda s, pre, sched: sched,
        tokens_after=lambda s, rule, pre, sched: z3.IntVal(0),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="RUNNING", ends=False, stores=False,
        new_cursor=lambda s, pre, sched: z3.IntVal(0),
    ),
    TransitionDef(
        # update_state_after_alloc with an offload load under CHUNK_LEVEL:
        # cursor = cdiv(num_cached_tokens, tokens_per_chunk), sched = cached
        K_START_LOADED, "loaded", _CONN, "OffloadingConnectorScheduler.update_state_after_alloc",
        sched=None,
        guard=lambda s, pre, sched, budget: z3.And(pre.f == 0, pre.cursor == 0, sched >= 1),
        new_f=lambda s, pre, sched: sched,
        tokens_after=lambda s, rule, pre, sched: z3.IntVal(0),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="RUNNING", ends=False, stores=False,
        new_cursor=lambda s, pre, sched: (sched + s.C - 1) / s.C,
    ),
    TransitionDef(
        # AsyncScheduler: a decode step is scheduled before the previous step's
        # sampled token is appended, so _build_store_jobs sees
        # Request.num_tokens = num_computed_tokens (one behind; F9) and
        # _calc_num_offloadable_tokens caps the step at f tokens
        K_DECODE_ASYNC, "decode-async", "vllm.v1.core.sched.async_scheduler",
        "AsyncScheduler.schedule", sched=1,
        guard=lambda s, pre, sched, budget: pre.f >= s.P,
        new_f=lambda s, pre, sched: pre.f + 1,
        tokens_after=lambda s, rule, pre, sched: pre.f + 1,
        num_tokens=lambda s, pre: pre.f,
        status="RUNNING", ends=False,
    ),
    TransitionDef(
        # Scheduler.finish_requests(req_id, FINISHED_ERROR) at any point: the
        # store side's finished-request branch of _build_store_jobs, whose
        # max(num_prompt_tokens, num_tokens - 1) is the whole prompt while it
        # is being computed (before 0.34.0; _ERROR_CLAMPED for 0.34.0)
        K_ERROR, "error", _SCHED, "Scheduler.finish_requests", sched=0,
        guard=lambda s, pre, sched, budget: z3.BoolVal(True),
        new_f=lambda s, pre, sched: pre.f,
        tokens_after=lambda s, rule, pre, sched: finish_tokens(s, rule, num_tokens(s, pre.f)),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="FINISHED_ERROR", ends=True,
    ),
    TransitionDef(
        # the worker reports a store job of the request failed: dropped
        # (complete_store(success=False)), not offered again in the
        # incarnation (the cursor passed its chunks when it was submitted)
        K_STORE_FAILED, "store-failed", _CONN, "OffloadingConnectorScheduler.update_connector_output",
        sched=0,
        guard=lambda s, pre, sched, budget: z3.BoolVal(True),
        new_f=lambda s, pre, sched: pre.f,
        tokens_after=lambda s, rule, pre, sched: z3.IntVal(0),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="RUNNING", ends=False, stores=False,
        new_cursor=lambda s, pre, sched: pre.cursor,
    ),
    TransitionDef(
        # the worker reports a load job of the request failed: load_failed
        # (every later lookup answers 0); the request's frontier as it was (a
        # synchronous load's request runs on; an asynchronous one's is reset
        # by load-recompute, or finished by an error step under
        # kv_load_failure_policy="fail"). Enabled at any point (vLLM reports
        # one only after a start that loads: an over-approximation)
        K_LOAD_FAILED, "load-failed", _CONN, "OffloadingConnectorScheduler.update_connector_output",
        sched=0,
        guard=lambda s, pre, sched, budget: z3.BoolVal(True),
        new_f=lambda s, pre, sched: pre.f,
        tokens_after=lambda s, rule, pre, sched: z3.IntVal(0),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="RUNNING", ends=False, stores=False,
        new_cursor=lambda s, pre, sched: pre.cursor,
    ),
    TransitionDef(
        # kv_load_failure_policy="recompute": a request waiting for its failed
        # asynchronous load gets num_computed_tokens = 0 and waits for its next
        # lookup (Scheduler._handle_failed_recving); only after a failed load
        K_LOAD_RECOMPUTE, "load-recompute", _SCHED, "Scheduler._handle_failed_recving", sched=0,
        guard=lambda s, pre, sched, budget: pre.load_failed,
        new_f=lambda s, pre, sched: z3.IntVal(0),
        tokens_after=lambda s, rule, pre, sched: z3.IntVal(0),
        num_tokens=lambda s, pre: num_tokens(s, pre.f),
        status="WAITING", ends=False, stores=False,
        new_cursor=lambda s, pre, sched: pre.cursor,
    ),
)
assert [t.kind for t in TRANSITIONS] == list(range(len(TRANSITIONS)))

KINDS = tuple(t.name for t in TRANSITIONS)

# vLLM before 0.33.0 (``Release.cursor_on_lookup == "kept"``):
# get_num_new_matched_tokens leaves next_stored_chunk_idx as the last
# incarnation left it; update_state_after_alloc returns at once when nothing
# is loaded (start: the cursor stays) and under CHUNK_LEVEL (BLOCK_LEVEL in
# 0.29.0) assigns the loaded chunks cdiv(num_cached_tokens, tokens_per_chunk)
# (loaded: an assignment, so it may move the cursor back). The starts' guard
# drops "cursor 0": a resumed request starts from the cursor it had.
_CURSOR_KEPT = {
    K_LOOKUP: dict(new_cursor=lambda s, pre, sched: pre.cursor),
    K_START: dict(guard=lambda s, pre, sched, budget: z3.And(pre.f == 0, sched >= 0),
                  new_cursor=lambda s, pre, sched: pre.cursor),
    K_START_LOADED: dict(guard=lambda s, pre, sched, budget: z3.And(pre.f == 0, sched >= 1)),
}
# vLLM 0.34.0 (``Release.finish_computed_clamp``): a finished request's
# num_tokens_after_batch is also capped by num_computed_tokens.
_ERROR_CLAMPED = dict(
    tokens_after=lambda s, rule, pre, sched: finish_tokens(s, rule, num_tokens(s, pre.f), pre.f))
# vLLM 0.34.0 (``Release.failed_transfers``): after a failed load every
# lookup of the request answers 0, so no start loads from the offload tier
# (a start's hit is GPU-local only: ``start`` as it is).
_LOADED_UNLESS_FAILED = dict(
    guard=lambda s, pre, sched, budget: z3.And(
        TRANSITIONS[K_START_LOADED].guard(s, pre, sched, budget), z3.Not(pre.load_failed)))
CURSOR_ON_LOOKUP = ("reset to 0", "kept")
NULL_BLOCK_FILTERS = ("every reachable block", "last block")


def table(world: str = "single", release: Release = DEFAULT_RELEASE) -> tuple[TransitionDef, ...]:
    """The entries of :data:`TRANSITIONS` the world has, for ``release``'s
    ``get_num_new_matched_tokens`` and ``update_state_after_alloc``
    (``Release.cursor_on_lookup``), ``_build_store_jobs``'s finished
    request (``Release.finish_computed_clamp``, read by ``error``) and the
    failed transfers (``Release.failed_transfers``: ``store-failed``,
    ``load-failed``, ``load-recompute``, and ``loaded`` disabled after a
    failed load; the other releases' table has none of them); :data:`TRANSITIONS` is 0.33.0's with
    the failure kinds."""
    if world == "restarts":
        if release.cursor_on_lookup not in CURSOR_ON_LOOKUP:
            raise ValueError(f"cursor_on_lookup={release.cursor_on_lookup!r}: "
                             f"expected one of {CURSOR_ON_LOOKUP}")
        changes = {} if release.cursor_on_lookup == "reset to 0" else dict(_CURSOR_KEPT)
        if release.finish_computed_clamp:
            changes[K_ERROR] = _ERROR_CLAMPED
        if release.failed_transfers:
            changes[K_START_LOADED] = changes.get(K_START_LOADED, {}) | _LOADED_UNLESS_FAILED
        entries = tuple(t for t in TRANSITIONS
                        if t.kind not in FAILURE_KINDS or release.failed_transfers)
        return tuple(replace(t, **changes[t.kind]) if t.kind in changes else t
                     for t in entries)
    if world != "single":
        raise ValueError(f"unknown world {world!r}")
    return tuple(t for t in TRANSITIONS if t.kind in BASE_KINDS)


def _chain(kind, entries, values: list) -> z3.ExprRef:
    """``If(kind == k0, v0, If(kind == k1, v1, ... v_last))`` over ``entries``,
    leaving out a branch whose value is the same term as the fallback
    ``v_last`` (sound: the kinds are distinct constants; keeps the term as
    small as a hand-written one)."""
    out = fallback = values[-1]
    for t, v in reversed(list(zip(entries, values))[:-1]):
        if not v.eq(fallback):
            out = z3.If(kind == t.kind, v, out)
    return out


def _is(kind, kinds: list[int]) -> z3.BoolRef:
    return kind == kinds[0] if len(kinds) == 1 else z3.Or([kind == k for k in kinds])


def _enabled(s: SymConfig, pre: State, kind, sched, budget, entries) -> list[z3.BoolRef]:
    """The table's guards as constraints on ``kind``: a kind whose step size
    the scheduler chooses gets its guard; the fixed sizes are one equation;
    the other guards are grouped by term (one implication per distinct
    guard, a guard ``True`` dropped)."""
    free = [t for t in entries if t.sched is None]
    fixed = [t for t in entries if t.sched is not None]
    out = [z3.Implies(kind == t.kind, t.guard(s, pre, sched, budget)) for t in free]
    if fixed:
        size = _chain(kind, fixed, [z3.IntVal(t.sched) for t in fixed])
        if not free:
            out.append(sched == size)
        else:
            out.append(z3.Implies(
                kind != free[0].kind if len(free) == 1 else z3.Not(_is(kind, [t.kind for t in free])),
                sched == size,
            ))
    groups: list[tuple[z3.BoolRef, list[int]]] = []
    for t in fixed:
        g = t.guard(s, pre, sched, budget)
        if z3.is_true(g):
            continue
        same = [kinds for gg, kinds in groups if gg.eq(g)]
        if same:
            same[0].append(t.kind)
        else:
            groups.append((g, [t.kind]))
    out += [z3.Implies(_is(kind, kinds), g) for g, kinds in groups]
    return out


def step_num_tokens(t: TransitionDef, s: SymConfig, pre: State, sched):
    """The entry's ``num_tokens`` (``recompute``'s depends on the step size)."""
    return t.num_tokens(s, pre, sched) if t.kind == K_RECOMPUTE else t.num_tokens(s, pre)


def transition(
    s: SymConfig, rule: str, pre: State, post: State, c, budget, tag: str, store_fn=None,
    world: str = "single", release: Release = DEFAULT_RELEASE,
) -> Transition:
    """One scheduler step of any kind of the ``world``'s :func:`table`;
    ``store_fn`` replaces the rule's store decision (used for mutants), the
    rest of the rule (storable chunks, finish tokens) stays ``rule``'s.

    World ``"single"`` (the default: one request, one incarnation, every
    store accepted, the world of each obligation that does not name
    ``"restarts"``) builds only the terms of the steps in ``BASE_KINDS``
    (``table("single")``). World ``"restarts"`` adds the steps
    that run no store (preempt, lookup, start, start-loaded: the cursor
    follows the entry's ``new_cursor``), ``recompute``, the manager's outcome
    (``outcome_<tag>``: accept / partial / refused, ``accepted_<tag>`` the
    key accepted under partial) and null blocks (``null_<tag>``: a reachable
    block of the chunk is null, so it is not offered).

    ``release`` (world ``"restarts"``): the vLLM release whose cursor on lookup
    and null-block filter the step has (``kvreach.releases``; default
    0.33.0). Cursor kept (before 0.33.0): :func:`table`'s lookup and starts,
    and the incarnation ghost ``stored_inc`` also ends at a preemption (the
    request's next step is a lookup: ``Scheduler.schedule`` calls
    ``get_num_new_matched_tokens`` for every waiting request with no
    computed tokens, and a lookup that keeps the cursor changes nothing
    else, so a start right after a preemption stands for one after its
    lookup). Null filter: ``null_<tag>`` is "the filter drops the chunk", a
    free Boolean under either filter (0.33.0's: a null block among the
    chunk's reachable ones, or any block when the mask is dense, or its last
    one; before: its last block): for any set of chunks some placement of
    null blocks (each one's last block) drops exactly those, so the relation
    is the same (the executable filter over block ids is
    ``kvreach.impl.release_rules.offered_chunks``)."""
    entries = table(world, release)
    if world == "restarts" and release.null_block_filter not in NULL_BLOCK_FILTERS:
        raise ValueError(f"null_block_filter={release.null_block_filter!r}: "
                         f"expected one of {NULL_BLOCK_FILTERS}")
    kind = z3.Int(f"kind_{tag}")
    sched = z3.Int(f"sched_{tag}")
    aux = {"wc": z3.Int(f"wc_{tag}")}
    spb = None
    if world == "restarts":
        # Request.shared_prefix_boundary at this step: set by
        # KVCacheManager.get_computed_blocks at admission; any value >= 0
        spb = aux["shared_prefix_boundary"] = z3.Int(f"shared_prefix_boundary_{tag}")
    finished = z3.Or([kind == t.kind for t in entries if t.ends])
    tokens_after = _chain(kind, entries, [t.tokens_after(s, rule, pre, sched) for t in entries])
    nt_step = _chain(kind, entries, [step_num_tokens(t, s, pre, sched) for t in entries])
    off = s.offloadable(tokens_after, nt_step)
    if s.L is not None:
        # lookahead rows: the step's prompt horizon reads its hashed end
        aux["num_tokens"] = nt_step
    n = storable_chunks(s, rule, off, finished)
    allocated = None
    if world == "restarts":
        # RequestOffloadState.storable_chunks caps the count by the allocated
        # and keyed chunks (len(block_ids) // blocks_per_chunk, len(offload_keys)):
        # e.g. a request aborted while its offload load is pending has none
        allocated = z3.Int(f"allocated_chunks_{tag}")
        n = z3.If(allocated < n, allocated, n)
    step = (store_fn or RULES[rule])(s, pre.cursor, n, finished, c, aux)
    new_f = _chain(kind, entries, [t.new_f(s, pre, sched) for t in entries])
    if world == "single":
        submitted, next_cursor, extra = step.submitted, step.next_cursor, []
        offered = outcome = accepted = null = None
    else:
        outcome = z3.Int(f"outcome_{tag}")
        accepted, null = z3.Bool(f"accepted_{tag}"), z3.Bool(f"null_{tag}")
        stores = _is(kind, [t.kind for t in entries if t.stores])
        offered = z3.And(stores, step.submitted, z3.Not(null))
        submitted = z3.And(offered, z3.Or(outcome == O_ACCEPT,
                                          z3.And(outcome == O_PARTIAL, accepted)))
        quiet = [t for t in entries if not t.stores]
        store_cursor = z3.If(outcome == O_REFUSED, pre.cursor, step.next_cursor)
        next_cursor = store_cursor
        for t in reversed(quiet):
            next_cursor = z3.If(kind == t.kind, t.new_cursor(s, pre, sched), next_cursor)
        extra = [z3.Or(outcome == O_ACCEPT, outcome == O_PARTIAL, outcome == O_REFUSED),
                 z3.Implies(z3.Not(stores), outcome == O_ACCEPT), spb >= 0, allocated >= 0]
        if release.failed_transfers:
            if pre.load_failed is None or post.load_failed is None:
                raise ValueError("a release with failed transfers needs the load_failed ghost "
                                 "(State.fresh(..., failures=True))")
            extra.append(post.load_failed == z3.Or(pre.load_failed, kind == K_LOAD_FAILED))
        if pre.stored_inc is not None and post.stored_inc is not None:
            ends_inc = (kind == K_LOOKUP if release.cursor_on_lookup == "reset to 0"
                        else z3.Or(kind == K_LOOKUP, kind == K_PREEMPT))
            extra.append(post.stored_inc == z3.If(
                ends_inc, False, z3.Or(pre.stored_inc, submitted)))
    cons = z3.And(
        z3.Not(pre.ended),
        z3.Or([kind == t.kind for t in entries]),
        *_enabled(s, pre, kind, sched, budget, entries),
        post.f == new_f,
        post.cursor == next_cursor,
        post.stored == z3.Or(pre.stored, submitted),
        post.ended == finished,
        step.side,
        *extra,
    )
    return Transition(kind, sched, tokens_after, n, submitted, finished, cons, off,
                      offered, outcome, accepted, null, spb, allocated)


def cursor_of(s: SymConfig, rule: str, f) -> z3.ArithRef:
    """The cursor after the step that reached frontier ``f`` (not ended)."""
    n_running = storable_chunks(s, rule, s.offloadable(f, z3.If(f <= s.P, s.P, f)), False)
    # the prompt's last prefill step (num_tokens = P: under lookahead hashes
    # its hashed end; without them the term of ``s.prompt_offloadable``)
    n_prompt = storable_chunks(s, rule, s.offloadable(s.P, s.P), False)
    return z3.If(f == 0, 0, z3.If(f <= s.P, n_running, z3_max(n_prompt, n_running)))


def invariant(s: SymConfig, rule: str, st: State, c) -> z3.BoolRef:
    """Inductive invariant of the running (not ended) states.

    vllm-0.33: the tracked chunk is stored iff it lies below the cursor and the
    mask at the non-final horizon keeps it (the prompt horizon; for c beyond
    it the final tail is empty, so the same mask gives the decode rule).
    vllm-0.29: stored chunks lie below the cursor.

    vLLM 0.34.0 with lookahead hashes (``s.L``, L >= 1, vllm-0.33): a chunk
    is kept by the mask of the horizon of the step that passed it
    (:func:`lookahead_keep`), not by the final prompt horizon's.
    """
    from kvreach.spec import mask

    base = z3.And(
        z3.Not(st.ended), st.f >= 0, st.cursor == cursor_of(s, rule, st.f),
    )
    if rule in STATIC_KEEP:
        return z3.And(base, st.stored == z3.And(c >= 0, c < st.cursor, STATIC_KEEP[rule](s, c)))
    if rule == "vllm-0.33":
        keep = (mask.chunk_reachable(s, c, final_segment_end(s, s.prompt_horizon))
                if s.L is None else lookahead_keep(s, c))
        return z3.And(base, st.stored == z3.And(c >= 0, c < st.cursor, keep))
    return z3.And(base, z3.Implies(st.stored, c < st.cursor))


def lookahead_keep(s: SymConfig, c) -> z3.BoolRef:
    """vllm-0.33's keep decision for chunk ``c`` of a running request under
    lookahead hashes (``s.L`` symbolic; vLLM 0.34.0): the mask at the horizon
    of the step whose storable count first passed ``c``. The prefill steps
    see ``num_tokens = P``, so their horizon is the prompt's hashed end ``Hh``
    (``prompt_horizon_at(P)``; F14); a decode step's count grows by at most
    one chunk (the hashed tokens by ``tokens_per_hash``, which divides the
    block) and, below the prompt horizon ``Hp``, its horizon is its count:
    chunk ``c`` in ``[Hh, Hp)`` is passed with horizon ``c + 1``; beyond
    ``Hp`` a decode step has no horizon and the prompt horizon's final tail
    does not reach the chunk. With L = 0, ``Hh = Hp``: the mask at the
    prompt horizon."""
    from kvreach.spec import mask

    hh, hp = s.prompt_horizon_at(s.P), s.prompt_horizon

    def at(h):
        return mask.chunk_reachable(s, c, final_segment_end(s, h))
    return z3.If(c < hh, at(hh), z3.If(c < hp, at(c + 1), at(hp)))
