"""The proof run's result cache: one entry per solver check, keyed by the Z3
version, the exact query (its SMT-LIB text, the text the solver parses) and
the check's resource limit (``rlimit``), as verification tools keep one
(Dafny's and Boogie's verification caches).

What is trusted: an ``unsat`` or an ``unknown`` answer, with the resources
the check spent, only on an identical key (a check's answer and its
resource count are a function of the query text, the limit and the Z3
version: :func:`kvreach.proofs.solve.check_terms`). A ``sat`` answer is never
taken from the cache: the query is solved again (a model is needed anyway
to decode a counterexample, and the sat checks are the cheap ones), so a
counterexample is always re-checked by the solver. An entry that does not
parse, whose key fields differ from the query's, or whose checksum is wrong
is ignored (and overwritten by the fresh answer).

A row is also kept whole, keyed by the source it was proved with (below:
building the queries costs more than solving most of them); its sat checks
are kept with their models, each re-checked by evaluation on a hit.

Where: ``$XDG_CACHE_HOME/kvreach/{queries,rows}`` or
``~/.cache/kvreach/{queries,rows}``.
Off when ``CI`` is ``true`` (CI runs everything) or with
``kvreach prove --no-cache``; the tests and the library default to off
(:data:`ENABLED` is set by the CLI).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import z3

# Set by ``kvreach prove`` (and inherited by its spawned workers through the
# environment variable below); off for any other caller.
ENV = "KVREACH_PROOF_CACHE"
TRUSTED = ("unsat", "unknown")


def enabled() -> bool:
    return os.environ.get(ENV) == "1" and os.environ.get("CI", "").lower() != "true"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kvreach" / "queries"


def _key(text: str, limit: int) -> tuple[str, dict]:
    fields = {"z3": z3.get_version_string(), "rlimit_limit": int(limit),
              "query_sha256": hashlib.sha256(text.encode()).hexdigest()}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return digest, fields


def entry_checksum(entry: dict) -> str:
    body = {k: v for k, v in entry.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def lookup(text: str, limit: int) -> tuple[str, int] | None:
    """-> (``unsat`` | ``unknown``, rlimit spent) for this exact query, or
    None (no entry, or one that is not to be trusted)."""
    digest, fields = _key(text, limit)
    try:
        entry = json.loads((cache_dir() / digest[:2] / f"{digest}.json").read_text())
        if (not isinstance(entry, dict) or entry.get("checksum") != entry_checksum(entry)
                or any(entry.get(k) != v for k, v in fields.items())
                or entry.get("result") not in TRUSTED
                or type(entry.get("used")) is not int or entry["used"] < 0):
            return None
        return entry["result"], entry["used"]
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def store(text: str, limit: int, result: str, used: int) -> None:
    """Record an ``unsat`` / ``unknown`` answer (a ``sat`` one is not kept).
    Written to a temporary file and renamed: a reader never sees half an
    entry, and two workers writing the same entry write the same bytes."""
    if result not in TRUSTED:
        return
    digest, fields = _key(text, limit)
    entry = fields | {"result": result, "used": int(used)}
    entry["checksum"] = entry_checksum(entry)
    path = cache_dir() / digest[:2] / f"{digest}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, sort_keys=True))
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache directory: no cache, same verdicts
        pass


# --- whole rows ---------------------------------------------------------------
#
# Building a row's queries (Python terms, printed to SMT-LIB) costs more than
# solving most of them, so a warm run that looked every query up would still
# pay for all of them. A row is also kept whole (when proved, or a
# counterexample that replays; non-vacuous, its mutant rejected), keyed by
# what its queries are a function of: the source of the packages that build
# and check them (kvreach, kvreach.spec, kvreach.proofs, kvreach.impl: every
# file, the budgets of proofs/config.py included), the Z3 and Python versions
# and the row. The queries have fixed symbol names, the solver a fixed seed
# and no wall-clock limit, and nothing else goes in (no randomness, no time,
# no environment), so an identical key means identical query texts and
# limits, hence the same answers and resource counts: the same exactness as
# the query key, computed without building a query. The row's sat answers
# (non-vacuity, mutant, counterexample) are not trusted: the entry keeps
# each one's SMT-LIB text and model, and a hit checks every model against its
# query by evaluation (the query with the model's values asserted, which the
# solver decides by propagation), solving the query again where that is not
# sat (:func:`kvreach.proofs.runner.cached_row`).

_source: str | None = None
KEPT_VERDICTS = ("proved", "counterexample")


def source_digest() -> str:
    """sha256 over the files of the packages the proof run's queries come
    from, their subpackages included (``kvreach.proofs.obligations``: the
    obligations' scopes and queries), paths and bytes in sorted order, and
    the Z3 and Python versions."""
    global _source
    if _source is None:
        import importlib.util
        import sys

        h = hashlib.sha256()
        h.update(f"z3 {z3.get_version_string()} python {sys.version}".encode())
        for pkg in ("kvreach", "kvreach.spec", "kvreach.proofs", "kvreach.impl"):
            spec = importlib.util.find_spec(pkg)
            for root in spec.submodule_search_locations or ():
                for f in sorted(Path(root).rglob("*")):
                    if f.is_file() and f.suffix in (".py", ".toml"):
                        name = f.relative_to(root).as_posix()
                        h.update(f"{pkg}/{name}\0".encode() + f.read_bytes() + b"\0")
        _source = h.hexdigest()
    return _source


def row_path(key: tuple[str, str, str]) -> tuple[Path, dict]:
    fields = {"source": source_digest(), "row": list(key)}
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return cache_dir().parent / "rows" / digest[:2] / f"{digest}.json", fields


def row_lookup(key: tuple[str, str, str]) -> dict | None:
    """The stored row (``row``: its JSON fields; ``sat``: [[text, limit], ...]
    to solve again) for this row and source, or None."""
    path, fields = row_path(key)
    try:
        entry = json.loads(path.read_text())
        if (not isinstance(entry, dict) or entry.get("checksum") != entry_checksum(entry)
                or any(entry.get(k) != v for k, v in fields.items())
                or not isinstance(entry.get("fields"), dict)
                or entry["fields"].get("verdict") not in KEPT_VERDICTS
                or not isinstance(entry.get("sat"), list)):
            return None
        return entry
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def row_store(key: tuple[str, str, str], row_fields: dict, sat: list) -> None:
    if row_fields.get("verdict") not in KEPT_VERDICTS:
        return
    path, fields = row_path(key)
    entry = fields | {"fields": row_fields,
                      "sat": [[t, int(rl), pins] for t, rl, pins in sat]}
    try:
        entry["checksum"] = entry_checksum(entry)
    except (TypeError, ValueError):  # a counterexample that is not JSON: not kept
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass
