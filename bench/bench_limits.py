"""The seconds behind the limits that ``tests/test_cli_limits.py`` checks
machine-independently (CPU-time ratios, calls, memory): wall and CPU seconds
and peak resident MB of ``simulate`` and ``lookup`` with a 10^6- and a
10^7-token prompt (PR #54362's geometry, ``--budget 1000``), and of a
100 000-token ``simulate --json`` with window 16, 10^9 and 2^63 - 1, each
with its ratio to the baseline measured in the same run (10^6 tokens;
window 16).

    python bench/bench_limits.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

KVREACH = shutil.which("kvreach", path=str(Path(sys.executable).parent)) or "kvreach"
PR = ["--full-block-size", "36", "--swa-block-size", "4", "--window", "16"]


def run(args: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak resident MB) of ``kvreach args``, each run in a
    wrapper process of its own (a process's children's ``ru_maxrss`` is the
    largest child it ever waited for)."""
    code = ("import resource, subprocess, sys, json, time; t = time.perf_counter(); "
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, "
            "text=True); w = time.perf_counter() - t; "
            "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print(json.dumps([r.returncode, r.stderr, w, u.ru_utime + u.ru_stime, "
            "u.ru_maxrss / 1024]))")
    out = subprocess.run([sys.executable, "-c", code, KVREACH, *args], capture_output=True,
                         text=True, check=True)
    rc, err, wall, cpu, mb = json.loads(out.stdout)
    if rc != 0:
        raise SystemExit(f"kvreach {' '.join(args)}: exit {rc}: {err.strip()}")
    return wall, cpu, mb


def table(title: str, cases: list[tuple[str, list[str]]]) -> None:
    print(title)
    print(f"  {'case':28s} {'wall s':>8s} {'CPU s':>8s} {'peak MB':>8s} {'wall x':>7s} "
          f"{'CPU x':>7s}")
    base = None
    for name, args in cases:
        wall, cpu, mb = run(args)
        base = base or (wall, cpu)
        print(f"  {name:28s} {wall:8.2f} {cpu:8.2f} {mb:8.0f} {wall / base[0]:7.2f} "
              f"{cpu / base[1]:7.2f}")


def main() -> None:
    for cmd, extra in (("simulate", []), ("simulate", ["--json"]), ("lookup", [])):
        args = [cmd, "--rule", "vllm-0.33", *PR, "--budget", "1000", *extra]
        table(f"{cmd} {' '.join(extra)}".strip() + " (x: against 10^6 tokens; linear is <= 10)",
              [(f"{n} tokens", [*args, "--prompt", str(n)]) for n in (10**6, 10**7)])
    args = ["simulate", "--rule", "vllm-0.33", "--full-block-size", "36", "--swa-block-size",
            "4", "--prompt", "100000", "--budget", "1000", "--json"]
    table("simulate --json, 10^5 tokens (x: against window 16)",
          [(f"window {w}", [*args, "--window", w]) for w in ("16", "1000000000", str(2**63 - 1))])


if __name__ == "__main__":
    main()
