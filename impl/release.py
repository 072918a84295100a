"""A vLLM release's record (``kvreach.releases.Release``) as the parameters
of ``kvreach.impl``: the one mapping from a record to impl's lookup and to
impl's single-request lifecycle, used by ``kvreach conform``, ``kvreach
simulate`` and ``kvreach lookup``.

Lookup side: per group :func:`lookup_group` (``LookupGroup``'s
``window_extra`` and ``padded_initial_window``), for the whole lookup
:func:`lookup_parts` (``LookupParts``). Store side in the single-request
world (``kvreach.impl.lifecycle.run``): :func:`run` drives the record's
store rule (``kvreach.impl.release_rules``) through the one lifecycle.
"""

from __future__ import annotations

import dataclasses

from kvreach.impl import lifecycle
from kvreach.impl import release_rules
from kvreach.impl.lookup import LookupGroup, LookupParts
from kvreach.params import GroupConfig, ParamError, RequestConfig
from kvreach.releases import Release


def lookup_group(r: Release, block_tokens: int, blocks_per_chunk: int = 1,
                 window_tokens: int | None = None, extra_retained_tokens: int = 0,
                 eagle: bool = False) -> LookupGroup:
    """One KV-cache group as release ``r``'s lookup sees it
    (``GroupOffloadConfig``; ``get_sliding_window_size_in_chunks`` and
    ``load_window_size_in_chunks`` of the release)."""
    return LookupGroup(block_tokens, blocks_per_chunk, window_tokens, extra_retained_tokens, eagle,
                       window_extra=r.lookup_window_extra,
                       padded_initial_window=r.padded_initial_window)


def with_lookup_of(r: Release, g: LookupGroup) -> LookupGroup:
    """``g`` with release ``r``'s window parts (its sizes unchanged)."""
    return dataclasses.replace(g, window_extra=r.lookup_window_extra,
                               padded_initial_window=r.padded_initial_window)


def lookup_parts(r: Release) -> LookupParts:
    """The parts of release ``r``'s ``_lookup_complete_chunks``."""
    return LookupParts(pending=r.pending, eagle_widening=r.eagle_widening,
                       max_num_new_tokens=r.max_num_new_tokens,
                       max_load_tokens=r.max_load_tokens,
                       swa_reduction_before_caps=r.swa_reduction_before_caps)


def lifecycle_rule(r: Release) -> str:
    """The rule of ``kvreach.impl.rules`` whose single-request lifecycle is
    release ``r``'s store side: the record's ``store_rule``, whose
    ``storable_chunks`` and finish (``rules.storable_chunks``,
    ``rules.finish_tokens``) go with the rule name. A record whose EAGLE
    tail or finish clamp is not its rule's is refused (ParamError) rather
    than run with the wrong bookkeeping."""
    lifted = r.store_rule != "vllm-0.29"
    if r.eagle_tail_lifted_at_finish != lifted or r.finish_clamp != lifted:
        raise ParamError("vllm", r.name, "a release whose EAGLE tail and finish clamp are its "
                         f"store rule's ({r.store_rule})")
    return r.store_rule


def run(r: Release, g: GroupConfig, req: RequestConfig, lc: lifecycle.Lifecycle) -> lifecycle.Trace:
    """One request through ``lc`` under release ``r``'s store side: its
    store rule over the group its mask sees (``release_rules.mask_group``:
    0.30.0's mask window has no ``extra_retained_tokens``), its EAGLE tail
    and its finish (the commit-point clamp, and 0.34.0's computed-tokens
    clamp, which an error finish before the prompt is computed meets). The trace keeps ``g`` itself (the load models and the
    output see the group as configured).

    The record's other store parts do not act in this world: no block is
    null (``null_block_filter``), the keys cover every chunk
    (``storable_keyed_cap``), no lookup moves the cursor
    (``cursor_on_lookup``); 0.29.0's ``vllm-0.29`` rule ignores a retention
    interval, as 0.29.0's offloading does (``retention_interval``)."""
    if req.hash_lookahead_tokens and not r.lookahead_hashes:
        raise ParamError("hash_lookahead_tokens", req.hash_lookahead_tokens,
                         f"0 under vLLM {r.name}, which has no lookahead block hashes under "
                         "a KV connector (0.34.0 on)")
    trace = lifecycle.run(lifecycle_rule(r), release_rules.mask_group(r, g), req, lc,
                          finish_computed_clamp=r.finish_computed_clamp)
    return dataclasses.replace(trace, group=g, _sets={})
