"""``--vllm X`` on ``kvreach simulate`` and ``kvreach lookup``: a release's
store side and lookup (``kvreach.impl.release``), kvreach's rules scored
against a release's lookup, and the two released lookups that load chunks
they never checked (docs/versions.md, docs/findings.md F11)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.proofs.scenarios import PR_54362, example_flags
from kvreach.releases import RELEASES

runner = CliRunner()
PR = example_flags(PR_54362)
VERSIONS = [v for r in RELEASES for v in r.names]

# Full-attention block 2, SWA block 4, window 8, a 24-token request; the tier
# evicted SWA chunk 3 and full chunk 11 before the later request looks up.
CASE_029 = ["--full-block-size", "2", "--swa-block-size", "4", "--window", "8",
            "--prompt", "24", "--budget", "100",
            "--later-evicted", "swa:3", "--later-evicted", "full:11"]
# SWA block 2, window 4, extra 4, a 7-token request, SWA chunk 0 evicted.
CASE_030 = ["--swa-block-size", "2", "--window", "4", "--extra-retained-tokens", "4",
            "--prompt", "7", "--budget", "8", "--later-evicted", "swa:0"]
# The same group beside a full-attention block of 6 (alignment 6: segments of
# 3 chunks) and nothing evicted: whether chunk 0 is stored is the release's
# mask window (0.30.0's has no extra_retained_tokens).
CASE_030_STORED = ["--full-block-size", "6", "--swa-block-size", "2", "--window", "4",
                   "--extra-retained-tokens", "4", "--prompt", "7", "--budget", "8"]


def run_json(command: str, *args: str) -> dict:
    r = runner.invoke(app, [command, *args, "--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout)


def swa(doc: dict) -> dict:
    """The SWA group of ``simulate --json`` (by name) or ``lookup --json`` (the last)."""
    groups = doc["groups"]
    return groups["swa"] if isinstance(groups, dict) else groups[-1]


# --- simulate ----------------------------------------------------------------


def stores(doc: dict) -> dict:
    """``simulate --json``'s SWA group without the lookup view."""
    return {k: v for k, v in doc["groups"]["swa"].items() if k != "lookup"}


def test_simulate_release_store_sides_are_the_rules_they_transcribe():
    """0.29.0's store side is the rule vllm-0.29 (its window, EAGLE tail and
    finish); 0.31.0 .. 0.34.0's is vllm-0.33 (0.34.0's without lookahead
    hashes: with them an EAGLE group is a plain one); no --vllm is 0.34.0.
    The store side only: the lookup view is the release's lookup of those
    stores (a rule is scored against 0.34.0's)."""
    for extra in ("0", "4"):
        args = [*PR, "--extra-retained-tokens", extra, "--decode", "2", "--eagle",
                "--hash-lookahead-tokens", "0"]
        by_rule = {rule: stores(run_json("simulate", "--rule", rule, *args))
                   for rule in ("vllm-0.29", "vllm-0.33")}
        for v in VERSIONS:
            doc = run_json("simulate", "--vllm", v, *args)
            assert doc["config"]["vllm"] == v
            if v in ("0.29.0",):
                assert stores(doc) == by_rule["vllm-0.29"], v
            elif v != "0.30.0":
                assert stores(doc) == by_rule["vllm-0.33"], v
        assert stores(run_json("simulate", *args)) == by_rule["vllm-0.33"]
    assert by_rule["vllm-0.29"] != by_rule["vllm-0.33"]  # the two sides do differ here


def test_simulate_0_30_0_mask_window_has_no_extra():
    """Window 4 and extra 4 in chunks of 2 tokens, segments of 3 chunks: the
    final segment keeps cdiv(4, 2) = 2 chunks under 0.30.0's mask, all 3
    (a window of 8 tokens) from 0.31.0 on; with extra 0 they agree."""
    stored = {v: swa(run_json("simulate", "--vllm", v, *CASE_030_STORED))["stored"]
              for v in ("0.30.0", "0.31.0", "0.33.0")}
    assert stored == {"0.30.0": [1, 2], "0.31.0": [0, 1, 2], "0.33.0": [0, 1, 2]}
    no_extra = [a if a != "4" or i != CASE_030_STORED.index("--extra-retained-tokens") + 1
                else "0" for i, a in enumerate(CASE_030_STORED)]
    assert (swa(run_json("simulate", "--vllm", "0.30.0", *no_extra))["stored"]
            == swa(run_json("simulate", "--vllm", "0.33.0", *no_extra))["stored"])
    # the trace keeps the group as configured (the extra the load models see)
    doc = run_json("simulate", "--vllm", "0.30.0", *CASE_030_STORED)
    assert doc["trace"]["group"]["extra_retained_tokens"] == 4


def test_simulate_text_names_the_release():
    r = runner.invoke(app, ["simulate", "--vllm", "0.30.0", *CASE_030_STORED])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("rule vllm-0.33  vllm 0.30.0 (its store side: rule vllm-0.33, "
                               "the mask window without extra_retained_tokens)")


# --- lookup --------------------------------------------------------------------


@pytest.mark.parametrize("v", VERSIONS)
def test_lookup_0_29_0_loads_a_chunk_it_never_checked(v):
    """0.29.0's run of cdiv(8, 4) = 2 chunks ends the hit at token 22 (the
    full group's chunk 11 is gone) and loads SWA chunks 3-5, chunk 3 a MISS;
    0.30.0 on need the padded run of 3 chunks, find the MISS and hit 12."""
    doc = run_json("lookup", "--vllm", v, *CASE_029)
    if v == "0.29.0":
        assert (doc["hit_tokens"], swa(doc)["loaded"], swa(doc)["unchecked_chunks"]) == \
            (22, [3, 6], [3])
    else:
        assert (doc["hit_tokens"], swa(doc)["unchecked_chunks"]) == (12, [])
    assert doc["groups"][0]["unchecked_chunks"] == []
    assert doc["config"]["later_evicted"] == [[11], [3]]


