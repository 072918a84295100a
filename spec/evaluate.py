"""Evaluate the spec's Z3 encoding at concrete values (tests only).

One mechanism, used for every spec answer the conformance tests compare with
``kvreach.impl``: pin the symbolic configuration to a concrete one
(``SymConfig.well_formed() & SymConfig.equals(g, r)``, plus any side
constraints a term needs, e.g. 0.29's ``ceil(W / chunk)`` witness) and ask two
independent questions of Z3, which must agree:

1. **solver**: under the pins, is ``term`` satisfiable, is ``not term``
   satisfiable? Exactly one must be (the pins determine the value; a term whose
   value the pins leave open is an :class:`EvalError`). For an integer term:
   take its value ``v`` in a model and check that ``term != v`` is unsat.
2. **substitution**: replace every free constant of the term by its value in
   a model of the pins and ``z3.simplify``; the result must be the literal the
   solver gave.

An existential (e.g. ``load.needed``, whose hit boundary ``L`` is free) is
evaluated by :meth:`Evaluator.exists`: true iff the pins and the term are
satisfiable (cross-checked by substituting the model, witness included); when
false, the substitution check runs over a caller-given candidate range of the
witness.

The spec's scope: ``alignment_tokens % B != 0`` and ``window == 1`` are outside
it (``SymConfig.equals`` raises / the pins are unsat, an :class:`EvalError`).
"""

from __future__ import annotations

from typing import Iterable

import z3

from kvreach.params import GroupConfig, RequestConfig
from kvreach.spec import load, mask
from kvreach.spec.config import SymConfig
from kvreach.spec.lookup import VLLM_WINDOW
from kvreach.spec.rules import RULES, storable_chunks


class EvalError(AssertionError):
    """The pins are unsatisfiable, a value is not determined, the solver gave
    up, or solver and substitution disagree."""


def free_consts(*terms: z3.ExprRef) -> list[z3.ExprRef]:
    """Uninterpreted constants (free symbols) occurring in ``terms``."""
    seen: dict[int, z3.ExprRef] = {}
    done: set[int] = set()
    todo = list(terms)
    while todo:
        t = todo.pop()
        if t.get_id() in done:
            continue
        done.add(t.get_id())
        if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            seen[t.get_id()] = t
        else:
            todo.extend(t.children())
    return list(seen.values())


# Each check of a pinned evaluation within this many Z3 resource units (a
# resource limit, so the answer does not depend on machine load). Every
# configuration is concrete: the test suite's checks spend at most about
# 0.75 M units each.
EVAL_RLIMIT = 50_000_000


