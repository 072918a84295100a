"""``kvreach counterexample OBLIGATION --replay-vllm``: every expected
counterexample row of an obligation with a vLLM replay (``replay_vllm.REPLAYS``,
proofs/expected.toml) is reproduced on vLLM 0.33.0's real scheduler through
the command a maintainer types: vLLM's numbers equal kvreach's and show the
violation, exit status 0. The CLI imports ``tests/vllm/replay_vllm.py`` from
the checkout, as it does for a user."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from replay_vllm import REPLAYS, reproduced  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from kvreach.cli import app  # noqa: E402
from kvreach.proofs.runner import expected_rows  # noqa: E402

pytestmark = pytest.mark.vllm

ROWS = [(r["obligation"], r["rule"]) for r in expected_rows()
        if r["verdict"] == "counterexample" and r["obligation"] in REPLAYS]


def test_every_lookup_obligation_has_an_expected_counterexample_row():
    assert {o for o, _ in ROWS} == set(REPLAYS)


@pytest.mark.parametrize("obligation,rule", ROWS, ids=[f"{o}-{r}" for o, r in ROWS])
def test_replay_vllm_reproduces_the_row(obligation, rule):
    r = CliRunner().invoke(app, ["counterexample", obligation, "--rule", rule,
                                 "--replay-vllm", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "counterexample" and not doc["detail"], doc["detail"]
    got = doc["counterexample"]["vllm_replay"]
    assert got["vllm"] == got["kvreach"]
    assert reproduced(obligation, got), got


def test_replay_vllm_names_the_obligations_it_replays():
    r = CliRunner().invoke(app, ["counterexample", "chunk-mask-closed-form", "--replay-vllm"])
    assert r.exit_code == 2
    assert "--replay-vllm" in r.output and "hit-preservation-neighbours" in r.output
