"""Run the ``crosshair`` CLI after pre-importing modules.

Usage: ``python tests/conformance/run_crosshair.py [--preimport MOD]... -- ARGS``
where ARGS are ``crosshair`` command-line arguments.

CrossHair's side-effect wall refuses module imports that spawn processes or
write files (importing torch/vLLM runs ``ldconfig`` and writes temp files).
Importing those modules *before* the wall is engaged keeps the wall on for the
analysis itself, instead of unblocking those events for the whole run.
"""

from __future__ import annotations

import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str]) -> None:
    pre: list[str] = []
    while argv and argv[0] == "--preimport":
        pre.append(argv[1])
        argv = argv[2:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    for mod in pre:
        importlib.import_module(mod)
    from crosshair.main import main as crosshair_main

    crosshair_main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
