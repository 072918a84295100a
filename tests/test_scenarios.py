"""proofs/scenarios.py is the one statement of the worked example and of the
findings' scenarios: docs/findings.md shows each as the command that runs it,
and the proof runner pins counterexamples to the example."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kvreach.cli._options import _scenario_flags
from kvreach.proofs import scenarios

FINDINGS_MD = Path(__file__).resolve().parents[1] / "docs" / "findings.md"


def _commands(section: str) -> list[list[str]]:
    """The ``kvreach simulate`` / ``kvreach lookup`` commands of a finding's section."""
    text = FINDINGS_MD.read_text(encoding="utf-8").replace("\\\n", " ")
    m = re.search(rf"^## {section}\. .*?(?=^## |\Z)", text, re.M | re.S)
    assert m, section
    return [shlex.split(line) for line in m.group(0).splitlines()
            if line.startswith(("kvreach simulate", "kvreach lookup"))]


def _pairs(argv: list[str]) -> set[tuple[str, ...]]:
    out, i = set(), 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out.add((argv[i], argv[i + 1]))
            i += 2
        else:
            out.add((argv[i],))
            i += 1
    return out


@pytest.mark.parametrize("f", scenarios.FINDINGS, ids=lambda f: f.finding)
def test_findings_md_runs_the_scenario(f):
    want = ["kvreach", f.command] + shlex.split(_scenario_flags(f.scenario, [f.rule]))
    assert any(_pairs(cmd) == _pairs(want) for cmd in _commands(f.finding)), (
        want, _commands(f.finding))


def test_pr_example_is_the_prs_numbers():
    ex = scenarios.PR_54362
    assert (ex.full_block_size, ex.swa_block_size, ex.window, ex.prompt, ex.budget) == (
        36, 4, 16, 1200, 1000)
    assert ex.alignment_tokens == 36
