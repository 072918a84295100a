"""Trace validation: a recorded trace of vLLM's real scheduler checked, step by
step, against the Z3 spec (the shape of etcd-io/raft's
``tla/Traceetcdraft.tla`` and ``validate.sh``: the implementation writes a
trace, a separate validator replays it against the spec).

The trace format, one JSON object per line, one line per step of one SWA
group of one request, in the order the steps happened within that
(seed, request, group) lifecycle::

    {"seed": 0, "request": "r0-3", "group": 1, "index": 0,
     "config": {"group": {<GroupConfig fields>}, "prompt": 57,
                "offload_prompt_only": true, "budget": 64, "async_scheduling": false},
     "kind": "lookup", "sched": 0, "pre": [0, 0], "post": [0, 0],
     "outcome": "accept", "offered": [], "accepted": [], "null": [],
     "shared_prefix_boundary": 0, "allocated_chunks": null, "note": "..."}

``kind`` is a transition of ``spec.lifecycle.TRANSITIONS``; ``pre`` /
``post`` the state (computed tokens f, the group's store cursor) before and
after; ``sched`` the step's size (or a start's hit); ``outcome`` the offload
manager's answer to ``prepare_store`` (``spec.lifecycle.OUTCOMES``);
``offered`` / ``accepted`` the chunks ``prepare_store`` received / stored;
``null`` the chunks holding a null block id; ``shared_prefix_boundary`` and
``allocated_chunks`` what a store step read from the request and the
allocation.

Each step is checked against ``spec.lifecycle.transition(...,
world="restarts")`` with those values pinned (``spec.evaluate.StepChecker``):
(A) it is a transition; (B) the spec offers and accepts exactly its chunks;
consecutive steps chain (one step's post-state is the next one's pre-state)
and a lifecycle starts from (0, 0). Validating needs no vLLM::

    python -m kvreach.vllm_harness.trace validate FILE

exits 0 when every step is a transition of the spec, 1 with the first step
that is not (decoded, with the steps before it), 2 on a malformed file.
Recording needs vLLM 0.33.0 (:mod:`kvreach.vllm_harness.trace_record`)::

    python -m kvreach.vllm_harness.trace_record --seeds 0:6 --out FILE
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kvreach.params import GroupConfig, RequestConfig
from kvreach.spec import lifecycle as lc
from kvreach.spec.evaluate import StepChecker

RULE = "vllm-0.33"
CHECK_RL = 20_000_000  # Z3 resource units per check (never wall time)
REOFFERED = "store steps re-offering chunks accepted in an earlier incarnation (F10)"


@dataclass
class Step:
    """One recorded step of one SWA group (see the module's format)."""

    kind: str
    sched: int
    pre: tuple[int, int]  # (f, cursor)
    post: tuple[int, int]
    outcome: int = lc.O_ACCEPT
    offered: frozenset = frozenset()
    accepted: frozenset = frozenset()
    null: frozenset = frozenset()  # chunks with a null block id
    note: str = ""
    shared_prefix_boundary: int = 0  # Request.shared_prefix_boundary at a store step
    allocated_chunks: int | None = None  # min(allocated, keyed) chunks at a store step
    # RequestOffloadState.load_failed before and after the step (vLLM 0.34.0;
    # None: not recorded, the spec's ghost then free)
    load_failed: tuple[bool, bool] | None = None


@dataclass(frozen=True)
class Config:
    """What a lifecycle's steps are checked under: the group, the request,
    the scheduler's token budget."""

    group: GroupConfig
    prompt: int
    offload_prompt_only: bool
    budget: int
    async_scheduling: bool = False

    def request(self) -> RequestConfig:
        return RequestConfig(self.prompt, None, self.offload_prompt_only)


def step_line(seed: int, request: str, group: int, index: int, config: Config, st: Step) -> dict:
    """One step as its trace line."""
    return {"seed": seed, "request": request, "group": group, "index": index,
            "config": {"group": dataclasses.asdict(config.group), "prompt": config.prompt,
                       "offload_prompt_only": config.offload_prompt_only,
                       "budget": config.budget, "async_scheduling": config.async_scheduling},
            "kind": st.kind, "sched": st.sched, "pre": list(st.pre), "post": list(st.post),
            "outcome": lc.OUTCOMES[st.outcome], "offered": sorted(st.offered),
            "accepted": sorted(st.accepted), "null": sorted(st.null),
            "shared_prefix_boundary": st.shared_prefix_boundary,
            "allocated_chunks": st.allocated_chunks, "note": st.note,
            "load_failed": None if st.load_failed is None else list(st.load_failed)}


def parse_line(d: dict) -> tuple[tuple[int, str, int], int, Config, Step]:
    """A trace line -> ((seed, request, group), index, config, step)."""
    c = d["config"]
    config = Config(GroupConfig(**c["group"]), c["prompt"], c["offload_prompt_only"],
                    c["budget"], c.get("async_scheduling", False))
    st = Step(d["kind"], d["sched"], tuple(d["pre"]), tuple(d["post"]),
              lc.OUTCOMES.index(d["outcome"]), frozenset(d["offered"]),
              frozenset(d["accepted"]), frozenset(d["null"]), d.get("note", ""),
              d.get("shared_prefix_boundary", 0), d.get("allocated_chunks"),
              None if d.get("load_failed") is None else tuple(d["load_failed"]))
    return (d["seed"], d["request"], d["group"]), d["index"], config, st


def write(path: Path | str, lines: Iterable[dict]) -> int:
    """Write trace lines to ``path``. -> the number of lines."""
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for d in lines:
            out.write(json.dumps(d, separators=(",", ":")) + "\n")
            n += 1
    return n


def read(path: Path | str) -> Iterator[dict]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise TraceError(f"{path}:{n}: not a JSON line ({e.msg})") from None


class TraceError(ValueError):
    """A malformed trace (not a spec violation)."""


# ---------------------------------------------------------------------------
# checking against the spec
# ---------------------------------------------------------------------------


@dataclass
class Totals:
    lifecycles: int = 0
    steps: int = 0
    checks: int = 0
    kinds: collections.Counter = field(default_factory=collections.Counter)
    sub: collections.Counter = field(default_factory=collections.Counter)
    failures: list = field(default_factory=list)


class Validator:
    """Checks lifecycles against the spec; one ``StepChecker`` per
    (group, request, budget), one Z3 check per distinct step."""

    def __init__(self, rule: str = RULE, rlimit: int = CHECK_RL):
        self.rule, self.rlimit = rule, rlimit
        self._checkers: dict = {}
        self._results: dict = {}
        self.totals = Totals()

    def _checker(self, config: Config) -> StepChecker:
        key = (config.group, config.request(), config.budget)
        if key not in self._checkers:
            self._checkers[key] = StepChecker(config.group, config.request(), self.rule,
                                              config.budget, self.rlimit)
        return self._checkers[key]

    def explain(self, config: Config, st: Step) -> str | None:
        """None when the step is a transition of the spec, else why not."""
        checker = self._checker(config)
        key = (id(checker), st.kind, st.sched, st.pre, st.post, st.outcome, st.offered,
               st.accepted, st.null, st.shared_prefix_boundary, st.allocated_chunks,
               st.load_failed)
        if key not in self._results:
            self.totals.checks += 1
            self._results[key] = checker.explain(
                st.kind, st.sched, st.outcome, st.pre, st.post, st.offered, st.accepted,
                st.null, st.shared_prefix_boundary, st.allocated_chunks,
                load_failed=st.load_failed)
        return self._results[key]

    def lifecycle(self, key: tuple[int, str, int], config: Config, steps: list[Step]) -> None:
        """One (seed, request, group)'s steps, in order."""
        totals = self.totals
        totals.lifecycles += 1
        _count_reoffers(totals, steps)
        prev = None
        for i, st in enumerate(steps):
            totals.steps += 1
            totals.kinds[st.kind] += 1
            _subkind(totals, st)
            if prev is not None and prev.post != st.pre:
                why = f"does not chain: previous post {prev.post} != pre {st.pre}"
            elif prev is None and st.pre != (0, 0):
                why = f"first step not from the initial state: {st.pre}"
            else:
                why = self.explain(config, st)
            if why:
                totals.failures.append(describe(key, config, steps, i, why))
            prev = st

    def lines(self, lines: Iterable[dict]) -> Totals:
        """Trace lines, grouped into lifecycles by (seed, request, group) in
        the order each first appears; each lifecycle's ``index`` must run
        0, 1, 2, ..."""
        lives: dict = {}
        for d in lines:
            try:
                key, index, config, st = parse_line(d)
            except (KeyError, TypeError, ValueError) as e:
                raise TraceError(f"malformed trace line ({type(e).__name__}: {e}): {d}") from None
            config0, steps = lives.setdefault(key, (config, []))
            if index != len(steps) or config != config0:
                raise TraceError(f"seed {key[0]}, request {key[1]}, group {key[2]}: line with "
                                 f"index {index} after {len(steps)} steps"
                                 + ("" if config == config0 else ", with another config"))
            steps.append(st)
        for key, (config, steps) in lives.items():
            self.lifecycle(key, config, steps)
        return self.totals


def validate(path: Path | str, rule: str = RULE) -> Totals:
    """Validate a trace file. -> its totals (``failures`` empty: every step a
    transition of the spec)."""
    return Validator(rule).lines(read(path))


def _count_reoffers(totals: Totals, steps: list[Step]) -> None:
    """F10 on the real scheduler: a chunk the manager accepted in one
    incarnation (between two lookups) offered again in a later one."""
    accepted_before: set = set()
    this: set = set()
    for st in steps:
        if st.kind == "lookup":
            accepted_before |= this
            this = set()
        if st.offered & accepted_before:
            totals.sub[REOFFERED] += 1
        this |= st.accepted


AFTER_FAILED_LOAD = "a step after a failed load"


def _subkind(totals: Totals, st: Step) -> None:
    if st.load_failed is not None and st.load_failed[0]:
        totals.sub[AFTER_FAILED_LOAD] += 1
    if st.kind == "lookup":
        totals.sub["lookup deferred" if st.note == "deferred" else "lookup answered"] += 1
    if st.kind in ("start", "loaded"):
        local, ext = (int(x.split("=")[1]) for x in st.note.split()[:2])
        what = "zero hit" if local + ext == 0 else ("offload hit" if ext else "GPU-local hit")
        totals.sub[f"{st.kind}: {what} ({st.note.split()[-1]})"] += 1
    if st.kind not in ("preempt", "lookup", "start", "loaded"):
        totals.sub[f"store outcome {lc.OUTCOMES[st.outcome]}"] += 1
        if any(c >= st.pre[1] for c in st.null):
            totals.sub["store with null blocks"] += 1
        if st.shared_prefix_boundary:
            totals.sub["store with a shared_prefix_boundary"] += 1


def describe(key: tuple[int, str, int], config: Config, steps: list[Step], i: int,
             why: str) -> str:
    """The failing step ``i`` decoded, with up to six steps before it."""
    seed, rid, gi = key
    lines = [f"seed {seed}, request {rid}, group {gi} ({config.group}), "
             f"budget {config.budget}, async {config.async_scheduling}: step {i}: {why}"]
    for j, st in enumerate(steps[max(0, i - 6): i + 1], max(0, i - 6)):
        lines.append(f"  {'>' if j == i else ' '} {j}: {st.kind} sched={st.sched} {st.pre}->{st.post} "
                     f"outcome={lc.OUTCOMES[st.outcome]} offered={sorted(st.offered)} "
                     f"accepted={sorted(st.accepted)} null<{len(st.null)}> {st.note}")
    return "\n".join(lines)


def report(totals: Totals) -> str:
    out = [f"lifecycles {totals.lifecycles}, steps {totals.steps} (per SWA group), "
           f"distinct Z3-checked steps {totals.checks}, failures {len(totals.failures)}"]
    out += [f"  {k}: {totals.kinds[k]}" for k in lc.KINDS]
    out += [f"    {k}: {v}" for k, v in sorted(totals.sub.items())]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m kvreach.vllm_harness.trace",
        description="Validate a recorded trace (one JSON line per step) against the Z3 spec.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="exit 0 iff every step is a transition of the spec")
    v.add_argument("file")
    v.add_argument("--rule", default=RULE, help=f"the store rule of the spec (default {RULE})")
    a = p.parse_args(argv)
    try:
        totals = validate(a.file, a.rule)
    except OSError as e:
        print(f"trace validate: cannot read {a.file}: {e.strerror}", file=sys.stderr)
        return 2
    except TraceError as e:
        print(f"trace validate: {e}", file=sys.stderr)
        return 2
    print(report(totals))
    if totals.failures:
        print("\nfirst step that is not a transition of the spec:\n" + totals.failures[0])
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