class Pinned:
    """The mechanism: pins asserted once in an incremental solver, then
    :meth:`value` / :meth:`exists` of terms under them."""

    def __init__(self, pins: z3.BoolRef, what: str, rlimit: int = EVAL_RLIMIT):
        self.solver = z3.Solver()
        self.solver.set("rlimit", rlimit)
        self.solver.add(pins)
        self._pins = pins
        if self.solver.check() != z3.sat:
            raise EvalError(f"pins unsatisfiable for {what}")

    # --- the mechanism ---------------------------------------------------
    def _check(self, extra: list) -> z3.ModelRef | None:
        self.solver.push()
        try:
            self.solver.add(*extra)
            res = self.solver.check()
            if res == z3.unknown:
                raise EvalError(f"solver unknown: {self.solver.reason_unknown()}")
            return self.solver.model() if res == z3.sat else None
        finally:
            self.solver.pop()

    @staticmethod
    def _substitute(m: z3.ModelRef, term: z3.ExprRef, fixed=()) -> z3.ExprRef:
        pairs = dict((x.get_id(), (x, v)) for x, v in fixed)
        for x in free_consts(term):
            if x.get_id() not in pairs:
                pairs[x.get_id()] = (x, m.eval(x, model_completion=True))
        return z3.simplify(z3.substitute(term, *pairs.values()) if pairs else term)

    def value(self, term, side: Iterable = ()) -> bool | int:
        """The value of a Boolean or integer ``term`` under the pins and
        ``side``; both checks must agree and the value must be determined."""
        term = term if isinstance(term, z3.ExprRef) else z3.simplify(z3.IntVal(term))
        side = list(side)
        if z3.is_bool(term):
            m_t = self._check(side + [term])
            m_f = self._check(side + [z3.Not(term)])
            if m_t is None and m_f is None:
                raise EvalError("pins and side constraints are unsatisfiable")
            if m_t is not None and m_f is not None:
                raise EvalError(f"value not determined by the pins: {term}")
            v, m = (True, m_t) if m_t is not None else (False, m_f)
            simp = self._substitute(m, term)
            if not (z3.is_true(simp) if v else z3.is_false(simp)):
                raise EvalError(f"substitution gives {simp}, solver {v}")
            return v
        m = self._check(side)
        if m is None:
            raise EvalError("pins and side constraints are unsatisfiable")
        v = m.eval(term, model_completion=True)
        if not z3.is_int_value(v):
            raise EvalError(f"no integer value: {v}")
        if self._check(side + [term != v]) is not None:
            raise EvalError(f"value not determined by the pins: {term}")
        simp = self._substitute(m, term)
        if not (z3.is_int_value(simp) and simp.as_long() == v.as_long()):
            raise EvalError(f"substitution gives {simp}, solver {v}")
        return v.as_long()

    def exists(self, term, var: z3.ArithRef, candidates: Iterable[int], side: Iterable = ()) -> bool:
        """Is there a value of ``var`` making ``term`` true? Solver check over
        all integers; the substitution check uses the model's witness (true)
        or every value of ``candidates`` (false)."""
        side = list(side)
        m = self._check(side + [term])
        if m is not None:
            if not z3.is_true(self._substitute(m, term)):
                raise EvalError("substitution of the solver's witness is not true")
            return True
        m0 = self._check(side)
        if m0 is None:
            raise EvalError("pins and side constraints are unsatisfiable")
        for k in candidates:
            if not z3.is_false(self._substitute(m0, term, [(var, z3.IntVal(k))])):
                raise EvalError(f"solver: no witness; substitution: {var} = {k} is one")
        return False