@pytest.mark.parametrize("v", VERSIONS)
def test_lookup_0_30_0_with_extra_loads_chunk_0_unchecked(v):
    """SWA block 2, window 4, extra 4: 0.29.0 and 0.30.0's window has no
    extra (a run of 2 chunks): hit 6, chunk 0 loaded though a MISS; 0.31.0 on
    need 4 chunks: hit 0."""
    doc = run_json("lookup", "--vllm", v, *CASE_030)
    if v in ("0.29.0", "0.30.0"):
        assert (doc["hit_tokens"], swa(doc)["loaded"], swa(doc)["unchecked_chunks"]) == \
            (6, [0, 3], [0])
        assert swa(doc)["window_chunks"] == 2
    else:
        assert (doc["hit_tokens"], swa(doc)["unchecked_chunks"]) == (0, [])
        assert swa(doc)["window_chunks"] == 4
    text = runner.invoke(app, ["lookup", "--vllm", v, *CASE_030]).stdout
    assert ("loads, never answered HIT: 0" in text) == (v in ("0.29.0", "0.30.0"))


def test_lookup_0_30_0_loads_a_chunk_its_own_store_side_left_out():
    """With nothing evicted: 0.30.0's mask leaves chunk 0 out and its lookup
    loads it anyway; 0.31.0 stores it (and loads only what it checked)."""
    d30 = run_json("lookup", "--vllm", "0.30.0", *CASE_030_STORED)
    d31 = run_json("lookup", "--vllm", "0.31.0", *CASE_030_STORED)
    assert (d30["hit_tokens"], swa(d30)["unchecked_chunks"], swa(d30)["missing_chunks"]) == \
        (6, [0], [0])
    assert (d31["hit_tokens"], swa(d31)["unchecked_chunks"], swa(d31)["missing_chunks"]) == \
        (6, [], [])


def test_lookup_rule_against_a_release_lookup():
    """--rule R --vllm X: kvreach's rule R stores (as --rule R alone does),
    release X's lookup finds the hit."""
    alone = run_json("lookup", "--rule", "lookup-window", *CASE_030_STORED,
                     "--hash-lookahead-tokens", "0")
    against = run_json("lookup", "--rule", "lookup-window", "--vllm", "0.30.0", *CASE_030_STORED)
    assert [g["stored_chunks"] for g in alone["groups"]] == \
        [g["stored_chunks"] for g in against["groups"]]
    assert (alone["config"]["vllm"], against["config"]["vllm"]) == ("0.34.0", "0.30.0")
    assert against["config"]["store_side"] == "rule" and against["config"]["rule"] == "lookup-window"
    assert (swa(alone)["window_chunks"], swa(against)["window_chunks"]) == (4, 2)
    # without --rule the release's own store side
    own = run_json("lookup", "--vllm", "0.30.0", *CASE_030_STORED)
    assert own["config"]["store_side"] == "vllm" and own["config"]["rule"] == "vllm-0.33"
    assert swa(own)["stored_chunks"] == 2 and swa(against)["stored_chunks"] == 3
    # no --vllm: the lookup of 0.34.0, the default
    assert run_json("lookup", "--rule", "vllm-0.29", *PR) == \
        run_json("lookup", "--rule", "vllm-0.29", "--vllm", "0.34.0", *PR)


# --- bad input -----------------------------------------------------------------


@pytest.mark.parametrize("args, start", [
    (["simulate", "--vllm", "0.35.0", *PR], "error: --vllm=0.35.0: expected one of 0.29.0, "
     "0.30.0, 0.31.0, 0.32.0, 0.33.0, 0.34.0"),
    (["simulate", "--vllm", "0.33.0", "--hash-lookahead-tokens", "1", *PR],
     "error: --hash-lookahead-tokens=1: expected 0 under vLLM 0.33.0, which has no lookahead"),
    (["lookup", "--vllm", "0.30.0", "--eagle", "--hash-lookahead-tokens", "2", *PR],
     "error: --hash-lookahead-tokens=2: expected 0 under vLLM 0.30.0"),
    (["simulate", "--hash-lookahead-tokens", "-1", *PR],
     "error: --hash-lookahead-tokens=-1: expected an integer >= 0"),
    (["simulate", "--error-after-step", "1", "--abort-after-step", "1", *PR],
     "error: --error-after-step=1: expected None with abort_after_step"),
    (["lookup", "--vllm", "vllm-0.29", *PR], "error: --vllm=vllm-0.29: expected one of 0.29.0"),
    (["simulate", "--rule", "vllm-0.29", "--vllm", "0.29.0", *PR],
     "error: --vllm=0.29.0: expected no --rule beside it"),
    (["lookup", "--later-evicted", "swa3", *PR], "error: --later-evicted=swa3: expected GROUP:"),
    (["lookup", "--later-evicted", "swa:5-2", *PR], "error: --later-evicted=swa:5-2: expected"),
    (["lookup", "--later-evicted", "full:1", *CASE_030], "error: --later-evicted=full:1: "
     "expected a group the scenario has"),
])
def test_bad_release_input_is_one_line(args, start):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith(start) and r.stderr.count("\n") == 1, r.stderr
    assert r.stdout == ""
