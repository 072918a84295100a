"""CrossHair targets: plain-int adapters around kvreach.impl rules, and
mutants carrying the *same* deal contracts. A mutant is the one rule with one
mutation parameter set (``mask.reachable_block_mask_with``'s ``need`` / ``shift``,
``rules.store_horizon_chunks_with`` / ``rules.store_step_with``'s ``frontier_final``,
``lookup.scan``'s ``reset_window_on_break``), never a copy of it.

Test data for ``tests/conformance/test_crosshair.py`` and
``scripts/crosshair_check.sh``. Every adapter takes plain ints/bools (no
``GroupConfig`` argument), so CrossHair explores the rule's integer inputs
directly; the bounds are stated once, in the ``*_BOUNDS`` preconditions below.

Mutants (each the real rule with one known bug injected by a parameter):

- ``mask_need_ceil_w``: ``need = ceil(W / B)`` instead of ``ceil((W - 1) / B)``
  (vLLM 0.29.0's ``get_sliding_window_size_in_chunks`` window).
- ``mask_no_eagle_shift``: the EAGLE shift of the matched run dropped
  (``shift = 0``; ``need`` still counts the EAGLE block).
- ``horizon_prefix_frontier`` / ``store_prefix_frontier``: the pre-fix horizon
  (vLLM 0.29.0 ``is_store_reachable_swa_chunk``): the current step's storable
  count used as the final segment end while the request is still running.
"""

from __future__ import annotations

import deal

from kvreach.impl import mask, rules
from kvreach.impl.oracles import horizon_is_final, mask_matches_hits, submitted_wanted
from kvreach.impl.rules import store_horizon_chunks
from kvreach.params import GroupConfig, RequestConfig, cdiv
from kvreach.proofs.scenarios import PR_54362

# ---------------------------------------------------------------------------
# Bounds (realistic for SWA groups, small enough for the solver)
# ---------------------------------------------------------------------------
MAX_BLOCK_SIZE = 8  # tokens per block per DCP rank
MAX_WINDOW = 64  # sliding_window W
MAX_ALIGNMENT = 128  # alignment_tokens (full-attention chunk tokens)
MAX_BLOCK = 128  # block indices and horizons in blocks
MAX_SPAN = 8  # end_block - start_block (mask length)
MAX_PROMPT = 1024  # num_prompt_tokens


def _group_ok(block_size, window, alignment_tokens, dcp_world_size, retention_interval):
    if not (1 <= block_size <= MAX_BLOCK_SIZE and 1 <= window <= MAX_WINDOW):
        return False
    if dcp_world_size not in (1, 2):
        return False
    if alignment_tokens is not None and not 1 <= alignment_tokens <= MAX_ALIGNMENT:
        return False
    if retention_interval is not None:
        # SchedulerOffloadConfig.from_spec: a multiple of the chunk, needs alignment.
        if alignment_tokens is None or not 0 <= retention_interval <= MAX_ALIGNMENT:
            return False
        if retention_interval % (block_size * dcp_world_size) != 0:
            return False
    return True


def _group(block_size, window, alignment_tokens, eagle, dcp_world_size=1, retention_interval=None):
    return GroupConfig(
        block_size=block_size,
        window=window,
        alignment_tokens=alignment_tokens,
        dcp_world_size=dcp_world_size,
        eagle=eagle,
        retention_interval=retention_interval,
    )


# ---------------------------------------------------------------------------
# reachable_block_mask
# ---------------------------------------------------------------------------


def _mask_bounds(
    block_size, window, alignment_tokens, eagle, dcp_world_size, retention_interval,
    prompt_tokens, start_block, end_block, final_segment_end_block,
):
    return (
        _group_ok(block_size, window, alignment_tokens, dcp_world_size, retention_interval)
        and 1 <= prompt_tokens <= MAX_PROMPT
        and 0 <= start_block <= end_block <= MAX_BLOCK
        and end_block - start_block <= MAX_SPAN
        and (
            final_segment_end_block is None
            or end_block <= final_segment_end_block <= MAX_BLOCK
        )
    )


def _mask_post(
    block_size, window, alignment_tokens, eagle, dcp_world_size, retention_interval,
    prompt_tokens, start_block, end_block, final_segment_end_block, result,
):
    g = _group(block_size, window, alignment_tokens, eagle, dcp_world_size, retention_interval)
    return mask_matches_hits(
        start_block, end_block, g, prompt_tokens, final_segment_end_block, result
    )


def mask_contract(f):
    """The contract of ``mask.reachable_block_mask`` (``mask_matches_hits``)
    over plain ints, within the bounds above."""
    return deal.pre(_mask_bounds)(deal.ensure(_mask_post)(f))


@mask_contract
def mask_real(
    block_size: int, window: int, alignment_tokens: int | None, eagle: bool,
    dcp_world_size: int, retention_interval: int | None, prompt_tokens: int,
    start_block: int, end_block: int, final_segment_end_block: int | None,
) -> list[bool] | None:
    g = _group(block_size, window, alignment_tokens, eagle, dcp_world_size, retention_interval)
    return mask.reachable_block_mask(
        start_block, end_block, g, prompt_tokens, final_segment_end_block
    )


@mask_contract
def mask_need_ceil_w(
    block_size: int, window: int, alignment_tokens: int | None, eagle: bool,
    dcp_world_size: int, retention_interval: int | None, prompt_tokens: int,
    start_block: int, end_block: int, final_segment_end_block: int | None,
) -> list[bool] | None:
    """MUTANT: need = ceil(W / B) (+ EAGLE block) instead of ceil((W - 1) / B)."""
    g = _group(block_size, window, alignment_tokens, eagle, dcp_world_size, retention_interval)
    need = cdiv(g.window, g.block_tokens) + g.shift
    return mask.reachable_block_mask_with(
        start_block, end_block, g, prompt_tokens, final_segment_end_block, need, g.shift
    )


