"""The trace validator (``python -m kvreach.vllm_harness.trace validate
FILE``) on a trace recorded from vLLM 0.33.0's scheduler
(``tests/traces/seed3-4requests.jsonl``: ``python -m
kvreach.vllm_harness.trace_record --seeds 3 --requests 4``): the recorded
trace is accepted, and the same trace with one step changed is rejected at
that step. Needs no vLLM (the validator reads the file and the Z3 spec); the
recording itself is validated in tests/vllm/test_trace_validation.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreach.vllm_harness import trace

RECORDED = Path(__file__).resolve().parent / "traces" / "seed3-4requests.jsonl"


def lines() -> list[dict]:
    return [json.loads(x) for x in RECORDED.read_text(encoding="utf-8").splitlines()]


def test_the_recorded_trace_is_a_run_of_the_spec(capsys):
    assert trace.main(["validate", str(RECORDED)]) == 0
    out = capsys.readouterr().out
    totals = trace.validate(RECORDED)
    assert not totals.failures and totals.steps == len(lines()) and totals.checks > 0
    assert f"steps {totals.steps}" in out and "failures 0" in out


def _first_store_step(ls: list[dict]) -> int:
    return next(i for i, d in enumerate(ls) if d["kind"] in ("prefill", "decode")
                and len(d["offered"]) >= 1 and d["offered"] == d["accepted"])


def _drop_a_chunk(d: dict) -> None:
    """vLLM would have offered (and stored) one chunk fewer than the spec's rule."""
    d["offered"] = d["offered"][:-1]
    d["accepted"] = d["accepted"][:-1]


def _cursor_jumps(d: dict) -> None:
    """The step's cursor ends one chunk later than the next step starts from."""
    d["post"] = [d["post"][0], d["post"][1] + 1]


@pytest.mark.parametrize("corrupt", [_drop_a_chunk, _cursor_jumps],
                         ids=["offered-chunk-dropped", "cursor-jumps"])
def test_a_corrupted_trace_is_rejected_at_the_changed_step(tmp_path, capsys, corrupt):
    ls = lines()
    at = _first_store_step(ls)
    corrupt(ls[at])
    bad = tmp_path / "bad.jsonl"
    trace.write(bad, ls)
    assert trace.main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    first = out.split("first step that is not a transition of the spec:\n", 1)[1]
    head = first.splitlines()[0]
    d = ls[at]
    where = f"seed {d['seed']}, request {d['request']}, group {d['group']} "
    assert head.startswith(where) and f": step {d['index']}: " in head, head
    if corrupt is _drop_a_chunk:  # the spec offers the dropped chunk
        dropped = lines()[at]["offered"][-1]
        assert f"(B) chunk {dropped}: spec offers True" in head, head
    else:
        assert "(A) not a transition of the spec" in head, head
    if corrupt is _cursor_jumps:  # and the step after it no longer chains
        failures = trace.validate(bad).failures
        assert any(f.startswith(where) and f": step {d['index'] + 1}: does not chain" in f
                   for f in failures), failures


def test_a_malformed_trace_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    ls = lines()[:3]
    del ls[1]["kind"]
    trace.write(bad, ls)
    assert trace.main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trace validate: malformed trace line") and len(err.splitlines()) == 1
    assert trace.main(["validate", str(tmp_path / "missing.jsonl")]) == 2
