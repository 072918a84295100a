"""Chunk maps: which chunks a scenario submits at each scheduler step, drawn
against which chunks a later lookup can load.

Report stage only (params -> rules -> lifecycle -> properties -> report):
the input is an already-simulated trace in ``Trace.to_json(load_model)`` form
(what ``kvreach simulate --json`` and ``kvreach counterexample`` carry); no
store rule is evaluated here. :func:`chunk_map` turns the trace into the sets
to draw (no matplotlib); :func:`draw` renders maps to PNG and SVG and returns
the sets read back from the drawn artists, so a test can compare them with
the simulation.

matplotlib is imported inside :func:`draw` only (the ``plot`` extra), on the
Agg canvas, without pyplot and without touching global state.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from kvreach.params import GroupConfig

# Cell categories. A step row holds SUBMITTED / SUBMITTED_WASTED (this step),
# EARLIER / EARLIER_WASTED (stored at an earlier step) and LOADABLE (loadable
# under the load model, below the step's frontier, not stored yet). The end
# row holds STORED / WASTED / LOADABLE / MISSED (needed, never stored).
SUBMITTED = "submitted"
SUBMITTED_WASTED = "submitted-wasted"
EARLIER = "earlier"
EARLIER_WASTED = "earlier-wasted"
STORED = "stored"
WASTED = "wasted"
LOADABLE = "loadable"
MISSED = "missed"
# A later request's lookup row: the chunks it loads with the rule's stores,
# the rest of the run it asks for (stored, but the run is incomplete), and the
# chunks of that run that were never stored.
LOOKUP_LOADED = "lookup-loaded"
LOOKUP_RUN = "lookup-run"
LOOKUP_MISSING = "lookup-missing"
CATEGORIES = (SUBMITTED, SUBMITTED_WASTED, EARLIER, EARLIER_WASTED, STORED, WASTED,
              LOADABLE, MISSED, LOOKUP_LOADED, LOOKUP_RUN, LOOKUP_MISSING)

END_ROW = "stored at end"
LOOKUP_ROW = "later lookup"


@dataclass(frozen=True)
class MapRow:
    """One row of a chunk map: a scheduler step, or the end state.

    frontier: the row's storable chunks (``num_chunks``; the final horizon for
        the end row), drawn as a tick.
    cells: category -> chunks drawn in it (within the map's x range).
    """

    label: str
    frontier: int
    cells: dict[str, frozenset[int]]

    def chunks(self, *categories: str) -> frozenset[int]:
        out: frozenset[int] = frozenset()
        for cat in categories:
            out |= self.cells.get(cat, frozenset())
        return out


@dataclass(frozen=True)
class ChunkMap:
    """One panel: a rule's store decisions for one scenario.

    lo, hi: the chunk range drawn, ``[lo, hi)``.
    segment_chunks: alignment segment length in chunks (grid), when whole.
    whole: ``[lo, hi)`` is the whole request (named so in the title).

    ``counts`` (stored, loadable, wasted, missed) are read from the end row,
    so they count the drawn range and nothing else: every printed total is
    over the same chunks as the picture.
    """

    title: str
    rule: str
    load_model: str
    rows: tuple[MapRow, ...]
    lo: int
    hi: int
    segment_chunks: int | None
    whole: bool = True

    def row(self, label: str) -> MapRow:
        return next(r for r in self.rows if r.label == label)

    @property
    def end(self) -> MapRow:
        """The end state (or a mask's single row)."""
        return next((r for r in self.rows if r.label == END_ROW),
                    next(r for r in reversed(self.rows) if not r.label.startswith(LOOKUP_ROW)))

    @property
    def counts(self) -> dict[str, int]:
        end = self.end
        return {"stored": len(end.chunks(STORED, WASTED)),
                "loadable": len(end.chunks(STORED, LOADABLE, MISSED)),
                "wasted": len(end.chunks(WASTED)), "missed": len(end.chunks(MISSED))}

    @property
    def range_text(self) -> str:
        """The chunks the totals count, in words."""
        span = f"chunks {self.lo}-{self.hi - 1}"
        return f"whole request ({span})" if self.whole else span

    @property
    def step_rows(self) -> tuple[MapRow, ...]:
        return tuple(r for r in self.rows
                     if r.label != END_ROW and not r.label.startswith(LOOKUP_ROW))


# ---------------------------------------------------------------------------
# data (no matplotlib)
# ---------------------------------------------------------------------------


def chunk_extent(trace: dict) -> int:
    """One past the last chunk the trace mentions (frontiers, horizon, stores)."""
    ends = [trace["final_chunks"]] + [s["num_chunks"] for s in trace["steps"]]
    ends += [c + 1 for c in trace["stored"]]
    return max(ends)


# What one figure can show legibly (and in bounded time and memory): at most
# MAX_DRAWN_CHUNKS chunks across and MAX_DRAWN_ROWS scheduler steps down.
MAX_DRAWN_CHUNKS = 4000
MAX_DRAWN_ROWS = 200


def drawable_range(extent: int, zoom: tuple[int, int] | None) -> tuple[int, int]:
    """The chunk range ``[lo, hi)`` to draw of a request of ``extent`` chunks:
    ``zoom`` (which must lie within the request) or the whole request;
    ``ValueError`` (saying what is expected) past the request or past
    :data:`MAX_DRAWN_CHUNKS`."""
    if zoom is not None:
        lo, hi = zoom
        if hi > extent:
            raise ValueError(f"LO:HI within the request's {extent} chunks "
                             f"(0 <= LO < HI <= {extent})")
    else:
        lo, hi = 0, max(extent, 1)
    if hi - lo > MAX_DRAWN_CHUNKS:
        raise ValueError(f"at most {MAX_DRAWN_CHUNKS} chunks drawn (the request has {extent}); "
                         "give --chunks LO:HI")
    return lo, hi


def segment_chunks(group: dict) -> int | None:
    """The segment (alignment, or retention interval) in chunks, when it is a
    whole number of chunks."""
    g = GroupConfig(**group)
    segment_tokens = g.segment_tokens
    if segment_tokens is None or segment_tokens % g.chunk_tokens:
        return None
    return segment_tokens // g.chunk_tokens


def _clip(chunks: Iterable[int], lo: int, hi: int) -> frozenset[int]:
    return frozenset(c for c in chunks if lo <= c < hi)


def _end_row(stored: set[int], loadable: set[int], needed: set[int], horizon: int,
             lo: int, hi: int, label: str = END_ROW) -> MapRow:
    return MapRow(label, horizon, {
        STORED: _clip(stored & loadable, lo, hi),
        WASTED: _clip(stored - loadable, lo, hi),
        LOADABLE: _clip(loadable - stored - needed, lo, hi),
        MISSED: _clip(needed - stored, lo, hi),
    })


def chunk_map(trace: dict, lo: int | None = None, hi: int | None = None,
              title: str | None = None) -> ChunkMap:
    """The sets to draw for a trace in ``Trace.to_json(load_model)`` form:
    one row per scheduler step, then the end state. ``[lo, hi)`` clips every
    set and the totals (default: the whole request)."""
    extent = chunk_extent(trace)
    lo = 0 if lo is None else lo
    hi = extent if hi is None else hi
    # Every set is clipped to [lo, hi) once, up front: each step then costs
    # O(hi - lo), not O(chunks stored so far).
    loadable, needed = _clip(trace["loadable"], lo, hi), _clip(trace["needed"], lo, hi)
    stored: set[int] = set()
    rows = []
    for s in trace["steps"]:
        sub = _clip(s["submitted"], lo, hi)
        earlier = stored - sub
        n = s["num_chunks"]
        rows.append(MapRow(f"{s['index']} {s['kind']}", n, {
            SUBMITTED: sub & loadable,
            SUBMITTED_WASTED: sub - loadable,
            EARLIER: frozenset(earlier & loadable),
            EARLIER_WASTED: frozenset(earlier - loadable),
            LOADABLE: frozenset(c for c in loadable if c < n and c not in stored and c not in sub),
        }))
        stored |= sub
    rows.append(_end_row(stored, loadable, needed, trace["final_chunks"], lo, hi))
    model = trace.get("load_model", "?")
    return ChunkMap(
        title=title or f"{trace['rule']}, load model {model}",
        rule=trace["rule"], load_model=model, rows=tuple(rows), lo=lo, hi=hi,
        segment_chunks=segment_chunks(trace["group"]),
        whole=lo == 0 and hi >= extent,
    )


def with_lookup(m: ChunkMap, lookup: dict) -> ChunkMap:
    """``m`` with a last row for a later request's lookup of the SWA group
    (``later_lookup`` of a decoded counterexample, or of ``kvreach lookup
    --json``'s SWA group): the run it asks for (``dense_loaded``, what it
    loads from dense stores), the chunks of it never stored, and what it
    loads from the rule's stores; the label gives both hits."""
    def span(r: list[int]) -> set[int]:
        return set(range(r[0], r[1])) if r else set()

    loaded, run = span(lookup.get("loaded") or []), span(lookup.get("dense_loaded") or [])
    missing = set(lookup.get("missing_chunks") or [])
    label = (f"{LOOKUP_ROW}: hit {lookup.get('hit_tokens') or 0}, "
             f"dense {lookup.get('dense_hit_tokens') or 0}")
    row = MapRow(label, max(run | loaded | missing, default=0) + 1, {
        LOOKUP_LOADED: _clip(loaded, m.lo, m.hi),
        LOOKUP_RUN: _clip(run - loaded - missing, m.lo, m.hi),
        LOOKUP_MISSING: _clip(missing, m.lo, m.hi),
    })
    return replace(m, rows=m.rows + (row,))


def mask_map(rule: str, load_model: str, group: dict, kept: Iterable[int],
             loadable: Iterable[int], horizon: int, title: str | None = None) -> ChunkMap:
    """A single-row map of a store mask evaluated at a final horizon (a static
    counterexample): kept chunks against the loadable ones. Every loadable
    chunk below the horizon is needed here, so the ones not kept are missed."""
    kept_s, ld = set(kept), set(loadable)
    label = f"mask at {horizon}"
    row = _end_row(kept_s, ld, ld, horizon, 0, horizon, label)
    return ChunkMap(
        title=title or f"{rule}, load model {load_model}", rule=rule, load_model=load_model,
        rows=(row,), lo=0, hi=max(horizon, 1), segment_chunks=segment_chunks(group),
        whole=not any(c >= horizon for c in kept_s | ld),
    )


def clipped(m: ChunkMap, lo: int, hi: int) -> ChunkMap:
    """``m`` restricted to chunks ``[lo, hi)`` (and so are its counts)."""
    rows = tuple(replace(r, cells={k: _clip(v, lo, hi) for k, v in r.cells.items()})
                 for r in m.rows)
    return replace(m, rows=rows, lo=lo, hi=hi, whole=m.whole and lo <= m.lo and hi >= m.hi)


def panel_title(m: ChunkMap) -> str:
    c = m.counts
    return (f"{m.title}, {m.range_text}: stored {c['stored']}, loadable {c['loadable']}, "
            f"wasted {c['wasted']}, missed {c['missed']}")


def runs(chunks: Iterable[int]) -> list[tuple[int, int]]:
    """``[5, 6, 7, 14]`` -> ``[(5, 3), (14, 1)]`` (start, length)."""
    out: list[tuple[int, int]] = []
    for c in sorted(set(chunks)):
        if out and out[-1][0] + out[-1][1] == c:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((c, 1))
    return out


# ---------------------------------------------------------------------------
# drawing (matplotlib, Agg)
# ---------------------------------------------------------------------------

# category -> (colour, cell height as a fraction of the row, legend label).
# Cells submitted this step stand full height; chunks held from earlier steps
# are drawn lower; wasted chunks are red wherever they appear.
STYLE: dict[str, tuple[str, float, str | None]] = {
    SUBMITTED: ("#1f5fa8", 0.6, "submitted this step"),
    EARLIER: ("#9ec5ea", 0.34, "stored earlier"),
    STORED: ("#1f5fa8", 0.6, None),
    LOADABLE: ("#f5d58a", 0.34, "loadable, not stored"),
    MISSED: ("#e08a00", 0.6, "needed, never stored (missed)"),
    SUBMITTED_WASTED: ("#d62728", 0.6, "stored, not loadable (wasted)"),
    EARLIER_WASTED: ("#d62728", 0.34, None),
    WASTED: ("#d62728", 0.6, None),
    LOOKUP_LOADED: ("#2ca02c", 0.6, "later lookup loads"),
    LOOKUP_RUN: ("#b7e0b0", 0.6, "later lookup asks for, stored"),
    LOOKUP_MISSING: ("#7b2cbf", 0.6, "later lookup asks for, never stored"),
}
HASH_SALT = "kvreach"
FORMATS = (".png", ".svg")


def out_paths(out: Path) -> tuple[Path, Path]:
    """``x.png`` or ``x.svg`` -> ``(x.png, x.svg)``: both are always written."""
    suffix = out.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{out}: expected a .png or .svg file name")
    png = out if suffix == ".png" else out.with_suffix(".png")
    svg = out if suffix == ".svg" else out.with_suffix(".svg")
    return png, svg


def _draw_panel(ax, m: ChunkMap, index: int) -> None:
    from matplotlib.ticker import MaxNLocator, MultipleLocator

    n = len(m.rows)
    for y, row in enumerate(m.rows):
        base = n - 1 - y  # first step at the top
        for cat in CATEGORIES:
            cells = row.cells.get(cat)
            if not cells:
                continue
            colour, height, _ = STYLE[cat]
            ax.broken_barh(runs(cells), (base - height / 2, height), facecolors=colour,
                           edgecolors="none", gid=f"cells:{index}:{y}:{cat}")
        if m.lo <= row.frontier <= m.hi:
            ax.plot([row.frontier, row.frontier], [base - 0.4, base + 0.4],
                    color="black", linewidth=1.0)
        bad = row.chunks(SUBMITTED_WASTED, WASTED, LOOKUP_MISSING)
        for start, length in runs(bad):
            txt = f"{start}" if length == 1 else f"{start}-{start + length - 1}"
            ax.annotate(txt, (start + length / 2, base + 0.3), xytext=(0, 0.5),
                        textcoords="offset points", ha="center", va="bottom",
                        fontsize=7, color="#d62728", fontweight="bold")
    ax.set_yticks(range(n), [r.label for r in reversed(m.rows)],
                  fontsize=8 if n <= 12 else 6)
    ax.set_ylim(-0.7, n + 0.15)  # headroom for the wasted-range labels
    ax.set_xlim(m.lo, m.hi)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=20, integer=True))
    if m.segment_chunks and (m.hi - m.lo) / m.segment_chunks <= 80:
        ax.xaxis.set_minor_locator(MultipleLocator(m.segment_chunks))
        ax.grid(axis="x", which="minor", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(panel_title(m), fontsize=9, loc="left")


def _read_back(fig, maps: Sequence[ChunkMap]) -> list[ChunkMap]:
    """The maps as drawn: every cell set recovered from the drawn bars."""
    cells: dict[tuple[int, int], dict[str, set[int]]] = {}
    for ax in fig.axes:
        for coll in ax.collections:
            gid = coll.get_gid() or ""
            if not gid.startswith("cells:"):
                continue
            _, i, y, cat = gid.split(":")
            got = cells.setdefault((int(i), int(y)), {}).setdefault(cat, set())
            for path in coll.get_paths():
                xs = path.vertices[:, 0]
                got.update(range(round(xs.min()), round(xs.max())))
    out = []
    for i, m in enumerate(maps):
        rows = []
        for y, r in enumerate(m.rows):
            got = cells.get((i, y), {})
            keys = list(r.cells) + [k for k in got if k not in r.cells]
            rows.append(replace(r, cells={k: frozenset(got.get(k, ())) for k in keys}))
        out.append(replace(m, rows=tuple(rows)))
    return out


def draw(maps: Sequence[ChunkMap], out: Path, suptitle: str | None = None) -> list[ChunkMap]:
    """Draw ``maps`` as panels (one above the other, same x range) to both
    ``out``'s PNG and SVG (see :func:`out_paths`). Returns the maps as read
    back from the drawn artists."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    png, svg = out_paths(out)
    heights = [max(len(m.rows), 2) + 1.6 for m in maps]
    with matplotlib.rc_context({"svg.hashsalt": HASH_SALT, "svg.fonttype": "path"}):
        fig = Figure(figsize=(13, 0.6 + 0.34 * sum(heights)), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(len(maps), 1, sharex=True, squeeze=False,
                            gridspec_kw={"height_ratios": heights})[:, 0]
        for i, (ax, m) in enumerate(zip(axes, maps)):
            _draw_panel(ax, m, i)
        axes[-1].set_xlabel("chunk index (black tick: the row's storable chunks, the final "
                            "horizon in the last row; grid: segments)", fontsize=8)
        looked = any(r.label.startswith(LOOKUP_ROW) for m in maps for r in m.rows)
        handles = [Patch(facecolor=c, label=lab) for cat, (c, _, lab) in STYLE.items()
                   if lab and (looked or not cat.startswith("lookup"))]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 6),
                   fontsize=8, frameon=False)
        if suptitle:
            lines = [textwrap.fill(x, 170) for x in suptitle.splitlines()]
            fig.suptitle("\n".join(lines), fontsize=9)
        drawn = _read_back(fig, maps)
        fig.savefig(png, dpi=150, metadata={"Software": None})
        fig.savefig(svg, metadata={"Date": None, "Creator": None})
    return drawn
