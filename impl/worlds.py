"""What the offload tier holds when a later request looks up, and the hit
that request gets (``kvreach lookup``).

World *single request*: the tier holds exactly the chunks one earlier request
submitted (a repeated prompt, a shared system prompt), and nothing else.
A chunk of the later request is a HIT iff the earlier request stored the chunk
with the same key: same group, same index, and the whole chunk inside the
prefix the two requests share (keys are prefix hashes). The earlier request's
SWA chunks come from the store rule (``kvreach.impl.lifecycle``); its
full-attention chunks are every chunk it could offload (``_build_store_jobs``
applies no mask to them). *Dense* is the same world with every chunk the
earlier request could offload stored (its computed tokens, capped as
``_calc_num_offloadable_tokens`` caps them: the prompt with
``offload_prompt_only``, ``max_offload_tokens``), the reference for lost hits:
it differs from the rule only by the SWA mask.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreach.impl.lifecycle import Trace
from kvreach.impl.lookup import (VLLM_0_33, Answer, LaterRequest, LookupGroup, LookupOutcome,
                                 LookupParts, StoreContent, lookup)
from kvreach.params import MAX_INT, MAX_TOKENS, ParamError


@dataclass(frozen=True)
class LaterLookup:
    """The later request's lookup under the rule's stores and under dense ones."""

    groups: tuple[LookupGroup, ...]
    request: LaterRequest
    shared_tokens: int
    stored: tuple[tuple[int, ...], ...]  # per group, the earlier request's stores
    rule: LookupOutcome
    dense: LookupOutcome
    # per group: chunks the rule's load asks ``prepare_load`` for that the
    # manager never answered HIT (:func:`unchecked_chunks`)
    unchecked: tuple[tuple[int, ...], ...] = ()

    @property
    def missing(self) -> tuple[tuple[int, ...], ...]:
        """Per group: chunks the dense lookup loads that the rule did not store."""
        return tuple(tuple(c for c in r if c not in held)
                     for r, held in zip(self.dense.loaded, map(set, self.stored)))

    def to_json(self) -> dict:
        return {
            "hit_tokens": self.rule.hit_tokens,
            "dense_hit_tokens": self.dense.hit_tokens,
            "lost_hit_tokens": (self.dense.hit_tokens or 0) - (self.rule.hit_tokens or 0),
            "later_prompt": self.request.num_tokens,
            "local_hit_tokens": self.request.local_hit_tokens,
            "shared_tokens": self.shared_tokens,
            "groups": [
                {"kind": "swa" if g.is_swa else "full", "block_tokens": g.block_tokens,
                 "chunk_tokens": g.chunk_tokens, "window_tokens": g.window_tokens,
                 "extra_retained_tokens": g.extra_retained_tokens, "eagle": g.eagle,
                 "window_chunks": g.window_chunks,
                 "stored_chunks": len(st), "loaded": [r.start, r.stop] if len(r) else [],
                 "dense_loaded": [d.start, d.stop] if len(d) else [],
                 "missing_chunks": list(m), "unchecked_chunks": list(u)}
                for g, st, r, d, m, u in zip(self.groups, self.stored, self.rule.loaded,
                                             self.dense.loaded, self.missing,
                                             self.unchecked or [()] * len(self.groups))
            ],
        }


def offloadable_tokens(trace: Trace) -> int:
    """The most tokens any step of the earlier request could offload."""
    return max((s.offloadable_tokens for s in trace.steps), default=0)


def stored_chunks(groups: tuple[LookupGroup, ...], trace: Trace) -> tuple[tuple[int, ...], ...]:
    """The earlier request's stores per group: the rule's SWA chunks (the SWA
    group of the trace), every offloadable chunk of a full-attention group."""
    return tuple(
        tuple(trace.stored) if g.is_swa else dense_chunks((g,), trace)[0] for g in groups
    )


def dense_chunks(groups: tuple[LookupGroup, ...], trace: Trace) -> tuple[tuple[int, ...], ...]:
    """Dense: every offloadable chunk of the earlier request, every group."""
    off = offloadable_tokens(trace)
    return tuple(tuple(range(off // g.chunk_tokens)) for g in groups)


def single_request_content(groups, chunks_per_group, shared_tokens: int,
                           hash_lookahead_tokens: int = 0) -> StoreContent:
    """The later request's HIT keys: stored chunks wholly inside the shared
    prefix; with L lookahead tokens a chunk's key also covers the L tokens
    after it (``get_request_block_hasher``), which must be shared too (the
    stored prompt's last chunk keys its first sampled tokens, which a later
    request repeating the prompt lacks)."""
    L = hash_lookahead_tokens
    return StoreContent.of_chunks([
        [c for c in chunks if (c + 1) * g.chunk_tokens + L <= shared_tokens]
        for g, chunks in zip(groups, chunks_per_group)
    ])


def unchecked_chunks(outcome: LookupOutcome, content: StoreContent) -> tuple[tuple[int, ...], ...]:
    """Per group: chunks the load asks ``prepare_load`` for that ``content``
    does not answer HIT, chunks the lookup never checked (vLLM 0.29.0's and
    0.30.0's lookups load such chunks: docs/versions.md)."""
    return tuple(tuple(c for c in r if content.answer(gi, c) is not Answer.HIT)
                 for gi, r in enumerate(outcome.loaded))


def later_lookup(groups: tuple[LookupGroup, ...], trace: Trace, later_prompt: int,
                 diverges_at: int | None = None, local_hit_tokens: int = 0,
                 max_load_tokens: int | None = None, *,
                 parts: LookupParts | None = VLLM_0_33,
                 evicted: tuple[tuple[int, ...], ...] = ()) -> LaterLookup:
    """A later request of ``later_prompt`` tokens sharing the earlier
    request's prompt up to ``diverges_at`` (default: all of it) looks up;
    ``parts`` (and the groups' window parts): the release's lookup
    (``kvreach.impl.release``). ``evicted``: per group (in ``groups``'
    order), chunks the tier no longer holds when the later request looks up
    (the manager's LRU eviction), a MISS under the rule's stores and under
    dense ones."""
    if not 1 <= later_prompt <= MAX_TOKENS:
        raise ParamError("later_prompt", later_prompt,
                         f"an integer between 1 and {MAX_TOKENS:,} (kvreach's limit)")
    for name, v in (("later_diverges_at", diverges_at), ("later_local_hit", local_hit_tokens),
                    ("max_load_tokens", max_load_tokens)):
        if v is not None and v > MAX_INT:
            raise ParamError(name, v, f"an integer <= 2**63 - 1 ({MAX_INT})")
    if diverges_at is not None and diverges_at < 0:
        raise ParamError("later_diverges_at", diverges_at, "an integer >= 0")
    common = min(later_prompt, trace.request.prompt_tokens)
    if diverges_at is not None and diverges_at > common:
        raise ParamError("later_diverges_at", diverges_at,
                         f"at most {common} (the shorter of the stored prompt, "
                         f"{trace.request.prompt_tokens} tokens, and the later request, "
                         f"{later_prompt}): it diverges inside both")
    shared = min(later_prompt, trace.request.prompt_tokens,
                 trace.request.prompt_tokens if diverges_at is None else diverges_at)
    for g in groups:
        if local_hit_tokens % g.block_tokens:
            raise ParamError("later_local_hit", local_hit_tokens,
                             f"a multiple of every group's block ({g.block_tokens} tokens): "
                             "vLLM passes a block-aligned GPU hit")
    if local_hit_tokens > shared:
        raise ParamError("later_local_hit", local_hit_tokens,
                         f"at most the shared prefix ({shared} tokens): a GPU hit is a shared prefix")
    if len(evicted) > len(groups):
        raise ParamError("evicted", evicted, f"chunks of at most {len(groups)} group(s)")
    L = trace.request.hash_lookahead_tokens
    req = LaterRequest(later_prompt, local_hit_tokens, max_load_tokens, hash_lookahead_tokens=L)
    parts = VLLM_0_33 if parts is None else parts
    stored = stored_chunks(groups, trace)
    gone = [set(e) for e in evicted] + [set() for _ in groups[len(evicted):]]

    def held(chunks_per_group):
        if not any(gone):
            return chunks_per_group
        return [[c for c in cs if c not in out] for cs, out in zip(chunks_per_group, gone)]

    content = single_request_content(groups, held(stored), shared, L)
    rule = lookup(groups, req, content, parts=parts)
    unchecked = unchecked_chunks(rule, content)
    del content  # the dense content is as large: not both at once
    dense = lookup(groups, req, single_request_content(
        groups, held(dense_chunks(groups, trace)), shared, L), parts=parts)
    return LaterLookup(groups, req, shared, stored, rule, dense, unchecked)
