"""The comparison: every role on the same seeded inputs for the tree and for
every record's twin; the verdict (the record the tree equals, or the
nearest)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from kvreach.conform.checks import CHECKS
from kvreach.conform.extract import ConformError, Extracted, Tree, extract
from kvreach.releases import RELEASES, Release

DEFAULT_CASES = 1000
MAX_CASES = 1_000_000  # per role: about an hour on the 2-core machine
DEFAULT_SEED = 0


@dataclass
class Difference:
    role: str
    parts: tuple[str, ...]
    case: int | None  # None: the tree lacks or has a function the record's release has not
    input: object
    tree_value: object
    twin_value: object


@dataclass
class Verdict:
    tree: str
    cases: int
    seed: int
    where: dict[str, str]
    differences: dict[str, list[Difference]]  # record name -> first difference per role
    records: tuple[Release, ...] = RELEASES

    @property
    def equal(self) -> Release | None:
        for r in self.records:
            if not self.differences[r.name]:
                return r
        return None

    @property
    def nearest(self) -> Release:
        return min(reversed(self.records), key=lambda r: len(self.differences[r.name]))


def _presence(ex: Extracted, r: Release) -> list[Difference]:
    """The tree has the functions of the record's release, in its files."""
    out = []
    want = r.functions()
    for role, (f, qn) in want.items():
        got = ex.where.get(role)
        if got != f"{f}:{qn}":
            out.append(Difference(f"function {role}", (_part_of(role),), None, f"{f}:{qn}",
                                  got or "absent", f"{f}:{qn}"))
    for role in ("load_window", "store_rule", "store_mask"):
        if role in ex.where and role not in want:
            out.append(Difference(f"function {role}", (_part_of(role),), None, ex.where[role],
                                  ex.where[role], "absent"))
    return out


def _part_of(role: str) -> str:
    return {"window": "window_module", "load_window": "padded_initial_window",
            "store_rule": "store_rule", "store_mask": "store_rule",
            "block_mask": "store_rule", "contiguous_blocks": "store_rule"}.get(role, role)


def conform(tree: Tree, cases: int = DEFAULT_CASES, seed: int = DEFAULT_SEED,
            records: tuple[Release, ...] = RELEASES) -> Verdict:
    """Run every role on ``cases`` seeded random inputs for the tree and for
    every record (``records``: the release records unless a test plants
    another); the first differing input per (record, role)."""
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise ConformError(f"records: {names}: expected distinct names")
    if isinstance(cases, bool) or not isinstance(cases, int) or not 1 <= cases <= MAX_CASES:
        raise ConformError(f"--cases={cases}: expected an integer from 1 to {MAX_CASES:,}")
    ex = extract(tree)
    diffs: dict[str, list[Difference]] = {r.name: _presence(ex, r) for r in records}
    for k, role in enumerate(CHECKS):
        missing = [n for n in role.needs if n not in ex.fns]
        if missing:
            for r in records:
                diffs[r.name].append(Difference(role.name, role.parts, None, None,
                                                "missing " + ", ".join(missing), None))
            continue
        rnd = random.Random(f"{seed}:{role.name}")
        first: dict[str, Difference] = {}
        for i in range(cases):
            x = role.inputs(rnd)
            try:
                t = role.tree(x, ex)
            except Exception as e:  # noqa: BLE001 (the tree's code is under test)
                t = f"raised {type(e).__name__}: {e}"
            for r in records:
                if r.name in first:
                    continue
                try:
                    v = role.twin(x, r)
                except Exception as e:  # noqa: BLE001
                    v = f"raised {type(e).__name__}: {e}"
                if v != t:
                    first[r.name] = Difference(role.name, role.parts, i, x, t, v)
        for name, d in first.items():
            diffs[name].append(d)
    return Verdict(tree.label, cases, seed, dict(ex.where), diffs, tuple(records))
