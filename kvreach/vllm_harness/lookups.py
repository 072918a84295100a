"""Record vLLM 0.33.0's own offload lookups and compare each with kvreach's
twin (``kvreach.impl.lookup``).

Real: the ``Scheduler``, ``KVCacheManager`` (GPU prefix-cache hits, block
allocation with SWA null padding) and ``OffloadingConnectorScheduler``
(``get_num_new_matched_tokens`` -> ``_lookup_complete_chunks`` and
``update_state_after_alloc``). Scripted: only the offload manager's answers.
``lookup(key)`` answers from :attr:`LookupRecorder.answers` (HIT, HIT_PENDING,
RETRY; any other key MISS), and ``prepare_load(keys)`` records the keys the
load requests.

Every call of ``get_num_new_matched_tokens`` is one observation: the request's
length, the GPU-local hit vLLM passed in, ``max_load_tokens``, the manager's
answer for each of the request's keys at that moment, vLLM's hit and the keys
it then loaded. :func:`twin_outcome` computes what kvreach predicts for the
same inputs; the tests assert the two are equal.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from vllm.v1.kv_offload.base import LookupResult

from kvreach.impl.lookup import num_keys
from kvreach.vllm_harness.runner import STOCK, SchedulerRun, Setup, prompt_token_ids

from kvreach.impl.lookup import Answer, LaterRequest, LookupGroup, LookupOutcome, StoreContent, lookup

TO_ANSWER = {
    LookupResult.HIT: Answer.HIT, LookupResult.HIT_PENDING: Answer.HIT_PENDING,
    LookupResult.RETRY: Answer.RETRY, LookupResult.MISS: Answer.MISS,
}
TO_RESULT = {v: k for k, v in TO_ANSWER.items()}


def lookup_groups(setup: Setup) -> list[LookupGroup]:
    """The twin's groups, from the harness setup (not from vLLM's config)."""
    dcp, bpc = setup.dcp_world_size, setup.blocks_per_chunk
    return [
        LookupGroup(block_tokens=g.block_size * dcp, blocks_per_chunk=bpc,
                    window_tokens=g.window if g.kind == "swa" else None,
                    extra_retained_tokens=g.extra_retained_tokens if g.kind == "swa" else 0,
                    eagle=g.eagle)
        for g in setup.groups
    ]


@dataclass
class Observation:
    req_id: str
    num_tokens: int
    local_hit_tokens: int
    max_load_tokens: int | None
    content: StoreContent  # the manager's answers for this request's keys
    num_keys: tuple[int, ...]  # len(offload_keys) per group, as vLLM had them
    hit_tokens: int | None  # vLLM's get_num_new_matched_tokens
    loaded: set[tuple[int, int]] = field(default_factory=set)  # prepare_load keys

    def later_request(self) -> LaterRequest:
        return LaterRequest(self.num_tokens, self.local_hit_tokens, self.max_load_tokens)


class LookupRecorder:
    """Wraps one :class:`SchedulerRun` (stock vLLM connector)."""

    def __init__(self, run: SchedulerRun) -> None:
        self.run = run
        self.offload = run.offload
        self.answers: dict[object, LookupResult] = {}
        self.observations: list[Observation] = []
        self.stored_keys: dict[str, list] = {}  # prepare_store keys, per request
        # every key of the request's first lookup -> (group, chunk)
        self.prompt_keys: dict[str, dict] = {}
        run.manager.lookup.side_effect = self._lookup
        run.manager.prepare_load = self._prepare_load
        store = run.manager.prepare_store.side_effect

        def prepare_store(keys, req_context):
            self.stored_keys.setdefault(req_context.req_id, []).extend(keys)
            return store(keys, req_context)

        run.manager.prepare_store.side_effect = prepare_store
        real = self.offload.get_num_new_matched_tokens

        def spy(request, num_computed_tokens, max_num_new_tokens=None):
            assert max_num_new_tokens is None  # vLLM's scheduler passes none
            hit, is_async = real(request, num_computed_tokens, max_num_new_tokens)
            self.observations.append(self._observe(request, num_computed_tokens, hit))
            return hit, is_async

        self.offload.get_num_new_matched_tokens = spy

    def _lookup(self, key, req_context):
        return self.answers.get(key, LookupResult.MISS)

    def key_positions(self, req_id: str) -> dict[object, tuple[int, int]]:
        st = self.offload._req_status[req_id]
        return {k: (g, c) for g, gs in enumerate(st.group_states)
                for c, k in enumerate(gs.offload_keys)}

    def _observe(self, request, local: int, hit) -> Observation:
        st = self.offload._req_status[request.request_id]
        self.prompt_keys.setdefault(request.request_id, self.key_positions(request.request_id))
        by_kind: dict[Answer, set] = {a: set() for a in Answer}
        for key, pos in self.key_positions(request.request_id).items():
            by_kind[TO_ANSWER[self.answers.get(key, LookupResult.MISS)]].add(pos)
        content = StoreContent(hit=frozenset(by_kind[Answer.HIT]),
                               pending=frozenset(by_kind[Answer.HIT_PENDING]),
                               retry=frozenset(by_kind[Answer.RETRY]))
        params = request.kv_transfer_params or {}
        return Observation(
            request.request_id, request.num_tokens, local, params.get("max_load_tokens"),
            content, tuple(len(gs.offload_keys) for gs in st.group_states), hit,
        )

    def _prepare_load(self, keys, req_context):
        from kvreach.vllm_harness.runner import KeysSpec

        pos = self.key_positions(req_context.req_id)
        obs = [o for o in self.observations if o.req_id == req_context.req_id][-1]
        obs.loaded |= {pos[k] for k in keys}
        return KeysSpec(keys)

    def keys_of(self, req_id: str, chunks: set[tuple[int, int]]) -> list:
        pos = self.key_positions(req_id)
        return [k for k, p in pos.items() if p in chunks]


def installed_release():
    """The record (``kvreach.releases``) of the vLLM the harness drives: the
    installed one; ValueError naming the known releases for another."""
    import vllm

    from kvreach.releases import release

    return release(vllm.__version__)


def twin_outcome(setup: Setup, obs: Observation) -> LookupOutcome:
    """kvreach's lookup for one of vLLM's lookups, with the parts of the
    release the harness drives (:func:`installed_release`)."""
    return release_outcome(setup, obs, installed_release())


class ReleaseRecorder(LookupRecorder):
    """:class:`LookupRecorder` for any release 0.29.0 .. 0.33.0: 0.29.0's
    ``get_num_new_matched_tokens`` takes no ``max_num_new_tokens``."""

    def __init__(self, run: SchedulerRun) -> None:
        real = run.offload.get_num_new_matched_tokens
        super().__init__(run)

        def spy(request, num_computed_tokens, *rest, **kw):
            hit, is_async = real(request, num_computed_tokens, *rest, **kw)
            self.observations.append(self._observe(request, num_computed_tokens, hit))
            return hit, is_async

        self.offload.get_num_new_matched_tokens = spy


def release_outcome(setup: Setup, obs: Observation, r) -> LookupOutcome:
    """kvreach's lookup with release ``r``'s parts (``kvreach.releases``
    record; ``kvreach.impl.release``) for one of vLLM's lookups."""
    from kvreach.impl import release as release_params

    return lookup([release_params.with_lookup_of(r, g) for g in lookup_groups(setup)],
                  obs.later_request(), obs.content, parts=release_params.lookup_parts(r))


