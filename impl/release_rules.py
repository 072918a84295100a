"""The store side of a vLLM release (``kvreach.releases.Release``) through
the one rule of :mod:`kvreach.impl.rules`: each part of the record picks an
argument of the existing functions (the rule name, the group the mask sees,
the finish clamp), never a copy of them. vLLM code per part:
docs/versions.md.
"""

from __future__ import annotations

import dataclasses

from kvreach.impl import rules
from kvreach.params import GroupConfig, RequestConfig
from kvreach.releases import Release


def mask_group(r: Release, g: GroupConfig) -> GroupConfig:
    """The group ``_reachable_store_block_mask`` hands the mask: the window
    widened by ``extra_retained_tokens`` (0.31.0 on) or not (0.30.0)."""
    return g if r.mask_window_extra else dataclasses.replace(g, extra_retained_tokens=0)


def storable_chunks(r: Release, g: GroupConfig, req: RequestConfig, offloadable: int,
                    finished: bool) -> int:
    """``RequestOffloadState.storable_chunks`` of the release (allocation and
    keys assumed to cover the range): the EAGLE tail lifted at finish or not."""
    rule = "vllm-0.33" if r.eagle_tail_lifted_at_finish else "vllm-0.29"
    return rules.storable_chunks(rule, g, req, offloadable, finished)


def finish_tokens(r: Release, req: RequestConfig, num_tokens: int,
                  num_computed_tokens: int) -> int:
    """``num_tokens_after_batch`` of a finished (not aborted) request: the
    commit-point clamp (0.30.0 on) and the computed-tokens clamp (0.34.0
    on)."""
    return rules.finish_tokens("vllm-0.33" if r.finish_clamp else "vllm-0.29", req, num_tokens,
                               num_computed_tokens if r.finish_computed_clamp else None)


def store_step(r: Release, g: GroupConfig, req: RequestConfig, cursor: int, num_chunks: int,
               finished: bool) -> rules.StoreStep:
    """One ``_build_store_jobs`` selection of the release, before the
    null-block filter (:func:`offered_chunks`)."""
    return rules.store_step(r.store_rule, mask_group(r, g), req, cursor, num_chunks, finished)


def offered_chunks(r: Release, step: rules.StoreStep, null_blocks: frozenset[int],
                   blocks_per_chunk: int) -> tuple[int, ...]:
    """The chunks of ``step`` that ``_build_store_jobs`` offers
    ``prepare_store`` when the blocks ``null_blocks`` (block indices of the
    request) hold the null block: never a chunk whose last block is null;
    from 0.33.0 on neither one with a null block the mask keeps (any null
    block when the mask is dense)."""
    out = []
    for c in step.chunks:
        blocks = range(c * blocks_per_chunk, (c + 1) * blocks_per_chunk)
        if blocks[-1] in null_blocks:
            continue
        if r.null_block_filter == "every reachable block":
            k0 = (c - step.start_chunk) * blocks_per_chunk
            if any(b in null_blocks and (step.block_mask is None or step.block_mask[k0 + i])
                   for i, b in enumerate(blocks)):
                continue
        out.append(c)
    return tuple(out)


def cursor_after_lookup(r: Release, cursor: int) -> int:
    """``next_stored_chunk_idx`` after ``get_num_new_matched_tokens``."""
    return 0 if r.cursor_on_lookup == "reset to 0" else cursor
