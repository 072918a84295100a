"""``--model-config PATH``: a local Hugging Face ``config.json`` to the
KV-cache groups vLLM 0.34.0 gives the model, as kvreach's options.

Two steps, each what vLLM does:

1. Each decoder layer's KV cache (its attention kind, KV heads on one rank,
   K and V head sizes, window), as the release's model file builds it:
   ``gpt_oss.py`` (layer ``i`` slides when ``i % 2 == 0``), ``gemma2.py`` /
   ``gemma3.py`` (``layer_types``, which transformers fills from
   ``sliding_window_pattern``), ``mimo_v2.py`` (``hybrid_layer_pattern``; 1
   is a sliding layer with the ``swa_*`` heads), any other model with
   ``layer_types``, or one ``sliding_window`` for every layer (Mistral).
   KV heads per rank: ``max(1, heads // tp)`` (``ModelConfig.get_num_kv_heads``).
2. The groups, as ``vllm/v1/core/kv_cache_planning.py``'s
   ``get_kv_cache_groups`` does for attention layers: one group when every
   layer has the same spec or the same kind; else
   ``unify_kv_cache_spec_page_size`` (a layer whose page divides the largest
   gets its block scaled up by the ratio, another is padded to it and keeps
   its block) and one group per spec. That is at a layer-outermost KV cache
   layout (FlashAttention's, ``resolve_kv_cache_layout``); a block-outermost
   one (DeepSeek-V4's sparse MLA backends) packs groups that keep their own
   blocks (``_get_packed_kv_cache_groups``), which this does not derive.

EAGLE/MTP: ``--mtp N`` serves with the config's own MTP layer as the draft
(``num_nextn_predict_layers``, speculative method ``mtp``,
``num_speculative_tokens`` N). The SWA group is an EAGLE group when the MTP
layer is a sliding layer (MiMo-V2: ``mimo_v2_mtp.py`` builds it with the
``swa_*`` attention); ``extra_retained_tokens`` is
``num_prefill_lookahead_tokens - 1``: ``N - 1`` for a multi-module MTP
(``SpeculativeConfig.use_multi_module_mtp``: at least 2 MTP modules and
N >= 2), else 0. vLLM runs MiMo-V2's first MTP layer only.

Bytes: a block's page per layer is ``block_size * kv_heads * (head_size +
head_size_v) * dtype bytes`` (``AttentionSpec.page_size_bytes``), from the
config's ``torch_dtype`` (or ``dtype``) as vLLM serves it under ``--dtype
auto`` (float32 weights in bfloat16); None when the config names none.

Data in, data out: imports nothing of kvreach. Errors are
:class:`ModelConfigError` naming the field, the value and what was expected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 2, "float": 2}
"""KV bytes per element under ``--dtype auto`` and ``--kv-cache-dtype auto``:
the model's dtype, float32 weights served in bfloat16 (``_resolve_auto_dtype``
downcasts float32 to the platform's first dtype, bfloat16 on a GPU that has it)."""
SLIDING, FULL = "sliding_attention", "full_attention"
MTP_LAYER_KIND = {"mimo_v2": SLIDING}
"""The attention kind of a model's MTP layer, for the model types whose
MTP layer this release builds from the target's config."""
MTP_MODULES = {"mimo_v2": 1}
"""MTP modules vLLM runs when it is not ``num_nextn_predict_layers``
(``_MIMO_V2_PRO_NUM_MTP_LAYERS``)."""


CONFIG_DEFAULTS = {
    "gemma2": {"num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
               "head_dim": 256, "sliding_window": 4096},
    "gemma3_text": {"num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                    "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 6},
    "gpt_oss": {"num_hidden_layers": 36, "num_attention_heads": 64, "num_key_value_heads": 8,
                "head_dim": 64, "sliding_window": 128},
}
"""What transformers' config class (``Gemma2Config``, ``Gemma3TextConfig``,
``GptOssConfig``) gives a field the config.json leaves out; vLLM reads the
config through that class (e.g. gemma-3-12b-it's ``text_config`` has no
``head_dim``: 256, not hidden_size / heads)."""


class ModelConfigError(ValueError):
    """A config field vLLM's derivation cannot take: ``field``, ``value``,
    ``expected``."""

    def __init__(self, field: str, value: object, expected: str):
        super().__init__(f"{field}={value}: expected {expected}")
        self.field, self.value, self.expected = field, value, expected


@dataclass(frozen=True)
class LayerKV:
    """One layer's KV cache on one rank (tokens, heads, bytes)."""

    kind: str
    kv_heads: int
    head_size: int
    head_size_v: int
    window: int | None


@dataclass(frozen=True)
class KVGroup:
    """One KV cache group: its kind, window, block (tokens), layers, and a
    block's bytes for one layer (None: the config names no dtype)."""

    kind: str
    window: int | None
    block_size: int
    layers: int
    page_bytes: int | None
    eagle: bool = False


