"""``--model-config``'s derivation (kvreach.model_config) against vLLM's own
code, on the config.json fixtures of tests/model_configs/ (no weights, no hub).

vLLM functions compared against:

- the per-layer step: ``vllm.config.ModelConfig`` on a directory holding the
  fixture (it reads the config through transformers' config class, as vLLM
  serving does): ``hf_text_config.layer_types``, ``get_sliding_window()``,
  ``get_head_size()``, ``get_num_kv_heads(parallel_config)`` at TP 1 and 8,
  ``dtype``. MiMo-V2 is a remote-code config transformers does not know
  offline, so its per-layer step is not compared (its grouping is).
- the grouping step: ``vllm.v1.core.kv_cache_planning.get_global_kv_cache_groups``
  (what the engine calls on the workers' layer specs: ``extra_retained_tokens``
  tagging, ``get_kv_cache_groups``, ``unify_kv_cache_spec_page_size``, the
  EAGLE group marking) on vLLM ``FullAttentionSpec`` / ``SlidingWindowSpec``
  built from each layer's heads, head sizes, window and dtype: every group's
  kind, window, block size, layer count and ``page_size_bytes``.

Not run: building the model's layers (``Attention.get_kv_cache_spec`` needs
the model instantiated on a device), so each model file's choice of which
layer slides is read from the model file (kvreach.model_config's docstring),
compared with transformers' ``layer_types`` where the config class has them.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.model_config import (FULL, SLIDING, decoder_config, derive,  # noqa: E402
                                  dtype_bytes, layer_types, layers, load)

pytestmark = pytest.mark.vllm
CONFIGS = Path(__file__).resolve().parents[1] / "model_configs"
TRANSFORMERS_KNOWS = ["gpt-oss-20b", "gemma-3-12b-it", "gemma-2-9b", "mistral-7b-v0.1"]
DERIVED = TRANSFORMERS_KNOWS + ["mimo-v2-flash"]


@pytest.fixture(scope="module")
def vllm_config(offline_model_dir):
    """A VllmConfig for get_global_kv_cache_groups (it reads the scheduler,
    attention and speculative configs, not the model)."""
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, VllmConfig

    v = VllmConfig(model_config=ModelConfig(model=offline_model_dir, skip_tokenizer_init=True),
                   cache_config=CacheConfig(block_size=16), device_config=DeviceConfig("cpu"))
    # the layout the engine core resolves from the attention backends
    # (resolve_kv_cache_layout): FlashAttention's layer-outermost NHD
    v.cache_config.kv_cache_layout = "LBNHC"
    return v


def _model_config(name: str, tmp_path):
    from vllm.config import ModelConfig

    (tmp_path / name).mkdir()
    shutil.copy(CONFIGS / f"{name}.json", tmp_path / name / "config.json")
    return ModelConfig(model=str(tmp_path / name), skip_tokenizer_init=True)


@pytest.mark.parametrize("name", TRANSFORMERS_KNOWS)
def test_each_layer_is_what_vllm_reads(name, tmp_path):
    m = _model_config(name, tmp_path)
    cfg = decoder_config(load(CONFIGS / f"{name}.json"))
    kinds = layer_types(cfg)
    text = m.hf_text_config
    vllm_types = getattr(text, "layer_types", None)
    if vllm_types is not None:
        assert kinds == list(vllm_types)
    else:  # Mistral: one window for every layer
        assert kinds == [SLIDING] * text.num_hidden_layers
    assert {kv.window for kv in layers(cfg) if kv.kind == SLIDING} == {m.get_sliding_window()}
    assert dtype_bytes(cfg) == m.dtype.itemsize
    for tp in (1, 8):
        mine = layers(cfg, tp)
        assert {kv.head_size for kv in mine} == {m.get_head_size()}
        assert {kv.head_size_v for kv in mine} == {m.get_head_size()}
        assert {kv.kv_heads for kv in mine} == {
            m.get_num_kv_heads(SimpleNamespace(tensor_parallel_size=tp))}


def _vllm_groups(vllm_config, cfg, *, block_size: int, tp: int, mtp_layer=None):
    """vLLM's groups for the layers kvreach derives from ``cfg``."""
    import torch
    from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    dtype = {2: torch.bfloat16, 4: torch.float32}[dtype_bytes(cfg)]
    specs = {}
    for i, kv in enumerate(layers(cfg, tp) + ([mtp_layer] if mtp_layer else [])):
        common = dict(block_size=block_size, num_kv_heads=kv.kv_heads, head_size=kv.head_size,
                      head_size_v=kv.head_size_v, dtype=dtype, is_draft=mtp_layer is not None
                      and i == len(layers(cfg, tp)))
        specs[f"model.layers.{i}.self_attn.attn"] = (
            SlidingWindowSpec(sliding_window=kv.window, **common) if kv.kind == SLIDING
            else FullAttentionSpec(**common))
    out = []
    for g in get_global_kv_cache_groups(vllm_config, [specs]):
        s = g.kv_cache_spec
        kind = SLIDING if isinstance(s, SlidingWindowSpec) else FULL
        out.append((kind, getattr(s, "sliding_window", None), s.block_size, len(g.layer_names),
                 s.page_size_bytes, g.is_eagle_group,
                 getattr(s, "extra_retained_tokens", 0)))
    return sorted(out, key=str)


