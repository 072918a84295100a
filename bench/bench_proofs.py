"""How proof time grows with the bounds the runner uses.

The induction proofs have no bound (any number of steps); the bounds are the
BMC depth of the counterexample search and the per-node resource limit of
the case-splitting. This prints, for each depth, the time to decide the BMC query
of a few rows, and the time of each induction step query.

Then the split strategy: the runner's (a ROOT_RL try, then every
(step kind x EAGLE x retention) case at once, ``runner._solve_cases``) against
the baseline it replaced (a NODE_RL try at every node of a depth-first split over
the same cases, then the rest; ``depth_first`` below), on the slowest proved
rows, measured in the same run, and for each the ratio runner / baseline.

    python bench/bench_proofs.py
"""

from __future__ import annotations

import time

import z3

from kvreach.params import RetentionMode
from kvreach.proofs import runner
from kvreach.proofs.induction import bmc_query, lifecycle_step_query
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.spec.lifecycle import K_FINISH

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
            r, _ = runner._solve(q.premise + [q.violation], runner.CHECK_RL)
            cells.append(f"{time.perf_counter() - t:6.2f}s {str(r)[:5]:5s}")
        ctx = runner._ctx(rule, model)
        t = time.perf_counter()
        r, _ = runner._decide(lifecycle_step_query(ob, ctx), ctx, True, runner.Meter(runner.ROW_RL))
        print(f"{name:24s} {rule:10s} {model:9s} " + " ".join(cells) + f"  {time.perf_counter() - t:6.2f}s {r}")
    _ = z3
    split_strategies()


SLOW_ROWS = [
    ("completeness", "vllm-0.33", "intended"),
    ("completeness", "vllm-0.33", "aligned"),
    ("load-witness", "any", "intended"),
    ("load-witness", "any", "aligned"),
    ("chunk-mask-closed-form", "any", "any"),
]


def depth_first(assertions: list, ctx, lifecycle: bool, meter):
    """The baseline: the runner's split before it split the cube at once."""
    s = ctx.s
    head = [s.eagle, s.retention_mode == RetentionMode.NONE, s.retention_mode == RetentionMode.ZERO]
    if lifecycle:
        head.insert(0, z3.Int("kind_t") == K_FINISH)
    return runner._solve_split(assertions, head + runner._splits(ctx, lifecycle), meter)


def _queries(name: str, rule: str, model: str):
    ob = OBLIGATIONS[name]
    ctx = runner._ctx(rule, model)
    if ob.kind == "static":
        return ctx, False, ob.queries(ctx)
    return ctx, True, [lifecycle_step_query(ob, ctx)]


def split_strategies() -> None:
    print()
    print(f"{'row':48s} {'runner':>9s} {'baseline':>9s}  ratio")
    tot_new = tot_old = 0.0
    for name, rule, model in SLOW_ROWS:
        times = []
        for strategy in (runner._solve_cases, depth_first):
            ctx, lifecycle, qs = _queries(name, rule, model)
            t = time.perf_counter()
            verdicts = [str(strategy(q.premise + [q.violation], ctx, lifecycle,
                                     runner.Meter(runner.CASES_RL))[0]) for q in qs]
            times.append(time.perf_counter() - t)
            if verdicts != ["unsat"] * len(qs):
                print(f"  {name} {rule} {model}: {strategy.__name__} gave {verdicts}")
        tot_new, tot_old = tot_new + times[0], tot_old + times[1]
        print(f"{name + ' ' + rule + ' ' + model:48s} {times[0]:8.2f}s {times[1]:8.2f}s  {times[0] / times[1]:.3f}")
    print(f"{'total':48s} {tot_new:8.2f}s {tot_old:8.2f}s  {tot_new / tot_old:.3f}")


if __name__ == "__main__":
    main()
