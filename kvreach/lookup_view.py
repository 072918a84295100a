"""What a release's lookup loads of one request's stores: the later requests
that repeat the stored prompt, cut at every chunk boundary (plus one token,
so the boundary can be a hit), the whole prompt, and the prompt with one
token more, each looked up as vLLM release X's offload lookup does it
(``kvreach.impl.worlds.later_lookup`` with the release's parts), against the
rule's stores and dense ones. This is "loadable" in ``simulate``: no
approximate load model (``intended``, ``aligned``) is involved.

The cuts are the later requests that share the prompt; one diverging inside
it is looked up by ``kvreach lookup --later-diverges-at T``.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_LATER_REQUESTS = 1024
"""The most later requests the view looks up (each is a lookup over every
stored chunk: 4,076 of them took 48 s on a busy 2-core machine); past it
the view is not computed and says so."""


@dataclass(frozen=True)
class Lost:
    """A later request the rule's stores serve less than dense ones."""

    later_prompt: int
    hit_tokens: int
    dense_hit_tokens: int
    dense_loaded: tuple[int, ...]    # the SWA chunks its lookup loads under dense stores
    missing_chunks: tuple[int, ...]  # of those, the ones not stored


@dataclass(frozen=True)
class LookupView:
    """The SWA group's chunks under the release's lookup of the later requests."""

    later_prompts: tuple[int, ...]
    loaded: frozenset[int]            # loaded by some later request (the rule's stores)
    asked_not_stored: frozenset[int]  # read by some dense load, not stored
    lost: tuple[Lost, ...]

    def to_json(self, stored) -> dict:
        return {
            "later_requests": len(self.later_prompts),
            "later_prompts": list(self.later_prompts),
            "loaded": sorted(self.loaded),
            "stored_not_loaded": sorted(set(stored) - self.loaded),
            "asked_not_stored": sorted(self.asked_not_stored),
            "lost": [{"later_prompt": x.later_prompt, "hit_tokens": x.hit_tokens,
                      "dense_hit_tokens": x.dense_hit_tokens,
                      "dense_loaded": list(x.dense_loaded),
                      "missing_chunks": list(x.missing_chunks)} for x in self.lost],
        }


def later_prompts(groups, prompt_tokens: int) -> tuple[int, ...]:
    """Every group's chunk boundary below the prompt plus one token, the
    prompt, and the prompt plus one."""
    from kvreach.params import MAX_TOKENS

    cuts = {b + 1 for g in groups for b in range(g.chunk_tokens, prompt_tokens, g.chunk_tokens)}
    return tuple(n for n in sorted(cuts | {prompt_tokens, prompt_tokens + 1}) if n <= MAX_TOKENS)


def lookup_view(groups, trace, parts) -> LookupView:
    """The view of ``trace``'s stores under the lookup ``parts`` of
    ``groups`` (the SWA group last, as ``kvreach.scenario.lookup_groups``
    orders them). ``ValueError`` past :data:`MAX_LATER_REQUESTS`."""
    from kvreach.impl.worlds import later_lookup

    ns = later_prompts(groups, trace.request.prompt_tokens)
    if len(ns) > MAX_LATER_REQUESTS:
        raise ValueError(len(ns))
    swa = len(groups) - 1
    loaded: set[int] = set()
    asked: set[int] = set()
    lost = []
    for n in ns:
        r = later_lookup(groups, trace, n, parts=parts)
        loaded.update(r.rule.loaded[swa])
        missing = r.missing[swa]
        asked.update(missing)
        hit, dense = r.rule.hit_tokens or 0, r.dense.hit_tokens or 0
        if hit < dense:
            lost.append(Lost(n, hit, dense, tuple(r.dense.loaded[swa]), tuple(missing)))
    return LookupView(ns, frozenset(loaded), frozenset(asked), tuple(lost))