EDITS = {"mimo-v2-flash-padded": ("mimo-v2-flash", {"num_key_value_heads": 3})}
"""A page that does not divide the largest: padded, its block kept."""


@pytest.mark.parametrize("block_size", [16, 64])
@pytest.mark.parametrize("tp", [1, 8])
@pytest.mark.parametrize("name", DERIVED + list(EDITS))
def test_groups_are_what_vllm_groups(name, tp, block_size, vllm_config):
    base, edit = EDITS.get(name, (name, {}))
    raw = load(CONFIGS / f"{base}.json") | edit
    d = derive(raw, block_size=block_size, tp=tp)
    cfg = decoder_config(raw)
    mine = sorted([(g.kind, g.window, g.block_size, g.layers, g.page_bytes, g.eagle, 0)
                   for g in d.groups], key=str)
    assert mine == _vllm_groups(vllm_config, cfg, block_size=block_size, tp=tp)


def test_mimo_groups_at_tp_1_differ_from_tp_8():
    """Non-vacuity: the page sizes differ at TP 1 (vLLM doubles the full
    block) and even out at TP 8 (one KV head a rank each)."""
    raw = load(CONFIGS / "mimo-v2-flash.json")
    assert (derive(raw).full_block_size, derive(raw).swa_block_size) == (32, 16)
    assert (derive(raw, tp=8).full_block_size, derive(raw, tp=8).swa_block_size) == (16, 16)


@pytest.mark.parametrize("tp", [1, 8])
def test_mimo_mtp_draft_is_vllms_eagle_group(tp, vllm_config):
    """MiMo-V2's MTP layer (a sliding layer with the swa_* heads) joins the SWA
    group, which vLLM marks as the EAGLE group once a drafter drops the
    trailing block; one MTP module, so no extra_retained_tokens."""
    raw = load(CONFIGS / "mimo-v2-flash.json")
    d = derive(raw, tp=tp, mtp=3)
    # the speculative config of `--speculative-config '{"method": "mtp"}'`
    # as far as the grouping reads it: the trailing-block drop on, and one
    # prefill lookahead token (MTPSpeculatorConfig, one MTP module; 0.33.0's
    # VllmConfig.num_prefill_lookahead_tokens asks use_eagle and
    # use_multi_module_mtp instead)
    v = copy.copy(vllm_config)
    object.__setattr__(v, "speculative_config", SimpleNamespace(
        use_eagle_block_drop=lambda: True, use_eagle=lambda: True,
        use_multi_module_mtp=lambda: False, method="mtp", num_speculative_tokens=3,
        speculator_config=SimpleNamespace(num_prefill_lookahead_tokens=1)))
    mtp_layer = layers(raw | {"num_hidden_layers": 1, "hybrid_layer_pattern": [1]}, tp)[0]
    got = _vllm_groups(v, raw, block_size=16, tp=tp, mtp_layer=mtp_layer)
    mine = sorted([(g.kind, g.window, g.block_size, g.layers, g.page_bytes, g.eagle,
                    d.extra_retained_tokens if g.kind == SLIDING else 0) for g in d.groups],
                  key=str)
    assert mine == got
    assert d.eagle and d.extra_retained_tokens == 0


def test_a_config_file_names_its_fields():
    for name in DERIVED + ["deepseek-v4-flash"]:
        assert json.loads((CONFIGS / f"{name}.json").read_text())["model_type"]
