"""no-waste over the block-shape family, member by member.

``no-waste-family`` and ``no-waste-read-window-family`` decide no-waste's
query at each of the family's 20 members (``Obligation.confirm_each`` on a
static obligation, ``runner._static_confirm_each``). The query checks six
witness later requests; a model it finds is a counterexample only once the
executable replay (``proofs.decode.unloaded_kept_chunk``: every later
request sharing a prefix) confirms it, and a model the replay refutes is
excluded and the query solved again (``search.confirmed_static_cex``), at
most ``CONFIRM_RETRIES`` times; a member without a confirmed one makes the
row unknown. tests/vllm/test_no_waste_family_vllm.py replays each member's
counterexample on vLLM's scheduler.
"""

from __future__ import annotations

import dataclasses

import z3

from kvreach.proofs import rows, runner, search
from kvreach.proofs.config import CONFIRM_RETRIES, LEAF_RL
from kvreach.proofs.decode import unloaded_kept_chunk
from kvreach.proofs.geometries import family
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.solve import Meter, check_terms

FAMILY = "no-waste-family"
RELEASE = "0.31.0/0.32.0/0.33.0"


def _member(swa_block, full_block="same"):
    full = swa_block if full_block == "same" else full_block
    return next(g for g in family() if g.swa_block == swa_block and g.full_block == full
                and g.bpc == 1)


def test_the_family_rows_are_every_member_and_no_wastes_rules():
    for name, base in (("no-waste-family", "no-waste"),
                       ("no-waste-read-window-family", "no-waste-read-window")):
        ob = OBLIGATIONS[name]
        assert ob.grid == family() and len(ob.grid) == 20
        assert ob.rules == OBLIGATIONS[base].rules and ob.confirm_each and ob.deep
        assert ob.lookup_variant == OBLIGATIONS[base].lookup_variant
        assert "the same query over the block-shape family: the deep row " + name \
            in OBLIGATIONS[base].scope


def _query_and_model(ob, member):
    release = rows.release_for(ob.name, "vllm-0.33", RELEASE)
    ctx = rows.ctx_for("vllm-0.33", "any", False, lookup_variant=ob.lookup_variant,
                       release=release)
    ctx.pins = member.pins(ctx)
    (q,) = ob.queries(ctx)
    r, m = check_terms(q.premise + [q.violation], LEAF_RL)
    assert r == z3.sat
    return ctx, q, m


def test_a_model_the_replay_refutes_is_excluded_and_the_query_solved_again(monkeypatch):
    """The first model's replay is made to refute it: the model found next
    differs in its chunk, final horizon or window, and is the one reported."""
    seen = []

    def refute_the_first(cex):
        seen.append((cex["chunk"], cex["final_horizon_chunks"], cex["config"]["group"]["window"]))
        return [] if len(seen) == 1 else unloaded_kept_chunk(cex)

    ob = dataclasses.replace(OBLIGATIONS[FAMILY], witness=refute_the_first)
    member = _member(16)
    ctx, q, m = _query_and_model(ob, member)
    r, cex, excluded = search.confirmed_static_cex(ob, ctx, q, "sat", m, "any", member, Meter(None))
    assert (r, excluded) == ("sat", 1) and cex["replayed_violation"]
    assert len(seen) == 2 and seen[0] != seen[1]


def test_a_member_never_confirmed_makes_the_row_unknown(monkeypatch):
    """The row can fail: with a replay that refutes every model, the member's
    models are excluded CONFIRM_RETRIES times and the row is unknown, not a
    counterexample."""
    ob = dataclasses.replace(OBLIGATIONS[FAMILY], witness=lambda cex: [], grid=(_member(16),))
    monkeypatch.setitem(OBLIGATIONS, FAMILY, ob)
    row = runner.run_row(FAMILY, "vllm-0.33", "any", {}, RELEASE)
    assert row.verdict == "unknown", row
    assert f"did NOT replay; {CONFIRM_RETRIES} model(s) excluded" in row.detail


def test_a_chunk_loaded_only_by_a_run_reaching_past_it_is_no_counterexample():
    """A model the query over four witness later requests had at SWA only,
    SWA block 4 (vLLM 0.34.0, L = 0; lookup window 8, extra_retained_tokens
    5: runs of three chunks; a 28-token prompt, 27 offloadable tokens, final
    horizon 6 chunks, chunk 3 kept with 4 and 5): no request ending at the
    chunk's own boundary loads it, but the one of 25 tokens does (its run is
    chunks 3 .. 5). The executable replay says so, and the query, asking
    also the farthest alignment boundary whose window holds the chunk, has no
    such model now."""
    from kvreach.proofs.decode import OFFLOADABLE_TOKENS

    cex = {"config": {"group": {
        "block_size": 4, "window": 13, "alignment_tokens": 4, "blocks_per_chunk": 1,
        "dcp_world_size": 1, "eagle": False, "retention_interval": 0,
        "extra_retained_tokens": 0, "lookahead_hashes": False}, "request": {
        "prompt_tokens": 28, "max_offload_tokens": 0, "offload_prompt_only": False,
        "hash_lookahead_tokens": 0, "tokens_per_hash": 4}},
        "chunk": 3, "final_horizon_chunks": 6, "offloadable_tokens": 27,
        "lookup_groups": {"full_block_tokens": None, "window": 8, "extra_retained_tokens": 5},
        "rule": "vllm-0.33"}
    assert unloaded_kept_chunk(cex) == []  # loaded by some later request
    ob = OBLIGATIONS[FAMILY]
    release = rows.release_for(FAMILY, "vllm-0.33", "0.34.0")
    ctx = rows.ctx_for("vllm-0.33", "any", False, lookup_variant=ob.lookup_variant,
                       release=release)
    ctx.pins = _member(4, None).pins(ctx)
    (q,) = ob.queries(ctx)
    pins = [ctx.c == 3, ctx.final_horizon_chunks == 6, z3.Int(OFFLOADABLE_TOKENS) == 27,
            ctx.lk.W == 8, ctx.lk.extra == 5, ctx.s.P == 28, z3.Not(ctx.s.eagle)]
    assert check_terms(q.premise + pins + [q.violation], LEAF_RL)[0] == z3.unsat
    # the premise with the pins is satisfiable: they describe a real request
    assert check_terms(q.premise + pins, LEAF_RL)[0] == z3.sat
