"""The group geometries the lookup-based obligations are run for.

With the SWA block, ``blocks_per_chunk``, the alignment, the window and the
retention interval symbolic, the lookup's arithmetic (divisions by the chunk
sizes) is nonlinear and Z3 does not decide it; with them fixed it is linear
and every other parameter stays symbolic and unbounded (the prompt, budget
and step sizes, ``max_offload_tokens``, ``offload_prompt_only``, the chunk,
and the later request's length, shared prefix, GPU-local hit and
``max_load_tokens``). So each obligation row is the conjunction of one proof
per geometry below: the worked examples, the classes the lookup separates
(``W - 1`` a multiple of the chunk or not, ``extra_retained_tokens``, EAGLE,
``blocks_per_chunk`` > 1, SWA only, retention intervals), and windows and
block sizes of real models (docs/findings.md cites them).

A geometry: ``full_block`` (tokens per full-attention block, None: SWA only),
``swa_block``, ``bpc``, ``window``, ``extra`` (``extra_retained_tokens``),
``eagle``, ``retention`` (None, 0, or a retention interval in tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from kvreach.params import RetentionMode
from kvreach.proofs.scenarios import MEASURED_W17, PR_54362


@dataclass(frozen=True)
class Geometry:
    name: str
    full_block: int | None
    swa_block: int
    window: int
    bpc: int = 1
    extra: int = 0
    eagle: bool = False
    retention: int | None = None
    example: tuple[int, int] | None = None  # (prompt, budget) to decode a counterexample at

    def pins(self, ctx) -> list:
        s, lk = ctx.s, ctx.lk
        A = (self.full_block or self.swa_block) * self.bpc
        out = [s.B == self.swa_block, s.bpc == self.bpc, lk.W == self.window,
               lk.extra == self.extra, s.eagle == self.eagle,
               lk.has_full == (self.full_block is not None), s.A == A, s.has_align]
        if self.full_block is not None:
            out.append(lk.full_block_tokens == self.full_block)
        if self.retention is None:
            out.append(s.retention_mode == RetentionMode.NONE)
        elif self.retention == 0:
            out.append(s.retention_mode == RetentionMode.ZERO)
        else:
            out += [s.retention_mode == RetentionMode.POSITIVE, s.Rc * self.swa_block * self.bpc == self.retention]
        return out

    def example_pins(self, ctx) -> list:
        """The repeated-prompt example: this prompt and budget, the later
        request the same prompt (no GPU-local hit, no max_load_tokens)."""
        if self.example is None:
            return []
        P, budget = self.example
        s, lk = ctx.s, ctx.lk
        return [s.P == P, ctx.budget == budget, s.prompt_only, z3.Not(s.has_max),
                lk.num_tokens == P, ctx.shared == P, lk.local_hit_tokens == 0,
                z3.Not(lk.has_max_load)]


_PR, _W17 = PR_54362, MEASURED_W17
_EX, _EX17 = (_PR.prompt, _PR.budget), (_W17.prompt, _W17.budget)
_PR_GROUP = (_PR.full_block_size, _PR.swa_block_size, _PR.window)
GEOMETRIES: tuple[Geometry, ...] = (
    Geometry("window-17 measurement", _W17.full_block_size, _W17.swa_block_size, _W17.window,
             example=_EX17),
    Geometry("PR #54362 example", _PR.full_block_size, _PR.swa_block_size, _PR.window,
             example=_EX),
    Geometry("PR example, extra_retained_tokens 5", *_PR_GROUP, extra=5, example=_EX17),
    Geometry("PR example, EAGLE group", *_PR_GROUP, eagle=True, example=_EX),
    Geometry("PR example, retention interval 72", *_PR_GROUP, retention=72, example=_EX17),
    Geometry("PR example, retention interval 0", *_PR_GROUP, retention=0, example=_EX17),
    Geometry("blocks_per_chunk 2, W - 1 a multiple of the chunk", 16, 8, 17, bpc=2),
    Geometry("SWA only", None, 4, 16),
    Geometry("block 16, window 128", 16, 16, 128, example=(4096, 2048)),
    Geometry("block 16, window 1024", 16, 16, 1024, example=(8192, 2048)),
)
