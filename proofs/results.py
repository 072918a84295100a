"""The proof run's file formats: ``kvreach prove --json`` (a run header and
one object per row) and ``kvreach prove --junit`` (JUnit XML), the writers
and the reader, in one place so that what is written and what is read cannot
drift apart.

Rows are the runner's ``Row`` objects (anything with its attributes and
``to_json``); this module imports no other kvreach module. ``kvreach prove``
writes, ``kvreach catalog`` (through the CLI) reads.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path


def git_commit() -> str | None:
    """HEAD of the checkout kvreach runs from (``-dirty`` with local changes to
    tracked files), or None outside git."""
    import subprocess

    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def run_header(obligation, rule, load_model, total: float) -> dict:
    """The ``run`` header of ``prove --json``: what ran, with which versions,
    when (one field) and how long; every other field is reproducible."""
    import platform
    from datetime import datetime, timezone
    from importlib import metadata

    import z3

    try:
        version = metadata.version("kvreach")
    except metadata.PackageNotFoundError:  # pragma: no cover
        version = None
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "kvreach": version, "git_commit": git_commit(),
        "z3": z3.get_version_string(), "python": platform.python_version(),
        "selection": {"obligation": obligation, "rule": rule, "load_model": load_model},
        "seconds": round(total, 3),
    }


def write_json(path: Path, header: dict, rows: list, total: float) -> None:
    """``{"run": header (its seconds set to total), "rows": [...]}``."""
    doc = {"run": {**header, "seconds": round(total, 3)}, "rows": [r.to_json() for r in rows]}
    Path(path).write_text(json.dumps(doc, indent=2, default=str) + "\n")


def load_results(path: Path) -> dict:
    """``{"run": header, "rows": [...]}`` as :func:`write_json` writes it (a
    bare list of rows, as older versions wrote, gets an empty header)."""
    doc = json.loads(Path(path).read_text())
    if isinstance(doc, list):
        doc = {"run": {}, "rows": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError("not a `kvreach prove --json` file (no 'rows' list)")
    return doc


def write_junit(rows: list, path: Path, total: float) -> None:
    """One ``testcase`` per row; a row that is not ok is a ``failure``."""
    suites = ET.Element("testsuites")
    suite = ET.SubElement(suites, "testsuite", {
        "name": "kvreach.prove", "tests": str(len(rows)),
        "failures": str(sum(1 for r in rows if not r.ok)), "errors": "0",
        "skipped": "0", "time": f"{total:.3f}",
    })
    for r in rows:
        tc = ET.SubElement(suite, "testcase", {
            "classname": f"kvreach.prove.{r.obligation}",
            "name": f"{r.obligation}[{r.rule},{r.load_model}]",
            "time": f"{r.seconds:.3f}",
        })
        if not r.ok:
            f = ET.SubElement(tc, "failure", {
                "message": f"verdict {r.verdict}, expected {r.expected}",
                "type": r.verdict,
            })
            f.text = (
                f"verdict={r.verdict} expected={r.expected} non_vacuous={r.non_vacuous} "
                f"mutant={r.mutant} mutant_rejected={r.mutant_rejected} detail={r.detail}"
            )
        out = ET.SubElement(tc, "system-out")
        out.text = json.dumps(r.to_json(), default=str)
    ET.indent(suites)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
