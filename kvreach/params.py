"""Concrete parameters of one SWA KV-cache group and one request.

First stage of the data flow (params -> rules -> lifecycle -> properties ->
report). Everything here is plain integers; the Z3 twin is
``kvreach.spec.config``. Each derived quantity names the vLLM 0.33.0 code it
mirrors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

RULES: tuple[str, ...] = ("vllm-0.29", "vllm-0.33", "lookup-window")
LOAD_MODELS: tuple[str, ...] = ("aligned", "intended")
Rule = Literal["vllm-0.29", "vllm-0.33", "lookup-window"]
LoadModel = Literal["aligned", "intended"]

# Limits, stated and refused past (ParamError) before any work. A request of
# at most MAX_TOKENS tokens (prompt + decode; vLLM's largest max_model_len is
# of this order: 10M-token contexts), at most MAX_CHUNKS SWA chunks of them
# (prompt + decode over swa-block-size x dcp x blocks-per-chunk) and at most
# MAX_STEPS scheduler steps (prefill steps ceil(prompt / budget) + decode
# steps) runs in O(prompt + steps) time and memory: at the limits, seconds
# and well under 1 GB (README.md, Limits). Every other integer
# (block sizes, window, alignment, ...) is any integer up to MAX_INT, the
# int64 vLLM's tensors and configs hold: its size costs nothing (the rules
# use it in closed form, never as a range).
MAX_TOKENS = 10_000_000
MAX_CHUNKS = 2_500_000
MAX_STEPS = 20_000
MAX_INT = 2**63 - 1


class RetentionMode(IntEnum):
    """The three cases of ``CacheConfig.prefix_cache_retention_interval`` that
    ``SlidingWindowManager.reachable_block_mask`` tells apart: ``None`` (a tail
    at every ``alignment_tokens`` boundary), ``0`` (only the reachable
    boundaries' tails), ``> 0`` (a tail once per ``retention_interval``-sized
    segment). The spec uses the values as Z3 integers
    (``kvreach.spec.config.SymConfig.retention_mode``)."""

    NONE = 0
    ZERO = 1
    POSITIVE = 2

    @classmethod
    def of(cls, retention_interval: int | None) -> "RetentionMode":
        if retention_interval is None:
            return cls.NONE
        return cls.ZERO if retention_interval == 0 else cls.POSITIVE


class ParamError(ValueError):
    """Bad input: names the parameter, the value given and what was expected."""

    def __init__(self, param: str, value: object, expected: str) -> None:
        self.param, self.value, self.expected = param, value, expected
        super().__init__(f"{param}={value!r}: expected {expected}")

    def __reduce__(self):  # raised in a proof-run worker, re-raised in the parent
        return type(self), (self.param, self.value, self.expected)


def cdiv(a: int, b: int) -> int:
    """vllm.utils.math_utils.cdiv."""
    return -(-a // b)


def need_int(name: str, value: object, minimum: int) -> None:
    """Refuse ``value`` for parameter ``name`` unless it is an integer (not a
    bool) of at least ``minimum``: the one check of every integer parameter
    (here and in ``kvreach.impl.lookup``)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ParamError(name, value, f"an integer >= {minimum}")


def check_rule(rule: str) -> str:
    if rule not in RULES:
        raise ParamError("rule", rule, "one of " + ", ".join(RULES))
    return rule


def check_load_model(model: str) -> str:
    if model not in LOAD_MODELS:
        raise ParamError("load_model", model, "one of " + ", ".join(LOAD_MODELS))
    return model


def alignment_tokens(full_block_sizes: Iterable[int], block_sizes: Iterable[int],
                     dcp_world_size: int = 1, blocks_per_chunk: int = 1) -> int | None:
    """``SchedulerOffloadConfig.from_spec``'s ``alignment_tokens``: the
    full-attention groups' tokens per chunk (block_size * DCP *
    blocks_per_chunk) when they all agree, None when they differ; with no
    full-attention group (SWA-only), the largest tokens per chunk of
    ``block_sizes`` (every group's block size)."""
    per_chunk = dcp_world_size * blocks_per_chunk
    full = {b * per_chunk for b in full_block_sizes}
    if len(full) == 1:
        return full.pop()
    if full:
        return None
    return max(b * per_chunk for b in block_sizes)


