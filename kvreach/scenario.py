"""One request's scenario as ``kvreach simulate`` and ``kvreach plot`` take
it (option names: a full-attention block size, not an alignment), and
running it through the executable rule.

Sits between the parameters and the CLI: imports ``kvreach.params``, the
release records (``kvreach.releases``, data) and ``kvreach.impl`` only. The
alignment comes from :func:`kvreach.params.alignment_tokens`, the rule
``tests/vllm`` checks against vLLM's own ``SchedulerOffloadConfig.from_spec``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvreach.params import (MAX_CHUNKS, MAX_INT, MAX_STEPS, MAX_TOKENS, GroupConfig, ParamError,
                            RequestConfig, alignment_tokens)
from kvreach.releases import DEFAULT as DEFAULT_RELEASE, Release

if TYPE_CHECKING:
    from kvreach.impl.lifecycle import Trace


@dataclass(frozen=True)
class Scenario:
    """One SWA group (with at most one full-attention group beside it) and
    one request; :func:`run_scenario` validates it and drives a rule."""

    swa_block_size: int
    window: int
    prompt: int
    budget: int
    full_block_size: int | None = None
    blocks_per_chunk: int = 1
    dcp: int = 1
    eagle: bool = False
    retention_interval: int | None = None
    max_offload_tokens: int | None = None
    offload_prompt_only: bool = True
    abort_after_step: int | None = None
    async_scheduling: bool = False
    decode: int = 0
    load_model: str = "intended"
    extra_retained_tokens: int = 0
    error_after_step: int | None = None
    hash_lookahead_tokens: int | None = None  # None: what vLLM derives (derived_hash_lookahead_tokens)

    def config(self, rule: str) -> dict:
        """The ``config`` object of ``simulate --json`` (option names)."""
        return {
            "rule": rule, "load_model": self.load_model,
            "full_block_size": self.full_block_size, "swa_block_size": self.swa_block_size,
            "window": self.window, "blocks_per_chunk": self.blocks_per_chunk, "dcp": self.dcp,
            "eagle": self.eagle, "retention_interval": self.retention_interval,
            "prompt": self.prompt, "budget": self.budget,
            "max_offload_tokens": self.max_offload_tokens,
            "offload_prompt_only": self.offload_prompt_only, "decode": self.decode,
            "abort_after_step": self.abort_after_step, "async": self.async_scheduling,
            "extra_retained_tokens": self.extra_retained_tokens,
            "error_after_step": self.error_after_step,
            "hash_lookahead_tokens": self.hash_lookahead_tokens,
        }

    @property
    def alignment_tokens(self) -> int:
        """Full-attention block (else the SWA block) x DCP x blocks_per_chunk."""
        full = [] if self.full_block_size is None else [self.full_block_size]
        a = alignment_tokens(full, [self.swa_block_size], self.dcp, self.blocks_per_chunk)
        assert a is not None  # one full-attention group at most
        return a


# Scenario fields that are integers, with their minimum (None: not given).
MINIMUM = {
    "swa_block_size": 1, "window": 1, "prompt": 1, "budget": 1, "full_block_size": 1,
    "blocks_per_chunk": 1, "dcp": 1, "retention_interval": 0, "max_offload_tokens": 0,
    "abort_after_step": 0, "decode": 0, "extra_retained_tokens": 0, "error_after_step": 0,
    "hash_lookahead_tokens": 0,
}


def derived_hash_lookahead_tokens(s: Scenario, release: Release = DEFAULT_RELEASE) -> int:
    """``VllmConfig.num_hash_lookahead_tokens`` as vLLM derives it for the
    scenario under the offloading connector
    (``_resolve_num_hash_lookahead_tokens``, vLLM 0.34.0): with an EAGLE/MTP
    drafter (``use_eagle_block_drop``; kvreach sees one as an EAGLE group, or
    as ``extra_retained_tokens > 0``, which only a multi-token MTP drafter
    sets) and a connector that supports lookahead hashes
    (``OffloadingConnector.supports_lookahead_block_hashes`` is True), the
    drafter's ``num_prefill_lookahead_tokens``: 1 for EAGLE, EAGLE3 and MTP,
    ``num_speculative_tokens`` for multi-module MTP, which is
    ``extra_retained_tokens + 1`` (``kv_cache_planning``: ``extra =
    max(0, num_prefill_lookahead_tokens - 1)``). 0 without a drafter, with
    ``disable_lookahead_block_hashes``, and in every release before 0.34.0
    (their ``VllmConfig`` turns lookahead hashes off under any KV connector)."""
    if not release.lookahead_hashes or not (s.eagle or s.extra_retained_tokens > 0):
        return 0
    return s.extra_retained_tokens + 1


def hash_lookahead_tokens(s: Scenario, release: Release = DEFAULT_RELEASE) -> int:
    """The scenario's L: the one given, else :func:`derived_hash_lookahead_tokens`;
    ParamError for L > 0 under a release without lookahead hashes."""
    if s.hash_lookahead_tokens is None:
        return derived_hash_lookahead_tokens(s, release)
    if s.hash_lookahead_tokens > 0 and not release.lookahead_hashes:
        raise ParamError("hash_lookahead_tokens", s.hash_lookahead_tokens,
                         f"0 under vLLM {release.name}, which has no lookahead block hashes "
                         "under a KV connector (0.34.0 on)")
    return s.hash_lookahead_tokens


def tokens_per_hash(s: Scenario) -> int:
    """``SchedulerOffloadConfig.tokens_per_hash`` (``resolve_kv_cache_block_sizes``'
    hash block size): the GCD of the groups' block sizes times DCP; the one
    group's block size times DCP for an SWA-only model."""
    blocks = [s.swa_block_size] + ([] if s.full_block_size is None else [s.full_block_size])
    return math.gcd(*blocks) * s.dcp




