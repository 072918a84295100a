"""The comparison: every role on the same seeded inputs for the tree and for
every record's twin; the verdict (the record the tree equals, the records it
differs from, or that the roles it could run do not decide).

A role the tree's code cannot run with the stubs (its function not found, a
new required parameter, an attribute or helper the stubs lack, a value of a
new shape) is *not checked* on this tree, with what it now reads: a refactor
is not a semantic change. Its verdict then rests on the system layer
(:mod:`kvreach.conform.system`)."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from kvreach.conform import stubs
from kvreach.conform.checks import CHECKS
from kvreach.conform.extract import ROLES, ConformError, Extracted, Tree, extract
from kvreach.conform.records import RECORDS
from kvreach.releases import Release

DEFAULT_CASES = 1000
MAX_CASES = 1_000_000  # per role: about an hour on the 2-core machine
DEFAULT_SEED = 0

EQUALS, DIFFERS, UNDECIDED = "equals", "differs", "cannot decide"
EXIT = {EQUALS: 0, DIFFERS: 1, UNDECIDED: 2}


@dataclass
class Difference:
    role: str
    parts: tuple[str, ...]
    case: int | None
    input: object
    tree_value: object
    twin_value: object


@dataclass
class Unchecked:
    """A role this tree's code could not be run for, and why."""

    role: str
    parts: tuple[str, ...]
    why: str  # "it now reads Request.block_hashes", ...
    case: int | None = None  # the input it failed on (None: before any input)


@dataclass
class Verdict:
    tree: str
    cases: int
    seed: int
    where: dict[str, str]
    differences: dict[str, list[Difference]]  # record name -> first difference per role
    records: tuple[Release, ...] = RECORDS
    unchecked: list[Unchecked] = field(default_factory=list)
    # record name -> the tree's functions not where that record's release has
    # them (a moved function is a refactor: shown, never a difference)
    moved: dict[str, list[str]] = field(default_factory=dict)

    @property
    def candidates(self) -> tuple[Release, ...]:
        """The records no checked role differs from."""
        return tuple(r for r in self.records if not self.differences[r.name])

    @property
    def equal(self) -> Release | None:
        """The record the tree equals: no role differs and every role ran."""
        c = self.candidates
        return c[0] if c and not self.unchecked else None

    @property
    def outcome(self) -> str:
        if self.equal is not None:
            return EQUALS
        return UNDECIDED if self.candidates else DIFFERS

    @property
    def exit_code(self) -> int:
        return EXIT[self.outcome]

    @property
    def nearest(self) -> Release:
        return min(reversed(self.records), key=lambda r: len(self.differences[r.name]))


_SIGNATURE = re.compile(r"missing \d+ required (positional|keyword-only) argument"
                        r"|unexpected keyword argument|takes \d+ positional arguments? but \d+")


def _why(exc: BaseException | None, missing: list[str]) -> str | None:
    """Why a tree call says nothing about the record (None: it does)."""
    if missing:
        return "it now reads " + ", ".join(missing)
    if isinstance(exc, NameError):
        return f"it now calls {getattr(exc, 'name', None) or exc}, which is not in the tree's files"
    if isinstance(exc, TypeError) and _SIGNATURE.search(str(exc)):
        return f"its signature changed ({exc})"
    return None


def _moved(ex: Extracted, r: Release) -> list[str]:
    out = []
    for role, (f, qn) in r.functions().items():
        got = ex.where.get(role)
        if got is not None and got != f"{f}:{qn}":
            out.append(f"{role}: at {got} ({r.name} has it at {f}:{qn})")
    return out


def conform(tree: Tree, cases: int = DEFAULT_CASES, seed: int = DEFAULT_SEED,
            records: tuple[Release, ...] = RECORDS) -> Verdict:
    """Run every role on ``cases`` seeded random inputs for the tree and for
    every record (``records``: the release records and the rule twins,
    ``kvreach.conform.records``, unless a test plants another); the first differing input per (record, role), and the roles
    the tree's code cannot be run for."""
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise ConformError(f"records: {names}: expected distinct names")
    if isinstance(cases, bool) or not isinstance(cases, int) or not 1 <= cases <= MAX_CASES:
        raise ConformError(f"--cases={cases}: expected an integer from 1 to {MAX_CASES:,}")
    ex = extract(tree)
    diffs: dict[str, list[Difference]] = {r.name: [] for r in records}
    unchecked: list[Unchecked] = []
    for role in CHECKS:
        missing = [n for n in role.needs if n not in ex.fns]
        if missing:
            unchecked.append(Unchecked(role.name, role.parts, "the tree has no " + ", ".join(
                " or ".join(ROLES[n]) for n in missing) + " (renamed, or moved out of the files searched)"))
            continue
        rnd = random.Random(f"{seed}:{role.name}")
        first: dict[str, Difference] = {}
        gap = None
        for i in range(cases):
            x = role.inputs(rnd)
            stubs.ACTIVE_TREE[0] = ex
            stubs.reads_missing()
            exc = None
            try:
                t = role.tree(x, ex)
            except Exception as e:  # noqa: BLE001 (the tree's code is under test)
                exc, t = e, f"raised {type(e).__name__}: {e}"
            finally:
                stubs.ACTIVE_TREE[0] = None
            why = _why(exc, stubs.reads_missing())
            if why is None and exc is None and not role.shape(t):
                why = f"it now returns {type(t).__name__} {t!r:.60} (expected {role.shape_text})"
            if why is not None:
                gap = Unchecked(role.name, role.parts, why, i)
                break
            for r in records:
                if r.name in first:
                    continue
                try:
                    v = role.twin(x, r)
                except Exception as e:  # noqa: BLE001
                    v = f"raised {type(e).__name__}: {e}"
                if not role.same(t, v):
                    first[r.name] = Difference(role.name, role.parts, i, x, t, v)
        if gap is not None:
            unchecked.append(gap)
            continue
        for name, d in first.items():
            diffs[name].append(d)
    moved = {r.name: _moved(ex, r) for r in records}
    return Verdict(tree.label, cases, seed, dict(ex.where), diffs, tuple(records), unchecked, moved)
