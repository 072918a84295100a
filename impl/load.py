"""Load models: which chunks a later lookup can request. Written from the
load side only; no store rule is consulted here.

A later request that shares this request's prefix hits at a token boundary
``L``. Sliding-window attention at position ``L`` needs the KV of the ``W - 1``
tokens before it, so the SWA group must load every chunk holding a token of
``[L - (W - 1), L)``; an EAGLE/MTP draft group also matches the block after
``L`` and drops it (``SlidingWindowManager.find_longest_cache_hit``), so it
requests ``[L - (W - 1), L + B)``. A hit is servable only if every chunk it
requests lies below the request's final horizon ``H`` (chunks never computed
or keyed cannot be loaded).

Hit boundaries (what ``_lookup_complete_chunks`` can produce, in two models):

- ``aligned``: every multiple of the segment length ``S`` (alignment tokens;
  the retention interval when one is set; every chunk boundary with no
  alignment; none for retention interval 0), plus, with a retention interval,
  the replay boundary ``num_prompt_tokens - 1`` aligned down (the lookup of a
  request that repeats the prompt). A later request may extend the prefix, so
  every such ``L`` up to ``H`` counts.
- ``intended``: ``aligned`` plus the request's final horizon ``H`` itself (the
  premise of vLLM PR #54362: a later request may stop exactly where this one
  did) for non-EAGLE groups when no retention interval is set.

Two sets follow for a request whose final horizon is ``H`` chunks:
*wanted* (soundness): chunks below ``H`` requested by any boundary, including
one beyond ``H`` (a later request extending the prefix); *needed*
(completeness): chunks requested by a boundary all of whose requested chunks
lie below ``H`` (a hit this request's stores alone can serve).
"""

from __future__ import annotations

from itertools import chain

import deal

from kvreach.params import LOAD_MODELS, GroupConfig, RequestConfig, check_load_model


