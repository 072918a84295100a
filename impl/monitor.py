"""Runtime monitor of the SWA store decisions (``kvreach.monitor``).

Pure (no vLLM import): the connector (``kvreach.impl.vllm_connector``) calls
:meth:`GroupMonitor.check` once per (request, SWA group, step) with the
decision of that step and applies :meth:`RequestGroupState.stage` once the
decision is final. The work is O(chunks decided this step) with C-level
builtins (``min``/``max``/``set``/``map``); the per-request state is a few
integers and the list of the tuples this incarnation decided.

Properties (the spec's, stated on what the step decided):

- ``in_range``: every chunk lies in ``[0, num_chunks)`` (the storable count
  of this step), and at or above the cursor ``next_stored_chunk_idx`` unless
  the request finished (only the end-of-request reconsideration looks below).
- ``computed_before_stored``: the last chunk ends at or before the
  offloadable tokens of this step (``(c + 1) * chunk_tokens <= offloadable``).
- ``once_per_incarnation``: no chunk is decided twice in one incarnation
  (a preemption or cache reset that moves the cursor back starts a new one;
  a step whose stores were not committed, e.g. ``prepare_store`` returned
  None and the cursor did not advance, does not count as submitted).
- ``horizon_final``: the final-segment end handed to the mask is never
  before the frontier and, while the request runs, only the prompt's
  offloadable horizon (the only horizon known final), unchanged from the
  previous step; once finished, none or the current count.

And one *finding* (counted, never a violation, never a fallback, because
vLLM 0.33.0's own rule produces it; see :func:`loadable_chunk`):

- ``unloadable``: a decided chunk lies in no run the offload lookup
  (``kvreach.impl.lookup``) needs for any hit a later request can get in the
  stated world.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvreach.impl.lookup import LookupGroup
from kvreach.params import GroupConfig, cdiv

MODES = ("off", "log", "raise")
PROPERTIES = ("in_range", "computed_before_stored", "once_per_incarnation", "horizon_final")


# ---------------------------------------------------------------------------
# Loadability in the single-request world
# ---------------------------------------------------------------------------


def lookup_group(g: GroupConfig) -> LookupGroup:
    """The SWA group as the offload lookup sees it."""
    return LookupGroup(g.block_tokens, g.blocks_per_chunk, g.window,
                       g.extra_retained_tokens, g.eagle)


def hit_end_runs(lg: LookupGroup, full_chunk_tokens: int, k: int) -> tuple[tuple[int, int], ...]:
    """Runs ``[lo, hi)`` of SWA chunks the lookup needs for the hit ends a
    later request can produce at the k-th full-attention chunk boundary
    ``E = k * A`` (``A = full_chunk_tokens``):

    - ``k * A``: a later request longer than ``k * A`` sharing at least
      ``k * A`` tokens (or diverging inside the next full chunk);
    - ``k * A - 1``: a later request of exactly ``k * A`` tokens (the last
      prompt token is recomputed, ``_lookup_complete_chunks``), k >= 2 (a hit
      below one chunk is none);
    - ``k * A`` floored to the SWA chunk: ``max_load_tokens`` floors the
      hit per group.

    Each run is the first run the scan (``_sliding_window_lookup``) needs:
    ``load_window_chunks(E)`` chunks ending at chunk ``ceil(E / C)``."""
    C = lg.chunk_tokens
    A = full_chunk_tokens
    ends = [k * A, (k * A) // C * C]
    if k >= 2:
        ends.append(k * A - 1)
    out = []
    for E in ends:
        if E < C:
            continue
        hi = cdiv(E, C)
        w = lg.load_window_chunks(E)
        assert w is not None
        out.append((max(0, hi - w), hi))
    return tuple(out)


def loadable_chunk(lg: LookupGroup, full_chunk_tokens: int, chunk: int,
                   horizon_tokens: int | None) -> bool:
    """SWA chunk ``chunk`` lies in a run the lookup needs for some hit of a
    later request, in the world *single request*
    (``kvreach.impl.worlds``): the tier holds this request's stores; the
    model has one SWA group (not EAGLE, no retention interval) and
    full-attention groups whose chunk is ``full_chunk_tokens`` (``A``, the
    alignment); the later request shares any prefix of this request's
    offloadable tokens, whose end is ``horizon_tokens`` (None: not known yet,
    the request may grow), may have a GPU prefix hit and a
    ``max_load_tokens``. Its full-attention groups' maximal prefix caps the
    hit to ``k * A``, so the hit ends are those of :func:`hit_end_runs`
    with ``k * A <= horizon_tokens``. O(1): only the k whose runs can reach
    ``chunk`` are tried.

    Checked against ``kvreach.impl.lookup.lookup_hit_tokens`` by brute force
    over later requests (``tests/test_monitor.py``)."""
    C = lg.chunk_tokens
    A = full_chunk_tokens
    span = (lg.load_window_chunks(1) or 0) + 2  # the widest run, plus slack
    k_lo = max(1, (chunk * C) // A)
    k_hi = ((chunk + span + 1) * C) // A + 1
    if horizon_tokens is not None:
        k_hi = min(k_hi, horizon_tokens // A)
    for k in range(k_lo, k_hi + 1):
        for lo, hi in hit_end_runs(lg, A, k):
            if lo <= chunk < hi:
                return True
    return False


@dataclass
class Loadability:
    """:func:`loadable_chunk` with a cached pattern for an unknown horizon and
    the exact function only near a known one."""

    lg: LookupGroup
    full_chunk_tokens: int
    _pattern: bytearray = field(default_factory=bytearray)

    def _grow(self, n: int) -> bytearray:
        """The pattern for an unknown horizon up to chunk ``n``. Past the
        first boundaries it repeats every ``lcm(A, C) / C`` chunks (the hit
        ends shift by ``lcm(A, C)`` tokens, the window depends only on the end
        modulo ``C``), so only a prefix is computed."""
        p = self._pattern
        if len(p) >= n:
            return p
        A, C = self.full_chunk_tokens, self.lg.chunk_tokens
        period = math.lcm(A, C) // C
        if not p:
            span = (self.lg.load_window_chunks(1) or 0) + 2
            exact = cdiv(2 * A, C) + span + 2 * period
            p.extend(loadable_chunk(self.lg, A, c, None) for c in range(exact))
        if len(p) < n:
            block = p[len(p) - period:]
            p.extend(block * cdiv(n - len(p), period))
        return p

    def cut(self, horizon_tokens: int) -> int:
        """Below this chunk, a known horizon changes nothing: every run of a
        boundary past the horizon starts at or after it."""
        k = horizon_tokens // self.full_chunk_tokens + 1
        runs = hit_end_runs(self.lg, self.full_chunk_tokens, k)
        return min((lo for lo, _ in runs), default=0)

    def count_unloadable(self, chunks, hi: int, horizon_tokens: int | None) -> int:
        pat = self._grow(hi + 1)
        if horizon_tokens is None or hi < self.cut(horizon_tokens):
            return len(chunks) - sum(map(pat.__getitem__, chunks))
        cut = self.cut(horizon_tokens)
        return sum(
            1 for c in chunks
            if not (pat[c] if c < cut else
                    loadable_chunk(self.lg, self.full_chunk_tokens, c, horizon_tokens))
        )


# ---------------------------------------------------------------------------
# Per-request state and the check
# ---------------------------------------------------------------------------


@dataclass
class RequestGroupState:
    """One (request, SWA group): ``hw``, every chunk this incarnation
    committed lies below it; ``decided``, the committed decisions (tuples,
    expanded only when a finished request looks below ``hw``); the decision
    of the previous step, committed once the cursor shows it was stored;
    the horizon the previous step declared final."""

    hw: int = 0
    decided: list = field(default_factory=list)
    pending: tuple = ()
    pending_after: int = -1
    horizon: int | None = None

    def sync(self, cursor: int) -> None:
        """Commit or drop the previous step's decision from the cursor vLLM
        now shows; a cursor below ``hw`` starts a new incarnation."""
        if self.pending_after >= 0:
            if cursor >= self.pending_after:
                if self.pending:
                    self.decided.append(self.pending)
                self.hw = max(self.hw, self.pending_after)
            self.pending, self.pending_after = (), -1
        if cursor < self.hw:
            self.hw, self.decided, self.horizon = cursor, [], None
        elif cursor > self.hw:
            self.hw = cursor

    def stage(self, chunks: tuple, cursor_after: int, horizon: int | None) -> None:
        self.pending, self.pending_after = chunks, cursor_after
        if horizon is not None:
            self.horizon = horizon


@dataclass
class GroupMonitor:
    """The monitor of one SWA offload group (shared by all requests)."""

    g: GroupConfig
    loadability: Loadability | None  # None: the world's loadability is not checked

    def check(self, st: RequestGroupState, cursor: int, chunks, num_chunks: int,
              offloadable_tokens: int, prompt_horizon_chunks: int, finished: bool,
              horizon: int | None, horizon_tokens: int | None) -> tuple[str | None, int]:
        """(the first property violated or None, the number of unloadable
        chunks). ``st`` must be synced for this step's cursor."""
        if horizon is not None and horizon < num_chunks:
            return "horizon_final", 0
        if not finished and horizon is not None and (
            horizon != prompt_horizon_chunks
            or (st.horizon is not None and horizon != st.horizon)
        ):
            return "horizon_final", 0
        if finished and horizon not in (None, num_chunks):
            return "horizon_final", 0
        if not chunks:
            return None, 0
        lo, hi = min(chunks), max(chunks)
        if lo < 0 or hi >= num_chunks or (lo < cursor and not finished):
            return "in_range", 0
        if (hi + 1) * self.g.chunk_tokens > offloadable_tokens:
            return "computed_before_stored", 0
        if len(set(chunks)) != len(chunks):
            return "once_per_incarnation", 0
        if lo < st.hw:
            below = {c for c in chunks if c < st.hw}
            if any(not below.isdisjoint(d) for d in st.decided):
                return "once_per_incarnation", 0
        unloadable = 0
        if self.loadability is not None:
            unloadable = self.loadability.count_unloadable(chunks, hi, horizon_tokens)
        return None, unloadable
