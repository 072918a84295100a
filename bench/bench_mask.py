"""kvreach's ``reachable_block_mask`` vs vLLM 0.33.0's
``SlidingWindowManager.reachable_block_mask`` over 8k..1M-token ranges.

Both build the same mask (checked before timing) for a range of blocks
``[0, tokens / B)`` with the final segment ending there; contracts are off.
Best of ``--repeat`` timings each; the ratio is kvreach / vLLM, measured in
the same run.

    python bench/bench_mask.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import time

import torch
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import SlidingWindowSpec

from kvreach.impl import contracts
from kvreach.impl.mask import reachable_block_mask
from kvreach.params import GroupConfig

CASES = {
    # name: (block_size, window, alignment_tokens, eagle, retention_interval)
    "PR example (B=4, W=16, A=36)": (4, 16, 36, False, None),
    "EAGLE draft (B=4, W=16, A=36)": (4, 16, 36, True, None),
    "retention 288 (B=4, W=16, A=36)": (4, 16, 36, False, 288),
    "wide (B=16, W=128, A=256)": (16, 128, 256, False, None),
}
TOKENS = (8 << 10, 32 << 10, 128 << 10, 512 << 10, 1 << 20)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    contracts.set_mode("off")
    prompt = 1 << 20
    worst = 0.0
    print(f"{'case':34s} {'tokens':>8s} {'vLLM ms':>9s} {'kvreach ms':>10s} {'ratio':>6s}")
    for name, (bs, w, a, eagle, r) in CASES.items():
        g = GroupConfig(block_size=bs, window=w, alignment_tokens=a, eagle=eagle,
                        retention_interval=r)
        spec = SlidingWindowSpec(block_size=bs, num_kv_heads=1, head_size=1,
                                 dtype=torch.float32, sliding_window=w)
        for tokens in TOKENS:
            end = tokens // g.block_tokens
            final = None if eagle or r is not None else end - 1

            def vllm_mask():
                return SlidingWindowManager.reachable_block_mask(
                    start_block=0, end_block=end, alignment_tokens=a, kv_cache_spec=spec,
                    use_eagle=eagle, retention_interval=r,
                    reachable_boundaries=(prompt - 1,) if r is not None else (),
                    dcp_world_size=1, final_segment_end_block=final,
                )

            def kvreach_mask():
                return reachable_block_mask(0, end, g, prompt, final)

            assert vllm_mask() == kvreach_mask(), (name, tokens)
            tv, tk = best(vllm_mask, args.repeat), best(kvreach_mask, args.repeat)
            worst = max(worst, tk / tv)
            print(f"{name:34s} {tokens:8d} {tv * 1e3:9.2f} {tk * 1e3:10.3f} {tk / tv:6.3f}")
    print(f"worst ratio kvreach / vLLM: {worst:.3f}")


if __name__ == "__main__":
    main()
