"""Cost measured machine-independently for the tests: the number of Python
and C function calls a command makes (``sys.setprofile``), and the peak of
the memory Python allocates meanwhile (``tracemalloc``). Both are the same
on a slow machine and a fast one, loaded or idle; seconds are not (the
seconds are in ``bench/bench_limits.py``)."""

from __future__ import annotations

import sys
import tracemalloc

from typer.testing import CliRunner

from kvreach.cli import app

_runner = CliRunner()


def invoke_counted(args: list[str], memory: bool = False):
    """``CliRunner().invoke(app, args)`` -> (result, calls, peak bytes or None),
    counted on a second invocation: the first one's imports (once per
    process, so dependent on what ran before) are not the command's cost."""
    _runner.invoke(app, args)
    n = 0

    def count(frame, event, arg):
        nonlocal n
        if event == "call" or event == "c_call":
            n += 1

    if memory:
        tracemalloc.start()
    sys.setprofile(count)
    try:
        r = _runner.invoke(app, args)
    finally:
        sys.setprofile(None)
        peak = tracemalloc.get_traced_memory()[1] if memory else None
        if memory:
            tracemalloc.stop()
    return r, n, peak
