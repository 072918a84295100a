"""Verdicts and Z3 resources do not depend on machine load.

Runs every proof row twice in one run, as ``kvreach prove`` does (the
process pool, ``pool.run``): first with the machine idle, then
with two CPU hogs (busy-loop subprocesses started here and always killed),
and prints per row the verdict, the Z3 resources spent (``rlimit`` units)
and the wall time, idle / loaded, and the wall-time ratio. Exits 1 if any
verdict or resource count differs between the two runs (wall times may).

    python bench/bench_determinism.py
"""

from __future__ import annotations

import subprocess
import sys
import time

from kvreach.proofs import mutant_check, pool

HOGS = 2


def _run() -> tuple[dict, float]:
    mutant_check.mutant_cache.clear()  # the invariant rows run in this process: redo their mutants
    mutant_check.mutant_use_counts.clear()
    t = time.perf_counter()
    rows = {(r.obligation, r.rule, r.load_model): r for r in pool.run()}
    return rows, time.perf_counter() - t


def main() -> int:
    idle, idle_s = _run()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
    try:
        time.sleep(0.5)
        loaded, loaded_s = _run()
    finally:
        for p in hogs:
            p.kill()
        for p in hogs:
            p.wait()
    bad = 0
    print(f"{'row':46s} {'verdict idle / loaded':31s} {'rlimit idle / loaded':>27s} "
          f"{'wall s idle / loaded':>20s} {'ratio':>6s}")
    for k, a in idle.items():
        b = loaded.get(k)
        same = b is not None and (a.verdict, a.rlimit) == (b.verdict, b.rlimit)
        bad += not same
        print(f"{'/'.join(k):46s} {a.verdict + ' / ' + (b.verdict if b else '-'):31s} "
              f"{a.rlimit:>13,d} / {(b.rlimit if b else 0):>11,d} "
              f"{a.seconds:>8.2f} / {(b.seconds if b else 0):>8.2f} "
              f"{(b.seconds / a.seconds if b and a.seconds else 0):>6.2f}"
              + ("" if same else "  DIFFERS"))
    print(f"whole run: idle {idle_s:.1f} s, loaded ({HOGS} CPU hogs) {loaded_s:.1f} s, "
          f"ratio {loaded_s / idle_s:.2f}; {len(idle)} rows, {bad} differ in verdict or rlimit; "
          f"all as expected idle: {all(r.ok for r in idle.values())}, "
          f"loaded: {all(r.ok for r in loaded.values())}")
    return 1 if bad or len(idle) != len(loaded) else 0


if __name__ == "__main__":
    sys.exit(main())