@dataclass(frozen=True)
class DerivedModel:
    """The groups and what kvreach's options take from them."""

    model_type: str
    groups: tuple[KVGroup, ...]
    full_block_size: int | None
    swa_block_size: int
    window: int
    eagle: bool
    extra_retained_tokens: int


def _int(cfg: dict, field: str, *, minimum: int = 1, default: object = ...) -> int:
    v = cfg.get(field, default)
    if v is ...:
        raise ModelConfigError(field, "(missing)", f"an integer >= {minimum}")
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ModelConfigError(field, json.dumps(v), f"an integer >= {minimum}")
    return v


def load(path: str | Path) -> dict:
    """The config's JSON object; one line for an unreadable or non-object file."""
    try:
        cfg = json.loads(Path(path).read_text())
    except OSError as e:
        raise ModelConfigError("--model-config", path, f"a readable config.json ({e.strerror})")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelConfigError("--model-config", path, f"a JSON config.json ({e})")
    if not isinstance(cfg, dict):
        raise ModelConfigError("--model-config", path, "a JSON object (a config.json)")
    return cfg


def decoder_config(cfg: dict) -> dict:
    """The decoder's config as vLLM reads it (``hf_text_config``): the
    ``text_config`` of a multimodal config (the top level's dtype kept), over
    the defaults transformers' config class gives the fields left out."""
    text = cfg.get("text_config", cfg)
    if not isinstance(text, dict):
        raise ModelConfigError("text_config", json.dumps(text), "a JSON object")
    if text is not cfg:
        text = {"torch_dtype": cfg.get("torch_dtype", cfg.get("dtype"))} | text
    mt = text.get("model_type", cfg.get("model_type"))
    return CONFIG_DEFAULTS.get(mt, {}) | text | {"model_type": mt}


def layer_types(cfg: dict) -> list[str]:
    """Each decoder layer's attention kind (sliding_attention or
    full_attention), as the release's model file reads the config."""
    mt = cfg.get("model_type")
    n = _int(cfg, "num_hidden_layers")
    window = cfg.get("sliding_window")
    if mt == "gpt_oss":
        return [SLIDING if i % 2 == 0 else FULL for i in range(n)]
    if mt == "mimo_v2":
        pattern = cfg.get("hybrid_layer_pattern")
        if (not isinstance(pattern, list) or len(pattern) != n
                or any(p not in (0, 1) for p in pattern)):
            raise ModelConfigError("hybrid_layer_pattern", json.dumps(pattern),
                                   f"a list of {n} entries 0 (full) or 1 (sliding)")
        return [SLIDING if p == 1 else FULL for p in pattern]
    types = cfg.get("layer_types")
    if types is None and mt in ("gemma2", "gemma3_text"):
        # transformers' Gemma2Config / Gemma3TextConfig default
        every = 2 if mt == "gemma2" else _int(cfg, "sliding_window_pattern")
        types = [SLIDING if (i + 1) % every else FULL for i in range(n)]
    if types is None:
        if window is None or cfg.get("use_sliding_window") is False:
            return [FULL] * n
        return [SLIDING] * n
    if (not isinstance(types, list) or len(types) != n
            or any(t not in (SLIDING, FULL) for t in types)):
        raise ModelConfigError("layer_types", json.dumps(types)[:80],
                               f"a list of {n} entries {SLIDING} or {FULL}")
    return types


