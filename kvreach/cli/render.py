"""Rendering for the terminal: chunk sets as ranges, a lifecycle trace
(``Trace.to_json`` form) as a steps table, the stored / loadable / needed
summary, the ``prove`` table and report, a counterexample, a drawn chunk map.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from kvreach.cli._common import show_value


def ranges(chunks: Iterable[int]) -> str:
    """Compress ``[5, 6, 7, 8, 14, 15]`` to ``"5-8,14-15"`` ("-" when empty)."""
    xs = sorted(set(chunks))
    if not xs:
        return "-"
    out, lo, prev = [], xs[0], xs[0]
    for x in xs[1:]:
        if x == prev + 1:
            prev = x
            continue
        out.append(f"{lo}-{prev}" if prev > lo else f"{lo}")
        lo = prev = x
    out.append(f"{lo}-{prev}" if prev > lo else f"{lo}")
    return ",".join(out)


STEP_COLUMNS = ("step", "kind", "sched", "computed", "after", "offload", "chunks", "cursor",
                "#sub")
RICH_TABLE_ROWS = 500  # longer step tables are laid out as plain text (rich: ~1 ms a row)


def _step_cells(s: dict) -> list[str]:
    kind = s["kind"] + ("*" if s.get("in_flight") else "")
    return [str(s["index"]), kind, str(s["scheduled_tokens"]), str(s["num_computed_tokens"]),
            str(s["tokens_after_batch"]), str(s["offloadable_tokens"]), str(s["num_chunks"]),
            f"{s['cursor_before']}->{s['cursor_after']}", str(len(s["submitted"]))]


def _plain_steps_table(trace: dict, title: str) -> str:
    """The steps table as plain fixed-width text (the same columns), linear
    in the rows."""
    rows = [_step_cells(s) for s in trace["steps"]]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(STEP_COLUMNS)]

    def line(cells) -> str:
        return "  ".join(c.ljust(w) if i == 1 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))
    head = line(STEP_COLUMNS)
    return "\n".join([title, head, "-" * len(head)] + [line(r) for r in rows])


def write_json(doc: object, write) -> None:
    """``write(json.dumps(doc, indent=2) + "\\n")``, the same text, streamed:
    a list of scalars is joined in one go (C speed) and nothing holds the
    whole document as one string (a long request's chunk lists are 10^7
    numbers; ``json.dumps`` with ``indent`` runs its pure-Python encoder)."""
    import json

    scalar = (str, int, float, bool, type(None))
    dumps = json.dumps
    buf: list[str] = []
    out, write = write, buf.append  # pieces are joined and written in batches

    def emit(o: object, depth: int) -> None:
        pad, inner = "\n" + "  " * depth, "\n" + "  " * (depth + 1)
        if isinstance(o, dict):
            if not o:
                write("{}")
                return
            write("{")
            for i, (k, v) in enumerate(o.items()):
                write(("," if i else "") + inner + dumps(str(k)) + ": ")
                emit(v, depth + 1)
            write(pad + "}")
        elif isinstance(o, (list, tuple)):
            if not o:
                write("[]")
            elif all(type(x) is int for x in o):
                write("[" + inner + ("," + inner).join(map(str, o)) + pad + "]")
            else:
                write("[")
                for i, v in enumerate(o):
                    write(("," if i else "") + inner)
                    emit(v, depth + 1)
                write(pad + "]")
        elif isinstance(o, scalar):
            write(dumps(o))
        else:
            raise TypeError(f"not JSON: {type(o).__name__}")
        if len(buf) > 4096:
            out("".join(buf))
            buf.clear()

    emit(doc, 0)
    write("\n")
    out("".join(buf))


def _steps_table(trace: dict, title: str) -> Table:
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col in ("step", "kind", "sched", "computed", "after", "offload", "chunks",
                "cursor", "#sub"):
        t.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True)
    for s in trace["steps"]:
        kind = s["kind"] + ("*" if s.get("in_flight") else "")
        t.add_row(
            str(s["index"]), kind, str(s["scheduled_tokens"]), str(s["num_computed_tokens"]),
            str(s["tokens_after_batch"]), str(s["offloadable_tokens"]), str(s["num_chunks"]),
            f"{s['cursor_before']}->{s['cursor_after']}", str(len(s["submitted"])),
        )
    return t


def print_steps(console: Console, trace: dict, loadable: set[int] | None, title: str) -> None:
    """The steps table, then each step's submitted chunks as ranges (and the
    ones the load model never loads)."""
    if len(trace["steps"]) > RICH_TABLE_ROWS:
        console.print(_plain_steps_table(trace, title), markup=False, soft_wrap=True)
    else:
        console.print(_steps_table(trace, title))
    console.print("columns: sched = tokens scheduled, computed = num_computed_tokens, "
                  "after = num_tokens_after_batch, offload = offloadable tokens, "
                  "chunks = storable chunks (num_chunks), cursor = next_stored_chunk_idx",
                  style="dim", soft_wrap=True)
    if any(s.get("in_flight") for s in trace["steps"]):
        console.print("*: async scheduling, the last step's output still in flight",
                      style="dim", soft_wrap=True)
    lines = []
    for s in trace["steps"]:
        line = f"step {s['index']} {s['kind']} submitted: {ranges(s['submitted'])}"
        if loadable is not None:
            bad = [c for c in s["submitted"] if c not in loadable]
            if bad:
                line += f"   [red]not loadable: {ranges(bad)}[/]"
        lines.append(line)
    if lines:  # one print: rich's per-call overhead dominates a long request
        console.print("\n".join(lines), soft_wrap=True)


def config_line(group: dict, request: dict, lifecycle: dict | None = None) -> str:
    parts = [
        f"block_size={group['block_size']}", f"window={group['window']}",
        f"alignment_tokens={group['alignment_tokens']}",
        f"blocks_per_chunk={group['blocks_per_chunk']}",
        f"dcp={group.get('dcp_world_size', 1)}", f"eagle={group['eagle']}",
        f"retention_interval={group['retention_interval']}",
        f"prompt={request['prompt_tokens']}",
        f"max_offload_tokens={request['max_offload_tokens']}",
        f"offload_prompt_only={request['offload_prompt_only']}",
    ]
    if request.get("hash_lookahead_tokens"):
        parts.append(f"hash_lookahead_tokens={request['hash_lookahead_tokens']} "
                     f"tokens_per_hash={request['tokens_per_hash']}")
    if lifecycle is not None:
        parts.append(f"budget={lifecycle['budget']}")
        if lifecycle.get("prefill_steps") is not None:
            parts.append("prefill_steps=" + ",".join(map(str, lifecycle["prefill_steps"])))
        parts.append(f"decode={lifecycle['decode']}")
        parts.append(f"abort_after_step={lifecycle['abort_after_step']}")
        if lifecycle.get("error_after_step") is not None:
            parts.append(f"error_after_step={lifecycle['error_after_step']}")
        if lifecycle.get("async_scheduling"):
            parts.append("async")
    return " ".join(parts)


def sets_summary(console: Console, stored: list[int], loadable: set[int],
                  needed: set[int], model: str) -> None:
    st = set(stored)
    dup = sorted(c for c, k in Counter(stored).items() if k > 1)  # O(n), not O(n^2)
    console.print(f"[bold]stored[/] ({len(stored)}): {ranges(stored)}", soft_wrap=True)
    if dup:
        console.print(f"[red]submitted more than once[/]: {ranges(dup)}", soft_wrap=True)
    console.print(f"[bold]loadable[/] under {model} ({len(loadable)}): {ranges(loadable)}",
                  soft_wrap=True)
    console.print(f"[bold]needed[/] under {model} ({len(needed)}): {ranges(needed)}",
                  soft_wrap=True)
    snl, nns = sorted(st - loadable), sorted(needed - st)
    flagged_set(console, "stored-not-loadable", snl, after=f" under {model}")
    flagged_set(console, "needed-not-stored", nns, after=f" under {model}")


def flagged_set(console, label: str, chunks: list[int], after: str = "",
                indent: str = "") -> None:
    """One chunk-set line, red when the set is not empty (something is
    wrong), green when it is."""
    style = "red" if chunks else "green"
    console.print(f"{indent}[{style}]{label}[/]{after} ({len(chunks)}): {ranges(chunks)}",
                  soft_wrap=True)


def _mark(b: bool | None) -> str:
    return "-" if b is None else ("[green]yes[/]" if b else "[red]NO[/]")


def _scope_ref(i: int) -> str:
    return f"\\[{i}]"


def cex_line(row) -> str:
    cex = row.counterexample or {}
    cfg = cex.get("config", {})
    g, r = cfg.get("group", {}), cfg.get("request", {})
    lc = cex.get("lifecycle")
    # a counterexample about one chunk names it; a lookup's has no tracked
    # chunk (its replayed chunks and configuration say what it is)
    parts = [] if cex.get("chunk") is None else [f"chunk {cex['chunk']}"]
    if g:
        parts.append(config_line(g, r, lc))
    if "final_horizon_chunks" in cex:
        parts.append(f"final_horizon_chunks={cex['final_horizon_chunks']}"
                     f" boundary_block={cex.get('boundary_block')}")
    if "replayed_violation" in cex:
        parts.append(f"replayed violation chunks: {ranges(cex['replayed_violation'])}")
    return (f"{row.obligation} {row.rule} {row.load_model} vllm {row.vllm}: "
            + ("; ".join(parts) or "no chunk tracked"))


def _prove_table(rows: list) -> Table:
    """One row per (obligation, rule, load model); scope as a footnote number."""
    scopes = list(dict.fromkeys(r.scope for r in rows))
    table = Table(title="kvreach prove", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("obligation\n  rule, load model, vLLM", no_wrap=True, min_width=18)
    table.add_column("verdict", no_wrap=True)
    table.add_column("expected", no_wrap=True)
    table.add_column("ok", justify="center", no_wrap=True)
    table.add_column("non-\nvac.", justify="center", no_wrap=True)
    table.add_column("mutant\n  rejected", overflow="fold", min_width=10)
    table.add_column("s", justify="right", no_wrap=True)
    table.add_column("solver\n  s", justify="right", no_wrap=True)
    table.add_column("rlimit", justify="right", no_wrap=True)
    table.add_column("scope", justify="right", no_wrap=True)
    for r in rows:
        vstyle = {"proved": "green", "counterexample": "yellow"}.get(r.verdict, "red")
        table.add_row(
            f"{r.obligation}\n  [dim]{r.rule}, {r.load_model}, {r.vllm}[/]",
            f"[{vstyle}]{r.verdict}[/]" + (" [dim](cached)[/]" if r.cached else ""), r.expected,
            "[green]✓[/]" if r.ok else "[red]✗[/]", _mark(r.non_vacuous),
            f"{r.mutant}\n  {_mark(r.mutant_rejected)}",
            f"{r.seconds:.2f}", f"{r.solver_seconds:.2f}", f"{r.rlimit:,}",
            _scope_ref(scopes.index(r.scope) + 1),
        )
    return table



def print_prove_report(out: Console, rows: list, total: float) -> int:
    """The ``prove`` table, its scope footnotes, details and counterexamples,
    and the summary line; -> the number of rows that are ok."""
    out.print(_prove_table(rows))
    scopes = list(dict.fromkeys(r.scope for r in rows))
    base = os.path.commonprefix(scopes) if len(scopes) > 1 else ""
    base = base[: base.rfind(";") + 1] if ";" in base else ""
    out.print("[bold]scopes[/]" + (f" (all: {base.rstrip(';')})" if base else "") + ":",
              soft_wrap=True)
    for i, sc in enumerate(scopes, 1):
        out.print(f"  [{i}] {sc[len(base):].strip()}", markup=False, soft_wrap=True)
    details = [r for r in rows if r.detail]
    if details:
        out.print("[bold]details[/]:")
        for r in details:
            out.print(f"  {r.obligation} {r.rule} {r.load_model} vllm {r.vllm}: {r.detail}",
                      markup=False, soft_wrap=True)
    cexs = [r for r in rows if r.verdict == "counterexample" and r.counterexample]
    if cexs:
        out.print("[bold]counterexamples[/]:")
        for r in cexs:
            out.print("  " + cex_line(r), markup=False, soft_wrap=True)
    n_ok = sum(1 for r in rows if r.ok)
    out.print(f"{len(rows)} row(s), {n_ok} ok, {len(rows) - n_ok} not ok; total {total:.2f} s")
    return n_ok


def print_cex(out: Console, cex: dict, model: str, depth: int | None) -> None:
    _print_cex_body(out, cex, model, depth)
    if cex.get("world") == "neighbours":
        _print_neighbours(out, cex)
    elif "lookahead_trace" in cex:  # no-waste with lookahead hashes: a request's stores
        la = cex["lookahead_trace"]
        steps = "; ".join(",".join(map(str, s)) or "-" for s in la["steps"])
        out.print(f"stored by a request prefilled in one step, {la['decode']} decode step(s), "
                  f"final horizon {cex['final_horizon_chunks']} chunks ({cex['offloadable_tokens']} "
                  f"offloadable tokens), per step {steps}: chunk {cex['chunk']}, which no later "
                  f"request sharing those tokens loads", markup=False, soft_wrap=True)
    elif "offloadable_tokens" in cex and "lookup_groups" in cex:  # no-waste: a kept chunk
        out.print(f"kept at final horizon {cex['final_horizon_chunks']} chunks "
                  f"({cex['offloadable_tokens']} offloadable tokens): chunk {cex['chunk']}, which "
                  f"no later request sharing those tokens loads", markup=False, soft_wrap=True)
    if cex.get("vllm_replay"):
        _print_replay_on_vllm(out, cex["vllm_replay"])


def _print_neighbours(out: Console, cex: dict) -> None:
    """World (b): the two earlier requests, the later one and its hits."""
    t = Table(title="world (b): earlier requests under the rule, then the later request",
              title_justify="left")
    for col in ("request", "prompt tokens", "tokens", "offloadable", "final horizon (chunks)",
                "shares with the later request"):
        t.add_column(col)
    for i, q in enumerate(cex["requests"]):
        t.add_row(f"r{i}", str(q["prompt_tokens"]), str(q["tokens"]), str(q["offloadable_tokens"]),
                  str(q["final_horizon_chunks"]), str(q["later_shared_tokens"]))
    out.print(t)
    lr = cex["later_request"]
    pairs = ", ".join(f"r{i} and r{j} {d}" for i, j, d in cex["shared_between"])
    out.print(f"shared tokens: {pairs}; later request: "
              f"{lr['num_tokens']} tokens, GPU-local hit {lr['local_hit_tokens']}, "
              f"max_load_tokens {lr['max_load_tokens']}; offload hit {cex['twin_hit_tokens']} with "
              f"the union of the rule's stores, {cex['twin_dense_hit_tokens']} with dense stores; "
              f"dense loads, not stored: {ranges(cex['lost_chunks'])}", markup=False, soft_wrap=True)


def _print_cex_body(out: Console, cex: dict, model: str, depth: int | None) -> None:
    cfg = cex["config"]
    t = Table(title="configuration", title_justify="left", show_header=False)
    t.add_column("key")
    t.add_column("value")
    for k, v in {**cfg["group"], **cfg["request"], **(cex.get("lifecycle") or {})}.items():
        t.add_row(k, show_value(v) if v is not None else "None")
    t.add_row("tracked chunk", str(cex.get("chunk")))
    for k in ("final_horizon_chunks", "boundary_block"):
        if k in cex:
            t.add_row(k, str(cex[k]))
    if depth is not None:
        t.add_row("BMC depth (steps)", str(depth))
    out.print(t)
    if cex.get("replay") is not None:  # world "restarts": run_vllm's steps
        _print_vllm_replay(out, cex)
    trace = cex.get("trace")
    if trace is None:
        return
    loadable = set(trace.get("loadable", []))
    print_steps(out, trace, loadable, f"replayed lifecycle (load model {model})")
    spec = cex.get("spec_steps") or []
    if spec:
        out.print("spec steps: " + "; ".join(
            f"{i}:{s['kind']} sched={s['scheduled_tokens']} n={s['num_chunks']}"
            f"{' submits tracked chunk' if s['submitted_tracked_chunk'] else ''}"
            for i, s in enumerate(spec, 1)), markup=False, soft_wrap=True)
    lr, ll = cex.get("later_request"), cex.get("later_lookup")
    if lr and ll:
        # a lookup obligation: what vLLM's lookup loads is the measure, not an
        # approximate load model's sets (which can show nothing missing here)
        stored = list(trace["stored"])
        out.print(f"[bold]stored[/] ({len(stored)}): {ranges(stored)}", soft_wrap=True)
        style = "red" if ll["missing_chunks"] else "green"
        out.print(f"later request: {lr['num_tokens']} tokens, shares {lr['shared_tokens']}, "
                  f"GPU-local hit {lr['local_hit_tokens']}, max_load_tokens {lr['max_load_tokens']}; "
                  f"offload hit {ll['hit_tokens']} with the rule's stores, "
                  f"{ll['dense_hit_tokens']} with dense stores", markup=False, soft_wrap=True)
        out.print(f"[{style}]asked for by the later lookup, never stored[/] "
                  f"({len(ll['missing_chunks'])}): {ranges(ll['missing_chunks'])}", soft_wrap=True)
    else:
        sets_summary(out, list(trace["stored"]), loadable, set(trace.get("needed", [])), model)
    out.print(f"[bold]replayed violation chunks[/]: {ranges(cex.get('replayed_violation') or [])}",
              soft_wrap=True)


def _print_replay_on_vllm(out: Console, v: dict) -> None:
    """``--replay-vllm``: what the installed vLLM's scheduler did beside what
    kvreach predicts for the same keys."""
    from importlib.metadata import version

    t = Table(title=f"replayed on vLLM {version('vllm')}'s scheduler", title_justify="left")
    for col in ("quantity", "vLLM", "kvreach", "equal"):
        t.add_column(col)
    for k, x in v["vllm"].items():
        y = v["kvreach"].get(k)
        t.add_row(k, _show_value(x), _show_value(y), "yes" if x == y else "[red]NO[/]")
    out.print(t)


def _show_value(x) -> str:
    if isinstance(x, dict):
        return ", ".join(f"{k} {_show_value(v)}" for k, v in x.items())
    if isinstance(x, list) and x and all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[1], list) for p in x):
        return "; ".join(f"{p[0]}: {ranges(p[1])}" for p in x)  # [[later tokens, chunks]]
    if isinstance(x, list) and x and all(isinstance(c, int) for c in x):
        return ranges(x)
    if isinstance(x, list):
        return "; ".join(_show_value(c) for c in x) if x else "none"
    return str(x)


def _print_vllm_replay(out: Console, cex: dict) -> None:
    """A world-"restarts" counterexample replayed by ``kvreach.impl.lifecycle.run_vllm``."""
    t = Table(title="replayed steps (world restarts)", title_justify="left")
    for col in ("step", "kind", "tokens", "incarnation", "frontier", "cursor",
                "prepare_store", "offered", "submitted"):
        t.add_column(col)
    for i, (st, x) in enumerate(zip(cex["plan"], cex["replay"]), 1):
        t.add_row(str(i), x["kind"], str(st["scheduled_tokens"]), str(x["incarnation"]),
                  "{} -> {}".format(*x["f"]), "{} -> {}".format(*x["cursor"]), st["outcome"],
                  ranges(x["offered"]), ranges(x["submitted"]))
    out.print(t)
    out.print(f"[bold]replayed violation chunks[/]: {ranges(cex.get('replayed_violation') or [])}",
              soft_wrap=True)


def print_drawn(console: Console, drawn: list, png: Path, svg: Path) -> None:
    from kvreach.plot import LOOKUP_LOADED, LOOKUP_MISSING, LOOKUP_ROW, MISSED, WASTED, panel_title

    for m in drawn:
        end = m.end
        console.print(f"{panel_title(m)}; wasted {ranges(end.chunks(WASTED))}, "
                      f"missed {ranges(end.chunks(MISSED))}",
                      markup=False, soft_wrap=True)
        for r in m.rows:
            if r.label.startswith(LOOKUP_ROW):
                console.print(f"{r.label}: loads {ranges(r.chunks(LOOKUP_LOADED))}; asks for, "
                              f"never stored: {ranges(r.chunks(LOOKUP_MISSING))}",
                              markup=False, soft_wrap=True)
    console.print(f"wrote {png} and {svg}", markup=False, soft_wrap=True)


def store_side(r) -> str:
    """What release record ``r``'s store side is, in a few words (the
    ``kvreach.releases.Release`` parts the single-request lifecycle runs)."""
    if r.store_rule == "vllm-0.29":
        return ("the pre-fix rule vllm-0.29, window cdiv(W, C), the EAGLE tail never "
                "stored, finish up to num_tokens")
    if not r.mask_window_extra:
        return "rule vllm-0.33, the mask window without extra_retained_tokens"
    return "rule vllm-0.33"


def lookup_side(r) -> str:
    """What release record ``r``'s lookup is, in a few words."""
    if not r.padded_initial_window:
        return "runs of cdiv(W, C) chunks, no padded initial window"
    if not r.lookup_window_extra:
        return "the window without extra_retained_tokens"
    return "the window with extra_retained_tokens"
