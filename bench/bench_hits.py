"""How much it matters: per store rule, SWA chunks stored per request, chunks
never loaded, and later-request hit tokens lost against dense stores, for
real model windows, in the single-request world (kvreach.impl.worlds).

    python bench/bench_hits.py [--plot docs/img/hit-loss.png] [--markdown]

Model shapes (SWA window from each model's published config; vLLM's default
block size 16 for both groups; offload chunks of 1 and 4 blocks):
gpt-oss (sliding_window 128, openai/gpt-oss-20b config.json), Gemma 3
(sliding_window 1024, its 4B/12B/27B configs), Mistral 7B v0.1 and Gemma 2
(sliding_window 4096); and two synthetic shapes the proofs single out: issue
9's full block 36 / SWA block 4 / window 17, and window 16 with
extra_retained_tokens 5 (MTP history).

Distribution, fixed by a seed: 24 prompt lengths log-uniform in [1k, 32k]
tokens, chunked prefill at 2048 tokens a step, each prompt completed; later
requests per prompt: the same prompt (a repeat or shared system prompt), the
prompt extended by 500 new tokens, and the prompt diverging at 3 points drawn
uniformly in [P/2, P]. "Not loaded by the sample": a stored SWA chunk none
of the 5 sampled later requests loads. It is not waste over all requests (a
later request ending at another boundary may load it); with full-attention
and SWA blocks of one size the alignment is one chunk, the mask is dense
(every chunk boundary is a hit end) and every rule stores every chunk.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvreach.impl.lifecycle import Lifecycle, run  # noqa: E402
from kvreach.impl.lookup import LookupGroup  # noqa: E402
from kvreach.impl.worlds import later_lookup  # noqa: E402
from kvreach.params import GroupConfig, RequestConfig  # noqa: E402

SHAPES = [
    # name, full block, swa block, window, extra, blocks_per_chunk
    ("gpt-oss (W 128)", 16, 16, 128, 0, 1),
    ("gpt-oss (W 128), 4-block chunks", 16, 16, 128, 0, 4),
    ("Gemma 3 (W 1024)", 16, 16, 1024, 0, 1),
    ("Gemma 3 (W 1024), 4-block chunks", 16, 16, 1024, 0, 4),
    ("Mistral 7B v0.1 / Gemma 2 (W 4096)", 16, 16, 4096, 0, 1),
    ("issue 9: full 36, SWA 4, W 17", 36, 4, 17, 0, 1),
    ("W 16, extra_retained_tokens 5", 36, 4, 16, 5, 1),
]
RULES = ("vllm-0.29", "vllm-0.33", "lookup-window")


def prompts(rng: random.Random) -> list[int]:
    return sorted(int(1000 * (32 ** rng.random())) for _ in range(24))


def later_shapes(P: int, rng: random.Random) -> list[tuple[int, int | None]]:
    return [(P, None), (P + 500, None)] + [(P, rng.randint(P // 2, P)) for _ in range(3)]


def measure(shape, rule: str, seed: int = 0) -> dict:
    name, fb, sb, W, extra, bpc = shape
    rng = random.Random(seed)
    g = GroupConfig(sb, W, fb * bpc, blocks_per_chunk=bpc, extra_retained_tokens=extra)
    groups = (LookupGroup(fb, bpc), LookupGroup(sb, bpc, window_tokens=W, extra_retained_tokens=extra))
    stored = lost = dense = never = requests = lossy = 0
    for P in prompts(rng):
        tr = run(rule, g, RequestConfig(P), Lifecycle(budget=2048))
        loaded: set[int] = set()
        for T, D in later_shapes(P, rng):
            r = later_lookup(groups, tr, T, D)
            requests += 1
            d, h = r.dense.hit_tokens or 0, r.rule.hit_tokens or 0
            dense += d
            lost += d - h
            lossy += d > h
            loaded |= set(r.rule.loaded[1])
        stored += len(tr.stored)
        never += len(set(tr.stored) - loaded)
    n = len(prompts(random.Random(seed)))
    return {"shape": name, "rule": rule, "stored_per_request": stored / n,
            "never_loaded_per_request": never / n, "lost_tokens_pct": 100 * lost / max(1, dense),
            "lossy_requests_pct": 100 * lossy / requests}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plot", type=Path, help="write a PNG of lost hit tokens per shape and rule")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = [measure(s, r) for s in SHAPES for r in RULES]
    cols = ["shape", "rule", "stored_per_request", "never_loaded_per_request",
            "lost_tokens_pct", "lossy_requests_pct"]
    heads = ["model shape", "rule", "SWA chunks stored / request", "not loaded by the sample / request",
             "hit tokens lost vs dense", "later requests losing hits"]
    if args.markdown:
        print("| " + " | ".join(heads) + " |")
        print("|" + "---|" * len(heads))
    for r in rows:
        vals = [r["shape"], r["rule"], f"{r['stored_per_request']:.1f}",
                f"{r['never_loaded_per_request']:.1f}", f"{r['lost_tokens_pct']:.1f}%",
                f"{r['lossy_requests_pct']:.0f}%"]
        print(("| " + " | ".join(vals) + " |") if args.markdown else "  ".join(vals))
    print(f"({len(rows)} rows in {time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(9, 4.5))
        width = 0.27
        for i, rule in enumerate(RULES):
            ys = [r["lost_tokens_pct"] for r in rows if r["rule"] == rule]
            ax.bar([x + (i - 1) * width for x in range(len(SHAPES))], ys, width, label=rule)
        ax.set_xticks(range(len(SHAPES)), [s[0] for s in SHAPES], rotation=25, ha="right", fontsize=7)
        ax.set_ylabel("later-request hit tokens lost vs dense (%)")
        ax.set_title("Single-request world, 24 prompts x 5 later requests per shape")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120, metadata={"Software": None})
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
