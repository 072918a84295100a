"""`crosshair check` over impl/ (scripts/crosshair_check.sh) runs as part of
the test command: zero counterexamples, bounded by per-condition timeouts.
The 1800 s limits (here and in the script) only catch a hang: they are far
above the run's 2-3 min on an idle 2-core machine, so a loaded or slower
machine does not fail it."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_crosshair_check_over_impl_finds_no_counterexample():
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "crosshair_check.sh")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=2000,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "crosshair check (impl): exit 0" in out
    assert "crosshair check (harness): exit 0" in out