def recorder_and_twin(r=None):
    """(recorder class, twin ``(setup, obs) -> LookupOutcome``): the
    installed release's (``r`` None) or release ``r``'s."""
    if r is None:
        return LookupRecorder, twin_outcome
    return ReleaseRecorder, lambda setup, obs: release_outcome(setup, obs, r)


_ids = itertools.count()


def new_id(prefix: str) -> str:
    return f"{prefix}{next(_ids)}"


def later_tokens(stored: list[int], num_tokens: int, diverges_at: int | None) -> list[int]:
    """The later request's prompt: the stored prompt cut to ``num_tokens`` or
    extended with new tokens, sharing only the first ``diverges_at`` tokens."""
    fresh = prompt_token_ids(num_tokens, seed=7919)
    shared = len(stored) if diverges_at is None else min(diverges_at, len(stored))
    return [
        stored[i] if i < shared else stored[i] + 1 if i < len(stored) else fresh[i]
        for i in range(num_tokens)
    ]


def new_run(setup: Setup, model_dir: str) -> tuple[SchedulerRun, LookupRecorder]:
    run = SchedulerRun(setup, STOCK, model_dir)
    return run, LookupRecorder(run)


def later_lookups(rec: "LookupRecorder", tokens: list[int], max_load_tokens: int | None = None,
                  settle_after: int = 1) -> list:
    """Schedule the later request until its lookup settles (after
    ``settle_after`` steps every HIT_PENDING / RETRY answer becomes HIT),
    then runs it to completion (an abort while its load is in flight would
    wait for the worker's ``finished_recving``, which the harness does not
    report). Returns the observations of that request."""
    rid = new_id("later-")
    params = None if max_load_tokens is None else {"max_load_tokens": max_load_tokens}
    rec.run.add_request(rid, len(tokens), max_tokens=1, kv_transfer_params=params,
                        token_ids=tokens)
    for step in range(3):
        if step == settle_after:
            rec.answers = {k: LookupResult.HIT for k in rec.answers}
        rec.run.step()
        obs = [o for o in rec.observations if o.req_id == rid]
        if obs and obs[-1].hit_tokens is not None:
            break
    rec.run.run_to_completion()
    return [o for o in rec.observations if o.req_id == rid]


def lookups_by_length(rec: "LookupRecorder", setup: Setup, tokens: list[int],
                      outcome=twin_outcome):
    """Every later request of the first 1 .. ``len(tokens)`` tokens, the GPU
    prefix cache reset before each (no GPU-local hit), against the manager's
    current answers. Yields ``(T, vLLM's observations of that request, the
    twin's (``outcome``'s) outcome for its last one)``."""
    for T in range(1, len(tokens) + 1):
        assert rec.run.scheduler.reset_prefix_cache()
        obs = later_lookups(rec, tokens[:T])
        yield T, obs, outcome(setup, obs[-1])


def check(setup: Setup, observations: list, outcome=twin_outcome) -> None:
    """Each observation's keys and vLLM's hit and loaded keys equal the twin's
    (``outcome``: vLLM 0.33.0's lookup, or a release's, :func:`recorder_and_twin`)."""
    groups = lookup_groups(setup)
    assert observations, "vLLM made no lookup"
    for o in observations:
        assert o.num_keys == tuple(num_keys(g, o.later_request()) for g in groups), o
        twin = outcome(setup, o)
        assert (twin.hit_tokens, twin.loaded_keys()) == (o.hit_tokens, o.loaded), (
            f"twin {twin} != vLLM hit {o.hit_tokens} loaded {sorted(o.loaded)} for {o}")