class Evaluator(Pinned):
    """The spec at one concrete configuration. Reuse one instance for many
    terms: the pins are asserted once in an incremental solver."""

    def __init__(self, g: GroupConfig, r: RequestConfig, rlimit: int = EVAL_RLIMIT,
                 lookahead: bool | None = None):
        """``lookahead``: the configuration has vLLM 0.34.0's lookahead-hash
        parameters (``SymConfig.fresh(lookahead=True)``, pinned to the
        request's L); None: when the request has L >= 1."""
        self.g, self.r = g, r
        if lookahead is None:
            lookahead = r.hash_lookahead_tokens > 0
        self.s = SymConfig.fresh("ev_", lookahead=lookahead)
        if g.mask_window_tokens < 2:
            raise EvalError("window 1 is outside the symbolic scope (well_formed: W >= 2)")
        try:
            pins = z3.And(self.s.well_formed(), self.s.equals(g, r))
        except ValueError as e:  # alignment_tokens % B != 0
            raise EvalError(str(e)) from e
        super().__init__(pins, f"{g}, {r}", rlimit)

    # --- spec terms at concrete arguments ---------------------------------
    @property
    def dense(self) -> bool:
        return self.value(self.s.dense)

    def block_reachable(self, i: int, final_block: int | None) -> bool:
        """``spec.mask.block_reachable(s, i, F)`` (F in blocks or None)."""
        return self.value(mask.block_reachable(self.s, i, final_block))

    def chunk_reachable(self, c: int, final_block: int | None) -> bool:
        """``spec.mask.chunk_reachable(s, c, F)`` (F in blocks or None)."""
        return self.value(mask.chunk_reachable(self.s, c, final_block))

    def wanted(self, model: str, c: int, H: int) -> bool:
        return self.value(load.wanted(self.s, model, c, H))

    def needed(self, model: str, c: int, H: int) -> bool:
        """Exists a boundary ``L`` with ``spec.load.needed``. Candidates for
        the substitution check: a servable hit requests blocks below
        ``H * bpc`` only, so ``0 <= L <= H * bpc``; a margin of one chunk on
        each side is added."""
        L = z3.Int("ev_boundary_block")
        bpc = self.g.blocks_per_chunk
        return self.exists(
            load.needed(self.s, model, c, L, H), L, range(-bpc, (H + 1) * bpc + 1)
        )

    def store_step(self, rule: str, cursor: int, n: int, finished: bool, c: int,
                   num_tokens: int | None = None):
        """``RULES[rule](s, cursor, n, finished, c, aux)`` and its side
        constraints (0.29 pins its ``wc`` witness there). ``num_tokens``: the
        step's ``Request.num_tokens`` (lookahead hashes: the prompt horizon's
        hashed end)."""
        aux = {"wc": z3.Int("ev_wc")}
        if num_tokens is not None:
            aux["num_tokens"] = z3.IntVal(num_tokens)
        return RULES[rule](self.s, z3.IntVal(cursor), z3.IntVal(n), z3.BoolVal(finished),
                           z3.IntVal(c), aux)

    def submitted(self, rule: str, cursor: int, n: int, finished: bool, c: int,
                  num_tokens: int | None = None) -> bool:
        st = self.store_step(rule, cursor, n, finished, c, num_tokens)
        return self.value(st.submitted, [st.side])

    def next_cursor(self, rule: str, cursor: int, n: int, finished: bool,
                    num_tokens: int | None = None) -> int:
        st = self.store_step(rule, cursor, n, finished, 0, num_tokens)
        return self.value(st.next_cursor, [st.side])

    def storable_chunks(self, rule: str, tokens_after: int, num_tokens: int, finished: bool) -> int:
        """``spec.rules.storable_chunks`` of ``s.offloadable(tokens, num_tokens)``."""
        off = self.s.offloadable(z3.IntVal(tokens_after), z3.IntVal(num_tokens))
        return self.value(storable_chunks(self.s, rule, off, z3.BoolVal(finished)))

    def transition(self, rule: str, pre_f: int, cursor: int, kind: str, sched: int,
                   budget: int) -> "StepEval":
        """One ``spec.lifecycle.transition`` from the running state
        (``f = pre_f``, ``cursor``, tracked chunk not stored) with the step's
        ``kind`` and scheduled tokens pinned (the pins must admit the step)."""
        return StepEval(self, rule, pre_f, cursor, kind, sched, budget)


class StepEval:
    """Values of one pinned ``spec.lifecycle.transition``: ``tokens_after``,
    ``n``, ``finished``, post ``cursor`` and ``f`` (attributes), and
    ``submitted(c)`` for a tracked chunk ``c``."""

    def __init__(self, ev: Evaluator, rule, pre_f, cursor, kind, sched, budget):
        from kvreach.spec import lifecycle as lc

        self.ev = ev
        pre, post = lc.State.fresh("ev_pre"), lc.State.fresh("ev_post")
        self.c = z3.Int("ev_tracked_chunk")
        tr = lc.transition(ev.s, rule, pre, post, self.c, z3.IntVal(budget), "ev")
        self.tr = tr
        self.side = [
            tr.constraints, pre.f == pre_f, pre.cursor == cursor,
            z3.Not(pre.stored), z3.Not(pre.ended),
            tr.kind == lc.KINDS.index(kind), tr.sched == sched, self.c == 0,
        ]
        self.tokens_after = ev.value(tr.tokens_after, self.side)
        self.n = ev.value(tr.n, self.side)
        self.finished = ev.value(tr.finished, self.side)
        self.cursor = ev.value(post.cursor, self.side)
        self.f = ev.value(post.f, self.side)

    def submitted(self, c: int) -> bool:
        return self.ev.value(self.tr.submitted, self.side[:-1] + [self.c == c])


# ---------------------------------------------------------------------------
# The offload lookup (spec.lookup) at concrete values
# ---------------------------------------------------------------------------


def chunk_set(chunks: Iterable[int]) -> z3.ArrayRef:
    """A concrete chunk set as a Z3 array (``Select`` simplifies at a
    concrete index, so the substitution check can evaluate it)."""
    arr = z3.K(z3.IntSort(), z3.BoolVal(False))
    for c in sorted(set(chunks)):
        arr = z3.Store(arr, c, True)
    return arr


