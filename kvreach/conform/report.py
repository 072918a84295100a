"""The conformance report: a verdict as the lines ``kvreach conform`` prints,
the nearest record's differences with their inputs shown readably."""

from __future__ import annotations

from kvreach.conform.checks import CHECKS, UNCHECKED
from kvreach.conform.compare import Verdict
from kvreach.impl import lookup as lk
from kvreach.params import GroupConfig


_LETTER = {lk.Answer.HIT: "H", lk.Answer.HIT_PENDING: "P", lk.Answer.RETRY: "R", lk.Answer.MISS: "M"}


def _show(x) -> str:
    if isinstance(x, dict) and x and all(isinstance(v, lk.Answer) for v in x.values()):
        groups = sorted({g for g, _ in x})
        return "{" + ", ".join(
            f"group {g}: " + "".join(_LETTER[x[g, c]] for c in sorted(c for h, c in x if h == g))
            for g in groups) + "} (H hit, P pending, R retry, M miss by chunk)"
    if isinstance(x, dict):
        return ", ".join(f"{k}={_show(v)}" for k, v in x.items())
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], lk.Answer):
        return "".join(_LETTER[a] for a in x) + " (H hit, P pending, R retry, M miss)"
    if isinstance(x, list):
        return "[" + ", ".join("{" + _show(v) + "}" if isinstance(v, dict) else _show(v)
                               for v in x) + "]"
    if isinstance(x, GroupConfig):
        return (f"GroupConfig(block_size={x.block_size}, window={x.window}, "
                f"alignment_tokens={x.alignment_tokens}, blocks_per_chunk={x.blocks_per_chunk}, "
                f"dcp={x.dcp_world_size}, eagle={x.eagle}, retention_interval={x.retention_interval}, "
                f"extra_retained_tokens={x.extra_retained_tokens})")
    if isinstance(x, frozenset):
        return "{" + ", ".join(map(str, sorted(x))) + "}"
    return repr(x)


def render(v: Verdict) -> list[str]:
    """The function layer's report, one line each; the last line is the
    outcome (``equals R``, ``differs ...``, ``cannot decide ...``)."""
    lines = [f"tree: {v.tree}",
             f"function layer: {len(CHECKS)} roles x {v.cases} cases each (seed {v.seed}) "
             f"against {len(v.records)} records: " + ", ".join(r.name for r in v.records),
             "not checked by this layer: " + ", ".join(UNCHECKED)]
    for u in v.unchecked:
        at = "" if u.case is None else f" (case {u.case})"
        lines.append(f"  cannot check role {u.role} on this tree: {u.why}{at}")
    for r in v.records:
        d = v.differences[r.name]
        lines.append(f"  {r.name}: " + ("no checked role differs" if not d else
                                        f"differs in {len(d)}: " + ", ".join(x.role for x in d)))
    eq = v.equal
    if eq is not None:
        lines += [f"  moved (a refactor, not a difference): {m}" for m in v.moved.get(eq.name, [])]
        lines.append(f"equals {eq.name}")
        return lines
    if v.candidates:
        names = ", ".join(r.name for r in v.candidates)
        for r in v.candidates:
            lines += [f"  moved (a refactor, not a difference): {m}" for m in v.moved.get(r.name, [])]
        lines.append(f"cannot decide: no checked role differs from {names}; "
                     f"{len(v.unchecked)} role(s) not checked: "
                     + ", ".join(u.role for u in v.unchecked))
        return lines
    near = v.nearest
    lines.append(f"differs from every record; nearest {near.name}:")
    for d in v.differences[near.name]:
        parts = ", ".join(d.parts) or "(a part every release shares)"
        lines.append(f"  {d.role} [{parts}] at case {d.case}: {_show(d.input)}")
        lines.append(f"    tree -> {d.tree_value!r}, {near.name} -> {d.twin_value!r}")
    return lines
