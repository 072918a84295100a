"""The release matrix (``kvreach.proofs.matrix``): a row stands for a group
of vLLM releases only if every release of the group gives the row the same
queries, so a group never hides a release whose verdict could differ; and
the rows and their expected verdicts cover every release."""

from __future__ import annotations

import pytest
import z3

from kvreach.params import RULES
from kvreach.proofs import matrix, rows as proof_rows
from kvreach.proofs.induction import bmc_query, invariant_base_query, lemma_queries, lifecycle_step_query
from kvreach.proofs.obligations import ALL, OBLIGATIONS
from kvreach.releases import DEFAULT, RELEASES, release


def _texts(name: str, rule: str, model: str, rel) -> list[str]:
    """The text of every query the row builds (its proof's, per geometry;
    a lifecycle row's step, lemmas, base case and first BMC depth)."""
    ob = OBLIGATIONS[name]
    out = []
    for g in (ob.grid or (None,)):
        ctx = proof_rows.ctx_for(rule, model, lookup_variant=ob.lookup_variant, release=rel)
        if g is not None:
            ctx.pins = g.pins(ctx)
        if ob.kind == "static":
            qs = ob.queries(ctx)
        else:
            qs = [lifecycle_step_query(ob, ctx), *lemma_queries(ob, ctx)]
            if ob.world != "single":
                qs.append(invariant_base_query(ctx, ob))
            if ob.role.value != "invariant":
                qs.append(bmc_query(ob, ctx, (ob.bmc_depths or (1,))[0])[0])
        out += [z3.And(q.premise + [q.violation]).sexpr() for q in qs]
    return out


_MULTI = [(name, r, m, g) for name, r, m, g in proof_rows.rows_for(None, None, None) if "/" in g]


@pytest.mark.parametrize("key", _MULTI, ids=["/".join(k[:3]) + "@" + k[3] for k in _MULTI])
def test_every_release_of_a_group_gives_the_same_queries(key):
    name, rule, model, group = key
    versions = matrix.versions(group)
    records = list(dict.fromkeys(release(v) for v in versions))
    base = _texts(name, rule, model, matrix.representative(group))
    for rel in records:
        assert _texts(name, rule, model, rel) == base, (name, rule, rel.name)


def test_groups_partition_the_releases_of_a_rule():
    for ob in ALL:
        for rule in ((ob.rules or RULES) if ob.rule_specific else ("any",)):
            groups = matrix.groups(ob.reads_for(rule), rule, ob.lookup_variant)
            names = [v for g in groups for v in matrix.versions(matrix.group_name(g))]
            assert len(names) == len(set(names)), (ob.name, rule)
            own = rule not in matrix.RELEASE_RULES and rule != "any" or ob.lookup_variant != "vllm-window"
            if own:  # kvreach's own rule / variant: the group about 0.33.0 only
                assert len(groups) == 1 and DEFAULT in groups[0], (ob.name, rule)
            else:
                want = [v for r in RELEASES if rule == "any" or r.store_rule == rule for v in r.names]
                assert sorted(names) == sorted(want), (ob.name, rule)


def test_every_row_has_an_expected_verdict():
    table = proof_rows.expected_table()
    missing = [k for k in proof_rows.rows_for(None, None, None) if k not in table]
    assert not missing, missing


def test_a_version_selects_the_rows_about_it():
    for v in ("0.29.0", "0.30.0", "0.32.0", "0.33.0"):
        rows = list(proof_rows.rows_for(None, None, None, v))
        assert rows and all(matrix.covers(g, v) for *_, g in rows)
    # 0.29.0's store rule is vllm-0.29: no vllm-0.33 row is about it
    assert not [k for k in proof_rows.rows_for(None, "vllm-0.33", None, "0.29.0")
                if OBLIGATIONS[k[0]].rule_specific]