@dataclass(frozen=True)
class GroupConfig:
    """One SWA group as the offloading scheduler sees it.

    block_size: ``SlidingWindowSpec.block_size`` (tokens per block per DCP rank).
    window: ``SlidingWindowSpec.sliding_window`` (W).
    extra_retained_tokens: ``SlidingWindowSpec.extra_retained_tokens`` (MTP
        re-prefill history). The store mask widens its window by it
        (``_reachable_store_block_mask``: :attr:`mask_window_tokens`); the
        offload lookup widens its run length by it
        (``get_sliding_window_size_in_chunks``, ``kvreach.impl.lookup``).
    alignment_tokens: ``SchedulerOffloadConfig.alignment_tokens`` (None: no
        alignment). With a full-attention group it is that group's tokens per
        chunk (``SchedulerOffloadConfig.from_spec``).
    blocks_per_chunk: ``SchedulerOffloadConfig.blocks_per_chunk``.
    dcp_world_size: decode context parallel size; scales the block.
    eagle: the group holds EAGLE/MTP draft layers (``is_eagle_group``).
    retention_interval: ``CacheConfig.prefix_cache_retention_interval``.
    lookahead_hashes: the offloading scheduler's ``use_lookahead_block_hashes``
        (vLLM 0.34.0: ``vllm_config.num_hash_lookahead_tokens > 0``; the
        request's ``RequestConfig.hash_lookahead_tokens``). An EAGLE group is
        then stored and looked up as a plain SWA group (:attr:`legacy_eagle`
        False: no trailing drop, no mask shift, no widening), except that it
        still gets no final tail (``store_horizon_chunks`` and
        ``_final_swa_alignment_blocks`` test ``is_eagle_group`` alone).
    """

    block_size: int
    window: int
    alignment_tokens: int | None
    blocks_per_chunk: int = 1
    dcp_world_size: int = 1
    eagle: bool = False
    retention_interval: int | None = None
    extra_retained_tokens: int = 0
    lookahead_hashes: bool = False

    def __post_init__(self) -> None:
        need_int("block_size", self.block_size, 1)
        need_int("window", self.window, 1)
        need_int("extra_retained_tokens", self.extra_retained_tokens, 0)
        if self.alignment_tokens is not None:
            need_int("alignment_tokens", self.alignment_tokens, 1)
        need_int("blocks_per_chunk", self.blocks_per_chunk, 1)
        need_int("dcp_world_size", self.dcp_world_size, 1)
        if self.retention_interval is not None:
            need_int("retention_interval", self.retention_interval, 0)
            if self.retention_interval % self.chunk_tokens != 0:
                # SchedulerOffloadConfig.from_spec raises the same ValueError.
                raise ParamError(
                    "retention_interval",
                    self.retention_interval,
                    f"a multiple of the SWA chunk size ({self.chunk_tokens} tokens)",
                )
            if self.alignment_tokens is None:
                raise ParamError(
                    "retention_interval",
                    self.retention_interval,
                    "None when there is no alignment (alignment_tokens is None)",
                )

    # --- derived, as in vLLM 0.33.0 -------------------------------------
    @property
    def block_tokens(self) -> int:
        """B: ``block_size * dcp_world_size`` (``reachable_block_mask``;
        ``resolve_dcp_kv_block_size`` for the offload group)."""
        return self.block_size * self.dcp_world_size

    @property
    def chunk_tokens(self) -> int:
        """``GroupOffloadConfig.tokens_per_chunk``."""
        return self.block_tokens * self.blocks_per_chunk

    @property
    def mask_window_tokens(self) -> int:
        """The window the store mask uses: ``sliding_window +
        extra_retained_tokens`` (``_reachable_store_block_mask``)."""
        return self.window + self.extra_retained_tokens

    @property
    def legacy_eagle(self) -> bool:
        """An EAGLE group with legacy hashes: ``reachable_block_mask``'s
        ``use_eagle`` (``is_eagle_group and not use_lookahead_block_hashes``,
        vLLM 0.34.0; ``is_eagle_group`` before), the trailing drop of
        ``storable_chunks`` (``apply_eagle_drop``) and the lookup's widening."""
        return self.eagle and not self.lookahead_hashes

    @property
    def shift(self) -> int:
        """EAGLE shift of the matched run (``reachable_block_mask``)."""
        return 1 if self.legacy_eagle else 0

    @property
    def need(self) -> int:
        """``SlidingWindowManager._contiguous_blocks_for_hit`` at block B, of
        the store mask's window."""
        return cdiv(self.mask_window_tokens - 1, self.block_tokens) + self.shift

    @property
    def segment_tokens(self) -> int | None:
        """Segment length: alignment (R None), R (R > 0), none (R == 0)."""
        if self.alignment_tokens is None:
            return None
        if self.retention_interval is None:
            return self.alignment_tokens
        return self.retention_interval or None

    @property
    def representable(self) -> bool:
        """``alignment_tokens % B == 0`` (else the mask falls back to dense)."""
        return (
            self.alignment_tokens is not None
            and self.alignment_tokens % self.block_tokens == 0
        )

    @property
    def has_segments(self) -> bool:
        """Segment boundaries exist (``kvreach.spec.config.SymConfig.has_segments``,
        the same definition): no alignment (every chunk boundary, the load
        side's granularity; the mask is dense) or a retention interval other
        than 0. Whether the mask has segment tails is this flag (and
        :attr:`dense`), never a value of :attr:`per_segment`."""
        return self.alignment_tokens is None or self.retention_interval != 0

    @property
    def per_segment(self) -> int:
        """The segment length in blocks (vLLM's ``per_segment``, ``segment_tokens
        // block_size`` of ``reachable_block_mask``), as the spec's
        ``SymConfig.per_segment``: the alignment's (retention interval None),
        the retention interval's (> 0), and with no alignment the chunk's
        (``blocks_per_chunk``: every chunk boundary, the load side's
        granularity). With a retention interval of 0 (no segments,
        :attr:`has_segments` False) it is the alignment's, as in the spec; for
        an alignment of part blocks (not :attr:`representable`, outside the
        spec's scope) vLLM's floor division. The mask reads it only where it
        has segment tails (:attr:`has_segments`, not :attr:`dense`)."""
        if self.alignment_tokens is None:
            return self.blocks_per_chunk
        if self.retention_interval:
            return self.retention_interval // self.block_tokens
        return self.alignment_tokens // self.block_tokens

    @property
    def dense(self) -> bool:
        """``reachable_block_mask`` returns None (store every block); as
        ``SymConfig.dense``: no (representable) alignment, or segments whose
        tail ``need`` fills them."""
        if not self.representable:
            return True
        return self.has_segments and self.need >= self.per_segment

    @property
    def final_alignment_blocks(self) -> int | None:
        """``OffloadingConnectorScheduler._final_swa_alignment_blocks``."""
        if self.eagle or not self.representable:
            return None
        assert self.alignment_tokens is not None
        return self.alignment_tokens // self.block_tokens


