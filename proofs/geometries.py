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


# --- the block-shape family -----------------------------------------------
#
# With the block sizes and ``blocks_per_chunk`` fixed, every division of the
# lookup and the masks is by a constant (linear); the window,
# ``extra_retained_tokens``, EAGLE and the retention interval's None / 0
# stay symbolic. Measured (Z3 4.15.4, hit-preservation under lookup-window,
# full block 16, SWA block 16, blocks_per_chunk 1): all of those symbolic,
# 0.3 M units; the full-attention block symbolic too (the alignment and the
# full-attention chunk then divisors): undecided after 400 s; a positive
# retention interval of k chunks symbolic (k a divisor of the segment):
# undecided within the row's 200 M units; k <= 4: 6.7 M for this shape, but
# over 300 s undecided for full block 256 / SWA block 64; k fixed to 3: 1.6 M.
# So a positive retention interval of any length is in the worked geometries
# only (72 tokens: proofs/geometries.py GEOMETRIES). With the interval fixed
# to k SWA chunks in every member (hit-preservation-family, lookup-window,
# 0.34.0, each member one row alone): k = 1 4.7 M units over the 20
# members, k = 2 37.3 M (full block 36 / SWA block 4 alone 10.7 M, decided
# with the runner's inner splits; per cube leaf two leaves were undecided
# within their limit), k = 3 about 103 M (full block 256 / SWA block 8 alone
# 41 M), k = 18 (the worked geometry's 72 tokens at SWA block 4) 12.4 M for the
# SWA-only block-4 member alone. FAMILY_RETENTION_CHUNKS are the k the family
# rows that take them prove.
FAMILY_RETENTION_CHUNKS = (1, 2)
FAMILY_SWA_BLOCKS = (4, 8, 16, 32, 64)  # every power of two from 4 to 64
FAMILY_FULL_BLOCKS = (None, "same")  # SWA only, or the full-attention block the SWA block's
# further shapes of real deployments (bench/bench_hits.py SHAPES) and the
# blocks_per_chunk > 1 shape of the worked geometries: (full, SWA, blocks_per_chunk).
# Full block 256 over SWA block 8 and 4 are DeepSeek-V4-Flash's compressor
# states (C128 and C4 layers; blocks_per_chunk 1 as bench_hits.py and the
# presets take it): an alignment of 32 and 64 SWA chunks.
FAMILY_EXTRA_SHAPES = ((256, 64, 1), (64, 32, 1), (32, 16, 1), (32, 16, 8), (32, 16, 64),
                       (16, 16, 16), (36, 4, 1), (16, 8, 2), (256, 8, 1), (256, 4, 1))
# The members whose static queries an obligation with ``static_splits`` case
# splits (BlockShape.split): hit-preservation-neighbours' queries for
# lookup-window were undecided whole within 60 M units each at both
# compressor shapes, and decided split (docs/proofs-cost.md).
FAMILY_SPLIT_SHAPES = ((256, 8, 1), (256, 4, 1))
# The members whose lifecycle step (hit-preservation-family) is decided per
# leaf of the runner's cube (step kind x EAGLE x retention mode), each leaf one
# check, with no further split inside (BlockShape.cube_only): with the
# runner's inner splits (3 M units a node) they were undecided within 20 M
# units (36 / 4 also at 60 M with the window splits first); per cube leaf
# every check is decided within 8 M (docs/proofs-cost.md).
FAMILY_CUBE_ONLY_SHAPES = ((36, 4, 1), (256, 8, 1), (256, 4, 1))


