"""World (b), *same-rule neighbours* (docs/lookup.md "Worlds"): the
offload tier holds what the rule stored for ``NEIGHBOURS_REQUESTS`` (3)
earlier requests of the same configuration (prompts ``P_i``, each pair
sharing its first ``d_ij`` tokens), and a later request looks up as
``_lookup_complete_chunks`` does (``kvreach.spec.lookup``).

Keys are prefix hashes, so the later request's chunk ``c`` of a group is a HIT
iff some earlier request stored its chunk ``c`` and the later request shares
that chunk's tokens with it: ``(c + 1) * chunk <= min(D_i, offloadable_i)``
for the prefix ``D_i`` it shares with request ``i``. The shared prefixes are
those of token sequences: of any three, the least is attained twice (an
ultrametric, :func:`ultrametric`). Full-attention chunks are stored dense (no
mask); the SWA chunks are the rule's one-shot keep decision at each request's
final horizon ``H_i = offloadable_i // C`` (as ``no-waste`` takes it), dense:
every chunk each request could offload.

Obligation ``hit-preservation-neighbours``: the later request's hit against
the union of the rule's stores equals its hit against the union of dense
stores. Encoded as ``hit-preservation`` encodes world (a): the violation is
a chunk of the SWA run the dense lookup accepts (``swa_verified``) that the
union of the rule's stores lacks, with a nonzero dense hit. Equivalent,
because the union of the rule's stores is a subset of the dense union, the
full-attention stores are the same (so the SWA group scans the same ``n``
keys with the same windows): every key at or above the dense scan's end
``e_d`` misses in both, so no larger end qualifies for the rule's scan, and
``e_d`` qualifies for it iff its run is all stored; then every term of the
hit is the same. A missing chunk makes the rule's scan end below ``e_d``:
a shorter hit (the twin confirms each counterexample's two hits). That step
is the obligation ``lookup-run-stored``, proved for later requests of up to
10 SWA chunks.

No bound on keys: the dense lookup is the closed form of a prefix
(``prefix_keys``, proved by ``lookup-prefix-scan``), the rule's stores enter
only through the one chunk. Static, per geometry of the worked grid without a
retention interval and per member of the block-shape family without one (a retention interval promises only some later requests;
world (a) covers those rows), two queries per geometry (with and without
``max_load_tokens``: a partition Z3 decides faster than the whole).

A counterexample decodes to the earlier requests, the later request and the
chunk (:func:`decode`), and is confirmed through the twin (:func:`replay`):
the executable rule's one-shot stores of each (``impl.rules.store_step``),
their union as ``impl.lookup.StoreContent``, the twin's lookup against it and
against the dense union: a shorter hit, the dense hit the spec's, the chunk
missing.

The obligation's record (its scope, its mutant):
``proofs/obligations/neighbours.py``.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import z3

from kvreach.proofs.config import NEIGHBOURS_REQUESTS
from kvreach.proofs.framework import Ctx, Query
from kvreach.proofs.keep import one_shot_mask
from kvreach.impl.decoded import lookup_groups_of, neighbours_lookup
from kvreach.releases import DEFAULT as DEFAULT_RELEASE
from kvreach.spec.config import z3_max, z3_min

NAME = "hit-preservation-neighbours"
WORLD = "neighbours"
RULES = ("vllm-0.33", "lookup-window")


def _terms(ctx: Ctx) -> dict:
    """The world's symbols: request 0 is ``ctx.s`` (its prompt ``s.P``), the
    others the same configuration with their own prompts; ``d[i, j]`` the
    prefix requests ``i`` and ``j`` share, ``D[i]`` the one request ``i``
    shares with the later request."""
    I = z3.Int  # noqa: E741
    n = NEIGHBOURS_REQUESTS
    return dict(
        s=[ctx.s] + [replace(ctx.s, P=I(f"nb_r{i}_prompt_tokens")) for i in range(1, n)],
        off=[I(f"nb_r{i}_offloadable_tokens") for i in range(n)],
        tokens=[I(f"nb_r{i}_tokens") for i in range(n)],  # prompt and any decode
        D=[I(f"nb_later_shared_r{i}") for i in range(n)],
        d={(i, j): I(f"nb_shared_r{i}_r{j}") for i, j in itertools.combinations(range(n), 2)},
    )


def terms(ctx: Ctx) -> dict:
    """:func:`_terms` and ``dense``, the later request's lookup against the
    union of dense stores (a prefix per group): what the queries, the shape
    the scheduler runs (:func:`replayable`) and the decoder (:func:`decode`)
    read. Built from ``ctx`` and fixed symbol names, so every call gives the
    same terms."""
    from kvreach.spec.lookup import lookup, prefix_keys

    t = _terms(ctx)
    lk = ctx.lk
    seen = [z3_min(D, off) for off, D in zip(t["off"], t["D"])]  # per request: shared and offloadable
    top = seen[0]  # the union of dense stores: a prefix per group
    for x in seen[1:]:
        top = z3_max(top, x)
    return dict(t, seen=seen,
                dense=lookup(lk, prefix_keys(z3.If(lk.has_full, top / lk.C_full, 0), top / lk.C)))


def shared(t: dict, a: int, b: int):
    """The prefix sequences ``a < b`` share; index ``NEIGHBOURS_REQUESTS`` is
    the later request."""
    return t["D"][a] if b == NEIGHBOURS_REQUESTS else t["d"][a, b]


def ultrametric(t: dict) -> list:
    """Prefixes of token sequences: of any three, the least shared prefix is
    attained twice (each is at least the least of the other two)."""
    out = []
    for a, b, c in itertools.combinations(range(NEIGHBOURS_REQUESTS + 1), 3):
        x, y, z = shared(t, a, b), shared(t, a, c), shared(t, b, c)
        out += [x >= z3_min(y, z), y >= z3_min(x, z), z >= z3_min(x, y)]
    return out


def keep(ctx: Ctx, s, c, H) -> z3.BoolRef:
    """The rule's one-shot keep decision (``one_shot_mask``) for a request of
    configuration ``s``; the mutant ``mutants.NEIGHBOURS_SHORT`` keeps
    ``lookup-window``'s runs one chunk short whatever the row's rule."""
    short = ctx.mutant.get("neighbours_short_by")
    if short:
        from kvreach.spec.rules import lookup_window_keep

        return lookup_window_keep(s, c, short_by=short)
    return one_shot_mask(replace(ctx, s=s), c, H)


def neighbour_queries(ctx: Ctx) -> list[Query]:
    from kvreach.spec.lookup import link

    t = terms(ctx)
    lk = ctx.lk
    C = lk.C
    prem = ctx.base() + [lk.well_formed(), link(ctx.s, lk)] + [s_i.well_formed() for s_i in t["s"][1:]]
    seen = t["seen"]  # per request: tokens of it the later request sees (shared and offloadable)
    for s_i, off, D, N in zip(t["s"], t["off"], t["D"], t["tokens"]):
        prem += [N >= s_i.P, 0 <= off, off <= N, z3.Implies(s_i.prompt_only, off <= s_i.P),
                 z3.Implies(s_i.has_max, off <= s_i.max_off),
                 0 <= D, D <= lk.num_tokens, D <= N]
    for (i, j), d in t["d"].items():
        prem += [d >= 0, d <= t["tokens"][i], d <= t["tokens"][j]]
    prem += ultrametric(t)

    def stored(c):  # the later request's SWA chunk c is a HIT in the union of the rule's stores
        return z3.And(c >= 0, z3.Or([
            z3.And((c + 1) * C <= sh, keep(ctx, s_i, c, off / C))
            for s_i, off, sh in zip(t["s"], t["off"], seen)]))

    dense = t["dense"]
    prem += dense.side
    c = ctx.c  # a chunk of the SWA run the dense lookup accepts, missing from the union
    violation = z3.And(dense.hit_tokens > 0, dense.swa_verified[0] <= c,
                       c < dense.swa_verified[1], z3.Not(stored(c)))
    # two queries, with and without max_load_tokens (a partition: Z3 decides
    # the two halves in about half the time of the whole)
    return [Query(prem + [case], violation) for case in (lk.has_max_load, z3.Not(lk.has_max_load))]


def splits(ctx: Ctx) -> list:
    """The case splits of the queries at the members that ask for them
    (``geometries.BlockShape.split``: full block 256 over SWA block 8 and 4,
    undecided whole), tried in order by ``solve.solve_split``: the window
    (with ``extra_retained_tokens``) longer than the alignment, EAGLE, the
    window within one SWA chunk, no ``extra_retained_tokens``, no GPU-local
    hit, ``offload_prompt_only``, a later request shorter than the alignment.
    Each is a term and its negation: the leaves partition the query."""
    s, lk = ctx.s, ctx.lk
    w = lk.W + lk.extra
    return [w > s.A, s.eagle, w <= s.C, lk.extra == 0, lk.local_hit_tokens == 0,
            s.prompt_only, lk.num_tokens < s.A]


# --- counterexamples ------------------------------------------------------


def replayable(ctx: Ctx) -> list[list]:
    """A counterexample shape vLLM's scheduler runs as the world states it
    (``kvreach/vllm_harness/replay.py``): each earlier request a prompt that
    finishes after one prefill step (no decode, ``offload_prompt_only``, no
    ``max_offload_tokens``: its only store is the keep decision at its final
    horizon ``P_i // C``), and a later request with no GPU-local hit (the
    harness resets the prefix cache before it looks up). Alternatives, tried
    in order."""
    t, s = terms(ctx), ctx.s
    out = [ctx.lk.local_hit_tokens == 0, s.prompt_only, z3.Not(s.has_max)]
    for s_i, off, N in zip(t["s"], t["off"], t["tokens"]):
        out += [N == s_i.P, off == s_i.P]
    # first prompts that differ past their shared prefixes, each seen by the
    # later request (a world-(b) scenario proper), then any
    apart = [z3.And(d < t["s"][i].P, d < t["s"][j].P) for (i, j), d in t["d"].items()]
    return [out + apart + [D > 0 for D in t["D"]], out]


def decode(m, ctx: Ctx) -> dict:
    """The model as the earlier requests, the later request and the spec's
    hits (``decode.decode_static``'s shape, world ``neighbours``; the
    record's ``cex_decoder``)."""
    from kvreach.params import GroupConfig
    from kvreach.spec.config import to_concrete

    v = lambda x: m.eval(x, model_completion=True).as_long()  # noqa: E731
    b = lambda x: z3.is_true(m.eval(x, model_completion=True))  # noqa: E731
    t, lk = terms(ctx), ctx.lk
    g, r = to_concrete(m, ctx.s)
    g = GroupConfig(**(g.__dict__ | {"window": v(lk.W), "extra_retained_tokens": v(lk.extra)}))
    reqs = []
    for s_i, off, D, N in zip(t["s"], t["off"], t["D"], t["tokens"]):
        reqs.append({"prompt_tokens": v(s_i.P), "tokens": v(N), "offloadable_tokens": v(off),
                     "final_horizon_chunks": v(off) // v(ctx.s.C), "later_shared_tokens": v(D)})
    out = {
        "world": WORLD, "rule": ctx.rule,
        "config": {"group": g.__dict__, "request": r.__dict__},
        "requests": reqs, "shared_between": [[i, j, v(d)] for (i, j), d in t["d"].items()],
        "lookup_groups": {"full_block_tokens": v(lk.full_block_tokens) if b(lk.has_full) else None,
                          "window": v(lk.W), "extra_retained_tokens": v(lk.extra)},
        "later_request": {"num_tokens": v(lk.num_tokens), "local_hit_tokens": v(lk.local_hit_tokens),
                          "max_load_tokens": v(lk.max_load_tokens) if b(lk.has_max_load) else None},
        "chunk": v(ctx.c), "spec_dense_hit_tokens": v(t["dense"].hit_tokens),
    }
    if lk.release.names != DEFAULT_RELEASE.names:  # the twin looks up under the same release
        out["lookup_groups"]["vllm"] = lk.release.name
    got, dense, swa = neighbours_lookup(out)  # recorded here; replay() is the check
    out |= {"twin_hit_tokens": got.hit_tokens, "twin_dense_hit_tokens": dense.hit_tokens,
            "lost_chunks": lost_chunks(out, dense, swa) if (dense.hit_tokens or 0) > (got.hit_tokens or 0) else []}
    return out


def replay(cex: dict) -> list[int]:
    """Confirmed: the twin's dense hit is the spec's, the decoded chunk is
    missing from the union of the rule's stores, and the twin's hit against
    that union is shorter. -> the chunks of the dense hit's last run the
    union lacks (the witness; ``[]`` if the twin does not confirm)."""
    got, dense, swa = neighbours_lookup(cex)
    if dense.hit_tokens != cex["spec_dense_hit_tokens"] or cex["chunk"] in swa:
        return []
    if (dense.hit_tokens or 0) <= (got.hit_tokens or 0):
        return []
    return lost_chunks(cex, dense, swa)


def lost_chunks(cex: dict, dense, swa) -> list[int]:
    """The witness of a confirmed loss: the chunks of the dense hit's last
    run (the ``load_window_chunks`` below its end, the EAGLE chunk above it)
    that the rule's union lacks; else every unstored chunk the later request
    scans below the dense end (a run broken elsewhere)."""
    from kvreach.params import GroupConfig

    g = lookup_groups_of(cex["lookup_groups"], GroupConfig(**cex["config"]["group"]))[-1]
    C, lr = g.chunk_tokens, cex["later_request"]
    end = lr["local_hit_tokens"] + dense.hit_tokens
    e = -(-end // C) + int(g.eagle)
    lo = lr["local_hit_tokens"] // C
    run = range(max(lo, e - g.load_window_chunks(end) - int(g.eagle)), e)
    return [c for c in run if c not in swa] or [c for c in range(lo, e) if c not in swa]


# --- the world's geometries ------------------------------------------------


def neighbour_geometries():
    """The grid's geometries without a retention interval (the worked ones
    whose counterexamples tests/vllm replays)."""
    from kvreach.proofs.geometries import GEOMETRIES

    return tuple(g for g in GEOMETRIES if g.retention is None)


def grid():
    """The row's grid: the worked geometries without a retention interval,
    then the block-shape family without one (``geometries.family``)."""
    from kvreach.proofs.geometries import family

    return neighbour_geometries() + family(retention="none")