def lookup_values(*, full_block_tokens: int | None, swa_block_tokens: int, blocks_per_chunk: int,
                  window: int, extra_retained_tokens: int, eagle: bool, num_tokens: int,
                  local_hit_tokens: int, max_load_tokens: int | None,
                  full_chunks: Iterable[int], swa_chunks: Iterable[int],
                  lookup_variant: str = VLLM_WINDOW, release=None,
                  full_eagle: bool | None = None,
                  hash_lookahead_tokens: int | None = None) -> dict:
    """``spec.lookup.lookup`` pinned to one configuration, one later request
    and one store content (the chunks of each group the manager answers HIT
    for: sets, or two counts for "exactly the chunks below"):
    ``hit_tokens``, ``swa_loaded``, ``full_loaded`` and ``swa_verified``
    (chunk ranges). With sets the bound is the later request's key count, so
    every range fits it. ``lookup_variant``: ``spec.lookup.LOOKUP_VARIANTS``;
    ``release``: the ``kvreach.releases.Release`` whose parts apply (None:
    the default, 0.33.0); ``full_eagle``: the full-attention group's EAGLE
    flag (None: the spec's default, not an EAGLE group);
    ``hash_lookahead_tokens``: vLLM 0.34.0's L (None: the spec's lookup
    without the term, legacy hashes)."""
    from kvreach.releases import DEFAULT
    from kvreach.spec import lookup as lk

    s = lk.LookupSym.fresh("evl_", lookup_variant, release or DEFAULT,
                           full_eagle=full_eagle is not None,
                           lookahead=hash_lookahead_tokens is not None)
    pins = z3.And(
        s.well_formed(), s.has_full == (full_block_tokens is not None),
        s.full_block_tokens == (full_block_tokens or 1), s.B == swa_block_tokens,
        s.bpc == blocks_per_chunk, s.W == window, s.extra == extra_retained_tokens,
        s.eagle == eagle, s.num_tokens == num_tokens, s.local_hit_tokens == local_hit_tokens,
        s.has_max_load == (max_load_tokens is not None), s.max_load_tokens == (max_load_tokens or 0),
        *([] if s.full_eagle is None else [s.full_eagle == bool(full_eagle)]),
        *([] if s.L is None else [s.L == hash_lookahead_tokens]),
    )
    ev = Pinned(pins, "lookup configuration")
    if isinstance(full_chunks, int) and isinstance(swa_chunks, int):
        keys = lk.prefix_keys(full_chunks, swa_chunks)  # HIT exactly below each count
    else:
        fset, sset = chunk_set(full_chunks), chunk_set(swa_chunks)
        bound = num_tokens // min(swa_block_tokens, full_block_tokens or swa_block_tokens) + 2
        keys = lk.bounded_keys(lambda c: z3.Select(fset, c), lambda c: z3.Select(sset, c),
                               bound, "evl")
    t = lk.lookup(s, keys)
    side = t.side + [t.scope]
    return {
        "hit_tokens": ev.value(t.hit_tokens, side),
        "swa_loaded": tuple(ev.value(x, side) for x in t.swa_loaded),
        "full_loaded": tuple(ev.value(x, side) for x in t.full_loaded),
        "swa_verified": tuple(ev.value(x, side) for x in t.swa_verified),
    }


# --- world "restarts": is a concrete step a transition of the spec? -------------


def _member(c, values) -> z3.BoolRef:
    return z3.Or([c == v for v in sorted(values)]) if values else z3.BoolVal(False)


NO_CAP = 2**31  # allocated_chunks None: blocks and keys for every storable chunk


