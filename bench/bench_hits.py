"""How much it matters: per store rule, SWA chunks stored per request, chunks
never loaded, and later-request hit tokens lost against dense stores, for
real model geometries, in the single-request world (kvreach.impl.worlds).

    python bench/bench_hits.py [--plot docs/img/hit-loss.png] [--markdown]

A shape is (full-attention block, SWA block, window, extra_retained_tokens,
blocks_per_chunk, EAGLE group); the real models' groups are the presets of
``kvreach.models`` (what ``--model NAME`` fills in), derived below. vLLM's block mask is sparse when
ceil((W + extra - 1) / swa_block) (+1 for an EAGLE group) < full_block *
blocks_per_chunk / swa_block (``_contiguous_blocks_for_hit`` against
``alignment_tokens``), but a chunk is stored when any of its blocks is kept
(``_build_store_jobs``): with equal full and SWA blocks the alignment is one
SWA chunk and every chunk is stored, whatever the offload chunk. Fewer
chunks than dense are stored only when the full-attention block is larger
than the SWA block and the window is shorter than the full-attention chunk.

Block sizes are what vLLM 0.33.0's grouping gives, checked by calling its own
functions on the models' layer specs (``unify_kv_cache_spec_page_size`` +
``_get_kv_cache_groups_uniform_page_size`` in vllm/v1/core/kv_cache_planning.py,
which scales the block of the layers with the smaller page up to the largest
page; ``_get_packed_kv_cache_groups`` for DeepSeek V4, whose backends need a
block-outermost layout and keep each group's own block). A sliding-window
layer starts from the primary ``--block-size`` when its backend can run it
(``Attention.get_kv_cache_spec`` / ``_largest_kernel_block_within``).

- gpt-oss-20b/120b: every layer 8 KV heads x head_dim 64, sliding_window 128
  (https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json). Same page
  for both groups, so both get the primary block: 16 by default, 64 with the
  ``--block-size 64`` of vLLM's gpt-oss-120b ROCm/XPU recipe
  (recipes/models/openai/gpt-oss-120b.yaml). Its EAGLE3 draft
  (nvidia/gpt-oss-120b-Eagle3-v3, same recipe) adds a full-attention draft
  group and no extra_retained_tokens (one drafter module); not benched.
- Gemma 3 (4B/12B/27B): global and local layers share KV heads and head_dim,
  sliding_window 1024 (e.g. https://huggingface.co/google/gemma-3-12b-it).
  Gemma 2: sliding_window 4096, same heads. Mistral 7B v0.1 (sliding_window
  4096) is SWA-only (alignment = its own chunk: dense), not benched.
- Gemma 4 31B: 16 KV heads x 256 on sliding layers, num_global_key_value_heads
  4 x global_head_dim 512 on full layers, sliding_window 1024
  (https://huggingface.co/google/gemma-4-31B-it/blob/main/config.json);
  26B-A4B: 8 x 256 / 2 x 512, window 1024. The sliding page is twice the full
  page, so vLLM doubles the full block: full 32 / SWA 16 at the default block
  (31B at TP <= 4, 26B-A4B at TP <= 2; at higher TP the replicated global
  head evens the pages). Its MTP assistant (google/gemma-4-31B-it-assistant)
  shares the target's KV (gemma4_mtp.py) and predicts one token: no draft
  group, no extra_retained_tokens. Per-group block sizes differ, so the
  connector refuses ``block_size`` and takes ``blocks_per_chunk``.
- MiMo-V2-Flash: full layers 4 KV heads, sliding layers 8 (head_dim 192,
  v_head_dim 128), sliding_window 128, 9 full + 39 sliding layers
  (https://huggingface.co/XiaomiMiMo/MiMo-V2-Flash/blob/main/config.json):
  full 32 / SWA 16 at TP <= 4 (its vLLM recipe runs TP 4). Its MTP layer is a
  sliding-window layer (mimo_v2_mtp.py), i.e. an EAGLE SWA group.
- DeepSeek-V4-Flash (--block-size 256 in recipes/models/deepseek-ai/
  DeepSeek-V4-Flash.yaml; the sparse MLA kernel takes only 256): the MLA
  (full-attention) group has block 256; every layer's sliding-window cache
  (window 128, DeepseekV4SWACache) has block 64; the compressor states are
  sliding-window groups of block 8 / window 128 (C128 layers) and block 4 /
  window 8 (C4 layers, compressor.py); the MTP layer's SWA cache is an EAGLE
  group (num_nextn_predict_layers 1, sliding_window 128,
  https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash/blob/main/config.json).
  Sparse at the default chunk. kvreach's lookup takes one full-attention and
  one SWA group, so each SWA group is measured alone with the MLA group; the
  real lookup takes the least hit over all groups.
- Two synthetic shapes the proofs single out: the measured full block 36 / SWA
  block 4 / window 17, and window 16 with extra_retained_tokens 5 (MTP
  history; no real geometry above has extra_retained_tokens > 0: it needs a
  multi-module MTP, num_nextn_predict_layers > 1 and num_speculative_tokens > 1).

Offload chunks: 1 block (the default, also ``--kv-offloading-size``), and,
where the default is dense, a ``blocks_per_chunk`` that makes the chunk mask
sparse (Gemma 4: 64, a 2048-token full-attention chunk; MiMo: 8, 256 tokens),
or for gpt-oss the offloaded ``block_size`` 256 (block-sparse, chunk-dense).

Distribution, fixed by a seed: 24 prompt lengths log-uniform in [1k, 32k]
tokens, chunked prefill at 2048 tokens a step, each prompt completed; later
requests per prompt: the same prompt (a repeat or shared system prompt), the
prompt extended by 500 new tokens, and the prompt diverging at 3 points drawn
uniformly in [P/2, P]. "Not loaded by the sample": a stored SWA chunk none
of the 5 sampled later requests loads. It is not waste over all requests (a
later request ending at another boundary may load it).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvreach.impl.lifecycle import Lifecycle, run  # noqa: E402
from kvreach.impl.lookup import VLLM_0_33, LookupGroup  # noqa: E402
from kvreach.impl.release import lookup_parts  # noqa: E402
from kvreach.impl.worlds import dense_chunks, later_lookup  # noqa: E402
from kvreach.models import PRESETS  # noqa: E402
from kvreach.params import GroupConfig, RequestConfig  # noqa: E402
from kvreach.releases import release as release_of  # noqa: E402
from kvreach.scenario import Scenario, lookup_groups, run_scenario  # noqa: E402

def _shape(label: str, model: str, blocks_per_chunk: int = 1) -> tuple:
    """A bench shape from a real model's preset (kvreach.models, what
    ``--model NAME`` fills in) and an offload chunk of ``blocks_per_chunk``."""
    p = PRESETS[model]
    return (label, p.full_block_size, p.swa_block_size, p.window, p.extra_retained_tokens,
            blocks_per_chunk, p.eagle)


SHAPES = [
    # name, full block, swa block, window, extra, blocks_per_chunk, eagle
    _shape("gpt-oss (W 128), block 16", "gpt-oss"),
    _shape("gpt-oss, block 16, offload 256", "gpt-oss", 16),
    _shape("gpt-oss, --block-size 64", "gpt-oss-block-64"),
    _shape("Gemma 3 (W 1024), block 16", "gemma-3"),
    _shape("Gemma 2 (W 4096), block 16", "gemma-2"),
    _shape("Gemma 4 31B/26B: full 32, SWA 16, W 1024", "gemma-4"),
    _shape("Gemma 4 31B/26B, 64-block chunks", "gemma-4", 64),
    _shape("MiMo-V2-Flash: full 32, SWA 16, W 128", "mimo-v2-flash"),
    _shape("MiMo-V2-Flash, 8-block chunks", "mimo-v2-flash", 8),
    _shape("MiMo-V2-Flash MTP (EAGLE), 8-block chunks", "mimo-v2-flash-mtp", 8),
    _shape("DeepSeek-V4-Flash SWA: MLA 256, SWA 64, W 128", "deepseek-v4-flash"),
    _shape("DeepSeek-V4-Flash MTP SWA (EAGLE)", "deepseek-v4-flash-mtp"),
    _shape("DeepSeek-V4-Flash C128 state: SWA 8, W 128", "deepseek-v4-flash-c128"),
    _shape("DeepSeek-V4-Flash C4 state: SWA 4, W 8", "deepseek-v4-flash-c4"),
    ("measured: full 36, SWA 4, W 17", 36, 4, 17, 0, 1, False),
    ("W 16, extra_retained_tokens 5", 36, 4, 16, 5, 1, False),
]
RULES = ("vllm-0.29", "vllm-0.33", "lookup-window")


def prompts(rng: random.Random) -> list[int]:
    return sorted(int(1000 * (32 ** rng.random())) for _ in range(24))


def later_shapes(P: int, rng: random.Random) -> list[tuple[int, int | None]]:
    return [(P, None), (P + 500, None)] + [(P, rng.randint(P // 2, P)) for _ in range(3)]


def measure(shape, rule: str, seed: int = 0, release=None, hash_lookahead_tokens=None) -> dict:
    """One shape under one store rule. ``release`` (a ``kvreach.releases``
    record): the request runs as in that vLLM release (``rule`` "vllm": its
    own store side; else kvreach's rule scored against it), its lookup and
    its lookahead hashes (``hash_lookahead_tokens``; None: what the release
    derives for the shape, ``kvreach.scenario.derived_hash_lookahead_tokens``),
    through the CLI's one path (``kvreach.scenario``); None: the rule against
    vLLM 0.33.0's lookup, legacy hashes (the table in docs/findings.md)."""
    name, fb, sb, W, extra, bpc, eagle = shape
    rng = random.Random(seed)
    if release is None:
        g = GroupConfig(sb, W, fb * bpc, blocks_per_chunk=bpc, extra_retained_tokens=extra,
                        eagle=eagle)
        groups = (LookupGroup(fb, bpc),
                  LookupGroup(sb, bpc, window_tokens=W, extra_retained_tokens=extra, eagle=eagle))
        parts = VLLM_0_33
    else:
        groups = lookup_groups(Scenario(sb, W, 1, 2048, fb, bpc, eagle=eagle,
                                        extra_retained_tokens=extra), release)
        parts = lookup_parts(release)
    stored = dense_stored = lost = dense = never = requests = lossy = 0
    for P in prompts(rng):
        if release is None:
            tr = run(rule, g, RequestConfig(P), Lifecycle(budget=2048))
        else:
            s = Scenario(sb, W, P, 2048, fb, bpc, eagle=eagle, extra_retained_tokens=extra,
                         hash_lookahead_tokens=hash_lookahead_tokens)
            tr = run_scenario(release if rule == "vllm" else rule, s, release)
        loaded: set[int] = set()
        for T, D in later_shapes(P, rng):
            r = later_lookup(groups, tr, T, D, parts=parts)
            requests += 1
            d, h = r.dense.hit_tokens or 0, r.rule.hit_tokens or 0
            dense += d
            lost += d - h
            lossy += d > h
            loaded |= set(r.rule.loaded[1])
        stored += len(tr.stored)
        dense_stored += len(dense_chunks(groups[1:], tr)[0])
        never += len(set(tr.stored) - loaded)
    n = len(prompts(random.Random(seed)))
    return {"shape": name, "rule": rule, "stored_per_request": stored / n,
            "dense_per_request": dense_stored / n,
            "never_loaded_per_request": never / n, "lost_tokens_pct": 100 * lost / max(1, dense),
            "lossy_requests_pct": 100 * lossy / requests}


RULE_MARKERS = {"vllm-0.29": ("o", "#1f77b4"), "vllm-0.33": ("s", "#ff7f0e"),
                "lookup-window": ("D", "#2ca02c")}


def plot(rows: list[dict], out: Path) -> None:
    """A dot plot a reader reads: one line per shape, sorted by the worst loss
    any rule gives it; per rule a filled marker at the measured value with the
    value printed beside it. A measured 0 is a hollow marker labelled "0"; a
    shape/rule pair not measured would be the text "not measured" (no bar of
    height 0 stands for either)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    by = {(r["shape"], r["rule"]): r for r in rows}
    shapes = [s[0] for s in SHAPES]
    keys = (("lost_tokens_pct", "hit tokens lost vs dense (%)", "{:.1f}"),
            ("lossy_requests_pct", "later requests losing hits (%)", "{:.0f}"))

    def worst(name: str) -> tuple:
        got = [by[(name, rule)] for rule in RULES if (name, rule) in by]
        return tuple(max((r[k] for r in got), default=-1) for k, _, _ in reversed(keys))

    order = sorted(shapes, key=worst)  # worst last: drawn at the top
    with matplotlib.rc_context({"svg.hashsalt": "kvreach"}):
        fig = Figure(figsize=(13, 0.42 * len(order) + 1.8), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, 2, sharey=True)
        for ax, (key, label, fmt) in zip(axes, keys):
            for y, name in enumerate(order):
                ax.axhline(y, color="#eeeeee", linewidth=0.8, zorder=0)
                for i, rule in enumerate(RULES):
                    marker, colour = RULE_MARKERS[rule]
                    yy = y + (1 - i) * 0.25
                    r = by.get((name, rule))
                    if r is None:
                        ax.text(0, yy, "not measured", fontsize=6, va="center", color="#777777")
                        continue
                    v = r[key]
                    zero = v == 0
                    ax.plot([v], [yy], marker=marker, linestyle="none", markersize=5,
                            markerfacecolor="white" if zero else colour,
                            markeredgecolor=colour)
                    text = "0" if zero else fmt.format(v)
                    if not zero and float(text) == 0:  # measured, not 0: never printed as 0
                        text = "<" + fmt.format(1 if fmt == "{:.0f}" else 0.1)
                    ax.text(v + 2, yy, text, fontsize=6,
                            va="center", color=colour)
            ax.set_xlim(-3, 112)
            ax.set_xlabel(label, fontsize=9)
            ax.tick_params(axis="x", labelsize=8)
        axes[0].set_yticks(range(len(order)), order, fontsize=7)
        axes[0].set_ylim(-0.6, len(order) - 0.4)
        handles = [Line2D([], [], marker=m, color=c, linestyle="none", label=rule)
                   for rule, (m, c) in RULE_MARKERS.items()]
        handles.append(Line2D([], [], marker="o", color="#555555", markerfacecolor="white",
                              linestyle="none", label="measured 0 (hollow)"))
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8,
                   frameon=False)
        fig.suptitle("Later requests' offload hits lost against dense stores, per model shape "
                     "and store rule\n(24 prompts of 1k-32k tokens x 5 later requests per "
                     "shape; worst shapes at the top)", fontsize=10)
        fig.savefig(out, dpi=120, metadata={"Software": None})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plot", type=Path,
                    help="write a PNG of lost hit tokens and lossy requests per shape and rule")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--vllm", default=None,
                    help="measure as vLLM X runs it: its own store side (rule \"vllm\") and "
                         "lookup-window, against X's lookup with X's lookahead hashes")
    ap.add_argument("--hash-lookahead-tokens", type=int, default=None,
                    help="with --vllm: L for every shape (default: what X derives per shape)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.vllm is None:
        rows = [measure(s, r) for s in SHAPES for r in RULES]
    else:
        rel = release_of(args.vllm)
        rows = [measure(s, r, release=rel, hash_lookahead_tokens=args.hash_lookahead_tokens)
                for s in SHAPES for r in ("vllm", "lookup-window")]
        for r in rows:
            if r["rule"] == "vllm":
                r["rule"] = f"vLLM {args.vllm}"
    heads = ["model shape", "rule", "SWA chunks stored / request", "dense stores / request",
             "not loaded by the sample / request",
             "hit tokens lost vs dense", "later requests losing hits"]
    if args.markdown:
        print("| " + " | ".join(heads) + " |")
        print("|" + "---|" * len(heads))
    for r in rows:
        vals = [r["shape"], r["rule"], f"{r['stored_per_request']:.1f}",
                f"{r['dense_per_request']:.1f}",
                f"{r['never_loaded_per_request']:.1f}", f"{r['lost_tokens_pct']:.1f}%",
                f"{r['lossy_requests_pct']:.0f}%"]
        print(("| " + " | ".join(vals) + " |") if args.markdown else "  ".join(vals))
    print(f"({len(rows)} rows in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.plot:
        plot(rows, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
