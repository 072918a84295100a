"""World (b)'s obligation, ``hit-preservation-neighbours``: the later
request's hit against the union of the rule's stores for earlier requests of
the same configuration equals its hit against the union of their dense
stores. The world (its symbols, queries, decoding and replay through the
twin): ``kvreach.proofs.neighbours``.
"""

from __future__ import annotations

from kvreach.proofs import mutants, neighbours
from kvreach.proofs.config import NEIGHBOURS_REQUESTS, SCOPE_FULL_NOT_EAGLE
from kvreach.proofs.framework import Obligation, Replay
from kvreach.proofs.geometries import family_text, worked_text
from kvreach.proofs.matrix import LOOKUP_PARTS

_GRID = neighbours.grid()

SCOPE = (
    f"world (b), same-rule neighbours: {NEIGHBOURS_REQUESTS} earlier requests of one "
    "configuration (prompts, lengths, offloadable tokens and the prefixes each pair shares "
    "symbolic; offload_prompt_only and max_offload_tokens symbolic), the rule's keep decision "
    "at each one's final horizon (one-shot; no request's lookup or hit changes another's "
    "stores), full-attention chunks dense; a later request of any length, any prefixes "
    "shared with each, GPU-local hit and max_load_tokens, unbounded (no key bound: the dense "
    "lookup's closed form and one chunk of its accepted run); no retention interval (the "
    "world's earlier requests store without one: a retention interval promises only some "
    "later requests, world (a) covers those); geometry: " + worked_text(neighbours.neighbour_geometries(),
    " without a retention interval") + family_text(", EAGLE") + "; HIT / MISS "
    "answers, one pass of _lookup_complete_chunks" + SCOPE_FULL_NOT_EAGLE
)

HIT_PRESERVATION_NEIGHBOURS = Obligation(
    neighbours.NAME,
    f"World (b): a later request's hit against the union of the rule's stores for "
    f"{NEIGHBOURS_REQUESTS} earlier requests of the same configuration (sharing prefixes) "
    "equals its hit against the union of their dense stores (every chunk each could "
    "offload).",
    "static", mutant=mutants.NEIGHBOURS_SHORT, scope=SCOPE, queries=neighbours.neighbour_queries,
    model_specific=False, grid=_GRID, rules=neighbours.RULES, world=neighbours.WORLD,
    split=False, static_splits=neighbours.splits, replayable=neighbours.replayable, cex_decoder=neighbours.decode,
    witness=neighbours.replay,
    bounds={"earlier_requests": NEIGHBOURS_REQUESTS}, reads=LOOKUP_PARTS, deep=True,
    vllm_replay=Replay("neighbours", on_releases=True),
)
