"""A decoded counterexample's lookup groups (its ``lookup_groups`` entry)
as the twin's ``kvreach.impl.lookup`` groups and parts, under the release
the lookup ran under: the helpers decoding, world (b)'s replay and the
harness share, below all of them (``proofs.decode``,
``proofs.neighbours``)."""

from __future__ import annotations

from kvreach.impl.lookup import LookupGroup
from kvreach.impl.release import lookup_parts, with_lookup_of
from kvreach.params import GroupConfig
from kvreach.proofs.matrix import representative
from kvreach.releases import DEFAULT


def release_of(lg: dict):
    """The release a decoded lookup ran under (``lookup_groups["vllm"]``,
    recorded when it is not 0.33.0's)."""
    return representative(lg["vllm"]) if "vllm" in lg else DEFAULT


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
        lookup_variant=lg.get("lookup_variant", "vllm-window"))),)
