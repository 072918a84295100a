"""A row's mutant check: the obligation's mutant (a wrong store decision
or mutation parameters, ``Obligation.mutant``) under vllm-0.33 / intended
must be rejected (its BMC search or its planted query sat). Checked once per
obligation in a process; every row of the obligation counts its resources
(:func:`spent`), whether it ran now or was kept.
"""

from __future__ import annotations

import z3

from kvreach.proofs import solve
from kvreach.proofs.config import CHECK_RL, ROW_RL
from kvreach.proofs.flatten import flat_terms
from kvreach.proofs.framework import Role
from kvreach.proofs.induction import lifecycle_step_query
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.rows import ctx_for
from kvreach.proofs.search import find_counterexample
from kvreach.proofs.solve import Meter, check_terms


mutant_cache: dict[str, tuple[str, bool]] = {}
mutant_use_counts: dict[str, int] = {}
_mutant_sats: dict[str, list[tuple[str, int, str]]] = {}


def run_mutant(name: str, rule: str, model: str) -> tuple[str, bool]:
    """The obligation's mutant (of vllm-0.33 under intended) must be rejected.
    Its checks share one ``ROW_RL`` total; the resources spent are kept in
    ``mutant_use_counts``."""
    if name in mutant_cache:
        return mutant_cache[name]
    sats0 = len(solve.sat_log)
    ob = OBLIGATIONS[name]
    mname, store_fn, params = ob.mutant.name, ob.mutant.store_fn, ob.mutant.params
    meter = Meter(ROW_RL)
    if params is not None:
        rejected = False
        for g in (ob.grid or (None,)):
            mctx = ctx_for("vllm-0.33", "intended", mutant=params,
                        lookup_variant=params.get("lookup_variant", ob.lookup_variant))
            if g is not None:
                mctx.pins = g.pins(mctx)
            qs = ob.queries(mctx)
            rejected = any(check_terms(_mutant_terms(name, q.premise + [q.violation]), CHECK_RL,
                                  meter)[0] == z3.sat for q in qs)
            if rejected:
                break
    elif ob.role is Role.INVARIANT:
        q = lifecycle_step_query(ob, ctx_for("vllm-0.33", "intended", store_fn=store_fn))
        rejected = check_terms(_mutant_terms(name, q.premise + [q.violation]), CHECK_RL,
                          meter)[0] == z3.sat
    else:
        depth, _ = find_counterexample(name, "vllm-0.33", "intended", store_fn=store_fn,
                                       meter=meter, named=ob.named_mutant)
        rejected = depth is not None
    mutant_cache[name] = (mname, rejected)
    mutant_use_counts[name] = meter.used
    _mutant_sats[name] = solve.sat_log[sats0:]
    return mutant_cache[name]


def _mutant_terms(name: str, terms: list) -> list:
    """A mutant check's assertions, named (``proofs/flatten.py``) for the
    obligations with ``Obligation.named_mutant``."""
    return flat_terms(terms) if OBLIGATIONS[name].named_mutant else terms



def spent(name: str) -> tuple[int, list[tuple[str, int, str]]]:
    """The resource units ``name``'s mutant check spent (0 if it has not
    run) and its sat checks (the result cache keeps them with a row)."""
    return mutant_use_counts.get(name, 0), _mutant_sats.get(name, [])
