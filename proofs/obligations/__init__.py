"""Every proof obligation, in one list (:data:`ALL`), in the order the
runner, the catalog (docs/proofs.md) and ``kvreach prove`` report them;
:data:`INVARIANTS` the ones the lifecycle proofs rest on, run first
(:func:`run_order`), as etcd-io/raft's ``MCetcdraft.cfg`` lists its
INVARIANTS. Each obligation is one record (``proofs.framework.Obligation``:
its world, role, mutant, scope, bounds and lookup variant), defined in the
module of its world:

- ``store``: the store rule, single-request world;
- ``lookup``: the offload lookup, single-request world (and its variant
  ``read-window``);
- ``restarts``: world "restarts" (preemption, the manager's answers);
- ``neighbours``: world (b), same-rule neighbours.
"""

from __future__ import annotations

from kvreach.proofs.framework import Obligation, Role
from kvreach.proofs.obligations import lookup, neighbours, restarts, store

ALL: list[Obligation] = [
    store.SOUNDNESS,
    store.COMPLETENESS,
    store.EXACTLY_ONCE,
    store.COMPUTED_BEFORE_STORED,
    store.MASK_EQUIVALENCE,
    store.INVARIANT,
    store.INVARIANT_LOOKAHEAD,
    store.EXACTLY_ONCE_LOOKAHEAD,
    store.COMPUTED_BEFORE_STORED_LOOKAHEAD,
    store.LOAD_WITNESS,
    store.CHUNK_MASK_CLOSED_FORM,
    lookup.HIT_PRESERVATION,
    lookup.HIT_PRESERVATION_FAMILY,
    lookup.NO_WASTE,
    lookup.NO_WASTE_FAMILY,
    lookup.LOOKUP_PREFIX_SCAN,
    lookup.LOOKUP_SCAN_CLOSED_FORM,
    store.LOAD_WINDOW_BLOCKS,
    lookup.HIT_PRESERVATION_READ_WINDOW,
    lookup.HIT_PRESERVATION_READ_WINDOW_FAMILY,
    lookup.HIT_PRESERVATION_READ_WINDOW_ALIGNED,
    lookup.HIT_PRESERVATION_READ_WINDOW_ALIGNED_FAMILY,
    lookup.NO_WASTE_READ_WINDOW,
    lookup.NO_WASTE_READ_WINDOW_FAMILY,
    lookup.LOOKUP_RUN_STORED,
    lookup.LOOKUP_RUN_STORED_READ_WINDOW,
    lookup.HIT_PRESERVING_WASTES,
    lookup.LOOKUP_MONOTONE,
    lookup.LOAD_READS_CHECKED,
    lookup.LOAD_READS_CHECKED_FAMILY,
    restarts.EXACTLY_ONCE_INCARNATION,
    restarts.EXACTLY_ONCE_RESTARTS,
    restarts.COMPUTED_BEFORE_STORED_RESTARTS,
    restarts.REFUSED_RETRIED,
    neighbours.HIT_PRESERVATION_NEIGHBOURS,
]

OBLIGATIONS: dict[str, Obligation] = {o.name: o for o in ALL}
assert len(OBLIGATIONS) == len(ALL), "two obligations share a name"

INVARIANTS: list[Obligation] = [o for o in ALL if o.role is Role.INVARIANT]


def run_order(keys):
    """Row keys ``(obligation, rule, load model)`` in the order they are
    reported: the invariants' rows first (the lifecycle proofs rest on them),
    then the rest, each in the order given."""
    keys = list(keys)
    first = [k for k in keys if OBLIGATIONS[k[0]].role is Role.INVARIANT]
    return first + [k for k in keys if OBLIGATIONS[k[0]].role is not Role.INVARIANT]