def check_limits(s: Scenario) -> None:
    """``ParamError`` naming the field when ``s`` is past a limit of
    :mod:`kvreach.params` (``MAX_TOKENS``, ``MAX_STEPS``, ``MAX_INT``) or below
    a field's minimum."""
    for name, lo in MINIMUM.items():
        v = getattr(s, name)
        if v is not None and v < lo:
            raise ParamError(name, v, f"an integer >= {lo}")
        if v is not None and v > MAX_INT:
            raise ParamError(name, v, f"an integer <= 2**63 - 1 ({MAX_INT})")
    if s.retention_interval is not None and s.full_block_size is None:
        raise ParamError("retention_interval", s.retention_interval,
                         "--full-block-size as well (a retention interval is kept before "
                         "full-attention boundaries; without a full-attention group omit it)")
    if s.prompt > MAX_TOKENS:
        raise ParamError("prompt", s.prompt, f"at most {MAX_TOKENS:,} tokens (kvreach's limit)")
    if s.prompt + s.decode > MAX_TOKENS:
        raise ParamError("decode", s.decode, f"at most {MAX_TOKENS - s.prompt:,} decode steps: "
                         f"prompt + decode at most {MAX_TOKENS:,} tokens (kvreach's limit)")
    chunk = s.swa_block_size * s.dcp * s.blocks_per_chunk
    if (s.prompt + s.decode) // chunk > MAX_CHUNKS:
        most = MAX_CHUNKS * chunk
        raise ParamError("prompt" if s.prompt > most else "decode",
                         s.prompt if s.prompt > most else s.decode,
                         f"at most {MAX_CHUNKS:,} SWA chunks of {chunk} token(s) (swa-block-size x "
                         f"dcp x blocks-per-chunk): prompt + decode at most {most:,} tokens "
                         "here (kvreach's limit)")
    prefill = -(-s.prompt // s.budget)
    if prefill > MAX_STEPS:
        raise ParamError("budget", s.budget, f"at least {-(-s.prompt // MAX_STEPS):,} for a "
                         f"{s.prompt:,}-token prompt: at most {MAX_STEPS:,} scheduler steps "
                         f"(this is {prefill:,} prefill steps; kvreach's limit)")
    if prefill + s.decode > MAX_STEPS:
        raise ParamError("decode", s.decode, f"at most {MAX_STEPS - prefill:,} decode steps: at "
                         f"most {MAX_STEPS:,} scheduler steps with {prefill:,} prefill steps "
                         "(kvreach's limit)")


def lookup_groups(s: Scenario, release: Release = DEFAULT_RELEASE) -> tuple:
    """The scenario's KV-cache groups as ``release``'s offload lookup sees
    them (``kvreach.impl.release.lookup_group``): the full-attention group
    (if any), then the SWA group."""
    from kvreach.impl.release import lookup_group

    full = () if s.full_block_size is None else (
        lookup_group(release, s.full_block_size * s.dcp, s.blocks_per_chunk),)
    return full + (lookup_group(release, s.swa_block_size * s.dcp, s.blocks_per_chunk,
                                window_tokens=s.window,
                                extra_retained_tokens=s.extra_retained_tokens, eagle=s.eagle),)


def run_scenario(rule: str | Release, s: Scenario, release: Release | None = None) -> Trace:
    """Validate ``s`` (``ParamError`` naming the Scenario field, or the
    ``GroupConfig`` / ``RequestConfig`` / ``Lifecycle`` parameter) and drive
    it through the executable rule ``rule`` (a rule name of
    ``kvreach.params.RULES``), or through a release's store side when
    ``rule`` is a release record (``kvreach.impl.release.run``). The
    lookahead hashes are those of the release ``rule`` (or ``release``, the
    release a rule's stores are scored against; default
    ``kvreach.releases.DEFAULT``): given, or as that release derives them."""
    from kvreach.impl.lifecycle import Lifecycle, run  # only when a scenario runs
    from kvreach.impl import release as release_params

    check_limits(s)
    L = hash_lookahead_tokens(s, rule if isinstance(rule, Release) else release or DEFAULT_RELEASE)
    g = GroupConfig(
        block_size=s.swa_block_size, window=s.window, alignment_tokens=s.alignment_tokens,
        blocks_per_chunk=s.blocks_per_chunk, dcp_world_size=s.dcp, eagle=s.eagle,
        retention_interval=s.retention_interval, extra_retained_tokens=s.extra_retained_tokens,
        lookahead_hashes=L > 0,
    )
    req = RequestConfig(s.prompt, s.max_offload_tokens, s.offload_prompt_only,
                        hash_lookahead_tokens=L, tokens_per_hash=tokens_per_hash(s))
    lc = Lifecycle(budget=s.budget, decode=s.decode, abort_after_step=s.abort_after_step,
                   async_scheduling=s.async_scheduling, error_after_step=s.error_after_step)
    if isinstance(rule, Release):
        return release_params.run(rule, g, req, lc)
    return run(rule, g, req, lc)
