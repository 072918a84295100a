"""``--model-config PATH``: a local config.json's groups as vLLM 0.34.0
derives them (kvreach.model_config; checked against vLLM's own code in
tests/vllm/test_model_config_vllm.py). Here: the real models' configs give
the presets ``--model NAME`` holds, the derivation's steps that change the
answer, and one clear line for each bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.model_config import ModelConfigError, derive, load

runner = CliRunner()
CONFIGS = Path(__file__).resolve().parent / "model_configs"
REQUEST = ["--prompt", "3000", "--budget", "2048"]


@pytest.mark.parametrize("config, options, preset", [
    ("gpt-oss-20b", [], "gpt-oss"),
    ("gpt-oss-20b", ["--block-size", "64"], "gpt-oss-block-64"),
    ("gemma-3-12b-it", [], "gemma-3"),
    ("gemma-2-9b", [], "gemma-2"),
    ("mimo-v2-flash", ["--tp", "4"], "mimo-v2-flash"),
    ("mimo-v2-flash", ["--mtp", "1"], "mimo-v2-flash-mtp"),
])
@pytest.mark.parametrize("command", [["simulate", "--rule", "vllm-0.33"],
                                     ["lookup", "--vllm", "0.34.0"]])
def test_a_real_config_gives_its_preset(command, config, options, preset):
    by_config = runner.invoke(app, [*command, "--model-config", str(CONFIGS / f"{config}.json"),
                                    *options, *REQUEST, "--json"])
    by_name = runner.invoke(app, [*command, "--model", preset, *REQUEST, "--json"])
    assert by_config.exit_code == 0, by_config.stderr
    assert by_name.exit_code == 0, by_name.stderr
    assert json.loads(by_config.stdout) == json.loads(by_name.stdout)
    assert by_config.stderr.startswith("model-config ") and by_config.stderr.count("\n") == 1


def test_the_derivation_is_printed_with_bytes():
    r = runner.invoke(app, ["lookup", "--model-config", str(CONFIGS / "mimo-v2-flash.json"),
                            "--mtp", "1", *REQUEST])
    assert r.exit_code == 0, r.stderr
    assert ("full block 32 (9 layers, 81,920 bytes/block/layer); SWA W 128 block 16 x4 groups "
            "(32 layers, 81,920 bytes/block/layer); SWA W 128 block 16 (8 layers, 81,920 "
            "bytes/block/layer, EAGLE); extra_retained_tokens 0") in r.stderr


def test_what_changes_the_answer():
    """Each step of the derivation moves a number (non-vacuity)."""
    mimo = load(CONFIGS / "mimo-v2-flash.json")
    # the sliding page is twice the full page at TP <= 4; even at TP 8
    assert derive(mimo).full_block_size == 32 and derive(mimo, tp=8).full_block_size == 16
    gemma = load(CONFIGS / "gemma-3-12b-it.json")
    # text_config has no head_dim: transformers' 256, not hidden_size / heads (240)
    assert {g.page_bytes for g in derive(gemma).groups} == {16 * 8 * 2 * 256 * 2}
    # float32 weights are served (and cached) in bfloat16
    assert {g.page_bytes for g in derive(load(CONFIGS / "gemma-2-9b.json")).groups} == {
        16 * 8 * 2 * 256 * 2}
    assert derive(load(CONFIGS / "mistral-7b-v0.1.json")).full_block_size is None
    # a multi-module MTP retains N - 1 tokens more; MiMo-V2 runs one module
    assert derive(mimo, mtp=3).extra_retained_tokens == 0
    assert derive(mimo, mtp=3).eagle and not derive(mimo).eagle
    # pages that do not divide are padded: the blocks stay
    padded = mimo | {"num_key_value_heads": 3}
    assert (derive(padded).full_block_size, derive(padded).swa_block_size) == (16, 16)


LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 8,
         "hidden_size": 512, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("edit, line", [
    ({"sliding_window": None}, "sliding_window=null: expected an integer >= 1"),
    ({"num_hidden_layers": 0}, "num_hidden_layers=0: expected an integer >= 1"),
    (LLAMA | {"sliding_window": 64, "layer_types": ["sliding_attention"] * 3},
     "layer_types=[\"sliding_attention\""),
    ({"torch_dtype": "int4"}, "torch_dtype=\"int4\": expected one of bfloat16"),
    ({"num_key_value_heads": "8"}, "num_key_value_heads=\"8\": expected an integer >= 1"),
    ({"model_type": "deepseek_v4"}, "model_type=deepseek_v4: expected a model whose KV cache"),
    (LLAMA, "sliding_window=(missing): expected a model with sliding-window layers"),
    (LLAMA | {"hidden_size": 500}, "hidden_size=500: expected a multiple of num_attention_heads"),
])
def test_a_bad_config_is_one_line_naming_the_field(tmp_path, edit, line):
    cfg = LLAMA if edit.get("model_type") == "llama" else json.loads(
        (CONFIGS / "gpt-oss-20b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg | edit))
    r = runner.invoke(app, ["simulate", "--rule", "vllm-0.33", "--model-config", str(path),
                            *REQUEST])
    assert r.exit_code == 2, r.stdout
    assert r.stderr.startswith(f"error: --model-config {path}: ") and r.stderr.count("\n") == 1
    assert line in r.stderr, r.stderr


@pytest.mark.parametrize("args, value, expected", [
    (["--tp", "2", "--model", "gemma-3"], "--tp=2", "--model-config PATH beside it"),
    (["--block-size", "64", "--swa-block-size", "4", "--window", "8"], "--block-size=64",
     "--model-config PATH beside it"),
    (["--mtp", "1", "--model", "gemma-3"], "--mtp=1", "--model-config PATH beside it"),
    (["--model-config", "X.json", "--model", "gemma-3"], "--model-config=X.json",
     "no --model beside it"),
    (["--model-config", "X.json", "--eagle"], "--model-config=X.json", "no --eagle beside it"),
    (["--model-config", "/nonexistent/config.json"], "--model-config=/nonexistent/config.json",
     "a readable config.json"),
    (["--model-config", str(CONFIGS / "gpt-oss-20b.json"), "--tp", "0"], "--tp=0",
     "an integer >= 1"),
])
def test_bad_options(args, value, expected):
    r = runner.invoke(app, ["simulate", "--rule", "vllm-0.33", *args, *REQUEST])
    assert r.exit_code == 2, r.stdout
    assert r.stderr.startswith(f"error: {value}: expected ") and r.stderr.count("\n") == 1
    assert expected in r.stderr, r.stderr


def test_a_non_json_file_is_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ModelConfigError, match="expected a JSON config.json"):
        load(path)