@dataclass(frozen=True)
class BlockShape:
    """One member of the block-shape family: the full-attention block
    (None: SWA only), the SWA block and ``blocks_per_chunk`` fixed, so the
    alignment (the full-attention chunk, or the SWA chunk with no
    full-attention group) is fixed; the window (>= 1, with ``W +
    extra_retained_tokens >= 2``), ``extra_retained_tokens`` and EAGLE
    symbolic and unbounded; the retention interval per ``retention``:
    ``"none-or-zero"`` (None or 0, symbolic), ``"none"``, or an int ``k``: a
    positive interval of ``k`` SWA chunks (``R = k * chunk_tokens``). ``no_eagle``: EAGLE off;
    ``window_one_past_chunks``: ``W - 1`` a multiple of the SWA chunk and
    shorter than the alignment (as in the worked geometries), no EAGLE, no ``extra_retained_tokens``, no retention interval (the premise
    of ``hit-preserving-wastes``). ``split``: a static obligation with
    ``Obligation.static_splits`` case splits each of its queries here (one
    check each elsewhere). ``cube_only``: a lifecycle row's step here is one
    check per leaf of the runner's cube (``solve.solve_cases``), no inner
    split."""

    full_block: int | None
    swa_block: int
    bpc: int = 1
    retention: str | int = "none-or-zero"
    no_eagle: bool = False
    window_one_past_chunks: bool = False
    split: bool = False
    cube_only: bool = False
    example = None  # no worked example: a counterexample search uses the readable bounds

    @property
    def name(self) -> str:
        full = "SWA only" if self.full_block is None else f"full block {self.full_block}"
        ret = (f", retention interval {self.retention} chunk{'s' if self.retention > 1 else ''}"
               if isinstance(self.retention, int) else "")
        return f"family: {full}, SWA block {self.swa_block}, blocks_per_chunk {self.bpc}{ret}"

    def pins(self, ctx) -> list:
        s, lk = ctx.s, ctx.lk
        A = (self.full_block or self.swa_block) * self.bpc
        out = [s.B == self.swa_block, s.bpc == self.bpc, s.A == A, s.has_align,
               lk.has_full == (self.full_block is not None)]
        if self.full_block is not None:
            out.append(lk.full_block_tokens == self.full_block)
        if self.retention == "none" or self.window_one_past_chunks:
            out.append(s.retention_mode == RetentionMode.NONE)
        elif isinstance(self.retention, int):
            assert self.retention >= 1, self.retention
            out += [s.retention_mode == RetentionMode.POSITIVE, s.Rc == self.retention]
        else:
            assert self.retention == "none-or-zero", self.retention
            out.append(s.retention_mode != RetentionMode.POSITIVE)
        if self.no_eagle or self.window_one_past_chunks:
            out.append(z3.Not(s.eagle))
        if self.window_one_past_chunks:
            out += [lk.extra == 0, (lk.W - 1) % (self.swa_block * self.bpc) == 0, lk.W - 1 < A]
        return out

    def example_pins(self, ctx) -> list:
        return []


def family(**kw) -> tuple[BlockShape, ...]:
    """The block-shape family (:data:`FAMILY_SWA_BLOCKS` x
    :data:`FAMILY_FULL_BLOCKS` at ``blocks_per_chunk`` 1, and
    :data:`FAMILY_EXTRA_SHAPES`), each member with ``kw`` (``BlockShape``'s
    flags)."""
    shapes = [(B if f == "same" else f, B, 1) for B in FAMILY_SWA_BLOCKS for f in FAMILY_FULL_BLOCKS]
    shapes += [x for x in FAMILY_EXTRA_SHAPES if x not in shapes]
    positive = isinstance(kw.get("retention"), int)  # cube leaves undecided there (36 / 4)
    return tuple(BlockShape(f, B, bpc, split=(f, B, bpc) in FAMILY_SPLIT_SHAPES,
                            cube_only=(f, B, bpc) in FAMILY_CUBE_ONLY_SHAPES and not positive, **kw)
                 for f, B, bpc in shapes)


def family_text(kw_text: str = "") -> str:
    """A row's scope for the family: what is fixed, what ranges over it, what is symbolic."""
    full = ", ".join("SWA only" if f is None else "the SWA block" if f == "same" else str(f)
                     for f in FAMILY_FULL_BLOCKS)
    extra = ", ".join(f"({'none' if f is None else f}, {b}, {c})" for f, b, c in FAMILY_EXTRA_SHAPES)
    return ("block-shape family (proofs/geometries.py): SWA block in "
            + "{" + ", ".join(map(str, FAMILY_SWA_BLOCKS)) + "} x full-attention block in {"
            + full + "} at blocks_per_chunk 1, and (full, SWA, blocks_per_chunk) in {" + extra
            + "}: each member's block sizes and blocks_per_chunk fixed, so the alignment "
            "(the full-attention chunk, or the SWA chunk with SWA only) is fixed; symbolic and "
            "unbounded in each: window W >= 1 (W + extra_retained_tokens >= 2), "
            "extra_retained_tokens" + kw_text)


def worked_text(geometries, which: str = "") -> str:
    """A lifted row's scope, its worked part: how many of the worked
    geometries (named when few), then the family's text follows."""
    names = "" if len(geometries) > 3 else " (" + ", ".join(g.name for g in geometries) + ")"
    return (f"the {len(geometries)} worked geometries{which} of proofs/geometries.py "
            f"(concrete){names} and the ")
