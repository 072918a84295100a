"""proofs/scenarios.py is the one statement of the worked example and of the
findings' scenarios: docs/findings.md shows each as the command that runs it,
the proof runner pins counterexamples to the example, and each finding's
record shows what it says through the executable rule and the spec
evaluator (on vLLM: tests/vllm/test_findings_vllm.py)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kvreach.cli._options import scenario_flags
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


REPLAYED = [f for f in scenarios.FINDINGS if f.command is not None]


@pytest.mark.parametrize("f", REPLAYED, ids=lambda f: f.finding)
def test_findings_md_runs_the_scenario(f):
    want = ["kvreach", f.command] + shlex.split(scenario_flags(f.scenario, [f.rule]))
    assert any(_pairs(cmd) == _pairs(want) for cmd in _commands(f.finding)), (
        want, _commands(f.finding))


def finding_headings(text: str) -> list[str]:
    """The findings docs/findings.md states: its ``## F<n>. ...`` sections."""
    return re.findall(r"^## (F\d+)\. ", text, re.M)


def test_every_finding_of_the_docs_is_a_record_and_every_record_a_finding():
    docs = finding_headings(FINDINGS_MD.read_text(encoding="utf-8"))
    records = [f.finding for f in scenarios.FINDINGS]
    assert len(set(records)) == len(records), records
    assert docs == records, (f"sections without a record: {sorted(set(docs) - set(records))}; "
                             f"records without a section: {sorted(set(records) - set(docs))}")


def test_the_heading_check_sees_a_finding_without_a_record():
    """The check above can fail: a section added to the docs without a record."""
    text = FINDINGS_MD.read_text(encoding="utf-8") + "\n## F99. A new finding\n"
    assert finding_headings(text)[-1] == "F99"
    assert finding_headings(text) != [f.finding for f in scenarios.FINDINGS]


@pytest.mark.parametrize("f", [f for f in scenarios.FINDINGS if f.release_replays],
                         ids=lambda f: f.finding)
def test_findings_md_runs_the_release_replays(f):
    """A finding reproduced on releases' own code shows each replay's command
    (and the counterexample command its ``--cex FILE`` is)."""
    m = re.search(rf"^## {f.finding}\. .*?(?=^## |\Z)", FINDINGS_MD.read_text(encoding="utf-8"),
                  re.M | re.S)
    section = " ".join(m.group(0).split())
    for r in f.release_replays:
        assert f.no_scenario and r.outcomes, f
        assert r.command() in section, (f.finding, r.command())
        if r.cex:
            obligation, rule, vllm = r.cex
            flags = [f"kvreach counterexample {obligation} --rule", f"--rule {rule}"]
            flags += [f"--vllm {vllm}"] if vllm else []
            assert all(x in section for x in flags), (f.finding, flags)


def test_a_finding_replays_only_counterexamples_its_obligation_record_replays_on_releases():
    """A release replay of a counterexample (``--cex``) names its obligation
    as CASE; the obligation's record is what makes it a CASE of
    ``release_replay`` (``Replay.on_releases``)."""
    from kvreach.proofs.obligations import OBLIGATIONS

    replayed = [(f.finding, r.case, r.cex[0]) for f in scenarios.FINDINGS
                for r in f.release_replays if r.cex]
    assert replayed
    for finding, case, obligation in replayed:
        rec = OBLIGATIONS[obligation].vllm_replay
        assert case == obligation and rec is not None and rec.on_releases, (finding, case)


def test_pr_example_is_the_prs_numbers():
    ex = scenarios.PR_54362
    assert (ex.full_block_size, ex.swa_block_size, ex.window, ex.prompt, ex.budget) == (
        36, 4, 16, 1200, 1000)
    assert ex.alignment_tokens == 36


# --- each finding shows what its record says -------------------------------------


def expected(f: scenarios.Finding) -> dict:
    """The outcome a finding's record states (the fields its command shows)."""
    if f.command == "simulate":
        return {"stored_not_loadable": set(f.stored_not_loadable)}
    return {"hit_tokens": f.hit_tokens, "dense_hit_tokens": f.dense_hit_tokens,
            "swa_loaded": tuple(f.swa_loaded), "missing": tuple(f.missing)}


