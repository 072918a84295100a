"""The lifecycle diagram in docs/lifecycle.md is the one generated from
``spec.lifecycle.TRANSITIONS`` (``kvreach.diagram``), and the generator
really follows the table: one labelled edge per entry, every ``K_*`` kind
present, and a changed table gives a different diagram (so this test can
fail)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import z3
from typer.testing import CliRunner

from kvreach import diagram as dg
from kvreach.cli import app
from kvreach.spec import lifecycle as lc

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / dg.DOC

_LABELLED = re.compile(r"^    (\S+) --> (\S+) : (\S+) \[")


def _labelled_edges(text: str) -> list[tuple[str, str, str]]:
    """(source, target, transition name) of every edge labelled by a table entry."""
    return [m.groups() for line in text.splitlines() if (m := _LABELLED.match(line))
            and m.group(3) != "init"]


def test_committed_diagram_is_the_generated_one():
    doc = DOC.read_text(encoding="utf-8")
    committed = dg.extract(doc)
    assert committed is not None, f"no {dg.BEGIN} ... {dg.END} block in {DOC}"
    assert committed == dg.block(), (
        "docs/lifecycle.md is stale: regenerate with `kvreach diagram`"
    )


def test_one_labelled_edge_per_transition_and_every_kind():
    text = dg.render()
    assert text.startswith("stateDiagram-v2\n")
    names = [name for _, _, name in _labelled_edges(text)]
    assert names == [t.name for t in lc.TRANSITIONS]
    kinds = set(range(len(lc.TRANSITIONS)))  # the single-incarnation kinds and vLLM's further ones
    assert {t.kind for t in lc.TRANSITIONS} == kinds
    for k in kinds:
        assert lc.KINDS[k] in names
    for t in lc.TRANSITIONS:  # the vLLM function each entry models is on its edge
        assert any(line.startswith(f"{t.name} [") and t.vllm_function in line
                   for line in (ln.split(" : ", 1)[-1] for ln in text.splitlines()))


def test_edges_follow_the_guards():
    """Sources and targets are where Z3 finds the guards satisfiable: prefill
    only before the prompt is computed (and may complete it), decode and
    finish only after, abort from both."""
    e = {x.name: x for x in dg.edges()}
    assert e["prefill"].sources == ("Prefilling",)
    assert e["prefill"].targets == ("Prefilling", "Decoding")
    assert (e["decode"].sources, e["decode"].targets) == (("Decoding",), ("Decoding",))
    assert e["finish"].sources == ("Decoding",)
    assert e["finish"].targets == ("FINISHED_STOPPED",)
    assert e["abort"].sources == ("Prefilling", "Decoding")
    assert e["abort"].targets == ("FINISHED_ABORTED",)


def test_render_is_deterministic():
    assert dg.block() == dg.block()


def test_show_prints_the_guard_terms():
    y = dg.Symbols.make()
    prefill = lc.TRANSITIONS[lc.K_PREFILL]
    assert dg.show(prefill.guard(y.s, y.pre, y.sched, y.budget)) == (
        "1 ≤ sched ≤ budget ∧ f + sched ≤ P"
    )
    assert dg.show(z3.If(y.pre.f >= y.s.P, y.pre.f, y.s.P)) == "max(f, P)"


def _mutated(**changes) -> tuple:
    """The table with the decode entry changed."""
    return tuple(dataclasses.replace(t, **changes) if t.kind == lc.K_DECODE else t
                 for t in lc.TRANSITIONS)


def test_a_changed_table_changes_the_diagram():
    base = dg.block()
    # a guard that forgets the prompt: decode becomes possible while prefilling
    loose = _mutated(guard=lambda s, pre, sched, budget: z3.BoolVal(True))
    assert dg.block(loose) != base
    assert next(x for x in dg.edges(loose) if x.name == "decode").sources == (
        "Prefilling", "Decoding")
    # two tokens per decode step; another vLLM function
    assert dg.block(_mutated(sched=2)) != base
    assert dg.block(_mutated(vllm_function="Scheduler.other")) != base
    # a guard no phase satisfies: the entry loses its edge
    dead = _mutated(guard=lambda s, pre, sched, budget: pre.f < 0)
    assert len(_labelled_edges(dg.render(dead))) == len(lc.TRANSITIONS) - 1
    # an entry dropped: one labelled edge fewer, and the check fails
    fewer = tuple(t for t in lc.TRANSITIONS if t.kind != lc.K_DECODE)
    assert len(_labelled_edges(dg.render(fewer))) == len(lc.TRANSITIONS) - 1
    assert dg.block(fewer) != base


def test_cli_check_fails_on_a_stale_block(tmp_path):
    runner = CliRunner()
    doc = tmp_path / "lifecycle.md"
    doc.write_text(f"# x\n\n{dg.BEGIN}\nstale\n{dg.END}\n", encoding="utf-8")
    r = runner.invoke(app, ["diagram", "--check", "--doc", str(doc)])
    assert r.exit_code == 1, r.output
    assert "stale" in doc.read_text(encoding="utf-8")  # --check writes nothing
    r = runner.invoke(app, ["diagram", "--doc", str(doc)])
    assert r.exit_code == 0, r.output
    assert dg.extract(doc.read_text(encoding="utf-8")) == dg.block()
    assert doc.read_text(encoding="utf-8").startswith("# x\n")
    r = runner.invoke(app, ["diagram", "--check", "--doc", str(doc)])
    assert r.exit_code == 0, r.output
