"""A decoded counterexample (``kvreach counterexample --json``, a plain
dict) run through the twin: its lookup groups and parts under the release
its lookup ran under, and world (b)'s lookup, several earlier requests'
one-shot stores under the executable rule, unioned, then the later
request's lookup against that union and against the dense one.

Plain Python over ``kvreach.impl``: what the proof side's decoding
(``kvreach.proofs.decode``, ``kvreach.proofs.neighbours``) and the vLLM
harness (``kvreach.vllm_harness.replay``) both replay a counterexample
through, below both of them.
"""

from __future__ import annotations

from kvreach.impl.lookup import VLLM_WINDOW, LaterRequest, LookupGroup, StoreContent, lookup
from kvreach.impl.release import lookup_parts, with_lookup_of
from kvreach.impl.rules import store_step
from kvreach.params import GroupConfig, RequestConfig
from kvreach.releases import DEFAULT, Release, release


def release_of(lg: dict) -> Release:
    """The release a decoded lookup ran under (``lookup_groups["vllm"]``, a
    release or a group of them ``"0.31.0/0.32.0/0.33.0"``, recorded when it
    is not the default: the group's newest, whose parts its queries read)."""
    return release(lg["vllm"].split("/")[-1]) if "vllm" in lg else DEFAULT


def lookup_parts_of(lg: dict):
    """The twin's ``LookupParts`` of that release (``kvreach.impl.release``)."""
    return lookup_parts(release_of(lg))


def lookup_groups_of(lg: dict, g: GroupConfig) -> tuple:
    """The decoded lookup groups (a counterexample's ``lookup_groups``): the
    full-attention group, if any, then the SWA group ``g``, with the
    release's window parts (:func:`release_of`)."""
    full = () if lg["full_block_tokens"] is None else (
        LookupGroup(lg["full_block_tokens"], g.blocks_per_chunk),)
    return full + (with_lookup_of(release_of(lg), LookupGroup(
        g.block_tokens, g.blocks_per_chunk, window_tokens=lg["window"],
        extra_retained_tokens=lg["extra_retained_tokens"], eagle=g.eagle,
        lookup_variant=lg.get("lookup_variant", VLLM_WINDOW))),)


def neighbours_lookup(cex: dict, rule: str | None = None):
    """World (b)'s counterexample (``hit-preservation-neighbours``) through
    the twin: the executable rule's one-shot stores of each earlier request
    at its final horizon, the union the later request sees, and its lookup
    against it and against the dense union.
    -> (rule outcome, dense outcome, stored SWA chunks it sees)."""
    g = GroupConfig(**cex["config"]["group"])
    groups = lookup_groups_of(cex["lookup_groups"], g)
    parts = lookup_parts_of(cex["lookup_groups"])
    swa, full = set(), 0
    for q in cex["requests"]:
        rq = RequestConfig(**(cex["config"]["request"] | {"prompt_tokens": q["prompt_tokens"]}))
        sh = min(q["later_shared_tokens"], q["offloadable_tokens"])
        kept = store_step(rule or cex["rule"], g, rq, 0, q["final_horizon_chunks"], True).chunks
        swa |= {c for c in kept if (c + 1) * g.chunk_tokens <= sh}
        full = max(full, sh)
    lr = cex["later_request"]
    req = LaterRequest(lr["num_tokens"], lr["local_hit_tokens"], lr["max_load_tokens"])
    fulls = [range(full // gr.chunk_tokens) for gr in groups[:-1]]
    got = lookup(groups, req, StoreContent.of_chunks(fulls + [sorted(swa)]), parts=parts)
    dense = lookup(groups, req, StoreContent.of_chunks(fulls + [range(full // g.chunk_tokens)]),
                   parts=parts)
    return got, dense, swa