def impl_outcome(f: scenarios.Finding) -> dict:
    """The scenario through the executable rule (``kvreach simulate`` /
    ``kvreach lookup``'s computation)."""
    from kvreach.impl.worlds import later_lookup
    from kvreach.scenario import lookup_groups, run_scenario

    trace = run_scenario(f.rule, f.scenario)
    if f.command == "simulate":
        return {"stored_not_loadable": set(trace.stored) - set(trace.wanted(f.scenario.load_model))}
    r = later_lookup(lookup_groups(f.scenario), trace, f.scenario.prompt)
    return {"hit_tokens": r.rule.hit_tokens, "dense_hit_tokens": r.dense.hit_tokens,
            "swa_loaded": tuple(r.rule.loaded[-1]), "missing": tuple(r.missing[-1])}


def spec_outcome(f: scenarios.Finding) -> dict:
    """The same scenario through the spec, pinned (``spec.evaluate``): each
    step's submitted chunks are the spec rule's, the stored chunks' load
    decision the spec's ``load.wanted`` at the final horizon; a lookup's hits
    ``spec.lookup.lookup``'s against the stored and the dense chunks."""
    from kvreach.impl.worlds import dense_chunks, stored_chunks
    from kvreach.scenario import lookup_groups, run_scenario
    from kvreach.spec.evaluate import Evaluator, lookup_values

    trace = run_scenario(f.rule, f.scenario)
    if f.command == "simulate":
        ev = Evaluator(trace.group, trace.request)
        g = trace.group
        tails = g.segment_tokens is not None and g.representable  # segment tails of whole blocks
        margin = ((g.per_segment if tails else 0) + g.need) // g.blocks_per_chunk + 2  # a final tail, in chunks
        for st in trace.to_json(f.scenario.load_model)["steps"]:
            ends, n = st["kind"] in ("finish", "abort"), st["num_chunks"]
            # every chunk the step could submit: from a segment and a window
            # below the cursor (an abort's reconsidered tail) to the step's end
            cands = range(max(0, min(st["cursor_before"], n) - margin), n)
            # the step's num_tokens: its hashed prompt horizon under lookahead hashes
            spec = [c for c in cands
                    if ev.submitted(f.rule, st["cursor_before"], n, ends, c, st["num_tokens"])]
            assert spec == list(st["submitted"]), (f.finding, st["index"])
        H = trace.final_horizon_chunks
        return {"stored_not_loadable": {c for c in trace.stored
                                        if not ev.wanted(f.scenario.load_model, c, H)}}
    groups, s = lookup_groups(f.scenario), f.scenario
    hits = {}
    for which, chunks in (("rule", stored_chunks(groups, trace)),
                          ("dense", dense_chunks(groups, trace))):
        # the later request's HIT keys: stored chunks inside the shared prefix (the prompt)
        full, swa = ([c for c in cs if (c + 1) * g.chunk_tokens <= s.prompt]
                     for g, cs in zip(groups, chunks))
        hits[which] = lookup_values(
            full_block_tokens=s.full_block_size, swa_block_tokens=s.swa_block_size,
            blocks_per_chunk=s.blocks_per_chunk, window=s.window,
            extra_retained_tokens=s.extra_retained_tokens, eagle=s.eagle, num_tokens=s.prompt,
            local_hit_tokens=0, max_load_tokens=None, full_chunks=full, swa_chunks=swa)
    lo, hi = hits["rule"]["swa_loaded"]
    dlo, dhi = hits["dense"]["swa_loaded"]
    held = set(stored_chunks(groups, trace)[-1])
    return {"hit_tokens": hits["rule"]["hit_tokens"], "dense_hit_tokens": hits["dense"]["hit_tokens"],
            "swa_loaded": tuple(range(lo, hi)),
            "missing": tuple(c for c in range(dlo, dhi) if c not in held)}


@pytest.mark.parametrize("f", scenarios.FINDINGS, ids=lambda f: f.finding)
def test_finding_shows_its_outcome(f):
    """Every finding's record through the executable rule and the spec
    evaluator; a finding without a scenario says why and states no outcome."""
    if f.command is None:
        assert f.no_scenario and f.scenario is None and f.stored_not_loadable is None, f
        return
    assert f.no_scenario is None, f
    assert impl_outcome(f) == expected(f), f.finding
    assert spec_outcome(f) == expected(f), f.finding