@dataclass(frozen=True)
class RequestConfig:
    """The request's offload-relevant settings.

    prompt_tokens: ``Request.num_prompt_tokens``.
    max_offload_tokens: ``kv_transfer_params["max_offload_tokens"]``.
    offload_prompt_only: ``OffloadingSpec.offload_prompt_only`` (default True).
    hash_lookahead_tokens: ``vllm_config.num_hash_lookahead_tokens`` (L,
        vLLM 0.34.0): each block hash also covers the L tokens after its
        block, so the request has ``(num_tokens - L) // tokens_per_hash``
        block hashes (``get_request_block_hasher``) and, with L > 0,
        ``_calc_num_offloadable_tokens`` is capped by the hashed tokens
        (:meth:`hashed_tokens`). 0: legacy hashes (every release before).
    tokens_per_hash: ``SchedulerOffloadConfig.tokens_per_hash``, the hash
        block size (``resolve_kv_cache_block_sizes``: the GCD of the groups'
        block sizes times DCP); read only when ``hash_lookahead_tokens > 0``.
    """

    prompt_tokens: int
    max_offload_tokens: int | None = None
    offload_prompt_only: bool = True
    hash_lookahead_tokens: int = 0
    tokens_per_hash: int = 1

    def __post_init__(self) -> None:
        need_int("prompt_tokens", self.prompt_tokens, 1)
        if self.max_offload_tokens is not None:
            need_int("max_offload_tokens", self.max_offload_tokens, 0)
        need_int("hash_lookahead_tokens", self.hash_lookahead_tokens, 0)
        need_int("tokens_per_hash", self.tokens_per_hash, 1)

    @property
    def prompt_offloadable_tokens(self) -> int:
        """``prompt_offloadable_tokens`` of ``_build_store_jobs``: the
        prompt's offloadable tokens, ``offloadable(prompt, prompt)`` (with
        lookahead hashes, before the first token is sampled: a store step
        reads it at its ``num_tokens``, :meth:`at`)."""
        return self.offloadable(self.prompt_tokens, self.prompt_tokens)

    def hashed_tokens(self, num_tokens: int) -> int | None:
        """``len(block_hashes) * tokens_per_hash`` of a request of
        ``num_tokens`` tokens under lookahead hashes; None without them."""
        if not self.hash_lookahead_tokens:
            return None
        L, h = self.hash_lookahead_tokens, self.tokens_per_hash
        return max(0, num_tokens - L) // h * h

    def offloadable(self, tokens: int, num_tokens: int) -> int:
        """``OffloadingConnectorScheduler._calc_num_offloadable_tokens``."""
        n = min(tokens, num_tokens)
        hashed = self.hashed_tokens(num_tokens)
        if hashed is not None:
            n = min(n, hashed)
        if self.max_offload_tokens is not None:
            n = min(n, self.max_offload_tokens)
        if self.offload_prompt_only:
            n = min(n, self.prompt_tokens)
        return n

    def at(self, num_tokens: int) -> "RequestConfig":
        """The request as one ``_build_store_jobs`` call sees it, at
        ``Request.num_tokens`` = ``num_tokens``: the hashed-tokens cap is one
        more cap of ``_calc_num_offloadable_tokens`` beside
        ``max_offload_tokens`` (both are mins), so it is folded into that
        one, and every reader of the request (the prompt horizon
        ``prompt_offloadable_tokens``, the rules' contracts) reads the
        hashed end of this step. ``self`` without lookahead hashes."""
        hashed = self.hashed_tokens(num_tokens)
        if hashed is None:
            return self
        cap = hashed if self.max_offload_tokens is None else min(hashed, self.max_offload_tokens)
        return RequestConfig(self.prompt_tokens, cap, self.offload_prompt_only)
