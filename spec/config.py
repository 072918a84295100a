"""Symbolic configuration of one SWA group and one request (Z3).

The Z3 twin of ``kvreach.params``. Every parameter is a Z3 integer or
Boolean; ``well_formed()`` states what vLLM 0.33.0 accepts. Units:

- ``B``: tokens per block, ``block_size * dcp_world_size`` (the spec works on
  the product, so every block size and every DCP size is covered at once);
- ``bpc``: ``blocks_per_chunk``; ``C = B * bpc`` tokens per chunk;
- ``W``: the store mask's window, ``sliding_window + extra_retained_tokens``
  (``_reachable_store_block_mask`` widens it; the lookup's own use of both is
  ``kvreach.spec.lookup.LookupSym``);
- ``need0 = ceil((W - 1) / B)`` (``SlidingWindowManager._contiguous_blocks_for_hit``
  without the EAGLE block) is tied to ``W`` by ``(need0-1)*B < W-1 <= need0*B``;
- alignment: ``A = alignment_blocks * B`` (``alignment_tokens`` representable per block) or
  none. ``alignment_tokens % B != 0`` (vLLM's deliberate dense fallback) is
  outside the symbolic scope; see docs/spec.md.
- retention: ``retention_mode``, a ``kvreach.params.RetentionMode`` (NONE / ZERO /
  POSITIVE: interval None / 0 / >0) as a Z3 integer, with ``R = Rc * C`` (vLLM requires a
  multiple of the SWA chunk, ``SchedulerOffloadConfig.from_spec``).
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from kvreach.params import GroupConfig, RequestConfig, RetentionMode


@dataclass
class SymConfig:
    B: z3.ArithRef
    W: z3.ArithRef
    need0: z3.ArithRef
    eagle: z3.BoolRef
    bpc: z3.ArithRef
    C: z3.ArithRef
    has_align: z3.BoolRef
    alignment_blocks: z3.ArithRef
    A: z3.ArithRef
    retention_mode: z3.ArithRef
    Rc: z3.ArithRef
    P: z3.ArithRef
    has_max: z3.BoolRef
    max_off: z3.ArithRef
    prompt_only: z3.BoolRef

    @staticmethod
    def fresh(prefix: str = "") -> "SymConfig":
        I = lambda n: z3.Int(prefix + n)  # noqa: E731
        Bo = lambda n: z3.Bool(prefix + n)  # noqa: E731
        # Code reads only the attribute alignment_blocks; the Z3 constant keeps
        # the name "psA", and B, bpc, psA are declared first, because Z3's runs
        # depend on constant names and declaration order: renaming it to
        # "alignment_blocks" changed the proof rlimits by up to +142% and 10 of
        # the counterexamples shown.
        B, bpc, ab = I("B"), I("blocks_per_chunk"), I("psA")
        return SymConfig(
            B=B, W=I("window"), need0=I("need0"), eagle=Bo("eagle"), bpc=bpc,
            C=I("chunk_tokens"), has_align=Bo("has_alignment"), alignment_blocks=ab,
            A=I("alignment_tokens"), retention_mode=I("retention_mode"),
            Rc=I("retention_chunks"), P=I("prompt_tokens"),
            has_max=Bo("has_max_offload"), max_off=I("max_offload_tokens"),
            prompt_only=Bo("offload_prompt_only"),
        )

    # --- derived --------------------------------------------------------
    @property
    def shift(self) -> z3.ArithRef:
        """EAGLE shift (``reachable_block_mask``: shift = 1 if use_eagle)."""
        return z3.If(self.eagle, 1, 0)

    @property
    def need(self) -> z3.ArithRef:
        """``_contiguous_blocks_for_hit`` at block B, EAGLE block included."""
        return self.need0 + self.shift

    @property
    def per_segment(self) -> z3.ArithRef:
        """vLLM's ``per_segment``: the segment length in blocks (``segment_tokens``
        over B): alignment (R None), R (R > 0); with no alignment every chunk
        boundary (the load side's granularity)."""
        return z3.If(
            z3.Not(self.has_align), self.bpc,
            z3.If(self.retention_mode == RetentionMode.POSITIVE, self.Rc * self.bpc,
                  self.alignment_blocks),
        )

    @property
    def has_segments(self) -> z3.BoolRef:
        return z3.Or(z3.Not(self.has_align), self.retention_mode != RetentionMode.ZERO)

    @property
    def dense(self) -> z3.BoolRef:
        """``reachable_block_mask`` returns None."""
        return z3.Or(
            z3.Not(self.has_align),
            z3.And(self.retention_mode != RetentionMode.ZERO, self.need >= self.per_segment),
        )

    @property
    def prompt_offloadable(self) -> z3.ArithRef:
        """``prompt_offloadable_tokens``: ``offloadable(P, P)``."""
        return self.offloadable(self.P, self.P)

    @property
    def prompt_horizon(self) -> z3.ArithRef:
        """``prompt_offloadable_tokens // tokens_per_chunk`` (in chunks)."""
        return self.prompt_offloadable / self.C

    def offloadable(self, tokens, num_tokens) -> z3.ArithRef:
        """``_calc_num_offloadable_tokens``."""
        n = z3_min(tokens, num_tokens)
        n = z3.If(self.has_max, z3_min(n, self.max_off), n)
        return z3.If(self.prompt_only, z3_min(n, self.P), n)

    @property
    def replay_boundary(self) -> z3.ArithRef:
        """The replay boundary ``num_prompt_tokens - 1`` aligned down to
        ``alignment_tokens``, in blocks (``reachable_boundaries``)."""
        return (self.P - 1) / self.A * self.alignment_blocks

    def replay_end_block(self, boundary_tokens=None) -> z3.ArithRef:
        """End block of a reachable boundary's tail (``reachable_boundaries``,
        ``SlidingWindowManager.reachable_block_mask``): the boundary aligned
        down to ``alignment_tokens`` (default the replay boundary), plus shift."""
        b = (self.replay_boundary if boundary_tokens is None
             else boundary_tokens / self.A * self.alignment_blocks)
        return b + self.shift

    def well_formed(self) -> z3.BoolRef:
        return z3.And(
            self.B >= 1, self.W >= 2, self.bpc >= 1, self.C == self.B * self.bpc,
            self.need0 >= 0,
            (self.need0 - 1) * self.B < self.W - 1, self.W - 1 <= self.need0 * self.B,
            self.alignment_blocks >= 1, self.A == self.alignment_blocks * self.B,
            z3.Or([self.retention_mode == m for m in RetentionMode]),
            self.Rc >= 1,
            z3.Implies(z3.Not(self.has_align), self.retention_mode == RetentionMode.NONE),
            self.P >= 1, self.max_off >= 0,
        )

    def equals(self, g: GroupConfig, r: RequestConfig) -> z3.BoolRef:
        """Pin the symbolic configuration to concrete values (evaluation)."""
        if g.alignment_tokens is not None and not g.representable:
            raise ValueError("alignment_tokens % B != 0 is outside the symbolic scope")
        eqs = [
            self.B == g.block_tokens, self.W == g.mask_window_tokens, self.bpc == g.blocks_per_chunk,
            self.eagle == g.eagle, self.has_align == (g.alignment_tokens is not None),
            self.P == r.prompt_tokens, self.prompt_only == r.offload_prompt_only,
            self.has_max == (r.max_offload_tokens is not None),
        ]
        if g.alignment_tokens is not None:
            eqs.append(self.A == g.alignment_tokens)
        if r.max_offload_tokens is not None:
            eqs.append(self.max_off == r.max_offload_tokens)
        if g.retention_interval is None:
            eqs.append(self.retention_mode == RetentionMode.NONE)
        elif g.retention_interval == 0:
            eqs.append(self.retention_mode == RetentionMode.ZERO)
        else:
            eqs += [self.retention_mode == RetentionMode.POSITIVE,
                    self.Rc * g.chunk_tokens == g.retention_interval]
        return z3.And(eqs)


def z3_min(a, b):
    return z3.If(a <= b, a, b)


def z3_max(a, b):
    return z3.If(a >= b, a, b)


def to_concrete(m: z3.ModelRef, s: SymConfig) -> tuple[GroupConfig, RequestConfig]:
    """Decode a model into the concrete configuration (block_size = B, DCP 1)."""
    v = lambda x: m.eval(x, model_completion=True).as_long()  # noqa: E731
    b = lambda x: z3.is_true(m.eval(x, model_completion=True))  # noqa: E731
    retention_mode = v(s.retention_mode)
    has_align = b(s.has_align)
    g = GroupConfig(
        block_size=v(s.B), window=v(s.W),
        alignment_tokens=v(s.A) if has_align else None,
        blocks_per_chunk=v(s.bpc), eagle=b(s.eagle),
        retention_interval=(
            None if retention_mode == RetentionMode.NONE or not has_align
            else 0 if retention_mode == RetentionMode.ZERO else v(s.Rc) * v(s.C)
        ),
    )
    r = RequestConfig(
        prompt_tokens=v(s.P),
        max_offload_tokens=v(s.max_off) if b(s.has_max) else None,
        offload_prompt_only=b(s.prompt_only),
    )
    return g, r
