"""`crosshair check` over impl/ (scripts/crosshair_check.sh) runs as part of
the test command: zero counterexamples, bounded by per-condition timeouts."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_crosshair_check_over_impl_finds_no_counterexample():
    env = dict(os.environ, PYTHON=sys.executable)
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "crosshair_check.sh")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=330,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "crosshair check (impl): exit 0" in out
    assert "crosshair check (harness): exit 0" in out
