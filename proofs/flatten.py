"""Queries with their arithmetic if-then-else terms named: the same query,
cheaper for the solver's preprocessing.

The spec's terms nest ``z3.If`` deeply (``z3_min`` / ``z3_max``, the lookup's
token caps, the scan's ``last_break`` chains). Z3's ``ctx-simplify`` tactic
(the solver of :mod:`kvreach.proofs.solve`) walks such a term once per
context it occurs in, and on the lookup queries it spent over 90% of a
check's resource units there (4.0 M of 4.3 M on a ``lookup-monotone`` query)
before the search began. :func:`flat_query` replaces every arithmetic
``If(c, a, b)`` by a fresh constant ``v`` with the guarded definitions
``c -> v == a`` and ``not c -> v == b``. Those definitions fix ``v`` for
every value of the query's own symbols and constrain nothing else (a
definitional extension), so the named query is satisfiable exactly when the
original is, a model of it is a model of the original (the decoders evaluate
the original terms), and the premise alone stays satisfiable exactly when it
was (non-vacuity). Guarded, the definitions are not substituted back by
``solve-eqs``. Terms under a quantifier are left alone.
"""

from __future__ import annotations

import z3
from z3 import z3core
from z3.z3 import _to_expr_ref

from kvreach.proofs.framework import Query

PREFIX = "named_ite"


def _unchecked(fn):
    """The C function behind a z3core wrapper, without the error-code check
    the wrapper makes after each call (the walk's calls are reads of live
    terms, which do not fail); the wrapper itself if it is not of that form."""
    el = (fn.__defaults__ or (None,))[-1]
    return getattr(el, "f", fn)


def name_ites(terms: list, prefix: str = PREFIX) -> tuple[list, list]:
    """-> (the terms with each arithmetic if-then-else replaced by a fresh
    constant ``prefix_N``, the constants' guarded definitions). One name per
    distinct subterm (shared subterms share it); numbered in the order a
    left-to-right post-order walk meets them, so the same terms get the same
    names in every process.

    The walk reads the terms through Z3's C API (no Python term object per
    visited node: the same terms, built the same way, at a fraction of the
    CPU); a node is rebuilt only where an argument changed, with its own
    declaration (``Z3_mk_app``, what ``e.decl()(*args)`` calls)."""
    if not terms:
        return [], []
    ctx = terms[0].ctx
    c = ctx.ref()
    kind_of, n_args, arg_of, id_of, decl_of, decl_kind, sort_of, sort_kind = map(_unchecked, (
        z3core.Z3_get_ast_kind, z3core.Z3_get_app_num_args, z3core.Z3_get_app_arg,
        z3core.Z3_get_ast_id, z3core.Z3_get_app_decl, z3core.Z3_get_decl_kind,
        z3core.Z3_get_sort, z3core.Z3_get_sort_kind))
    APP, ITE, ARITH = z3.Z3_APP_AST, z3.Z3_OP_ITE, (z3.Z3_INT_SORT, z3.Z3_REAL_SORT)
    memo: dict[int, object] = {}  # node id -> its replacement (a C pointer)
    keep: list = []  # the Python terms that own the rebuilt nodes and the names
    defs: list = []
    for root in terms:
        stack = [(root.as_ast(), False)]
        while stack:
            a, expanded = stack.pop()
            k = id_of(c, a)
            if k in memo:
                continue
            n = n_args(c, a) if kind_of(c, a) == APP else 0
            if n == 0:
                memo[k] = a  # constant, numeral, quantifier (left whole)
                continue
            if not expanded:
                stack.append((a, True))
                stack.extend((arg_of(c, a, i), False) for i in range(n - 1, -1, -1))
                continue
            kids = [arg_of(c, a, i) for i in range(n)]
            args = [memo[id_of(c, x)] for x in kids]
            d = decl_of(c, a)
            if decl_kind(c, d) == ITE and sort_kind(c, sort_of(c, a)) in ARITH:
                e = _to_expr_ref(a, ctx)
                v = z3.Const(f"{prefix}_{len(defs) // 2}", e.sort())
                cond, then, other = (_to_expr_ref(x, ctx) for x in args)
                defs += [z3.Implies(cond, v == then), z3.Implies(z3.Not(cond), v == other)]
                keep.append(v)
                memo[k] = v.as_ast()
            elif all(id_of(c, x) == id_of(c, y) for x, y in zip(args, kids)):
                memo[k] = a
            else:
                arr = (z3core.Ast * n)(*args)
                e = _to_expr_ref(z3core.Z3_mk_app(c, d, n, arr), ctx)
                keep.append(e)
                memo[k] = e.as_ast()
    return [_to_expr_ref(memo[id_of(c, t.as_ast())], ctx) for t in terms], defs


def flat_query(q: Query, prefix: str = PREFIX) -> Query:
    """``q`` with its arithmetic if-then-else terms named (premise and
    violation together, so a term in both has one name); the definitions
    join the premise."""
    named, defs = name_ites(q.premise + [q.violation], prefix)
    return Query(named[:-1] + defs, named[-1])


def flat_terms(terms: list, prefix: str = PREFIX) -> list:
    """``terms`` (one conjunction) with their arithmetic if-then-else terms
    named, the definitions appended: satisfiable exactly when ``terms`` is."""
    named, defs = name_ites(terms, prefix)
    return named + defs
