"""``--model NAME``: a real model's groups (kvreach.models) stand for the
geometry flags; the same scenario either way, and the presets are the shapes
bench/bench_hits.py measures."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.models import PRESETS

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
REQUEST = ["--prompt", "3000", "--budget", "2048"]


def flags(p) -> list[str]:
    out = ["--swa-block-size", str(p.swa_block_size), "--window", str(p.window)]
    if p.full_block_size is not None:
        out += ["--full-block-size", str(p.full_block_size)]
    if p.eagle:
        out.append("--eagle")
    if p.extra_retained_tokens:
        out += ["--extra-retained-tokens", str(p.extra_retained_tokens)]
    return out


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("command", [["simulate", "--rule", "vllm-0.33"],
                                     ["lookup", "--vllm", "0.33.0"]])
def test_model_equals_its_flags(name, command):
    by_name = runner.invoke(app, [*command, "--model", name, *REQUEST, "--json"])
    by_flags = runner.invoke(app, [*command, *flags(PRESETS[name]), *REQUEST, "--json"])
    assert by_name.exit_code == 0, by_name.stderr
    assert by_flags.exit_code == 0, by_flags.stderr
    assert json.loads(by_name.stdout) == json.loads(by_flags.stdout)


def test_an_offload_chunk_option_goes_with_a_model():
    r = runner.invoke(app, ["simulate", "--rule", "vllm-0.33", "--model", "gemma-4",
                            "--blocks-per-chunk", "64", *REQUEST, "--json"])
    assert r.exit_code == 0, r.stderr
    cfg = json.loads(r.stdout)["config"]
    assert (cfg["full_block_size"], cfg["swa_block_size"], cfg["window"],
            cfg["blocks_per_chunk"]) == (32, 16, 1024, 64)


def test_the_bench_measures_the_presets():
    spec = importlib.util.spec_from_file_location("bench_hits", ROOT / "bench/bench_hits.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    used = {(fb, sb, w, extra, eagle) for _, fb, sb, w, extra, _, eagle in bench.SHAPES}
    for p in PRESETS.values():
        assert (p.full_block_size, p.swa_block_size, p.window, p.extra_retained_tokens,
                p.eagle) in used, p.name


@pytest.mark.parametrize("args, value, expected", [
    (["--model", "gemma"], "--model=gemma", "one of gpt-oss"),
    (["--model", "gemma-3", "--window", "5"], "--model=gemma-3", "no --window beside it"),
    (["--model", "gpt-oss", "--full-block-size", "16", "--swa-block-size", "16"],
     "--model=gpt-oss", "no --full-block-size, --swa-block-size beside it"),
    (["--window", "16"], "--swa-block-size=(missing)", "or --model NAME"),
    (["--swa-block-size", "4"], "--window=(missing)", "or --model NAME"),
])
def test_bad_model_input(args, value, expected):
    r = runner.invoke(app, ["simulate", "--rule", "vllm-0.33", *args, *REQUEST])
    assert r.exit_code == 2, r.stdout
    assert r.stderr.startswith(f"error: {value}: expected ") and r.stderr.count("\n") == 1
    assert expected in r.stderr, r.stderr
