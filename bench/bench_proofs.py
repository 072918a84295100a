"""How proof time grows with the bounds the runner uses.

The induction proofs have no bound (any number of steps); the bounds are the
BMC depth of the counterexample search and the per-node resource limit of
the case-splitting. This prints, for each depth, the time to decide the BMC query
of a few rows, and the time of each induction step query.

Then the split strategy: the runner's (a ROOT_RL try, then every
(step kind x EAGLE x retention) case at once, ``solve.solve_cases``) against
the baseline it replaced (a NODE_RL try at every node of a depth-first split over
the same cases, then the rest; ``depth_first`` below), on the slowest proved
rows, measured in the same run, and for each the ratio runner / baseline.

    python bench/bench_proofs.py

With ``--against REV``: the whole proof run of this tree and of commit REV
(checked out with ``git worktree add`` in a temporary directory, removed
after), each in one process of its own (rows in sequence, no pool, no
result cache), and per obligation and in total the Z3 resource units
(``rlimit``) and the CPU seconds of both side by side with the ratio
this tree / REV. ``--obligation NAME`` runs one obligation only.

    python bench/bench_proofs.py --against 34de4e9 [--obligation NAME]
"""

from __future__ import annotations

import json
import time

import z3

from kvreach.params import RetentionMode
from kvreach.proofs import rows, runner, solve
from kvreach.proofs.config import splits
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
            ctx = rows.ctx_for(rule, model)
            q, _, _ = bmc_query(ob, ctx, depth)
            t = time.perf_counter()
            r, _ = solve.check_terms(q.premise + [q.violation], solve.CHECK_RL)
            cells.append(f"{time.perf_counter() - t:6.2f}s {str(r)[:5]:5s}")
        ctx = rows.ctx_for(rule, model)
        t = time.perf_counter()
        r, _ = solve.decide(lifecycle_step_query(ob, ctx), ctx, True, solve.Meter(runner.ROW_RL))
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
    return solve.solve_split(assertions, head + splits(ctx, lifecycle), meter)


def _queries(name: str, rule: str, model: str):
    ob = OBLIGATIONS[name]
    ctx = rows.ctx_for(rule, model)
    if ob.kind == "static":
        return ctx, False, ob.queries(ctx)
    return ctx, True, [lifecycle_step_query(ob, ctx)]


def split_strategies() -> None:
    print()
    print(f"{'row':48s} {'runner':>9s} {'baseline':>9s}  ratio")
    tot_new = tot_old = 0.0
    for name, rule, model in SLOW_ROWS:
        times = []
        for strategy in (solve.solve_cases, depth_first):
            ctx, lifecycle, qs = _queries(name, rule, model)
            t = time.perf_counter()
            verdicts = [str(strategy(q.premise + [q.violation], ctx, lifecycle,
                                     solve.Meter(solve.CASES_RL))[0]) for q in qs]
            times.append(time.perf_counter() - t)
            if verdicts != ["unsat"] * len(qs):
                print(f"  {name} {rule} {model}: {strategy.__name__} gave {verdicts}")
        tot_new, tot_old = tot_new + times[0], tot_old + times[1]
        print(f"{name + ' ' + rule + ' ' + model:48s} {times[0]:8.2f}s {times[1]:8.2f}s  {times[0] / times[1]:.3f}")
    print(f"{'total':48s} {tot_new:8.2f}s {tot_old:8.2f}s  {tot_new / tot_old:.3f}")


# One tree's proof run, in a child whose ``kvreach`` is that tree's: a
# directory on PYTHONPATH holds a ``kvreach`` package that is the tree's
# kvreach/ with spec/, proofs/ and impl/ as its subpackages (what the
# editable install maps), so the child imports the tree's code only.
_CHILD = """
import json, sys, time
from pathlib import Path
from kvreach.proofs import runner
assert Path(runner.__file__).resolve().is_relative_to(Path(sys.argv[2])), runner.__file__
try:
    from kvreach.proofs.pool import run
except ImportError:  # a tree whose runner module held the run
    run = runner.run
rows, t = [], time.process_time()
for row in run(sys.argv[1] or None, jobs=1):
    now = time.process_time()  # a row's CPU (the first row yielded: the invariants' too)
    rows.append([row.obligation, row.rule, row.load_model, row.verdict, row.rlimit, now - t])
    t = now
print(json.dumps(rows))
"""


def _tree_run(tree, obligation: str | None) -> list:
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    tree = Path(tree)
    with tempfile.TemporaryDirectory(prefix="kvreach-bench-") as farm:
        pkg = Path(farm) / "kvreach"
        pkg.mkdir()
        for f in (tree / "kvreach").iterdir():
            (pkg / f.name).symlink_to(f)
        for sub in ("spec", "proofs", "impl"):
            (pkg / sub).symlink_to(tree / sub)
        env = os.environ | {"PYTHONPATH": farm, "KVREACH_PROOF_CACHE": "0"}
        out = subprocess.run([sys.executable, "-c", _CHILD, obligation or "", str(tree.resolve())],
                             env=env,
                             capture_output=True, text=True, cwd=farm)
        if out.returncode != 0:
            raise SystemExit(f"the proof run of {tree} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout)


def against(rev: str, obligation: str | None) -> None:
    import subprocess
    import tempfile
    from pathlib import Path

    here = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="kvreach-against-") as tmp:
        old_tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(here), "worktree", "add", "--detach", str(old_tree), rev],
                       check=True, capture_output=True)
        try:
            runs = {"this": _tree_run(here, obligation), rev: _tree_run(old_tree, obligation)}
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force",
                            str(old_tree)], capture_output=True)
    per = {}
    for side, rows in runs.items():
        for ob, rule, model, verdict, rl, cpu in rows:
            d = per.setdefault(ob, {}).setdefault(side, [0, 0.0, []])
            d[0] += rl
            d[1] += cpu
            d[2].append((rule, model, verdict))
    print(f"{'obligation':40s} {'Munits':>8s} {rev[:8] + ' M':>10s} {'ratio':>6s} "
          f"{'CPU s':>7s} {rev[:8] + ' s':>10s} {'ratio':>6s}")
    tot = {side: [0, 0.0] for side in runs}

    def ratio(a, b):
        return f"{a / b:6.2f}" if b else "     -"
    for ob, sides in per.items():
        new, old = sides.get("this", [0, 0.0, []]), sides.get(rev, [0, 0.0, []])
        for side, d in (("this", new), (rev, old)):
            tot[side][0] += d[0]
            tot[side][1] += d[1]
        same = "" if new[2] == old[2] else "  (rows or verdicts differ)"
        print(f"{ob:40s} {new[0] / 1e6:8.1f} {old[0] / 1e6:10.1f} {ratio(new[0], old[0])} "
              f"{new[1]:7.1f} {old[1]:10.1f} {ratio(new[1], old[1])}{same}")
    new, old = tot["this"], tot[rev]
    print(f"{'total':40s} {new[0] / 1e6:8.1f} {old[0] / 1e6:10.1f} {ratio(new[0], old[0])} "
          f"{new[1]:7.1f} {old[1]:10.1f} {ratio(new[1], old[1])}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="REV", help="compare with this commit's proof run")
    ap.add_argument("--obligation", metavar="NAME", help="with --against: this obligation only")
    a = ap.parse_args()
    if a.against:
        against(a.against, a.obligation)
    else:
        main()
