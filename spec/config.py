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
- lookahead block hashes (vLLM 0.34.0's rows only, :meth:`SymConfig.fresh`
  with ``lookahead=True``): ``L`` = ``num_hash_lookahead_tokens`` (>= 0) and
  ``tokens_per_hash`` (the hash block, dividing ``B`` and ``A``); with
  ``L >= 1`` ``_calc_num_offloadable_tokens`` is capped by the hashed tokens
  ``(num_tokens - L) // tokens_per_hash * tokens_per_hash`` and an EAGLE group
  is stored and looked up as a plain SWA group (:attr:`SymConfig.legacy_eagle`)
  except for its final tail (``is_eagle_group`` alone: :attr:`SymConfig.eagle`).
  None in every other row (their terms are the ones without the mode).
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
    L: z3.ArithRef | None = None  # num_hash_lookahead_tokens (lookahead rows only)
    tokens_per_hash: z3.ArithRef | None = None

    @staticmethod
    def fresh(prefix: str = "", lookahead: bool = False) -> "SymConfig":
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
            # declared last: the other constants' names and order are unchanged
            L=I("hash_lookahead_tokens") if lookahead else None,
            tokens_per_hash=I("tokens_per_hash") if lookahead else None,
        )

    # --- derived --------------------------------------------------------
    @property
    def lookahead(self) -> z3.BoolRef:
        """``use_lookahead_block_hashes`` (``num_hash_lookahead_tokens > 0``)."""
        return z3.BoolVal(False) if self.L is None else self.L > 0

    @property
    def legacy_eagle(self) -> z3.BoolRef:
        """An EAGLE group with legacy hashes (``is_eagle_group and not
        use_lookahead_block_hashes``, vLLM 0.34.0 ``_build_store_jobs``,
        ``storable_chunks``' ``apply_eagle_drop`` and the lookup): the mask's
        ``use_eagle``, the trailing drop. ``eagle`` itself is
        ``is_eagle_group`` (``store_horizon_chunks``,
        ``_final_swa_alignment_blocks``: no final tail either way)."""
        return self.eagle if self.L is None else z3.And(self.eagle, z3.Not(self.lookahead))

    @property
    def shift(self) -> z3.ArithRef:
        """EAGLE shift (``reachable_block_mask``: shift = 1 if use_eagle)."""
        return z3.If(self.legacy_eagle, 1, 0)

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
        """``prompt_offloadable_tokens``: ``offloadable(P, P)``; under
        lookahead hashes its value once the prompt is hashed (``num_tokens >=
        P + L``), the hashed cap left out (a step reads
        :meth:`prompt_offloadable_at`)."""
        return self._caps(z3_min(self.P, self.P))  # offloadable(P, P)'s term, as before

    @property
    def prompt_horizon(self) -> z3.ArithRef:
        """``prompt_offloadable_tokens // tokens_per_chunk`` (in chunks)."""
        return self.prompt_offloadable / self.C

    def hashed_tokens(self, num_tokens) -> z3.ArithRef:
        """``len(req.block_hashes) * tokens_per_hash`` of a request of
        ``num_tokens`` tokens under lookahead hashes
        (``get_request_block_hasher``: a block hash also covers the L tokens
        after it)."""
        assert self.L is not None
        return z3_max(0, num_tokens - self.L) / self.tokens_per_hash * self.tokens_per_hash

    def _hashed_cap(self, n, num_tokens) -> z3.ArithRef:
        if self.L is None:
            return n
        return z3.If(self.lookahead, z3_min(n, self.hashed_tokens(num_tokens)), n)

    def _caps(self, n) -> z3.ArithRef:
        n = z3.If(self.has_max, z3_min(n, self.max_off), n)
        return z3.If(self.prompt_only, z3_min(n, self.P), n)

    def offloadable(self, tokens, num_tokens) -> z3.ArithRef:
        """``_calc_num_offloadable_tokens`` (0.34.0: also capped by the
        hashed tokens under lookahead hashes)."""
        return self._caps(self._hashed_cap(z3_min(tokens, num_tokens), num_tokens))

    def prompt_offloadable_at(self, num_tokens) -> z3.ArithRef:
        """``prompt_offloadable_tokens`` of a ``_build_store_jobs`` call that
        sees ``Request.num_tokens`` = ``num_tokens`` (``>= P``):
        ``_calc_num_offloadable_tokens(req_status, num_prompt_tokens)``, whose
        hashed cap reads the request's block hashes now (vLLM 0.34.0, L >= 1:
        below the prompt's end until L tokens past it are known, the prompt
        horizon is the hashed end). Without the mode: :attr:`prompt_offloadable`."""
        if self.L is None:
            return self.prompt_offloadable
        return self._caps(self._hashed_cap(self.P, num_tokens))

    def prompt_horizon_at(self, num_tokens) -> z3.ArithRef:
        """:meth:`prompt_offloadable_at` in chunks (``prompt_horizon_chunks``)."""
        return self.prompt_offloadable_at(num_tokens) / self.C

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
            *self._lookahead_well_formed(),
        )

    def _lookahead_well_formed(self) -> list:
        """L >= 0; ``tokens_per_hash`` the GCD of the groups' blocks times DCP
        (``resolve_kv_cache_block_sizes``), so it divides ``B`` and, with a
        full-attention group, its chunk ``A``."""
        if self.L is None:
            return []
        return [self.L >= 0, self.tokens_per_hash >= 1, self.B % self.tokens_per_hash == 0,
                z3.Implies(self.has_align, self.A % self.tokens_per_hash == 0)]
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
        if self.L is not None:
            eqs += [self.L == r.hash_lookahead_tokens, self.tokens_per_hash == r.tokens_per_hash]
        elif r.hash_lookahead_tokens:
            raise ValueError("hash_lookahead_tokens > 0 needs SymConfig.fresh(lookahead=True)")
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
        lookahead_hashes=s.L is not None and v(s.L) > 0,
        retention_interval=(
            None if retention_mode == RetentionMode.NONE or not has_align
            else 0 if retention_mode == RetentionMode.ZERO else v(s.Rc) * v(s.C)
        ),
    )
    r = RequestConfig(
        prompt_tokens=v(s.P),
        max_offload_tokens=v(s.max_off) if b(s.has_max) else None,
        offload_prompt_only=b(s.prompt_only),
        hash_lookahead_tokens=0 if s.L is None else v(s.L),
        tokens_per_hash=1 if s.L is None else v(s.tokens_per_hash),
    )
    return g, r
