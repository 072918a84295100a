"""How proof time grows with the bounds the runner uses.

The induction proofs have no bound (any number of steps); the bounds are the
BMC depth of the counterexample search and the per-node solver timeout of the
case-splitting. This prints, for each depth, the time to decide the BMC query
of a few rows, and the time of each induction step query.

    python bench/bench_proofs.py
"""

from __future__ import annotations

import time

import z3

from kvreach.proofs import runner
from kvreach.proofs.obligations import OBLIGATIONS, bmc_query, lifecycle_step_query

ROWS = [
    ("soundness", "vllm-0.29", "intended"),
    ("soundness", "vllm-0.33", "intended"),
    ("exactly-once", "vllm-0.33", "intended"),
    ("computed-before-stored", "vllm-0.29", "intended"),
]


def main() -> None:
    print(f"{'obligation':24s} {'rule':10s} {'model':9s} " + " ".join(f"bmc d={d:<2d}" for d in (1, 2, 3, 4)) + "  induction")
    for name, rule, model in ROWS:
        ob = OBLIGATIONS[name]
        cells = []
        for depth in (1, 2, 3, 4):
            ctx = runner._ctx(rule, model)
            q, _, _ = bmc_query(ob, ctx, depth)
            t = time.perf_counter()
            r, _ = runner._solve(q.premise + [q.violation], 60_000)
            cells.append(f"{time.perf_counter() - t:6.2f}s {str(r)[:5]:5s}")
        ctx = runner._ctx(rule, model)
        t = time.perf_counter()
        r, _ = runner._decide(lifecycle_step_query(ob, ctx), ctx, True)
        print(f"{name:24s} {rule:10s} {model:9s} " + " ".join(cells) + f"  {time.perf_counter() - t:6.2f}s {r}")
    _ = z3


if __name__ == "__main__":
    main()
