"""The proof run's result cache: one entry per solver check, keyed by the Z3
version, the exact query (its SMT-LIB text, the text the solver parses) and
the check's resource limit (``rlimit``), as verification tools keep one
(Dafny's and Boogie's verification caches).

What is trusted: an ``unsat`` or an ``unknown`` answer, with the resources
the check spent, only on an identical key (a check's answer and its
resource count are a function of the query text, the limit and the Z3
version: :func:`kvreach.proofs.runner._solve`). A ``sat`` answer is never
taken from the cache: the query is solved again (a model is needed anyway
to decode a counterexample, and the sat checks are the cheap ones), so a
counterexample is always re-checked by the solver. An entry that does not
parse, whose key fields differ from the query's, or whose checksum is wrong
is ignored (and overwritten by the fresh answer).

Where: ``$XDG_CACHE_HOME/kvreach/queries`` or ``~/.cache/kvreach/queries``.
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


def _checksum(entry: dict) -> str:
    body = {k: v for k, v in entry.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def lookup(text: str, limit: int) -> tuple[str, int] | None:
    """-> (``unsat`` | ``unknown``, rlimit spent) for this exact query, or
    None (no entry, or one that is not to be trusted)."""
    digest, fields = _key(text, limit)
    try:
        entry = json.loads((cache_dir() / digest[:2] / f"{digest}.json").read_text())
        if (not isinstance(entry, dict) or entry.get("checksum") != _checksum(entry)
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
    entry["checksum"] = _checksum(entry)
    path = cache_dir() / digest[:2] / f"{digest}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(entry, sort_keys=True))
        os.replace(tmp, path)
    except OSError:  # a read-only or full cache directory: no cache, same verdicts
        pass
