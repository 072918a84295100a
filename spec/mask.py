"""The store masks as closed-form constraints over a symbolic block / chunk.

- ``block_reachable``: vLLM 0.33.0 ``SlidingWindowManager.reachable_block_mask``
  (one entry, sparse case).
- ``chunk_reachable``: ``_build_store_jobs`` keeps a chunk iff any of its blocks
  is reachable. Given twice: ``chunk_reachable_exists`` (an existential block
  witness, usable only in positive position) and ``chunk_reachable`` (closed
  form, usable anywhere); the obligation ``chunk-mask-closed-form`` proves
  they agree.
- ``v029_chunk_reachable``: vLLM 0.29.0 ``is_store_reachable_swa_chunk`` with
  its own window ``ceil(W / chunk)`` and alignment ``A // chunk``.
"""

from __future__ import annotations

import z3

from kvreach.params import RetentionMode
from kvreach.spec.config import SymConfig, z3_max


def in_tail(s: SymConfig, i) -> z3.BoolRef:
    """Segment-boundary tail: ``i >= shift and (i - shift) % per_segment >=
    per_segment - need``."""
    return z3.And(
        s.has_segments, i >= s.shift, (i - s.shift) % s.per_segment >= s.per_segment - s.need,
    )


def final_tail_bounds(s: SymConfig, F):
    """``[max(F - F % per_segment, F - need), F)`` of the final partial segment."""
    return z3_max(F - F % s.per_segment, F - s.need), F


def in_final_tail(s: SymConfig, i, F) -> z3.BoolRef:
    """Final-segment tail formula (non-EAGLE, ``F % per_segment != 0``,
    whenever segments exist). ``_build_store_jobs`` passes no final end with a
    retention interval or for EAGLE groups (``store_horizon_chunks``)."""
    if F is None:
        return z3.BoolVal(False)
    lo, hi = final_tail_bounds(s, F)
    return z3.And(
        z3.Not(s.eagle), s.has_segments, F % s.per_segment != 0, lo <= i, i < hi,
    )


def in_replay_tail(s: SymConfig, i) -> z3.BoolRef:
    """With a retention interval: the ``need`` blocks ending at the replay
    boundary (``reachable_boundaries``)."""
    end = s.replay_end_block()
    return z3.And(s.retention_mode != RetentionMode.NONE, end - s.need <= i, i < end)


def block_reachable(s: SymConfig, i, F=None) -> z3.BoolRef:
    """One entry of ``reachable_block_mask`` with final segment end ``F``
    (blocks, or None), dense fallback included."""
    return z3.Or(s.dense, in_tail(s, i), in_final_tail(s, i, F), in_replay_tail(s, i))


def chunk_reachable_exists(s: SymConfig, c, j, F=None) -> z3.BoolRef:
    """Chunk ``c`` is kept, witnessed by its block ``c*bpc + j``."""
    return z3.And(0 <= j, j < s.bpc, block_reachable(s, c * s.bpc + j, F))


def _interval_meets_chunk(s: SymConfig, c, lo, hi) -> z3.BoolRef:
    first = c * s.bpc
    return z3.And(lo < hi, lo < first + s.bpc, first < hi)


def chunk_reachable(s: SymConfig, c, F=None, tail_off_by_one: bool = False,
                    boundaries=()) -> z3.BoolRef:
    """Closed form of "some block of chunk ``c`` is reachable".
    ``tail_off_by_one``: the mutant testing ``r > per_segment - need`` instead of
    ``>=``. ``boundaries``: further reachable boundaries (tokens, 0 = none)
    beside the replay boundary, as ``_build_store_jobs`` adds
    ``Request.shared_prefix_boundary`` with a retention interval (world
    "restarts", finding F8)."""
    first = c * s.bpc
    last = first + s.bpc - 1
    r = (last - s.shift) % s.per_segment
    prev_tail_block = last - r - 1  # last block of the previous segment
    in_last_tail = r > s.per_segment - s.need if tail_off_by_one else r >= s.per_segment - s.need
    seg_hit = z3.And(
        s.has_segments, s.need >= 1,
        z3.Or(
            z3.And(last >= s.shift, in_last_tail),
            z3.And(prev_tail_block >= first, prev_tail_block >= s.shift),
        ),
    )
    parts = [s.dense, seg_hit]
    if F is not None:
        lo, hi = final_tail_bounds(s, F)
        parts.append(z3.And(
            z3.Not(s.eagle), s.has_segments, F % s.per_segment != 0,
            _interval_meets_chunk(s, c, lo, hi),
        ))
    end = s.replay_end_block()
    parts.append(z3.And(s.retention_mode != RetentionMode.NONE, _interval_meets_chunk(s, c, end - s.need, end)))
    for b in boundaries:
        end = s.replay_end_block(b)
        parts.append(z3.And(s.retention_mode != RetentionMode.NONE, b > 0,
                            _interval_meets_chunk(s, c, end - s.need, end)))
    return z3.Or(parts)


# --- vLLM 0.29.0 ---------------------------------------------------------


def v029_window_chunks(s: SymConfig, wc) -> z3.BoolRef:
    """``wc = ceil(W / chunk_tokens)`` (0.29 ``get_sliding_window_size_in_chunks``)."""
    return z3.And((wc - 1) * s.C < s.W, s.W <= wc * s.C)


def v029_chunk_reachable(s: SymConfig, c, storable, wc) -> z3.BoolRef:
    """``is_store_reachable_swa_chunk(c, storable, acc, wc, eagle)``; ``wc``
    must satisfy ``v029_window_chunks``."""
    acc = s.A / s.C
    dense = z3.Or(z3.Not(s.has_align), s.A <= s.C, wc >= acc)
    pos = c % acc
    seg_start = c - pos
    actual = z3.If(acc <= storable - seg_start, acc, storable - seg_start)
    return z3.Or(dense, pos >= actual - (wc + s.shift))