def layers(cfg: dict, tp: int = 1) -> list[LayerKV]:
    """Each decoder layer's KV cache on one of ``tp`` ranks."""
    kinds = layer_types(cfg)
    heads = _int(cfg, "num_attention_heads")

    def kv(prefix: str, kind: str) -> LayerKV:
        kv_heads = _int(cfg, prefix + "num_key_value_heads", default=heads)
        if prefix + "head_dim" in cfg:
            head = _int(cfg, prefix + "head_dim")
        else:
            hidden = _int(cfg, "hidden_size")
            if hidden % heads:
                raise ModelConfigError("hidden_size", hidden, f"a multiple of num_attention_heads "
                                       f"({heads}) when the config has no {prefix}head_dim")
            head = hidden // heads
        head_v = _int(cfg, prefix + "v_head_dim", default=head)
        window = None
        if kind == SLIDING:
            field = "sliding_window_size" if prefix == "swa_" else "sliding_window"
            window = _int(cfg, field)
        return LayerKV(kind, max(1, kv_heads // tp), head, head_v, window)

    swa = "swa_" if cfg.get("model_type") == "mimo_v2" else ""
    return [kv(swa if k == SLIDING else "", k) for k in kinds]


def dtype_bytes(cfg: dict) -> int | None:
    name = cfg.get("torch_dtype", cfg.get("dtype"))
    if name is None:
        return None
    if name not in DTYPE_BYTES:
        raise ModelConfigError("torch_dtype", json.dumps(name), "one of " + ", ".join(DTYPE_BYTES))
    return DTYPE_BYTES[name]


def groups(specs: list[LayerKV], block_size: int, dtype: int | None,
           draft: int | None = None) -> list[KVGroup]:
    """The KV cache groups of ``get_kv_cache_groups`` for attention layers
    (``specs[draft]``: the EAGLE/MTP draft layer, if any). More than one kind:
    page sizes unified (``unify_kv_cache_spec_page_size``), then the layers of
    each spec split into groups of ``group_size`` layers, the fewest layers of
    a spec (the most when that is under 1.5 times the fewest), a spec's
    ``i``-th group holding its layers ``i::n``
    (``_get_kv_cache_groups_uniform_page_size``); the group holding the draft
    layer is the EAGLE group (``get_global_kv_cache_groups``)."""
    per_token = {s: s.kv_heads * (s.head_size + s.head_size_v) for s in specs}
    if len({(s.kind, s.window) for s in specs}) == 1:
        # one kind: one group (is_kv_cache_spec_uniform / UniformTypeKVCacheSpecs)
        page = max(block_size * t for t in per_token.values()) * dtype if dtype else None
        return [KVGroup(specs[0].kind, specs[0].window, block_size, len(specs), page,
                        eagle=draft is not None)]
    largest = max(block_size * t for t in per_token.values())
    block, page = {}, {}
    for s, t in per_token.items():
        if largest % (block_size * t) == 0:   # the block scaled up to the largest page
            block[s], page[s] = block_size * largest // (block_size * t), largest
        else:                                 # padded to it
            block[s], page[s] = block_size, largest
    buckets: dict[LayerKV, list[int]] = {}
    for i, s in enumerate(specs):
        buckets.setdefault(s, []).append(i)
    fewest = min(len(v) for v in buckets.values())
    most = max(len(v) for v in buckets.values())
    group_size = most if most < fewest * 1.5 else fewest
    out = []
    for s, members in buckets.items():
        n = -(-len(members) // group_size)
        for i in range(n):
            mine = members[i::n]
            out.append(KVGroup(s.kind, s.window, block[s], len(mine),
                               page[s] * dtype if dtype else None, eagle=draft in mine))
    return out


def derive(cfg: dict, *, block_size: int = 16, tp: int = 1, mtp: int = 0) -> DerivedModel:
    """The groups of the model ``cfg`` (a config.json's object) at
    ``CacheConfig.block_size`` ``block_size`` and tensor parallel ``tp``,
    served with its MTP layer and ``mtp`` speculative tokens (0: none)."""
    cfg = decoder_config(cfg)
    mt = cfg["model_type"]
    if mt in ("deepseek_v4", "deepseek_v32", "deepseek_v3", "deepseek_v2"):
        raise ModelConfigError("model_type", mt, "a model whose KV cache is heads x head_dim "
                               "(MLA and compressor caches are not; use --model "
                               "deepseek-v4-flash for DeepSeek-V4-Flash's groups)")
    if cfg.get("num_kv_shared_layers"):
        raise ModelConfigError("num_kv_shared_layers", cfg["num_kv_shared_layers"],
                               "0 (KV-shared layers, e.g. Gemma 4's, are not derived; use "
                               "--model gemma-4)")
    specs = layers(cfg, tp)
    dtype = dtype_bytes(cfg)
    extra = 0
    if mtp:
        n_predict = cfg.get("num_nextn_predict_layers", 0)
        if not n_predict or mt not in MTP_LAYER_KIND:
            raise ModelConfigError("num_nextn_predict_layers",
                                   json.dumps(n_predict) if n_predict else "(missing)",
                                   "an MTP layer this release builds from the config (model_type "
                                   + " or ".join(MTP_LAYER_KIND) + f"; --mtp {mtp} given, "
                                   f"model_type {mt})")
        # mimo_v2_mtp.py: the MTP layer is a sliding layer with the swa_* heads
        mtp_layer = layers(cfg | {"num_hidden_layers": 1, "hybrid_layer_pattern": [1]}, tp)[0]
        specs = specs + [mtp_layer]
        modules = MTP_MODULES.get(mt, n_predict)
        extra = mtp - 1 if min(modules, mtp) > 1 else 0
    grouped = groups(specs, block_size, dtype, draft=len(specs) - 1 if mtp else None)
    swa = {(g.block_size, g.window) for g in grouped if g.kind == SLIDING}
    full = {g.block_size for g in grouped if g.kind == FULL}
    if not swa:
        raise ModelConfigError("sliding_window", json.dumps(cfg["sliding_window"])
                               if "sliding_window" in cfg else "(missing)",
                               "a model with sliding-window layers (every layer of this "
                               "config is full attention: no SWA group to model)")
    if len(swa) > 1 or len(full) > 1:
        raise ModelConfigError("layer_types", mt, "one full-attention block and one "
                               "sliding-window block and window (this config gives "
                               + ", ".join(sorted({f"{g.kind} block {g.block_size}"
                                                   for g in grouped})) + ")")
    (swa_block, window), = swa
    # kvreach models one SWA group: the EAGLE one when a draft layer slides
    # (it needs one block more than the others, so its hit binds)
    eagle = any(g.eagle for g in grouped if g.kind == SLIDING)
    return DerivedModel(mt, tuple(grouped), full.pop() if full else None, swa_block, window,
                        eagle, extra)
