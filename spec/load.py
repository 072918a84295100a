"""Load models (Z3), written from the load side only: no store rule here.

A hit at block boundary ``L`` (token ``L * B``) requests, for the SWA group,
the blocks holding the ``W - 1`` tokens before it, ``[L - need0, L)``, and for
an EAGLE/MTP draft group also the block after it that the lookup matches and
drops (``SlidingWindowManager.find_longest_cache_hit``): ``[L - need0, L + 1)``.
A chunk is requested when any of its blocks is. (For a block-aligned ``L``,
``[L*B - (W-1), L*B)`` lies exactly in blocks ``[L - need0, L)``; the
obligation ``load-window-blocks`` proves it.)

Hit boundaries a later lookup can produce (``_lookup_complete_chunks``):

- ``aligned``: every multiple ``k * per_segment`` of the segment length (alignment
  tokens; the retention interval when one is set; every chunk boundary with no
  alignment; none for retention interval 0, where only the replay boundary
  ``num_prompt_tokens - 1`` aligned down remains). A later request may extend
  the prefix, so boundaries beyond this request's horizon count too.
- ``intended``: ``aligned`` plus this request's final horizon ``H`` (PR
  #54362's premise) for non-EAGLE groups without a retention interval.

Two sets follow, for a request whose final horizon is ``H`` chunks:

- *wanted* (soundness): chunks ``c < H`` requested by some boundary;
- *needed* (completeness): chunks requested by a boundary whose every
  requested chunk lies below ``H``, i.e. a hit this request's stores alone
  can serve.

``wanted`` has an existential boundary; ``segment_witness`` names the one
boundary that suffices, and the obligation ``load-witness`` proves that any
requesting boundary implies the witness requests the chunk.
"""

from __future__ import annotations

import z3

from kvreach.params import RetentionMode
from kvreach.spec.config import SymConfig, z3_max

MODELS = ("aligned", "intended")


def requested_blocks(s: SymConfig, L):
    """``[lo, hi)`` blocks requested by a hit at block boundary ``L``."""
    return z3_max(0, L - s.need0), L + s.shift


def chunk_requested(s: SymConfig, c, L) -> z3.BoolRef:
    lo, hi = requested_blocks(s, L)
    first = c * s.bpc
    return z3.And(c >= 0, lo < hi, lo < first + s.bpc, first < hi)


def servable(s: SymConfig, L, H) -> z3.BoolRef:
    """Every chunk the hit at ``L`` requests lies below ``H`` chunks."""
    _, hi = requested_blocks(s, L)
    return hi <= H * s.bpc


def segment_boundary(s: SymConfig, L) -> z3.BoolRef:
    """``L`` is a positive multiple of the segment length (blocks)."""
    return z3.And(
        z3.Or(z3.Not(s.has_align), s.retention_mode != RetentionMode.ZERO), L >= 1, L % s.per_segment == 0,
    )


def replay_boundary(s: SymConfig):
    """``num_prompt_tokens - 1`` aligned down, in blocks (retention only)."""
    return s.replay_boundary


def is_boundary(s: SymConfig, model: str, L, H) -> z3.BoolRef:
    """``L`` (blocks) is a hit boundary of ``model`` for final horizon ``H``."""
    parts = [
        segment_boundary(s, L),
        z3.And(s.has_align, s.retention_mode != RetentionMode.NONE, L == replay_boundary(s), L >= 1),
    ]
    if model == "intended":
        parts.append(z3.And(
            z3.Not(s.eagle), s.retention_mode == RetentionMode.NONE, H >= 1, L == H * s.bpc,
        ))
    return z3.Or(parts)


def segment_witness(s: SymConfig, c, early: int = 0):
    """The first segment boundary whose request can reach chunk ``c``: the
    smallest ``k >= 1`` with ``k * per_segment + shift > c * bpc``. ``early``: that
    many segments too early (a mutant only)."""
    k = (c * s.bpc - s.shift) / s.per_segment + (1 - early)
    return z3.If(k >= 1, k, 1) * s.per_segment


def wanted(s: SymConfig, model: str, c, H, witness_early: int = 0) -> z3.BoolRef:
    """Quantifier-free form of "``c < H`` and some boundary requests ``c``"
    (valid by ``load-witness``). ``witness_early``: the mutant whose segment
    witness is that many segments early."""
    w = segment_witness(s, c, witness_early)
    parts = [
        z3.And(segment_boundary(s, w), chunk_requested(s, c, w)),
        z3.And(s.has_align, s.retention_mode != RetentionMode.NONE, replay_boundary(s) >= 1,
               chunk_requested(s, c, replay_boundary(s))),
    ]
    if model == "intended":
        parts.append(z3.And(
            z3.Not(s.eagle), s.retention_mode == RetentionMode.NONE, H >= 1,
            chunk_requested(s, c, H * s.bpc),
        ))
    return z3.And(c >= 0, c < H, z3.Or(parts))


def needed(s: SymConfig, model: str, c, L, H) -> z3.BoolRef:
    """``c`` is requested by boundary ``L`` (free) that this request can serve."""
    return z3.And(is_boundary(s, model, L, H), servable(s, L, H), chunk_requested(s, c, L))

