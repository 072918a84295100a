"""``simulate`` shows what the release's lookup loads (kvreach.lookup_view)
before the approximate load models, which keep their names: the later
requests repeating the prompt, each looked up as ``kvreach lookup`` does."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvreach.cli import app

runner = CliRunner()
W17 = ["--full-block-size", "36", "--swa-block-size", "4", "--window", "17",
       "--prompt", "1188", "--budget", "1000"]


def _simulate(*args: str) -> dict:
    r = runner.invoke(app, ["simulate", *args, *W17, "--json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["groups"]["swa"]


def test_the_measured_case_loads_nothing_the_intended_model_calls_loadable():
    """F6's geometry on vLLM 0.34.0: the intended model calls every stored
    chunk loadable; the release's lookup loads none of them, and the repeated
    prompt (1188 tokens) loses its whole hit for want of chunk 292."""
    swa = _simulate("--vllm", "0.34.0")
    view = swa["lookup"]
    assert swa["loadable"] == swa["stored"] and swa["stored"]
    assert view["loaded"] == [] and view["stored_not_loaded"] == swa["stored"]
    assert view["asked_not_stored"] == [292]
    repeat = next(x for x in view["lost"] if x["later_prompt"] == 1188)
    assert (repeat["hit_tokens"], repeat["dense_hit_tokens"]) == (0, 1187)
    assert 292 in repeat["missing_chunks"]


def test_lookup_window_loses_no_hit():
    view = _simulate("--rule", "lookup-window")["lookup"]
    assert view["lost"] == [] and view["asked_not_stored"] == [] and view["loaded"]


@pytest.mark.parametrize("rule", [("--vllm", "0.34.0"), ("--rule", "lookup-window")])
@pytest.mark.parametrize("later", [37, 597, 1188, 1189])
def test_each_later_request_is_kvreach_lookups(later, rule):
    """The view's numbers are `kvreach lookup --later-prompt N`'s (a later
    request it looks up: a chunk boundary + 1, the prompt, the prompt + 1)."""
    view = _simulate(*rule)["lookup"]
    assert later in view["later_prompts"]
    lookup_args = ["--vllm", "0.34.0"] + (list(rule) if rule[0] == "--rule" else [])
    r = runner.invoke(app, ["lookup", *lookup_args, *W17, "--later-prompt", str(later),
                            "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    lost = {x["later_prompt"]: x for x in view["lost"]}
    hit, dense = doc["hit_tokens"], doc["dense_hit_tokens"]
    if later in lost:
        assert (lost[later]["hit_tokens"], lost[later]["dense_hit_tokens"]) == (hit, dense)
    else:
        assert hit == dense


def test_the_text_leads_with_the_lookup_and_names_the_models():
    r = runner.invoke(app, ["simulate", "--vllm", "0.34.0", *W17])
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert out.index("vLLM 0.34.0's lookup of 298 later requests") < out.index(
        "loadable under intended")
    assert "asked for, not stored (1): 292" in out
    assert out.index("lost hit: a later request of 37 tokens hits 0 tokens, 36 with dense") < (
        out.index("the approximate"))
    assert "the approximate load model, by its name:" in out


def test_a_prompt_past_the_view_says_so():
    r = runner.invoke(app, ["simulate", "--vllm", "0.34.0", "--full-block-size", "36",
                            "--swa-block-size", "4", "--window", "17", "--prompt", "5000",
                            "--budget", "2048", "--json"])
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["groups"]["swa"]["lookup"].startswith("not computed: 1,251 later requests")


def test_plot_draws_the_lookups_lost_hit(tmp_path, monkeypatch):
    """plot's default map is the lookup's: F6's chunk 292 is missed and the
    stored chunks no later request loads are wasted; --load-model intended
    draws the approximate model under its name (nothing missed)."""
    pytest.importorskip("matplotlib")
    args = ["plot", "--rule", "vllm-0.33", *W17, "--chunks", "270:297"]
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "lookup.png")])
    assert r.exit_code == 0, r.stderr
    assert ("vllm-0.33, vLLM 0.34.0's lookup, chunks 270-296: stored 12, loadable 1, "
            "wasted 12, missed 1; wasted 275-278,284-287,293-296, missed 292") in r.stdout
    titles = []
    from kvreach import plot as kplot
    real = kplot.draw
    monkeypatch.setattr(kplot, "draw", lambda maps, out, suptitle=None: (
        titles.append(suptitle), real(maps, out, suptitle=suptitle))[1])
    r = runner.invoke(app, [*args, "--load-model", "intended", "--out", str(tmp_path / "i.png")])
    assert titles[-1].endswith("--load-model intended --chunks 270:297"), titles
    assert r.exit_code == 0, r.stderr
    assert "vllm-0.33, load model intended, chunks 270-296: stored 12, loadable 12, wasted 0, " \
           "missed 0" in r.stdout
