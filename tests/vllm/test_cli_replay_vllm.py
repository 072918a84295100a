"""``kvreach counterexample OBLIGATION --replay-vllm``: every expected
counterexample row of an obligation with a vLLM replay (``kvreach.vllm_harness.replay.REPLAYS``,
proofs/expected.toml) is reproduced on vLLM 0.33.0's real scheduler through
the command a maintainer types: vLLM's numbers equal kvreach's and show the
violation, exit status 0; a row vLLM 0.33.0 cannot run is refused with the
reason, exit status 2. The CLI imports ``kvreach.vllm_harness.replay``, as
it does for a user (test_wheel_replay_vllm.py: from an installed wheel)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness.replay import REPLAYS, reproduced  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from kvreach.cli import app  # noqa: E402
from kvreach.proofs.rows import expected_rows  # noqa: E402

pytestmark = pytest.mark.vllm

# rows whose decoded scenario vLLM 0.33.0 cannot run (kvreach/vllm_harness/replay_lifecycle.py says why):
# vllm-0.29's finish stores up to num_tokens, bookkeeping kvreach's connector does not replace
# exactly-once-restarts/vllm-0.29 is 0.29.0's row: its lookup keeps the store cursor and the
# counterexample's loaded start moves it back, a step vLLM 0.33.0 (cursor reset) does not run
UNREPLAYABLE = {("computed-before-stored", "vllm-0.29", "any"),
                ("exactly-once-restarts", "vllm-0.29", "any")}
# one per (obligation, rule, model): the row ``counterexample`` picks without --vllm (about
# 0.33.0; a vllm-0.29 row is about 0.29.0)
ALL_ROWS = list(dict.fromkeys(
    (r["obligation"], r["rule"], r["load_model"]) for r in expected_rows()
    if r["verdict"] == "counterexample" and r["obligation"] in REPLAYS))
ROWS = [row for row in ALL_ROWS if row not in UNREPLAYABLE]


def test_every_replayed_obligation_has_an_expected_counterexample_row():
    assert {o for o, _, _ in ROWS} | {o for o, _, _ in UNREPLAYABLE} == set(REPLAYS)
    assert UNREPLAYABLE <= set(ALL_ROWS)


def _args(obligation, rule, model):
    # vLLM's own rule and lookup: the row about the installed release, the one
    # the replay runs on (vllm-0.29's rows are 0.29.0's; kvreach's rule and
    # lookup variant are scored against the current release's lookup only)
    import vllm

    from kvreach.proofs.obligations import OBLIGATIONS

    own = rule == "vllm-0.33" and OBLIGATIONS[obligation].lookup_variant == "vllm-window"
    about = ["--vllm", vllm.__version__] if own else []
    return ["counterexample", obligation, "--rule", rule, "--replay-vllm", "--json"] + about + (
        [] if model == "any" else ["--load-model", model])


@pytest.mark.parametrize("obligation,rule,model", ROWS, ids=["/".join(r) for r in ROWS])
def test_replay_vllm_reproduces_the_row(obligation, rule, model):
    r = CliRunner().invoke(app, _args(obligation, rule, model))
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


@pytest.mark.parametrize("obligation,rule,model", sorted(UNREPLAYABLE),
                         ids=["/".join(r) for r in sorted(UNREPLAYABLE)])
def test_replay_vllm_refuses_an_unreplayable_row(obligation, rule, model):
    r = CliRunner().invoke(app, _args(obligation, rule, model))
    assert r.exit_code == 2
    assert "cannot run on vLLM 0.33.0's real scheduler" in r.output