def requested_chunks(g: GroupConfig, boundary: int) -> range:
    """Chunks the SWA group must load for a hit at token ``boundary``."""
    lo = max(0, boundary - (g.mask_window_tokens - 1))
    hi = boundary + (g.block_tokens if g.legacy_eagle else 0)
    c = g.chunk_tokens
    if lo >= hi:  # window 1 and no EAGLE block: the hit reads nothing
        return range(0)
    return range(lo // c, -(-hi // c))


def replay_boundary(g: GroupConfig, prompt_tokens: int) -> int:
    """The replay boundary (tokens): ``num_prompt_tokens - 1`` aligned down to
    ``alignment_tokens``, where the lookup of a request repeating the prompt
    ends (vLLM's ``reachable_boundaries``); needs an alignment."""
    assert g.alignment_tokens is not None
    return (prompt_tokens - 1) // g.alignment_tokens * g.alignment_tokens


def _boundaries(
    model: str, g: GroupConfig, req: RequestConfig, final_horizon_chunks: int, relevant: bool
) -> list[int]:
    """The one enumerator of hit boundaries up to ``H * chunk + W``: every
    multiple of the segment step (the chunk with no alignment, the alignment,
    the retention interval, none for interval 0), with a retention interval
    the replay boundary, and under ``intended`` the final horizon itself.
    ``relevant``: only the multiples up to the first one past ``H * chunk``
    (see :func:`_relevant_boundaries`)."""
    check_load_model(model)
    c = g.chunk_tokens
    H_tokens = final_horizon_chunks * c
    top = H_tokens + g.mask_window_tokens
    out: set[int] = set()
    if g.alignment_tokens is None:
        step: int | None = c
    elif g.retention_interval is None:
        step = g.alignment_tokens
    else:
        step = g.retention_interval or None
    if step is not None:
        hi = top
        if relevant:
            first_past = (H_tokens // step + 1) * step  # the first multiple > H_tokens
            hi = min(first_past, top)
        out.update(range(step, hi + 1, step))
    if g.retention_interval is not None:
        replay = replay_boundary(g, req.prompt_tokens)
        if 0 < replay <= top:
            out.add(replay)
    if model == "intended" and g.retention_interval is None and not g.eagle and H_tokens > 0:
        out.add(H_tokens)
    return sorted(out)


def hit_boundaries(
    model: str, g: GroupConfig, req: RequestConfig, final_horizon_chunks: int
) -> list[int]:
    """Token boundaries a later lookup can hit whose window can reach below
    the final horizon (``0 < L < H * chunk + W``)."""
    return _boundaries(model, g, req, final_horizon_chunks, relevant=False)


def _relevant_boundaries(
    model: str, g: GroupConfig, req: RequestConfig, final_horizon_chunks: int
) -> list[int]:
    """The boundaries of :func:`hit_boundaries` that can change
    :func:`wanted_chunks` or :func:`needed_chunks`: every one up to the final
    horizon ``H * chunk`` and the first one past it (a later boundary requests
    a subset of what that one requests below ``H``). At most
    ``H * chunk / step + 2`` boundaries, whatever the window: O(prompt), not
    O(window)."""
    H_tokens = final_horizon_chunks * g.chunk_tokens
    out = _boundaries(model, g, req, final_horizon_chunks, relevant=True)
    past = [b for b in out if b > H_tokens]
    return [b for b in out if b <= H_tokens] + past[:1]


def _requested_spans(
    model: str, g: GroupConfig, req: RequestConfig, final_horizon_chunks: int
) -> list[tuple[int, int]]:
    """``requested_chunks`` of each relevant boundary as ``(start, stop)``,
    in boundary order (starts and stops non-decreasing), empty ones left out;
    the arithmetic inlined (millions of boundaries on a long request)."""
    c, back, fwd = g.chunk_tokens, g.mask_window_tokens - 1, g.block_tokens if g.legacy_eagle else 0
    out = []
    for L in _relevant_boundaries(model, g, req, final_horizon_chunks):
        lo, hi = L - back, L + fwd
        if lo < 0:
            lo = 0
        if lo < hi:
            out.append((lo // c, -(-hi // c)))
    return out


def _union(spans) -> frozenset[int]:
    """The union of ``(start, stop)`` spans whose starts are non-decreasing,
    merged as intervals first (linear in the spans plus the result)."""
    merged: list[list[int]] = []
    for a, b in spans:
        if a >= b:
            continue
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1][1] = b
        else:
            merged.append([a, b])
    return frozenset(chain.from_iterable(range(a, b) for a, b in merged))


@deal.pre(lambda model, g, req, final_horizon_chunks: model in LOAD_MODELS)
@deal.pre(lambda model, g, req, final_horizon_chunks: final_horizon_chunks >= 0)
@deal.ensure(
    lambda model, g, req, final_horizon_chunks, result: all(
        0 <= c < final_horizon_chunks for c in result)
)
def needed_chunks(
    model: str, g: GroupConfig, req: RequestConfig, final_horizon_chunks: int
) -> frozenset[int]:
    """Union of the requested chunks of every hit this request can serve."""
    return _union((a, b) for a, b in _requested_spans(model, g, req, final_horizon_chunks)
                  if b <= final_horizon_chunks)


@deal.pre(lambda model, g, req, final_horizon_chunks: model in LOAD_MODELS)
@deal.pre(lambda model, g, req, final_horizon_chunks: final_horizon_chunks >= 0)
@deal.ensure(
    lambda model, g, req, final_horizon_chunks, result: all(
        0 <= c < final_horizon_chunks for c in result)
)
def wanted_chunks(
    model: str, g: GroupConfig, req: RequestConfig, final_horizon_chunks: int
) -> frozenset[int]:
    """Chunks below the final horizon that some hit boundary requests."""
    return _union((a, min(b, final_horizon_chunks))
                  for a, b in _requested_spans(model, g, req, final_horizon_chunks))

