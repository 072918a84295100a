"""Stateful property test of the vllm-0.33 per-step store rule.

A hypothesis ``RuleBasedStateMachine`` drives one request through random
interleavings of chunked-prefill steps (any size within the per-step budget,
``max_num_batched_tokens``), decode steps, a normal finish, and an abort
(synchronous or asynchronous scheduling), applying kvreach's per-step rule the
way ``OffloadingConnectorScheduler._build_store_jobs`` does:
``RequestConfig.offloadable`` (``_calc_num_offloadable_tokens``) ->
``storable_chunks`` (``RequestOffloadState.storable_chunks``) ->
``store_step`` (mask + ``next_stored_chunk_idx``), with ``finish_tokens`` for
a normal finish. The manager accepts every store and no block is null.

Invariants after every step:
- nothing is submitted twice;
- nothing is submitted before its tokens are computed:
  ``(chunk + 1) * chunk_tokens <= num_computed_tokens`` at that step;
- ``next_stored_chunk_idx`` only moves forward.
At the end of the request (finish or abort; a run that stops early is aborted
in teardown), against the final horizon ``H`` (the last ``storable_chunks``):
- every submitted chunk is loadable under the ``intended`` load model
  (``kvreach.impl.load.wanted_chunks``), for a sparse mask (the dense
  fallbacks store every chunk by design);
- every loadable chunk below ``H`` was submitted.

Domain of the end-of-request properties: non-EAGLE groups, no retention
interval, ``offload_prompt_only=True`` (vLLM's default), ``W >= 2``. Outside it:
``EagleMachine`` / ``RetentionMachine`` check the per-step safety invariants
only; ``DecodeOffloadMachine`` (``offload_prompt_only=False``) is a strict
xfail: hypothesis finds the prompt-horizon tail stored but not loadable under
a final horizon past the prompt (a finding, see docs/conformance.md).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from kvreach.impl import contracts
from kvreach.impl.load import wanted_chunks
from kvreach.impl.lifecycle import build_store_jobs
from kvreach.impl.rules import finish_tokens
from kvreach.params import GroupConfig, ParamError, RequestConfig

RULE = "vllm-0.33"
LOAD_MODEL = "intended"


@st.composite
def groups(draw, eagle: bool, retention: bool):
    B = draw(st.integers(1, 8))
    dcp = draw(st.sampled_from([1, 2]))
    bpc = draw(st.integers(1, 2))
    # W >= 2: with W = 1 load.requested_chunks maps the empty token window
    # [L, L) to a non-empty chunk range (reported; see docs/conformance.md).
    W = draw(st.integers(2, 64))
    # Mostly representable alignments (the sparse mask); sometimes any value
    # (dense fallback) or none.
    A = draw(
        st.one_of(
            st.integers(1, 12).map(lambda m: m * B * dcp * bpc),
            st.integers(1, 12).map(lambda m: m * B * dcp * bpc),
            st.integers(1, 12).map(lambda m: m * B * dcp),
            st.integers(1, 128),
            st.none(),
        )
    )
    R = None
    if retention and A is not None:
        R = draw(st.integers(0, 6)) * B * dcp * bpc
    try:
        return GroupConfig(B, W, A, bpc, dcp, eagle, R)
    except ParamError:
        assume(False)


def requests(offload_prompt_only: bool):
    return st.builds(
        RequestConfig,
        prompt_tokens=st.integers(1, 300),
        max_offload_tokens=st.none() | st.integers(0, 400),
        offload_prompt_only=st.just(offload_prompt_only),
    )


class StoreMachine(RuleBasedStateMachine):
    RULE = RULE
    EAGLE = False
    RETENTION = False
    OFFLOAD_PROMPT_ONLY = True  # OffloadingSpec default
    CHECK_LOADABLE = True

    @initialize(data=st.data(), budget=st.integers(1, 128))
    def setup(self, data, budget):
        self.g: GroupConfig = data.draw(groups(self.EAGLE, self.RETENTION), label="group")
        self.req: RequestConfig = data.draw(requests(self.OFFLOAD_PROMPT_ONLY), label="request")
        self.budget = budget
        self.computed = 0  # num_computed_tokens
        self.num_tokens = self.req.prompt_tokens
        self.cursor = 0  # next_stored_chunk_idx
        self.submitted: list[int] = []
        self.final_horizon_chunks = 0
        self.done = False
        self.decodes = 0

    # --- one _build_store_jobs call ------------------------------------
    def _apply(self, tokens_after: int, finished: bool) -> None:
        jobs = build_store_jobs(self.RULE, self.g, self.req, self.cursor, tokens_after,
                                self.num_tokens, finished)
        n, w = jobs.num_chunks, jobs.store
        seen = set(self.submitted)
        for c in w.chunks:
            assert c not in seen, f"chunk {c} submitted twice"
            assert (c + 1) * self.g.chunk_tokens <= self.computed, (
                f"chunk {c} submitted with only {self.computed} tokens computed"
            )
        assert w.next_cursor >= self.cursor, "next_stored_chunk_idx moved back"
        self.submitted.extend(w.chunks)
        self.cursor = w.next_cursor
        self.final_horizon_chunks = n

    def _end(self, tokens_after: int) -> None:
        self._apply(tokens_after, finished=True)
        self.done = True
        if self.CHECK_LOADABLE:
            self._check_final()

    def _check_final(self) -> None:
        H = self.final_horizon_chunks
        event(f"final horizon {'0' if H == 0 else '>0'}, sparse={not self.g.dense}, "
              f"stored={'some' if self.submitted else 'none'}")
        loadable = wanted_chunks(LOAD_MODEL, self.g, self.req, H)
        stored = set(self.submitted)
        # The dense fallbacks (no/unrepresentable alignment, need >= per
        # segment) store every chunk by design; only a sparse mask must not
        # store what no hit loads.
        assert self.g.dense or stored <= loadable, (
            f"stored but not loadable under final horizon {H}: {sorted(stored - loadable)}"
        )
        assert loadable <= stored, (
            f"loadable under final horizon {H} but never stored: {sorted(loadable - stored)}"
        )

    # --- scheduler steps -------------------------------------------------
    @precondition(lambda self: not self.done and self.computed < self.req.prompt_tokens)
    @rule(size=st.integers(1, 128))
    def prefill(self, size):
        size = min(size, self.budget, self.req.prompt_tokens - self.computed)
        self.computed += size
        self._apply(self.computed, finished=False)
        if self.computed == self.req.prompt_tokens:
            self.num_tokens = self.req.prompt_tokens + 1  # first token sampled

    @precondition(lambda self: not self.done and self.computed < self.req.prompt_tokens)
    @rule(size=st.integers(1, 8))
    def prefill_small(self, size):
        self.prefill(size)

    @precondition(lambda self: not self.done and self.computed >= self.req.prompt_tokens)
    @rule(steps=st.integers(1, 32))
    def decode(self, steps):
        """``steps`` consecutive decode steps (one store step each)."""
        for _ in range(steps):
            self.computed += 1
            self.decodes += 1
            self.num_tokens = self.computed  # the fed token was sampled already
            self._apply(self.computed, finished=False)

    @precondition(lambda self: not self.done and self.computed >= self.req.prompt_tokens)
    @rule()
    def finish(self):
        self.num_tokens = self.req.prompt_tokens + self.decodes + 1
        self._end(finish_tokens(self.RULE, self.req, self.num_tokens))

    # Abort once at least one step ran (an abort before any step stores nothing).
    @precondition(lambda self: not self.done and self.computed > 0)
    @rule(async_scheduling=st.booleans())
    def abort(self, async_scheduling):
        # FINISHED_ABORTED: num_tokens_after_batch = num_computed_tokens. vLLM
        # advances num_computed_tokens at schedule time in both modes, so the
        # async case (last step's output still in flight) sees the same value.
        self._end(self.computed)

    @precondition(lambda self: self.done)
    @rule()
    def after_end(self):
        # The request is gone: later steps must not store anything for it.
        pass

    @invariant()
    def submitted_are_computed_and_unique(self):
        if not hasattr(self, "g"):
            return
        assert len(self.submitted) == len(set(self.submitted))
        assert all((c + 1) * self.g.chunk_tokens <= self.computed for c in self.submitted)

    def teardown(self):
        if hasattr(self, "g") and not self.done:
            self._end(self.computed)  # the request is aborted


class DecodeOffloadMachine(StoreMachine):
    """offload_prompt_only=False: decode tokens are offloaded too. The prompt
    horizon's final-segment tail, stored when the prompt completes, is not
    loadable under the final horizon once decode moves past the prompt
    (the intended load model has hits at aligned boundaries and at H only)."""

    OFFLOAD_PROMPT_ONLY = False


class EagleMachine(StoreMachine):
    """EAGLE/MTP draft groups: safety invariants only (see module docstring)."""

    EAGLE = True
    CHECK_LOADABLE = False


class RetentionMachine(StoreMachine):
    """prefix_cache_retention_interval set: safety invariants only."""

    RETENTION = True
    CHECK_LOADABLE = False


_settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(_settings, max_examples=600)
TestDecodeOffloadMachine = pytest.mark.xfail(
    strict=False, raises=AssertionError,
    reason="known gap: prompt-horizon tail vs final horizon past the prompt "
    "(offload_prompt_only=False); reported to the lead",
)(DecodeOffloadMachine.TestCase)
TestDecodeOffloadMachine.settings = _settings
TestEagleMachine = EagleMachine.TestCase
TestEagleMachine.settings = settings(_settings, max_examples=100)
TestRetentionMachine = RetentionMachine.TestCase
TestRetentionMachine.settings = settings(_settings, max_examples=100)


@pytest.fixture(autouse=True)
def _contracts_on():
    prev = contracts.mode()
    contracts.set_mode("raise")
    yield
    contracts.set_mode(prev)


class PreFixMachine(StoreMachine):
    """The same machine on the vllm-0.29 rule (pre-fix horizon)."""

    RULE = "vllm-0.29"


def test_machine_catches_prefix_rule():
    """The invariants can fail: on vllm-0.29 (the current step's count used as
    the final segment end) hypothesis finds a stored chunk that is not
    loadable under the final horizon."""
    with pytest.raises(AssertionError, match="not loadable|never stored"):
        run_state_machine_as_test(
            PreFixMachine,
            settings=settings(_settings, max_examples=1000, database=None, derandomize=True),
        )


def test_decode_offload_prompt_tail_not_loadable():
    """The DecodeOffloadMachine finding, replayed deterministically:
    offload_prompt_only=False, SWA block 1, window 2, alignment 2, a 1-token
    prompt, two decode steps, then abort. The prompt horizon is chunk 1, so
    chunk 0 (its final partial-segment tail) is stored when the prompt
    completes; the final horizon is 3 chunks, whose hits (2 and 3 tokens) read
    chunks 1 and 2 only."""
    m = DecodeOffloadMachine()
    m.g = GroupConfig(1, 2, 2)
    m.req = RequestConfig(1, offload_prompt_only=False)
    m.budget, m.computed, m.num_tokens, m.cursor = 1, 0, 1, 0
    m.submitted, m.final_horizon_chunks, m.done, m.decodes = [], 0, False, 0
    m.prefill(1)
    m.decode(2)
    m.CHECK_LOADABLE = False
    m.abort(False)
    assert m.final_horizon_chunks == 3
    assert 0 in m.submitted
    assert 0 not in wanted_chunks(LOAD_MODEL, m.g, m.req, m.final_horizon_chunks)
