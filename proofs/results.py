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
import sys
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


def run_header(obligation, rule, load_model, total: float, vllm=None, deep: bool = False) -> dict:
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
        "selection": {"obligation": obligation, "rule": rule, "load_model": load_model,
                      "vllm": vllm, "deep": deep},
        "seconds": round(total, 3),
    }


def write_json(path: Path, header: dict, rows: list, total: float) -> None:
    """``{"run": header (its seconds set to total), "rows": [...]}``."""
    doc = {"run": {**header, "seconds": round(total, 3)}, "rows": [r.to_json() for r in rows]}
    text = json.dumps(doc, indent=2, default=str) + "\n"
    if str(path) == "-":  # stdout
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        Path(path).write_text(text)


def load_results(path: Path) -> dict:
    """``{"run": header, "rows": [...]}`` as :func:`write_json` writes it (a
    bare list of rows, as older versions wrote, gets an empty header)."""
    text = sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8")
    doc = json.loads(text)
    if isinstance(doc, list):
        doc = {"run": {}, "rows": doc}
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise ValueError("not a `kvreach prove --json` file (no 'rows' list)")
    check_shape(doc)
    return doc


# Row fields and the JSON types they must have (what the catalog reads).
ROW_FIELDS: dict[str, tuple[type, ...]] = {
    "obligation": (str,), "rule": (str,), "load_model": (str,), "verdict": (str,),
    "scope": (str,), "seconds": (int, float),
}
OPTIONAL_ROW_FIELDS: dict[str, tuple[type, ...]] = {
    "expected": (str, type(None)), "non_vacuous": (bool, type(None)),
    "mutant": (str, type(None)), "mutant_rejected": (bool, type(None)),
    "detail": (str, type(None)), "counterexample": (dict, type(None)),
    "findings": (list,), "vllm": (str,),
}
RUN_FIELDS: dict[str, tuple[type, ...]] = {
    "date": (str, type(None)), "kvreach": (str, type(None)), "git_commit": (str, type(None)),
    "z3": (str, type(None)), "python": (str, type(None)), "selection": (dict, type(None)),
    "seconds": (int, float, type(None)),
}


def _type_names(types: tuple[type, ...]) -> str:
    names = {str: "a string", int: "a number", float: "a number", bool: "true/false",
             dict: "an object", list: "a list", type(None): "null"}
    return " or ".join(dict.fromkeys(names[t] for t in types))


def check_shape(doc: dict) -> None:
    """``ValueError`` naming the first row and field that is missing or of the
    wrong JSON type (a run the catalog cannot read)."""
    run = doc.get("run", {})
    if not isinstance(run, dict):
        raise ValueError("'run' is not an object")
    for k, types in RUN_FIELDS.items():
        v = run.get(k)
        if k in run and (not isinstance(v, types) or (isinstance(v, bool) and bool not in types)):
            raise ValueError(f"run.{k} is {json.dumps(v)[:40]}, expected {_type_names(types)}")
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict):
            raise ValueError(f"row {i} is {json.dumps(row)[:40]}, expected an object")
        for k, types in (ROW_FIELDS | OPTIONAL_ROW_FIELDS).items():
            if k not in row:
                if k in ROW_FIELDS:
                    raise ValueError(f"row {i} has no '{k}'")
                continue
            v = row[k]
            if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
                raise ValueError(f"row {i} '{k}' is {json.dumps(v)[:40]}, "
                                 f"expected {_type_names(types)}")


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
            "name": f"{r.obligation}[{r.rule},{r.load_model},{r.vllm}]",
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
    if str(path) == "-":  # stdout
        sys.stdout.write(ET.tostring(suites, encoding="unicode", xml_declaration=True) + "\n")
        sys.stdout.flush()
    else:
        ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)
