"""``kvreach lookup``: the measurement of window 17 (0 vs 1187), the PR example,
the later-request options and their one-line errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.proofs.scenarios import MEASURED_W17, PR_54362, example_flags

runner = CliRunner()
W17 = ["--rule", "vllm-0.33", *example_flags(MEASURED_W17)]
PR = ["--rule", "vllm-0.33", *example_flags(PR_54362)]


def lookup_json(*args: str) -> dict:
    r = runner.invoke(app, ["lookup", *args, "--json"])
    assert r.exit_code == 0, (r.stdout, r.stderr)
    return json.loads(r.stdout)


def test_measurement_zero_vs_1187():
    doc = lookup_json(*W17)
    assert (doc["hit_tokens"], doc["dense_hit_tokens"]) == (0, 1187)
    swa = doc["groups"][1]
    assert swa["window_chunks"] == 5  # cdiv(17, 4): the lookup's run length
    assert swa["missing_chunks"] == [292]  # the mask keeps 293-296, the run needs 292-296
    text = runner.invoke(app, ["lookup", *W17]).stdout
    assert "offload hit: 0 tokens with the rule's stores, 1187 with dense stores (1187 lost)" in text


def test_pr_example_repeated_prompt_hits_like_dense():
    doc = lookup_json(*PR)
    assert doc["hit_tokens"] == doc["dense_hit_tokens"] == 1188  # 33 full-attention chunks
    assert doc["groups"][1]["loaded"] == [293, 297]


def test_pr_example_aborted_final_tail_not_loaded():
    """Aborted after the 1000-token step: the final-segment tail 246-249 is
    stored, but the later lookup ends at the full-attention boundary 972
    (27 chunks of 36 stored): it loads 239-242."""
    doc = lookup_json(*PR, "--abort-after-step", "1")
    assert doc["hit_tokens"] == doc["dense_hit_tokens"] == 972
    assert doc["groups"][1]["loaded"] == [239, 243]


def test_later_request_options():
    doc = lookup_json(*PR, "--later-prompt", "1500", "--later-diverges-at", "500")
    assert doc["shared_tokens"] == 500 and doc["later_prompt"] == 1500
    assert doc["dense_hit_tokens"] == 468  # 13 full-attention chunks inside 500 tokens
    doc = lookup_json(*PR, "--later-local-hit", "360")
    assert doc["local_hit_tokens"] == 360 and doc["hit_tokens"] == 1188 - 360
    doc = lookup_json(*PR, "--later-max-load-tokens", "100")
    assert doc["dense_hit_tokens"] == 72


@pytest.mark.parametrize("args,flag", [
    (["--later-prompt", "0"], "--later-prompt"),
    (["--later-diverges-at", "-1"], "--later-diverges-at"),
    (["--later-local-hit", "3"], "--later-local-hit"),
    (["--later-local-hit", "1800", "--later-prompt", "2000"], "--later-local-hit"),
    (["--later-max-load-tokens", "-5"], "--later-max-load-tokens"),
    (["--extra-retained-tokens", "-1"], "--extra-retained-tokens"),
])
def test_bad_later_request(args, flag):
    r = runner.invoke(app, ["lookup", *PR, *args])
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: {flag}=") and r.stderr.count("\n") == 1
