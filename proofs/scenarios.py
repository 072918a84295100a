"""The worked examples and the findings' concrete scenarios, as data.

PR #54362's example (full-attention block 36, SWA block 4, window 16, a
1200-token prompt, a 1000-token budget) and each finding of docs/findings.md
that has a concrete scenario, stated once as ``kvreach.scenario.Scenario``
values (what ``kvreach simulate`` / ``kvreach lookup`` take): the proof
runner pins counterexamples to the example (``decode.pr_example_pins``), the
lookup geometries decode at their prompts (``proofs/geometries.py``), and
tests, bench and docs use the same numbers (``tests/test_scenarios.py``
checks the commands docs/findings.md shows). Apart from the core spec, the
way etcd-io/raft keeps its model-checking configuration and regression
scenarios apart from the protocol's spec.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvreach.scenario import Scenario

# PR #54362's worked example.
PR_54362 = Scenario(swa_block_size=4, window=16, prompt=1200, budget=1000, full_block_size=36)

# Issue 9's measurement: window 17, a prompt of 33 alignments (F6).
ISSUE_9 = replace(PR_54362, window=17, prompt=1188)


@dataclass(frozen=True)
class Finding:
    """A finding's scenario: the command (``simulate`` or ``lookup``) and
    rule docs/findings.md runs it with."""

    finding: str  # its section of docs/findings.md (F1, F2, ...)
    command: str  # "simulate" | "lookup"
    rule: str
    scenario: Scenario


FINDINGS: tuple[Finding, ...] = (
    Finding("F1", "simulate", "vllm-0.29", PR_54362),
    Finding("F2", "simulate", "vllm-0.33",
            replace(PR_54362, decode=40, offload_prompt_only=False)),
    Finding("F3", "simulate", "vllm-0.33",
            replace(PR_54362, eagle=True, retention_interval=0, prompt=30)),
    Finding("F4", "lookup", "vllm-0.33", replace(PR_54362, abort_after_step=1)),
    Finding("F6", "lookup", "vllm-0.33", ISSUE_9),
)
