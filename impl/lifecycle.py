"""Lifecycle driver: one request through chunked prefill, decode and a normal
finish or an abort, applying a store rule at every scheduler step.

Models what ``OffloadingConnectorScheduler._build_store_jobs`` sees each step
(``num_tokens_after_batch``) and the monotone cursor
``RequestGroupState.next_stored_chunk_idx``. The manager accepts every store
and no block is null (``prepare_store`` returns every key).

Steps and tokens, as vLLM's V1 scheduler produces them for one request:
- prefill step: ``s`` new prompt tokens, ``1 <= s <= budget``; the
  frontier ``num_computed_tokens + s`` is what the store side sees;
- the last prefill step samples the first output token, then each decode step
  feeds one token (``num_tokens = frontier``);
- normal finish (after ``decode`` decode steps): ``num_tokens = P + decode + 1``;
- abort after ``K`` scheduled steps: ``num_computed_tokens`` is the frontier of
  the last scheduled step;
- error finish (``FINISHED_ERROR``, e.g. a failed load under
  ``kv_load_failure_policy="fail"`` in vLLM 0.34.0) after ``K`` scheduled
  steps: a finished request, at any point, also before its prompt is
  computed; its store reads the finish clamp (``rules.finish_tokens``),
  which before vLLM 0.34.0 reaches past the computed tokens there. vLLM advances ``num_computed_tokens`` at schedule
  time in both modes, so synchronous and asynchronous scheduling give the same
  store-side value; with async scheduling the last step's output is still in
  flight (recorded as ``in_flight`` in the trace).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field, fields

from kvreach.impl import release_rules
from kvreach.impl.load import needed_chunks, wanted_chunks
from kvreach.impl.mask import boundary_end_block, shared_prefix_tail_chunks
from kvreach.impl.rules import StoreStep, finish_tokens, storable_chunks, store_step
from kvreach.params import GroupConfig, ParamError, RequestConfig, cdiv, check_rule
from kvreach.releases import DEFAULT as DEFAULT_RELEASE, Release


@dataclass(frozen=True)
class StoreJobs:
    """What one ``OffloadingConnectorScheduler._build_store_jobs`` call sees
    and decides for one group (:func:`build_store_jobs`).

    offloadable_tokens: ``_calc_num_offloadable_tokens`` of the step.
    num_chunks: ``RequestOffloadState.storable_chunks`` (capped by the
        allocated chunks when given).
    store: the rule's store step over them (mask, horizon, cursor).
    """

    offloadable_tokens: int
    num_chunks: int
    store: StoreStep


def build_store_jobs(rule: str, g: GroupConfig, req: RequestConfig, cursor: int,
                     tokens_after_batch: int, num_tokens: int, finished: bool, *,
                     bookkeeping_rule: str | None = None,
                     allocated_chunks: int | None = None) -> StoreJobs:
    """The one per-step pipeline of the store side (the twin of
    ``kvreach.spec.lifecycle.transition``'s store part): offloadable tokens
    (``num_tokens_after_batch``, ``Request.num_tokens``) -> ``storable_chunks``
    -> ``store_step`` under ``rule`` (mask, horizon, cursor).

    bookkeeping_rule: the rule whose ``storable_chunks`` counts (default
        ``rule``; kvreach's connector keeps vLLM 0.33.0's whatever its rule).
    allocated_chunks: ``RequestOffloadState.storable_chunks``' cap by the
        allocated and keyed chunks (None: enough).

    Under lookahead hashes (``req.hash_lookahead_tokens`` > 0, vLLM 0.34.0)
    the step reads the request at ``num_tokens`` (``RequestConfig.at``): its
    offloadable tokens and its prompt horizon end at the hashed tokens.
    """
    check_lookahead(g, req)
    req = req.at(num_tokens)
    off = req.offloadable(tokens_after_batch, num_tokens)
    n = storable_chunks(bookkeeping_rule or rule, g, req, off, finished)
    if allocated_chunks is not None:
        n = min(n, allocated_chunks)
    return StoreJobs(off, n, store_step(rule, g, req, cursor, n, finished))


def check_lookahead(g: GroupConfig, req: RequestConfig) -> None:
    """The group's lookahead mode is the request's: ``use_lookahead_block_hashes``
    is ``num_hash_lookahead_tokens > 0`` (ParamError otherwise)."""
    if g.lookahead_hashes != (req.hash_lookahead_tokens > 0):
        raise ParamError("lookahead_hashes", g.lookahead_hashes,
                         f"{req.hash_lookahead_tokens > 0} with hash_lookahead_tokens="
                         f"{req.hash_lookahead_tokens} (use_lookahead_block_hashes is "
                         "num_hash_lookahead_tokens > 0)")


@dataclass(frozen=True)
class Lifecycle:
    """budget: per-step token budget (``max_num_batched_tokens``).
    prefill_steps: explicit prefill chunk sizes (replaying a counterexample);
        default: ``min(budget, remaining)`` each step, as the scheduler does.
    decode: decode steps after the prompt completes.
    abort_after_step: abort once this many steps are scheduled (None: finish).
    async_scheduling: the abort is seen with the last step's output in flight.
    error_after_step: finish with ``FINISHED_ERROR`` once this many steps are
        scheduled (None: no error; not with ``abort_after_step``).
    """

    budget: int
    prefill_steps: tuple[int, ...] | None = None
    decode: int = 0
    abort_after_step: int | None = None
    async_scheduling: bool = False
    error_after_step: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or self.budget < 1:
            raise ParamError("budget", self.budget, "an integer >= 1")
        if not isinstance(self.decode, int) or self.decode < 0:
            raise ParamError("decode", self.decode, "an integer >= 0")
        if self.abort_after_step is not None and (
            not isinstance(self.abort_after_step, int) or self.abort_after_step < 0
        ):
            raise ParamError("abort_after_step", self.abort_after_step, "an integer >= 0")
        if self.error_after_step is not None:
            if (isinstance(self.error_after_step, bool) or not isinstance(self.error_after_step, int)
                    or self.error_after_step < 0):
                raise ParamError("error_after_step", self.error_after_step, "an integer >= 0")
            if self.abort_after_step is not None:
                raise ParamError("error_after_step", self.error_after_step,
                                 "None with abort_after_step (a request ends once)")
            if self.async_scheduling:
                raise ParamError("error_after_step", self.error_after_step,
                                 "None with async scheduling (an error finish is modelled "
                                 "synchronous only)")
        if self.prefill_steps is not None:
            for s in self.prefill_steps:
                if not isinstance(s, int) or not 1 <= s <= self.budget:
                    raise ParamError(
                        "prefill_steps", self.prefill_steps,
                        f"step sizes between 1 and the budget ({self.budget})",
                    )

    def chunk_sizes(self, prompt_tokens: int) -> list[int]:
        if self.prefill_steps is not None:
            if sum(self.prefill_steps) != prompt_tokens:
                raise ParamError(
                    "prefill_steps", self.prefill_steps,
                    f"sizes summing to the prompt length ({prompt_tokens})",
                )
            return list(self.prefill_steps)
        sizes, left = [], prompt_tokens
        while left > 0:
            sizes.append(min(self.budget, left))
            left -= sizes[-1]
        return sizes


@dataclass(frozen=True)
class Step:
    index: int
    kind: str  # "prefill" | "decode" | "finish" | "abort" | "error"
    scheduled_tokens: int
    num_computed_tokens: int  # after the step (the frontier)
    num_tokens: int
    tokens_after_batch: int  # num_tokens_after_batch of _build_store_jobs
    offloadable_tokens: int
    num_chunks: int  # storable_chunks
    cursor_before: int
    cursor_after: int
    window_start: int
    submitted: tuple[int, ...]
    in_flight: bool = False


_STEP_FIELDS = tuple(f.name for f in fields(Step))


@dataclass(frozen=True)
class Trace:
    rule: str
    group: GroupConfig
    request: RequestConfig
    lifecycle: Lifecycle
    steps: tuple[Step, ...]
    final_horizon_chunks: int  # the request's final horizon, in chunks
    computed_tokens: int  # num_computed_tokens at the end
    stored: tuple[int, ...] = field(default=())
    # (set, model) -> chunks: wanted and needed are computed once per model
    _sets: dict = field(default_factory=dict, compare=False, repr=False)

    def wanted(self, model: str) -> frozenset[int]:
        """Chunks some hit boundary of ``model`` requests (soundness set,
        ``kvreach.impl.load.wanted_chunks``)."""
        if ("wanted", model) not in self._sets:
            self._sets["wanted", model] = wanted_chunks(
                model, self.group, self.request, self.final_horizon_chunks)
        return self._sets["wanted", model]

    def needed(self, model: str) -> frozenset[int]:
        """Chunks a hit this request alone can serve requests (completeness set)."""
        if ("needed", model) not in self._sets:
            self._sets["needed", model] = needed_chunks(
                model, self.group, self.request, self.final_horizon_chunks)
        return self._sets["needed", model]

    def to_json(self, model: str | None = None) -> dict:
        out = {
            "rule": self.rule,
            "group": asdict(self.group),
            "request": asdict(self.request),
            "lifecycle": asdict(self.lifecycle),
            # the fields as they are (ints, strings, tuples of ints): asdict's
            # deep copy is most of the cost of a long request
            "steps": [{f: getattr(s, f) for f in _STEP_FIELDS} for s in self.steps],
            "final_chunks": self.final_horizon_chunks,  # the JSON key as published
            "computed_tokens": self.computed_tokens,
            "stored": list(self.stored),
        }
        if model is not None:
            out["load_model"] = model
            out["loadable"] = sorted(self.wanted(model))  # the JSON key as published
            out["needed"] = sorted(self.needed(model))
        return out


def run(rule: str, g: GroupConfig, req: RequestConfig, lc: Lifecycle, *,
        finish_computed_clamp: bool = False) -> Trace:
    """Drive one request through ``lc`` under ``rule``; return the trace.
    ``finish_computed_clamp``: the finish also caps by the computed tokens
    (vLLM 0.34.0, ``Release.finish_computed_clamp``)."""
    check_rule(rule)
    P = req.prompt_tokens
    plan: list[tuple[str, int]] = [("prefill", s) for s in lc.chunk_sizes(P)]
    plan += [("decode", 1)] * lc.decode
    ends_after = lc.abort_after_step if lc.abort_after_step is not None else lc.error_after_step
    if ends_after is not None:
        if ends_after > len(plan):
            raise ParamError(
                "abort_after_step" if lc.abort_after_step is not None else "error_after_step",
                ends_after, f"at most the number of scheduled steps ({len(plan)})",
            )
        plan = plan[: ends_after]

    steps: list[Step] = []
    cursor = computed = 0
    num_tokens = P
    stored: list[int] = []

    def apply(kind: str, scheduled: int, tokens_after: int, finished: bool, in_flight=False,
              allocated_chunks: int | None = None):
        nonlocal cursor
        jobs = build_store_jobs(rule, g, req, cursor, tokens_after, num_tokens, finished,
                                allocated_chunks=allocated_chunks)
        off, n, w = jobs.offloadable_tokens, jobs.num_chunks, jobs.store
        steps.append(Step(
            len(steps) + 1, kind, scheduled, computed, num_tokens, tokens_after,
            off, n, cursor, w.next_cursor, w.start_chunk, w.chunks, in_flight,
        ))
        stored.extend(w.chunks)
        cursor = w.next_cursor
        return n

    final_n = 0
    for kind, s in plan:
        computed += s
        if kind == "decode":
            num_tokens = computed  # the token fed this step was sampled already
        final_n = apply(kind, s, computed, False)
        if kind == "prefill" and computed == P:
            num_tokens = P + 1  # the last prefill step samples the first token
    clamp = computed if finish_computed_clamp else None
    if lc.abort_after_step is not None:
        final_n = apply("abort", 0, computed, True, in_flight=lc.async_scheduling)
    elif lc.error_after_step is not None:
        # num_tokens is the prompt until the last prefill step sampled; the
        # chunks are also capped by the blocks allocated for the computed
        # tokens (RequestOffloadState.storable_chunks), which a finish that
        # reads past them (0.33.0's clamp before the prompt is computed) meets
        if computed >= P:
            num_tokens = computed + 1  # the last step sampled
        final_n = apply("error", 0, finish_tokens(rule, req, num_tokens, clamp), True,
                        allocated_chunks=cdiv(computed, g.block_tokens) // g.blocks_per_chunk)
    else:
        num_tokens = P + lc.decode + 1
        final_n = apply("finish", 0, finish_tokens(rule, req, num_tokens, clamp), True)
    return Trace(rule, g, req, lc, tuple(steps), final_n, computed, tuple(stored))


# ---------------------------------------------------------------------------
# world "restarts": the kinds of kvreach.spec.lifecycle.TRANSITIONS, step by step
# ---------------------------------------------------------------------------

OUTCOMES = ("accept", "partial", "refused")  # prepare_store: every key, some, None
_STORING = ("prefill", "decode", "decode-async", "recompute", "finish", "abort", "error")
_QUIET = ("preempt", "lookup", "start", "loaded")
# the worker reports a transfer job of the request failed (vLLM 0.34.0's
# failed transfers, Release.failed_transfers; no prepare_store call)
_FAILURES = ("store-failed", "load-failed", "load-recompute")


@dataclass(frozen=True)
class VllmStep:
    """One scheduler step of world "restarts" (``kvreach.spec.lifecycle.TRANSITIONS``).

    scheduled_tokens: the step's tokens (prefill / recompute), the hit tokens
        (start / loaded: ``num_computed_tokens`` after admission).
    outcome: ``prepare_store``'s answer; ``accepted`` the chunks it takes
        under ``partial``.
    null: chunks the null-block filter drops (a null block where the
        release's filter looks), never offered.
    null_blocks: block indices of the request's blocks that hold the null
        block; the release's filter (``Release.null_block_filter``,
        ``kvreach.impl.release_rules.offered_chunks``) decides which chunks
        they drop.
    shared_prefix_boundary: ``Request.shared_prefix_boundary`` (tokens; a
        further reachable boundary of vllm-0.33 with a retention interval, F8).
    """

    kind: str
    scheduled_tokens: int = 0
    outcome: str = "accept"
    accepted: frozenset = frozenset()
    null: frozenset = frozenset()
    shared_prefix_boundary: int = 0
    allocated_chunks: int | None = None  # min(allocated, keyed) chunks; None: enough
    null_blocks: frozenset = frozenset()


@dataclass(frozen=True)
class VllmStepResult:
    step: VllmStep
    incarnation: int  # lookups before this step
    f_before: int
    f_after: int
    cursor_before: int
    cursor_after: int
    offered: tuple[int, ...] = ()
    submitted: tuple[int, ...] = ()
    load_failed: bool = False  # after the step: a load of the request failed


def load_failed_after(kind: str, load_failed: bool) -> bool:
    """``RequestOffloadState.load_failed`` after a step of ``kind``: set by
    a failed load job (``load-failed``), never cleared (every later lookup
    of the request answers 0, after a preemption too)."""
    return load_failed or kind == "load-failed"


def _num_tokens(req: RequestConfig, f: int) -> int:
    """``Request.num_tokens`` between steps (``kvreach.spec.lifecycle.num_tokens``)."""
    return req.prompt_tokens if f < req.prompt_tokens else f + 1


def _block_filtered(rule: str, release: Release, g: GroupConfig, w: StoreStep, kept: set[int],
                    null_blocks: frozenset, shared_prefix_boundary: int) -> set[int]:
    """The chunks of ``kept`` the release's null-block filter drops, the mask
    it consults being the step's with the shared-prefix boundary's tail
    blocks (``reachable_boundaries``) added."""
    if not null_blocks:
        return set()
    bpc = g.blocks_per_chunk
    mask = w.block_mask
    if mask is not None and shared_prefix_tail_chunks(
            rule, g, shared_prefix_boundary, w.start_chunk, w.end_chunk):
        end = boundary_end_block(g, shared_prefix_boundary)
        b0 = w.start_chunk * bpc
        mask = tuple(m or end - g.need <= b0 + i < end for i, m in enumerate(mask))
    step = dataclasses.replace(w, chunks=tuple(sorted(kept)), block_mask=mask)
    return kept - set(release_rules.offered_chunks(release, step, null_blocks, bpc))


def offered_chunks(rule: str, release: Release, g: GroupConfig, w: StoreStep, num_chunks: int,
                   null_blocks: frozenset, shared_prefix_boundary: int) -> tuple[int, ...]:
    """The chunks one ``_build_store_jobs`` step offers ``prepare_store``:
    the step's selection ``w`` with the tail of ``Request.shared_prefix_boundary``
    (``reachable_boundaries``, F8; in 0.34.0 also pinned by an offload
    lookup's shared-prefix junction), less the release's null-block filter
    over ``null_blocks`` (block indices holding the null block)."""
    kept = set(w.chunks) | shared_prefix_tail_chunks(rule, g, shared_prefix_boundary,
                                                     w.start_chunk, num_chunks)
    kept -= _block_filtered(rule, release, g, w, kept, null_blocks, shared_prefix_boundary)
    return tuple(sorted(kept))


def vllm_step(rule: str, g: GroupConfig, req: RequestConfig, f: int, cursor: int,
              st: VllmStep, release: Release = DEFAULT_RELEASE, load_failed: bool = False,
              ) -> tuple[int, int, tuple[int, ...], tuple[int, ...], bool]:
    """One step: (frontier after, cursor after, chunks offered, chunks
    submitted, the request ended). Raises ParamError when the step is not
    enabled in (f, cursor), as the spec's guards say. ``release``: the vLLM
    release whose cursor on lookup and null-block filter apply
    (``kvreach.releases``; default 0.33.0): with the cursor kept, a lookup
    leaves it, a start from a GPU-local hit keeps it and a loaded start
    assigns the loaded chunks whatever the cursor was. With
    ``failed_transfers`` (0.34.0): ``store-failed`` changes nothing of the
    request (its chunks stay submitted, the cursor past them),
    ``load-failed`` neither (``load_failed``: :func:`load_failed_after` of
    the steps before; after it no start loads), ``load-recompute`` (only
    after it, ``kv_load_failure_policy="recompute"``) sets the frontier to
    0 and keeps the cursor."""
    P, s, k = req.prompt_tokens, st.scheduled_tokens, st.kind
    reset = release.cursor_on_lookup == "reset to 0"

    def need(ok: bool, what: str) -> None:
        if not ok:
            raise ParamError("step", st, f"{what} (frontier {f}, cursor {cursor})")

    if st.outcome not in OUTCOMES:
        raise ParamError("outcome", st.outcome, f"one of {OUTCOMES}")
    if k in _FAILURES:
        need(release.failed_transfers, f"a failed transfer of a release that has them "
             f"(vLLM {release.name} has none)")
        if k == "load-recompute":  # Scheduler._handle_failed_recving, recompute policy
            need(load_failed, "a recompute after a failed load")
            return 0, cursor, (), (), False
        return f, cursor, (), (), False
    if k == "loaded" and load_failed:
        need(False, "a loaded start after a failed load (every later lookup answers 0)")
    if k in _QUIET:
        if k == "preempt":
            return 0, cursor, (), (), False
        if k == "lookup":
            need(f == 0, "a lookup of a request with no computed tokens")
            return 0, release_rules.cursor_after_lookup(release, cursor), (), (), False
        if reset:
            need(f == 0 and cursor == 0 and s >= (1 if k == "loaded" else 0),
                 "a start from frontier 0 and cursor 0")
        else:
            need(f == 0 and s >= (1 if k == "loaded" else 0), "a start from frontier 0")
        return s, (cdiv(s, g.chunk_tokens) if k == "loaded" else cursor), (), (), False
    if k == "prefill":
        need(s >= 1 and f + s <= P, "a prefill step within the prompt")
        tokens_after, nt, f_after = f + s, _num_tokens(req, f), f + s
    elif k in ("decode", "decode-async"):
        need(f >= P, "a decode step after the prompt")
        tokens_after, f_after = f + 1, f + 1
        nt = f + 1 if k == "decode" else f  # async: the sampled token not appended (F9)
    elif k == "recompute":
        need(s >= 1 and f + s > P, "a recompute step past the prompt")
        tokens_after, nt, f_after = f + s, f + s, f + s
    elif k == "finish":
        need(f >= P, "a finish after the prompt")
        nt = _num_tokens(req, f)
        tokens_after, f_after = finish_tokens(rule, req, nt), f
    elif k == "abort":
        tokens_after, nt, f_after = f, _num_tokens(req, f), f
    elif k == "error":  # FINISHED_ERROR at any point: a finished request's tokens
        nt = _num_tokens(req, f)  # 0.34.0: capped by num_computed_tokens
        tokens_after = finish_tokens(rule, req, nt, f if release.finish_computed_clamp else None)
        f_after = f
    else:
        raise ParamError("kind", k, f"one of {_STORING + _QUIET + _FAILURES}")
    ends = k in ("finish", "abort", "error")
    jobs = build_store_jobs(rule, g, req, cursor, tokens_after, nt, ends,
                            allocated_chunks=st.allocated_chunks)
    n, w = jobs.num_chunks, jobs.store
    offered = tuple(c for c in offered_chunks(rule, release, g, w, n, st.null_blocks,
                                              st.shared_prefix_boundary) if c not in st.null)
    if st.outcome == "refused":
        return f_after, cursor, offered, (), ends
    sub = offered if st.outcome == "accept" else tuple(c for c in offered if c in st.accepted)
    return f_after, w.next_cursor, offered, sub, ends


def run_vllm(rule: str, g: GroupConfig, req: RequestConfig,
             plan: list[VllmStep], release: Release = DEFAULT_RELEASE,
             ) -> tuple[VllmStepResult, ...]:
    """Drive one request through ``plan`` (world "restarts") from frontier 0 and
    cursor 0 under ``release`` (:func:`vllm_step`); the steps after the one
    that ends the request are refused. An incarnation starts at a lookup
    and, with the cursor kept on lookup, at a preemption too (the spec's
    ``stored_inc``: the request's next step is a lookup that changes nothing
    else)."""
    check_rule(rule)
    f = cursor = incarnation = 0
    load_failed = False
    out: list[VllmStepResult] = []
    kept = release.cursor_on_lookup == "kept"
    for i, st in enumerate(plan):
        if out and st.kind and (out[-1].step.kind in ("finish", "abort", "error")):
            raise ParamError("plan", plan, f"no step after the request ended (step {i})")
        if st.kind == "lookup" or (kept and st.kind == "preempt"):
            incarnation += 1
        f2, c2, offered, sub, _ = vllm_step(rule, g, req, f, cursor, st, release, load_failed)
        load_failed = load_failed_after(st.kind, load_failed)
        out.append(VllmStepResult(st, incarnation, f, f2, cursor, c2, offered, sub, load_failed))
        f, cursor = f2, c2
    return tuple(out)
