"""The verdict of ``kvreach conform``: the system layer (the authority,
:mod:`.system`) and the function layer (the fast diagnosis, :mod:`.compare`)
together, as lines and an exit code (0 equals a record, 1 differs, 2 cannot
decide).

- The system layer agrees with exactly one record and no checked role of the
  function layer differs from it: equals (0).
- It agrees with several: the function layer's records narrow them; one
  left: equals, else cannot decide (2), naming them.
- It agrees with none: differs (1), with the first differing trace, shrunk,
  and the record parts that explain it.
- A checked role differs from the record the system layer agrees with: the
  layers disagree; the function layer's input is a concrete difference the
  system cases did not reach: differs (1), both shown.
- The system layer cannot run (no vLLM here, or the tree does not run over
  it): the function layer's verdict, said so.
"""

from __future__ import annotations

from kvreach.conform.compare import DIFFERS, EQUALS, EXIT, UNDECIDED, Verdict
from kvreach.conform.report import render
from kvreach.conform.system import EDGE_CASES, SystemVerdict


def _system_lines(sv: SystemVerdict) -> list[str]:
    d = sv.data
    if d is None:
        return [f"system layer: cannot run: {sv.missing}"]
    lines = [f"system layer: vLLM {d['vllm']} (real Scheduler, stock OffloadingConnector, "
             f"manager answers scripted): {d['ran']} of {d['cases']} hypothesis cases ran "
             f"(seed {d['seed']}; the first {len(EDGE_CASES)} the records' known edges; "
             f"{d['skipped']} configurations vLLM refuses), "
             f"{d['wall_s']} s",
             "  endings: " + ", ".join(f"{k} {v}" for k, v in d["endings"].items())
             + f"; lookahead-hash mode in {d['lookahead_cases']} cases"
             + ("" if d["lookahead_mode_drawn"] else " (this vLLM has no such mode)"),
             "  transfers: " + (f"a failed store in {d['failed_store_cases']} cases, a failed "
                                f"load in {d['failed_load_cases']}" if d.get("failures_drawn")
                                else "none failed (this vLLM's worker cannot report a failure)")
             + f"; a lookup registered a shared-prefix junction in {d.get('junction_cases', 0)}"
             " cases; DCP not drawn (vLLM refuses DCP with a sliding-window group)"]
    for name, n in d["differing"].items():
        lines.append(f"  {name}: " + ("agrees on every case" if n == 0
                                      else f"differs on {n} case(s)"))
    return lines


def combine(fv: Verdict, sv: SystemVerdict | None) -> tuple[list[str], int]:
    lines = render(fv)
    f_last = lines.pop()
    lines.append(f"function layer: {f_last}")
    if sv is None:
        return lines + [f_last], fv.exit_code
    if sv.switches is not None:
        lines.append("switches read from the tree (each mode is drawn by the system layer):")
        lines += sv.switches.lines()
    lines += _system_lines(sv)
    d = sv.data
    if d is None or not d["ran"]:
        if d is not None:
            lines.append("system layer: no case ran: " + "; ".join(d.get("skipped_why") or []))
        return lines + [f_last], fv.exit_code
    agree = d["agree"]
    fcand = {r.name for r in fv.candidates}
    if not agree:
        sh = d.get("shrunk") or {}
        m = sh.get("mismatch") or {}
        lines.append(f"first differing trace against the nearest record, {d['nearest']} "
                     "(hypothesis-shrunk):")
        lines.append(f"  case: {sh.get('short')}")
        lines.append(f"  at event {m.get('event')}: {m.get('what')}: {m.get('detail')}")
        by = sh.get("explained_by") or []
        lines.append("  explained by the record part(s): " + ("; ".join(by) if by else
                     "no single part (decided by: " + ", ".join(m.get("parts") or []) + ")"))
        lines.append(f"differs from every record; nearest {d['nearest']}")
        return lines, EXIT[DIFFERS]
    narrowed = [a for a in agree if a in fcand] or agree
    if d.get("lookahead_unchecked") or (d["lookahead_mode_drawn"] and not d["lookahead_cases"]):
        lines.append(f"cannot decide: the system layer agrees with {', '.join(narrowed)} with "
                     "legacy hashes, but the tree can run with lookahead block hashes and no "
                     "case ran in that mode (this vLLM cannot be set to it, or too few cases)")
        return lines, EXIT[UNDECIDED]
    if len(narrowed) == 1:
        name = narrowed[0]
        if name not in fcand:
            lines.append(f"the layers disagree: the system layer agrees with {name}, "
                         f"the function layer's checked roles differ from it (above)")
            lines.append(f"differs from {name} in the function layer's roles")
            return lines, EXIT[DIFFERS]
        return lines + [f"equals {name}"], EXIT[EQUALS]
    lines.append(f"cannot decide: the system layer agrees with {', '.join(narrowed)} "
                 f"in {d['ran']} cases; more cases (--system-cases) may separate them")
    return lines, EXIT[UNDECIDED]
