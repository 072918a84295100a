"""Real models' SWA geometries as data: what ``--model NAME`` fills in.

Each preset is the KV-cache groups vLLM 0.33.0 gives the model at its
default (or its recipe's) block size, as ``bench/bench_hits.py`` measures
them; its docstring derives each from the model's ``config.json`` and vLLM's
grouping (``unify_kv_cache_spec_page_size``,
``_get_kv_cache_groups_uniform_page_size``, ``_get_packed_kv_cache_groups``).
A preset holds the model's groups only; the offload chunk
(``--blocks-per-chunk``), DCP and the request stay options.

Data only: imports nothing of kvreach.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelPreset:
    """One model's full-attention and SWA groups as kvreach's options.

    full_block_size: the full-attention group's block (tokens; None: none).
    swa_block_size, window: the SWA group's block and sliding window (tokens).
    eagle: the SWA group is an EAGLE/MTP draft group (``use_eagle``).
    extra_retained_tokens: ``SlidingWindowSpec.extra_retained_tokens``.
    what: the model and where the numbers come from, in one line.
    """

    name: str
    full_block_size: int | None
    swa_block_size: int
    window: int
    what: str
    eagle: bool = False
    extra_retained_tokens: int = 0


PRESETS: dict[str, ModelPreset] = {p.name: p for p in (
    ModelPreset("gpt-oss", 16, 16, 128,
                "gpt-oss-20b/120b: every layer 8 KV heads x 64, sliding_window 128; both groups "
                "get the default block 16"),
    ModelPreset("gpt-oss-block-64", 64, 64, 128,
                "gpt-oss-120b with its ROCm/XPU recipe's --block-size 64"),
    ModelPreset("gemma-2", 16, 16, 4096,
                "Gemma 2: sliding_window 4096, same KV heads on every layer"),
    ModelPreset("gemma-3", 16, 16, 1024,
                "Gemma 3 4B/12B/27B: sliding_window 1024, same KV heads on every layer"),
    ModelPreset("gemma-4", 32, 16, 1024,
                "Gemma 4 31B (TP <= 4) / 26B-A4B (TP <= 2): the sliding page is twice the "
                "full page, so vLLM doubles the full block"),
    ModelPreset("mimo-v2-flash", 32, 16, 128,
                "MiMo-V2-Flash (TP <= 4): full layers 4 KV heads, sliding layers 8, "
                "sliding_window 128"),
    ModelPreset("mimo-v2-flash-mtp", 32, 16, 128,
                "MiMo-V2-Flash's MTP layer: a sliding-window EAGLE group", eagle=True),
    ModelPreset("deepseek-v4-flash", 256, 64, 128,
                "DeepSeek-V4-Flash (--block-size 256): MLA 256, every layer's sliding-window "
                "cache 64, window 128"),
    ModelPreset("deepseek-v4-flash-mtp", 256, 64, 128,
                "DeepSeek-V4-Flash's MTP layer's sliding-window cache: an EAGLE group",
                eagle=True),
    ModelPreset("deepseek-v4-flash-c128", 256, 8, 128,
                "DeepSeek-V4-Flash's C128 compressor state: block 8, window 128"),
    ModelPreset("deepseek-v4-flash-c4", 256, 4, 8,
                "DeepSeek-V4-Flash's C4 compressor state: block 4, window 8"),
)}
