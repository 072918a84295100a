"""Launch ``crosshair`` CLI runs as subprocesses (via run_crosshair.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "run_crosshair.py")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def errors(self) -> list[str]:
        return [ln for ln in self.stdout.splitlines() if ": error: " in ln]


def start(args: list[str], preimport: tuple[str, ...] = ()) -> subprocess.Popen:
    cmd = [sys.executable, RUNNER]
    for m in preimport:
        cmd += ["--preimport", m]
    cmd += ["--", *args]
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=HERE
    )


def finish(p: subprocess.Popen, wall_timeout: float) -> Result:
    try:
        out, err = p.communicate(timeout=wall_timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return Result(-9, out, err + "\n[killed: wall timeout]")
    return Result(p.returncode, out, err)


CALL_RE = re.compile(r"when calling (\w+\(.*\)) \(which returns")
GIVEN_RE = re.compile(r"Given: \((.*)\),\s*$", re.M)
