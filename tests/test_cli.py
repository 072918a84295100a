"""The command line: simulate on PR #54362's worked example, JSON shapes,
one-line input errors (exit 2, no traceback), prove with --json/--junit, and
a decoded counterexample."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from kvreach.cli import app, ranges
from kvreach.proofs.scenarios import (
    PR_54362 as EX, PR_54362_FRONTIER_CHUNKS as FRONTIER, PR_54362_PROMPT_CHUNKS as PROMPT_CHUNKS,
    PR_54362_WASTED as WASTED, example_flags,
)

runner = CliRunner()

PR = example_flags(EX)
WASTED_TEXT = f"{WASTED[0]}-{WASTED[-1]}"  # as the output prints the range


def invoke(*args: str):
    return runner.invoke(app, list(args))


def sim_json(*args: str) -> dict:
    r = invoke("simulate", *args, "--json")
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout)


def tails(k_max: int) -> set[int]:
    return {9 * k + j for k in range(k_max + 1) for j in range(5, 9)}


COMPLETED = tails(31) | set(range(293, 300))
ABORTED_1 = tails(26) | set(range(246, 250))


# --- simulate --------------------------------------------------------------


def test_ranges():
    assert ranges([]) == "-"
    assert ranges([8, 5, 6, 7, 14, 15, 16, 17, 20]) == "5-8,14-17,20"


def test_simulate_completed_033():
    doc = sim_json("--rule", "vllm-0.33", *PR)
    swa = doc["groups"]["swa"]
    assert len(swa["stored"]) == 135
    assert set(swa["stored"]) == COMPLETED
    assert swa["stored_not_loadable"] == [] and swa["needed_not_stored"] == []
    assert doc["config"]["derived"]["alignment_tokens"] == 36
    assert doc["config"]["derived"]["need"] == 4
    assert doc["config"]["derived"]["per_segment"] == 9


@pytest.mark.parametrize("mode", [[], ["--async"]], ids=["sync", "async"])
def test_simulate_aborted_after_step1(mode):
    doc = sim_json("--rule", "vllm-0.33", *PR, "--abort-after-step", "1", *mode)
    swa = doc["groups"]["swa"]
    assert len(swa["stored"]) == 112
    assert set(swa["stored"]) == ABORTED_1
    assert [s["kind"] for s in swa["steps"]] == ["prefill", "abort"]
    assert swa["steps"][-1]["in_flight"] is bool(mode)
    assert swa["stored_not_loadable"] == []


def test_simulate_029_stores_unloadable_246_247():  # PR_54362_WASTED
    doc = sim_json("--rule", "vllm-0.29", *PR, "--load-model", "intended")
    swa = doc["groups"]["swa"]
    step1 = swa["steps"][0]
    assert step1["step"] == 1 and step1["kind"] == "prefill"
    assert set(WASTED) <= set(step1["submitted"])
    assert step1["not_loadable"] == list(WASTED)
    assert WASTED[0] not in swa["loadable"] and WASTED[1] not in swa["loadable"]
    assert swa["stored_not_loadable"] == list(WASTED)


def test_simulate_json_structure():
    doc = sim_json("--rule", "vllm-0.33", *PR)
    assert set(doc) >= {"config", "groups", "trace"}
    swa = doc["groups"]["swa"]
    assert set(swa) >= {"steps", "stored", "loadable", "needed", "stored_not_loadable",
                        "needed_not_stored", "final_chunks", "computed_tokens"}
    assert [s["step"] for s in swa["steps"]] == [1, 2, 3]
    assert [s["kind"] for s in swa["steps"]] == ["prefill", "prefill", "finish"]
    for s in swa["steps"]:
        assert {"submitted", "cursor_before", "cursor_after", "num_chunks",
                "num_computed_tokens", "scheduled_tokens"} <= set(s)
    # per-step submissions add up to the stored set; the cursor only moves forward
    assert sorted(c for s in swa["steps"] for c in s["submitted"]) == swa["stored"]
    assert all(s["cursor_after"] >= s["cursor_before"] for s in swa["steps"])
    assert doc["trace"]["rule"] == "vllm-0.33"
    assert doc["trace"]["load_model"] == "intended"
    assert swa["final_chunks"] == PROMPT_CHUNKS


def test_simulate_swa_only_alignment_and_dcp():
    # no full-attention group: alignment = SWA chunk tokens (block * dcp * bpc)
    doc = sim_json("--rule", "vllm-0.33", "--swa-block-size", "4", "--window", "16",
                   "--prompt", "100", "--budget", "64", "--dcp", "2", "--blocks-per-chunk", "2")
    assert doc["config"]["derived"]["alignment_tokens"] == 16
    # with one: full block * dcp * bpc
    doc = sim_json("--rule", "vllm-0.33", "--full-block-size", "36", "--swa-block-size", "4",
                   "--window", "16", "--prompt", "100", "--budget", "64", "--dcp", "2")
    assert doc["config"]["derived"]["alignment_tokens"] == 72
    assert doc["config"]["derived"]["block_tokens"] == 8


def test_simulate_human_output():
    r = invoke("simulate", "--rule", "vllm-0.29", *PR)
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "stored (137)" in out
    assert f"not loadable: {WASTED_TEXT}" in out
    assert f"stored-not-loadable under intended (2): {WASTED_TEXT}" in out
    assert f"0->{FRONTIER}" in out and f"{FRONTIER}->{PROMPT_CHUNKS}" in out
    r = invoke("simulate", "--rule", "vllm-0.33", *PR, "--abort-after-step", "1", "--async")
    assert r.exit_code == 0, r.stderr
    assert "stored (112)" in r.stdout and "239-242,246-249" in r.stdout
    assert f"step 2 abort submitted: {WASTED_TEXT}" in r.stdout


def test_simulate_decode_and_options():
    doc = sim_json("--rule", "vllm-0.33", *PR, "--decode", "3", "--no-offload-prompt-only",
                   "--max-offload-tokens", "1100")
    kinds = [s["kind"] for s in doc["groups"]["swa"]["steps"]]
    assert kinds == ["prefill", "prefill", "decode", "decode", "decode", "finish"]
    assert max(doc["groups"]["swa"]["stored"]) < 1100 // 4
    assert doc["config"]["offload_prompt_only"] is False


# --- input errors -----------------------------------------------------------

SIM = ["simulate", "--rule", "vllm-0.33"]
BASE = dict(zip(PR[::2], PR[1::2]))


def sim_args(**over: str) -> list[str]:
    opts = BASE | {k.replace("_", "-"): v for k, v in over.items()}
    return SIM[:1] + [x for kv in opts.items() for x in kv] + SIM[1:]


ERROR_CASES = [
    (sim_args(**{"--window": "0"}), "--window=0", "integer >= 1"),
    (sim_args(**{"--swa-block-size": "0"}), "--swa-block-size=0", "integer >= 1"),
    (sim_args(**{"--full-block-size": "0"}), "--full-block-size=0", "integer >= 1"),
    (sim_args(**{"--budget": "0"}), "--budget=0", "integer >= 1"),
    (sim_args(**{"--prompt": "-5"}), "--prompt=-5", "integer >= 1"),
    (sim_args(**{"--prompt": "0"}), "--prompt=0", "integer >= 1"),
    (sim_args(**{"--decode": "-1"}), "--decode=-1", "integer >= 0"),
    (sim_args(**{"--max-offload-tokens": "-1"}), "--max-offload-tokens=-1", "integer >= 0"),
    (sim_args(**{"--dcp": "0"}), "--dcp=0", "integer >= 1"),
    (sim_args(**{"--blocks-per-chunk": "0"}), "--blocks-per-chunk=0", "integer >= 1"),
    (sim_args(**{"--window": "abc"}), "--window=abc", "integer"),
    (sim_args(**{"--retention-interval": "5"}), "--retention-interval=5", "multiple"),
    (sim_args(**{"--abort-after-step": "9"}), "--abort-after-step=9", "at most"),
    (sim_args(**{"--load-model": "psychic"}), "--load-model=psychic", "aligned, intended"),
    (["simulate", "--rule", "vllm-0.30"] + sim_args()[1:-2],
     "--rule=vllm-0.30", "vllm-0.29, vllm-0.33"),
    (["prove", "--rule", "vllm-9"], "--rule=vllm-9", "vllm-0.29"),
    (["prove", "--load-model", "nope"], "--load-model=nope", "aligned, intended"),
    (["prove", "--obligation", "liveness"], "--obligation=liveness", "soundness"),
    (["counterexample", "liveness", "--rule", "vllm-0.29"], "OBLIGATION=liveness", "soundness"),
    (["counterexample", "soundness", "--rule", "x", "--load-model", "intended"], "--rule=x",
     "vllm-0.29"),
    (["counterexample", "soundness", "--rule", "vllm-0.29", "--load-model", "x"],
     "--load-model=x", "aligned"),
    (["counterexample", "soundness", "--load-model", "intended"], "--rule", "vllm-0.29"),
    (sim_args()[:-2] + ["--bogus"], "--bogus", ""),
    ([a for a in sim_args() if a not in ("--window", "16")], "--window", ""),
]


@pytest.mark.parametrize("args,flag_value,expected", ERROR_CASES,
                         ids=[c[1] for c in ERROR_CASES])
def test_bad_input_one_line_exit_2(args, flag_value, expected):
    r = invoke(*args)
    assert r.exit_code == 2, (args, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    assert flag_value in lines[0]
    assert expected in lines[0]
    assert "Traceback" not in r.output
    assert r.stdout == ""
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_error_message_format():
    r = invoke(*sim_args(**{"--window": "0"}))
    assert r.stderr.strip() == "error: --window=0: expected an integer >= 1"


def test_help_and_bare_invocation():
    assert invoke("--help").exit_code == 0
    r = invoke()
    assert r.exit_code == 0 and "simulate" in r.stdout


# --- prove -----------------------------------------------------------------


def test_prove_single_static_obligation(tmp_path):
    js, ju = tmp_path / "rows.json", tmp_path / "rows.xml"
    r = invoke("prove", "--obligation", "load-window-blocks", "--json", str(js),
               "--junit", str(ju))
    doc = json.loads(js.read_text())
    assert {"date", "kvreach", "git_commit", "z3", "python", "selection", "seconds"} <= set(doc["run"])
    assert doc["run"]["selection"] == {"obligation": "load-window-blocks", "rule": None,
                                       "load_model": None, "vllm": None, "deep": False}
    rows = doc["rows"]
    assert len(rows) == 1
    row = rows[0]
    assert {"obligation", "rule", "load_model", "verdict", "scope", "seconds", "rlimit",
            "expected", "non_vacuous", "mutant", "mutant_rejected"} <= set(row)
    assert (row["obligation"], row["rule"], row["load_model"]) == ("load-window-blocks", "any", "any")
    assert row["verdict"] == "proved"
    assert row["mutant_rejected"] is True and row["non_vacuous"] is True
    ok = row["verdict"] == row["expected"]
    assert r.exit_code == (0 if ok else 1), r.stdout
    assert "load-window-blocks" in r.stdout and "total" in r.stdout
    root = ET.parse(ju).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == 1
    assert cases[0].get("name") == "load-window-blocks[any,any,0.29.0/0.30.0/0.31.0/0.32.0/0.33.0/0.34.0]"
    assert (cases[0].find("failure") is None) == ok
    suite = root.find("testsuite")
    assert suite.get("tests") == "1" and suite.get("failures") == ("0" if ok else "1")


def test_prove_lifecycle_obligation_for_one_rule(tmp_path):
    js, ju = tmp_path / "rows.json", tmp_path / "rows.xml"
    r = invoke("prove", "--obligation", "exactly-once", "--rule", "vllm-0.33",
               "--json", str(js), "--junit", str(ju))
    rows = json.loads(js.read_text())["rows"]
    assert [(x["obligation"], x["rule"], x["load_model"]) for x in rows] == [
        ("exactly-once", "vllm-0.33", "any")]
    assert rows[0]["verdict"] == "proved"
    assert "induction" in rows[0]["scope"]
    all_ok = all(x["verdict"] == x["expected"] for x in rows)
    assert r.exit_code == (0 if all_ok else 1)
    assert len(ET.parse(ju).getroot().findall(".//testcase")) == 1


# --- counterexample --------------------------------------------------------


def test_counterexample_soundness_029_intended():
    r = invoke("counterexample", "soundness", "--rule", "vllm-0.29", "--load-model",
               "intended", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "counterexample"
    cex = doc["counterexample"]
    assert cex["replayed_violation"] == list(WASTED)
    assert cex["chunk"] in WASTED
    assert cex["config"]["group"]["block_size"] == 4
    assert cex["trace"]["steps"][0]["kind"] == "prefill"
    # the human form shows the same scenario
    r = invoke("counterexample", "soundness", "--rule", "vllm-0.29", "--load-model", "intended")
    assert r.exit_code == 0
    assert f"replayed violation chunks: {WASTED_TEXT}" in r.stdout
    assert f"not loadable: {WASTED_TEXT}" in r.stdout


def test_counterexample_proved_obligation_exits_0():
    r = invoke("counterexample", "load-window-blocks")
    assert r.exit_code == 0, r.stderr
    assert "proved" in r.stdout