class StepChecker:
    """One configuration's world-"restarts" transition relation
    (``spec.lifecycle.transition(world="restarts")``), built once; :meth:`explain`
    pins a concrete step (recorded from vLLM by trace validation, or run by
    ``impl.lifecycle.run_vllm``) and asks (A) is it a transition, (B) does the
    spec offer and submit exactly its chunks. ``rlimit``: Z3 resources per check;
    ``release``: the vLLM release of the relation (``kvreach.releases``,
    default 0.33.0)."""

    def __init__(self, g: GroupConfig, r: RequestConfig, rule: str, budget: int,
                 rlimit: int | None = None, release=None):
        from kvreach.releases import DEFAULT
        from kvreach.spec import lifecycle as lc

        s = SymConfig.fresh()
        release = release or DEFAULT
        self.kinds = {t.name: t.kind for t in lc.TRANSITIONS}
        # the load_failed ghost of a release with failed transfers (pinned by
        # explain's load_failed, else free)
        ghost = (lambda tag: z3.Bool(f"load_failed_{tag}")) if release.failed_transfers else (
            lambda tag: None)
        self.pre = lc.State(z3.Int("f_pre"), z3.Int("cursor_pre"), z3.Bool("stored_pre"),
                            z3.BoolVal(False), load_failed=ghost("pre"))
        self.post = lc.State(z3.Int("f_post"), z3.Int("cursor_post"), z3.Bool("stored_post"),
                             z3.Bool("ended_post"), load_failed=ghost("post"))
        self.c = z3.Int("chunk")
        self.tr = lc.transition(s, rule, self.pre, self.post, self.c, z3.IntVal(budget), "t",
                                world="restarts", release=release)
        self.rlimit = rlimit
        self.solver = z3.SimpleSolver()
        self.solver.add(s.well_formed(), s.equals(g, r), self.tr.constraints)

    def _check(self, extra: list):
        self.solver.push()
        try:
            if self.rlimit is not None:
                self.solver.set("rlimit", self.rlimit)
            self.solver.add(*extra)
            r = self.solver.check()
            return r, (self.solver.model() if r == z3.sat else None)
        finally:
            self.solver.pop()

    def explain(self, kind: str, sched: int, outcome: int, pre: tuple[int, int],
                post: tuple[int, int], offered: frozenset, accepted: frozenset,
                null: frozenset = frozenset(), shared_prefix_boundary: int = 0,
                allocated_chunks: int | None = None,
                submitted: frozenset | None = None,
                load_failed: tuple[bool, bool] | None = None) -> str | None:
        """None when the step ((f, cursor) before and after, the manager's
        ``outcome`` index, the chunks offered to and accepted by
        ``prepare_store``, the chunks with a null block) is a transition of the
        spec with those chunks, else why not. ``submitted``: the chunks the
        step submitted, when ``accepted`` is the manager's choice over more
        chunks than were offered (default: ``accepted``). ``load_failed``:
        the ghost before and after (a release with failed transfers; None:
        not pinned)."""
        submitted = accepted if submitted is None else submitted
        tr, c = self.tr, self.c
        ghost = []
        if load_failed is not None:
            if self.pre.load_failed is None:
                raise ValueError("load_failed pinned for a release without failed transfers")
            ghost = [self.pre.load_failed == load_failed[0],
                     self.post.load_failed == load_failed[1]]
        pins = [tr.kind == self.kinds[kind], tr.sched == sched, tr.outcome == outcome,
                self.pre.f == pre[0], self.pre.cursor == pre[1],
                self.post.f == post[0], self.post.cursor == post[1],
                tr.shared_prefix_boundary == shared_prefix_boundary,
                tr.allocated_chunks == (NO_CAP if allocated_chunks is None else allocated_chunks),
                # witnesses for the manager's choice and the null blocks
                tr.accepted == _member(c, accepted),
                tr.null == z3.And(_member(c, null), z3.Not(_member(c, offered)))] + ghost
        r, _ = self._check(pins + [c == min(offered | accepted, default=0)])
        if r != z3.sat:
            return f"(A) not a transition of the spec ({r})"
        r, m = self._check(pins + [c >= 0, z3.Or(tr.offered != _member(c, offered),
                                                 tr.submitted != _member(c, submitted))])
        if r == z3.sat:
            bad = m.eval(c).as_long()
            return (f"(B) chunk {bad}: spec offers {z3.is_true(m.eval(tr.offered))}, "
                    f"submits {z3.is_true(m.eval(tr.submitted))}; the step offered "
                    f"{bad in offered}, submitted {bad in submitted}")
        return None if r == z3.unsat else f"(B) {r}"
