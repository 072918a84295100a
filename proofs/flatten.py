"""Queries with their arithmetic if-then-else terms named: the same query,
cheaper for the solver's preprocessing.

The spec's terms nest ``z3.If`` deeply (``_min`` / ``_max``, the lookup's
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

from kvreach.proofs.framework import Query

PREFIX = "named_ite"


def name_ites(terms: list, prefix: str = PREFIX) -> tuple[list, list]:
    """-> (the terms with each arithmetic if-then-else replaced by a fresh
    constant ``prefix_N``, the constants' guarded definitions). One name per
    distinct subterm (shared subterms share it); numbered in the order a
    left-to-right post-order walk meets them, so the same terms get the same
    names in every process."""
    memo: dict[int, z3.ExprRef] = {}
    defs: list = []
    for root in terms:
        stack = [(root, False)]
        while stack:
            e, expanded = stack.pop()
            k = e.get_id()
            if k in memo:
                continue
            if not z3.is_app(e) or e.num_args() == 0:
                memo[k] = e  # constant, numeral, quantifier (left whole)
                continue
            kids = e.children()
            if not expanded:
                stack.append((e, True))
                stack.extend((a, False) for a in reversed(kids))
                continue
            args = [memo[a.get_id()] for a in kids]
            if z3.is_app_of(e, z3.Z3_OP_ITE) and z3.is_arith(e):
                v = z3.Const(f"{prefix}_{len(defs) // 2}", e.sort())
                c, a, b = args
                defs += [z3.Implies(c, v == a), z3.Implies(z3.Not(c), v == b)]
                memo[k] = v
            elif all(x.eq(y) for x, y in zip(args, kids)):
                memo[k] = e
            else:
                memo[k] = e.decl()(*args)
    return [memo[t.get_id()] for t in terms], defs


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
