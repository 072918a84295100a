"""The store rule's keep decision at a request's final horizon (one-shot):
what ``mask-equivalence``, ``no-waste`` and world (b) take a rule to store.
Apart from the obligations so that every world's module can use it."""

from __future__ import annotations

import z3

from kvreach.proofs.framework import Ctx
from kvreach.spec import mask
from kvreach.spec.rules import final_segment_end, lookup_window_keep


def one_shot_mask(ctx: Ctx, c, H) -> z3.BoolRef:
    """The rule's keep-decision for chunk ``c`` of a request whose final
    horizon is ``H`` chunks, evaluated at that horizon."""
    s = ctx.s
    if ctx.mutant.get("keep_every_chunk"):
        return z3.BoolVal(True)
    if ctx.rule == "lookup-window":

        return lookup_window_keep(s, c)
    if ctx.rule == "vllm-0.29":
        wc = z3.Int("wc_mask")
        return z3.And(mask.v029_window_chunks(s, wc), mask.v029_chunk_reachable(s, c, H, wc))

    return mask.chunk_reachable(s, c, final_segment_end(s, H))