@mask_contract
def mask_no_eagle_shift(
    block_size: int, window: int, alignment_tokens: int | None, eagle: bool,
    dcp_world_size: int, retention_interval: int | None, prompt_tokens: int,
    start_block: int, end_block: int, final_segment_end_block: int | None,
) -> list[bool] | None:
    """MUTANT: the EAGLE shift of the matched run dropped (shift = 0)."""
    g = _group(block_size, window, alignment_tokens, eagle, dcp_world_size, retention_interval)
    return mask.reachable_block_mask_with(
        start_block, end_block, g, prompt_tokens, final_segment_end_block, g.need, 0
    )


# ---------------------------------------------------------------------------
# store_horizon_chunks
# ---------------------------------------------------------------------------


def _horizon_bounds(eagle, retention, finished, num_chunks, prompt_horizon_chunks):
    return 0 <= num_chunks <= MAX_BLOCK and 0 <= prompt_horizon_chunks <= MAX_BLOCK


def _horizon_group(eagle: bool, retention: bool) -> GroupConfig:
    # The worked example's group (B 4, W 16, alignment 36); retention = one segment.
    ex = PR_54362
    return _group(ex.swa_block_size, ex.window, ex.alignment_tokens, eagle,
                  retention_interval=ex.alignment_tokens if retention else None)


def _horizon_post(eagle, retention, finished, num_chunks, prompt_horizon_chunks, result):
    return horizon_is_final(
        _horizon_group(eagle, retention), finished, num_chunks, prompt_horizon_chunks, result
    )


def horizon_contract(f):
    """The contract of ``rules.store_horizon_chunks`` (``horizon_is_final``)."""
    return deal.pre(_horizon_bounds)(deal.ensure(_horizon_post)(f))


@horizon_contract
def horizon_real(
    eagle: bool, retention: bool, finished: bool, num_chunks: int, prompt_horizon_chunks: int
) -> int | None:
    return store_horizon_chunks(
        _horizon_group(eagle, retention), finished, num_chunks, prompt_horizon_chunks
    )


@horizon_contract
def horizon_prefix_frontier(
    eagle: bool, retention: bool, finished: bool, num_chunks: int, prompt_horizon_chunks: int
) -> int | None:
    """MUTANT (pre-fix horizon): the current step's count is the final segment end."""
    return rules.store_horizon_chunks_with(
        _horizon_group(eagle, retention), finished, num_chunks, prompt_horizon_chunks,
        frontier_final=True,
    )


# ---------------------------------------------------------------------------
# store_step (vllm-0.33), with the load-side contract ``submitted_wanted``
# ---------------------------------------------------------------------------


def _store_bounds(block_size, window, alignment_tokens, prompt_tokens, cursor, num_chunks, finished):
    return (
        _group_ok(block_size, window, alignment_tokens, 1, None)
        and 1 <= prompt_tokens <= MAX_PROMPT
        and 0 <= cursor <= num_chunks <= MAX_BLOCK
    )


def _store_post(block_size, window, alignment_tokens, prompt_tokens, cursor, num_chunks, finished, result):
    g = _group(block_size, window, alignment_tokens, False)
    req = RequestConfig(prompt_tokens)
    return submitted_wanted("vllm-0.33", g, req, cursor, num_chunks, finished, result)


def store_contract(f):
    """``rules.store_step``'s load-side contract (``submitted_wanted``) for
    a non-EAGLE group without retention interval under vllm-0.33."""
    return deal.pre(_store_bounds)(deal.ensure(_store_post)(f))


@store_contract
def store_real(
    block_size: int, window: int, alignment_tokens: int | None, prompt_tokens: int,
    cursor: int, num_chunks: int, finished: bool,
) -> rules.StoreStep:
    g = _group(block_size, window, alignment_tokens, False)
    return rules.store_step("vllm-0.33", g, RequestConfig(prompt_tokens), cursor, num_chunks, finished)


# The pre-fix horizon only errs while the request runs: CrossHair searches the
# running steps from cursor 0 (with the reconsideration's branches in the one
# store step, the whole domain took it ~120 s alone, over its budget under CI's
# load). The contract and the rule are the real ones.
@deal.pre(lambda block_size, window, alignment_tokens, prompt_tokens, cursor, num_chunks,
          finished: not finished and cursor == 0)
@store_contract
def store_prefix_frontier(
    block_size: int, window: int, alignment_tokens: int | None, prompt_tokens: int,
    cursor: int, num_chunks: int, finished: bool,
) -> rules.StoreStep:
    """MUTANT (pre-fix horizon) of the vllm-0.33 store step: the mask's final
    segment end is the current storable count, running or not."""
    g = _group(block_size, window, alignment_tokens, False)
    return rules.store_step_with(
        "vllm-0.33", g, RequestConfig(prompt_tokens), cursor, num_chunks, finished,
        frontier_final=True,
    )


# --- the offload lookup's scan (kvreach.impl.lookup) ----------------------------------------
from kvreach.impl import lookup as _lookup  # noqa: E402

Answer = _lookup.Answer  # counterexamples print Answer.X; the replay evaluates them here


@deal.pre(lambda answers, w, w0: 1 <= w <= w0 and len(answers) <= 12)
@deal.ensure(lambda answers, w, w0, result: result == _lookup.sliding_window_end(answers, w, w0))
def scan_keeps_initial_window(answers: list[_lookup.Answer], w: int, w0: int) -> int | None:
    """Mutant: the twin's scan loop without the reset of the window after a
    MISS / RETRY (a parameter of the one loop, not a copy)."""
    return _lookup.scan(answers, w, w0, reset_window_on_break=False)
