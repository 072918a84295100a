"""vLLM's offload lookup (Z3), 0.29.0 to 0.34.0: the load path that defines
*loadable*.

The Z3 twin of ``kvreach.impl.lookup``, written from vLLM's lookup code
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading/``), not from the
store mask's assumption about it. The release whose parts apply is
``LookupSym.release`` (a ``kvreach.releases.Release``, default 0.33.0), read
as plain Python when the terms are built, so each release's lookup is its
own Z3 term and 0.33.0's is the one this module always built. Each element
names what it models (0.33.0's unless a part says otherwise):

- :func:`window_chunks`: ``config.py`` ``get_sliding_window_size_in_chunks``.
- :func:`load_window_chunks`: ``GroupOffloadConfig.load_window_size_in_chunks``.
- :func:`scan_loop`: ``OffloadingConnectorScheduler._sliding_window_lookup`` as
  the loop runs it (unrolled over at most ``bound`` keys).
- :func:`scan_end`: its closed form (the obligation ``lookup-scan-closed-form``
  proves the two equal for every key count up to its bound).
- :func:`prefix_end`: ``_maximal_prefix_lookup`` (HIT / MISS answers).
- :func:`lookup`: ``_lookup_complete_chunks`` for one optional full-attention
  group and one SWA group (EAGLE or not), and the chunk ranges
  ``update_state_after_alloc`` loads (with ``SlidingWindowManager``'s null
  padding, ``get_num_skipped_tokens``).

The release's parts (``Release`` fields) the spec reads:

- ``lookup_window_extra`` (False: 0.29.0, 0.30.0): the window is ``cdiv(W,
  C)`` and the padded initial window ``cdiv(W - 1 + padding, C)``, no
  ``extra_retained_tokens`` in either. The load's skipped tokens keep it:
  ``SlidingWindowManager.get_num_skipped_tokens`` subtracts
  ``extra_retained_tokens`` in every release, and ``update_state_after_alloc``
  loads from the first fresh non-null block in each.
- ``padded_initial_window`` (False: 0.29.0): the first run needs the window,
  not ``load_window_size_in_chunks``.
- ``eagle_widening``: the unverified EAGLE group's query is one chunk wider
  for ``"every group"`` (0.30.0 on) or for SWA groups only (0.29.0). For the
  spec's groups this matters only when the full-attention group is an EAGLE
  group (``LookupSym.full_eagle``, off unless a caller makes it symbolic)
  whose unwidened query stops short of its last key (a ``max_load_tokens``
  cap, read from 0.31.0 on, or a one-token chunk): 0.29.0 then pops a chunk
  off a prefix it never widened.
- ``max_load_tokens`` (False: 0.29.0, 0.30.0): the lookup ignores
  ``LookupSym.has_max_load`` / ``max_load_tokens``, as those releases'
  ``_lookup_complete_chunks`` never reads ``kv_transfer_params``.
- ``mask_window_extra`` (:func:`link`): the store mask's window is
  ``sliding_window + extra_retained_tokens`` or ``sliding_window`` alone.
- ``swa_reduction_before_caps`` (True: 0.34.0): the SWA group's ``- 1``
  (the last prompt token recomputed) is taken from ``num_tokens`` before the
  ``max_load_tokens`` cap, so a capped hit is not reduced; before 0.34.0
  after it.

Outside the spec's scope (the twin has them): ``pending`` (the manager
answers HIT or MISS here, so 0.29.0's sticky HIT_PENDING deferral never
arises) and ``max_num_new_tokens`` (none is passed: vLLM's scheduler passes
none).

Scope of :func:`lookup` (the executable twin covers more, and is checked
against vLLM itself in tests/vllm/test_lookup_vllm.py): at most one
full-attention group and exactly one SWA group, so ``_lookup_complete_chunks``
makes one pass (a second pass needs two SWA groups, or a deferral); the
manager answers HIT or MISS (deferral is modelled in the scan obligation and in
the twin); no partial tails, no Mamba groups.

The scan and the lookup are quantifier-free over at most ``bound`` keys: the
caller's premises must keep the scanned key counts inside the bound
(:attr:`LookupTerms.scope`). :func:`forall_in` unrolls a range over
``[0, bound)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import z3

from kvreach.releases import DEFAULT as DEFAULT_RELEASE, Release
from kvreach.spec.config import SymConfig, z3_max, z3_min

Pred = Callable[[z3.ArithRef], z3.BoolRef]


def cdiv(a, b):
    """``vllm.utils.math_utils.cdiv`` for ``b > 0`` (Z3 ``/`` floors then)."""
    return -((-a) / b)


def forall_in(lo, hi, pred: Pred, bound: int) -> z3.BoolRef:
    """``pred(k)`` for every integer ``k`` in ``[lo, hi)``, unrolled over
    ``[0, bound)``."""
    return z3.And([z3.Implies(z3.And(lo <= i, i < hi), pred(z3.IntVal(i))) for i in range(bound)]
                  or [z3.BoolVal(True)])


# ---------------------------------------------------------------------------
# Windows
# ---------------------------------------------------------------------------


# The lookup variants (``kvreach.impl.lookup.LOOKUP_VARIANTS``, the same
# names): "vllm-window", vLLM's ``get_sliding_window_size_in_chunks`` (each
# release's, ``Release.lookup_window_extra``), and "read-window", the
# load-side change docs/findings.md F7 proposes. Named apart from the store
# rules (``kvreach.params.RULES``): a variant is how a later request looks up.
VLLM_WINDOW, READ_WINDOW = "vllm-window", "read-window"
LOOKUP_VARIANTS = (VLLM_WINDOW, READ_WINDOW)


def window_chunks(W, extra, C, variant: str = VLLM_WINDOW,
                  release: Release = DEFAULT_RELEASE):
    """``get_sliding_window_size_in_chunks``: ``max(ceil(W / C), ceil((W - 1 +
    extra_retained_tokens) / C))``. ``variant="read-window"``: ``max(1,
    ceil((W - 1 + extra) / C))``, the chunks the load reads before a
    chunk-aligned hit. A release without ``lookup_window_extra`` (0.29.0's
    and 0.30.0's ``scheduler.py``): ``ceil(W / C)``, whatever the variant (as
    the twin's ``LookupGroup.window_chunks``)."""
    assert variant in LOOKUP_VARIANTS, variant
    if not release.lookup_window_extra:
        return cdiv(W, C)
    if variant == READ_WINDOW:
        return z3_max(1, cdiv(W - 1 + extra, C))
    return z3_max(cdiv(W, C), cdiv(W - 1 + extra, C))


def load_window_chunks(W, extra, C, candidate_end_tokens, variant: str = VLLM_WINDOW,
                       release: Release = DEFAULT_RELEASE):
    """``GroupOffloadConfig.load_window_size_in_chunks``: widened by the right
    padding ``-candidate_end % C`` of a candidate end that is not chunk-aligned
    (0.30.0's: without ``extra_retained_tokens``). A release without
    ``padded_initial_window`` (0.29.0 has no such method): the window."""
    if not release.padded_initial_window:
        return window_chunks(W, extra, C, variant, release)
    if not release.lookup_window_extra:
        return z3_max(window_chunks(W, extra, C, variant, release),
                    cdiv(W - 1 + (-candidate_end_tokens) % C, C))
    return z3_max(window_chunks(W, extra, C, variant),
                cdiv(W - 1 + extra + (-candidate_end_tokens) % C, C))


# ---------------------------------------------------------------------------
# The sliding-window scan: the loop and its closed form.
# Answers per relative key index i: breaks(i) (MISS or RETRY), retry(i),
# pending(i) (HIT_PENDING); a key that does not break is a hit.
# ---------------------------------------------------------------------------


@dataclass
class ScanResult:
    end: z3.ArithRef  # end index (in the scanned keys) of the run found
    deferred: z3.BoolRef  # the lookup returns None
    side: list  # constraints defining fresh symbols


def run_length(e, n, w, w0, reset_window_on_break: bool = True):
    """``required_window`` when the run ending at ``e`` completes: the initial
    window at the right end ``n``, ``sliding_window_size`` below a break."""
    return w0 if not reset_window_on_break else z3.If(e == n, w0, w)


def run_qualifies(e, n, w, w0, breaks_at_e, some_break_in, reset_window_on_break: bool = True):
    """The scan can return ``e``: ``e == n`` or key ``e`` breaks the run, and
    no key of ``[max(0, e - run_length(e)), e)`` breaks it.
    ``some_break_in(lo, e)``: a break lies in ``[lo, e)``."""
    lo = z3_max(0, e - run_length(e, n, w, w0, reset_window_on_break))
    return z3.And(0 <= e, e <= n, z3.Or(e == n, breaks_at_e), z3.Not(some_break_in(lo, e)))


def prefix_scan_end(present_below, n, short_by: int = 0):
    """The scan's end when exactly the keys below ``present_below`` (relative)
    hit: ``min(n, max(0, present_below))`` (obligation ``lookup-prefix-scan``).
    ``short_by``: the mutant ending that many keys short (``max(0, end - k)``)."""
    end = z3_min(n, z3_max(0, present_below))
    return z3_max(0, end - short_by) if short_by else end


def scan_end(breaks: Pred, pending: Pred, retry: Pred, n, w, w0, bound: int,
             reset_window_on_break: bool = True, prefix: str = "scan") -> ScanResult:
    """Closed form of ``_sliding_window_lookup`` over ``n <= bound`` keys: the
    end is the largest ``e`` in ``[0, n]`` with ``e == n`` or key ``e``
    breaking the run, and no break in ``[max(0, e - req(e)), e)``, where
    ``req(n) = w0`` (the initial window) and ``req(e) = w`` below ``n``.
    Deferred when a RETRY lies in ``[e, n)`` or a HIT_PENDING in
    ``[max(0, e - req(e)), e)``. ``reset_window_on_break=False``: the mutant
    that keeps ``w0`` throughout.

    Encoded in O(bound) terms: ``last_break[e]`` is the last break below ``e``
    (-1 if none), so "no break in ``[lo, e)``" is ``last_break[e] < lo``."""

    req = lambda e: run_length(e, n, w, w0, reset_window_on_break)  # noqa: E731
    last_break, last_pending = [z3.IntVal(-1)], [z3.IntVal(-1)]
    for i in range(bound):
        last_break.append(z3.If(breaks(z3.IntVal(i)), i, last_break[-1]))
        last_pending.append(z3.If(pending(z3.IntVal(i)), i, last_pending[-1]))
    retry_from = [z3.BoolVal(False)] * (bound + 1)
    for i in range(bound - 1, -1, -1):
        retry_from[i] = z3.Or(retry_from[i + 1], z3.And(i < n, retry(z3.IntVal(i))))

    def lo(e):
        return z3_max(0, e - req(e))

    def qualifies(e: int):
        return run_qualifies(e, n, w, w0, breaks(z3.IntVal(e)),
                             lambda a, b: last_break[e] >= a, reset_window_on_break)

    end = z3.Int(prefix + "_end")
    quals = [qualifies(e) for e in range(bound + 1)]  # built once, used twice (the same terms)
    side = [0 <= end, end <= n,
            z3.Or([z3.And(end == e, quals[e]) for e in range(bound + 1)]),
            z3.And([z3.Implies(e > end, z3.Not(quals[e])) for e in range(bound + 1)])]
    deferred = z3.Or([
        z3.And(end == e, z3.Or(retry_from[e], last_pending[e] >= lo(e)))
        for e in range(bound + 1)])
    return ScanResult(end, deferred, side)


def scan_loop(breaks: Pred, pending: Pred, retry: Pred, n, w, w0, bound: int) -> ScanResult:
    """``_sliding_window_lookup`` as vLLM's loop runs it, unrolled for
    ``idx = bound - 1 .. 0`` (iterations with ``idx >= n`` do nothing).
    Requires ``n <= bound``."""
    defer, pend, done = z3.BoolVal(False), z3.BoolVal(False), z3.BoolVal(False)
    consecutive, required, result = z3.IntVal(0), w0, z3.IntVal(0)
    result_deferred = z3.BoolVal(False)
    for idx in range(bound - 1, -1, -1):
        i = z3.IntVal(idx)
        active = z3.And(i < n, z3.Not(done))
        brk = breaks(i)
        n_defer = z3.Or(defer, z3.And(brk, retry(i)))
        n_pend = z3.If(brk, False, z3.Or(pend, pending(i)))
        n_cons = z3.If(brk, 0, consecutive + 1)
        n_req = z3.If(brk, w, required)
        hit_now = n_cons == n_req
        result = z3.If(z3.And(active, hit_now), i + n_req, result)
        result_deferred = z3.If(z3.And(active, hit_now), z3.Or(n_defer, n_pend), result_deferred)
        done = z3.Or(done, z3.And(active, hit_now))
        defer = z3.If(active, n_defer, defer)
        pend = z3.If(active, n_pend, pend)
        consecutive = z3.If(active, n_cons, consecutive)
        required = z3.If(active, n_req, required)
    # fell off the left end: ``return None if defer or pending else consecutive``
    end = z3.If(done, result, consecutive)
    deferred = z3.If(done, result_deferred, z3.Or(defer, pend))
    return ScanResult(end, deferred, [])


def prefix_end(hit: Pred, start, stop, bound: int, prefix: str = "prefix") -> tuple:
    """``_maximal_prefix_lookup`` over keys ``[start, stop)`` (HIT / MISS):
    the first missing chunk at or after ``start``, or ``stop``."""
    p = z3.Int(prefix + "_end")
    stop = z3_max(start, stop)
    side = [start <= p, p <= stop,
            forall_in(start, p, hit, bound),
            z3.Or(p == stop, z3.Not(hit(p)))]
    return p, side


# ---------------------------------------------------------------------------
# The whole lookup: one optional full-attention group and one SWA group.
# ---------------------------------------------------------------------------


@dataclass
class LookupSym:
    """Symbolic configuration of the lookup. Tokens unless named otherwise.

    has_full / full_block_tokens: the full-attention group (``tokens_per_block``);
    B: the SWA group's ``tokens_per_block`` (block size times DCP);
    bpc: ``blocks_per_chunk`` (one value for every group, as in vLLM);
    W, extra: ``sliding_window``, ``extra_retained_tokens``; eagle: the SWA
    group is an EAGLE/MTP draft group;
    num_tokens, local_hit_tokens, has_max_load / max_load_tokens: the later request;
    variant: the lookup variant (:data:`LOOKUP_VARIANTS`, not symbolic);
    release: the vLLM release whose lookup parts apply (``kvreach.releases``,
    not symbolic; default 0.33.0);
    full_eagle: the full-attention group is an EAGLE/MTP draft group
    (``is_eagle_group``; 0.29.0's spec decode with no annotated group makes
    every group one); None: it is not one (the lookup then has no such term).
    L: vLLM 0.34.0's ``num_hash_lookahead_tokens`` (the twin's
    ``LaterRequest.hash_lookahead_tokens``): each block hash covers the L
    tokens after its block, so the request has keys for ``num_tokens - L``
    tokens (:attr:`key_tokens`), and with L > 0 no group is looked up as a
    legacy EAGLE group (:attr:`legacy_eagle`); None: legacy hashes (the
    lookup then has no such term).
    """

    has_full: z3.BoolRef
    full_block_tokens: z3.ArithRef
    B: z3.ArithRef
    bpc: z3.ArithRef
    W: z3.ArithRef
    extra: z3.ArithRef
    eagle: z3.BoolRef
    num_tokens: z3.ArithRef
    local_hit_tokens: z3.ArithRef
    has_max_load: z3.BoolRef
    max_load_tokens: z3.ArithRef
    variant: str = VLLM_WINDOW
    release: Release = DEFAULT_RELEASE
    full_eagle: z3.BoolRef | None = None
    L: z3.ArithRef | None = None

    @staticmethod
    def fresh(prefix: str = "lk_", variant: str = VLLM_WINDOW,
              release: Release = DEFAULT_RELEASE, full_eagle: bool = False,
              lookahead: bool = False) -> "LookupSym":
        """Fresh symbols; ``full_eagle``: the full-attention group's EAGLE
        flag is a symbol too (else the group is not an EAGLE group);
        ``lookahead``: L (``num_hash_lookahead_tokens``) is a symbol too."""
        I = lambda n: z3.Int(prefix + n)  # noqa: E731
        Bo = lambda n: z3.Bool(prefix + n)  # noqa: E731
        return LookupSym(
            has_full=Bo("has_full"), full_block_tokens=I("full_block_tokens"),
            B=I("swa_block_tokens"), bpc=I("blocks_per_chunk"), W=I("sliding_window"),
            extra=I("extra_retained_tokens"), eagle=Bo("eagle"),
            num_tokens=I("num_tokens"), local_hit_tokens=I("local_hit_tokens"),
            has_max_load=Bo("has_max_load"), max_load_tokens=I("max_load_tokens"),
            variant=variant, release=release,
            full_eagle=Bo("full_eagle") if full_eagle else None,
            L=I("hash_lookahead_tokens") if lookahead else None,
        )

    @property
    def C(self):
        """SWA ``tokens_per_chunk``."""
        return self.B * self.bpc

    @property
    def C_full(self):
        return self.full_block_tokens * self.bpc

    @property
    def key_tokens(self):
        """The tokens the request's keys cover (``num_keys``: ``num_tokens -
        L``, at least 0; the hash block divides every chunk, so the keys per
        group are this over the group's chunk)."""
        return self.num_tokens if self.L is None else z3_max(0, self.num_tokens - self.L)

    @property
    def legacy_eagle(self):
        """The SWA group looked up as an EAGLE group (``apply_eagle_drop``:
        ``is_eagle_group and not use_lookahead_block_hashes``)."""
        return self.eagle if self.L is None else z3.And(self.eagle, self.L == 0)

    @property
    def shift(self):
        """EAGLE shift, as ``SymConfig.shift`` (``reachable_block_mask``)."""
        return z3.If(self.legacy_eagle, 1, 0)

    def well_formed(self) -> z3.BoolRef:
        """What vLLM accepts; the GPU-local hit is block-aligned for every
        group (``update_state_after_alloc`` asserts it)."""
        return z3.And(
            self.full_block_tokens >= 1, self.B >= 1, self.bpc >= 1,
            self.W >= 1, self.extra >= 0, self.num_tokens >= 1,
            self.local_hit_tokens >= 0, self.local_hit_tokens <= self.num_tokens,
            self.local_hit_tokens % self.B == 0,
            z3.Implies(self.has_full, self.local_hit_tokens % self.full_block_tokens == 0),
            self.max_load_tokens >= 0,
            *([] if self.L is None else [self.L >= 0]),
        )


@dataclass
class LookupTerms:
    hit_tokens: z3.ArithRef  # beyond local_hit_tokens (0: no hit)
    swa_loaded: tuple  # [lo, hi) chunk range the SWA group loads
    full_loaded: tuple  # [lo, hi) of the full-attention group
    swa_verified: tuple  # [lo, hi) the SWA run the scan accepted (before the EAGLE pop)
    side: list  # definitions of fresh symbols
    scope: z3.BoolRef  # the scanned key counts fit the bound


@dataclass
class Keys:
    """The manager's answers as the lookup reads them: a full-attention
    prefix end and an SWA scan end over the later request's chunk indices."""

    full_end: Callable  # (start, stop) -> (end, side)
    swa_scan: Callable  # (start, n, w, w0) -> ScanResult
    scope: Callable  # (full_start, full_stop, n) -> BoolRef


def bounded_keys(full_hit: Pred, swa_hit: Pred, bound: int, prefix: str = "lk") -> Keys:
    """Any HIT / MISS answers ``full_hit(c)``, ``swa_hit(c)``; at most
    ``bound`` keys scanned per group."""
    return Keys(
        full_end=lambda a, b: prefix_end(full_hit, a, b, bound, prefix + "_full"),
        swa_scan=lambda start, n, w, w0: scan_end(
            lambda i: z3.Not(swa_hit(start + i)), lambda i: z3.BoolVal(False),
            lambda i: z3.BoolVal(False), n, w, w0, bound, prefix=prefix + "_swa"),
        scope=lambda a, b, n: z3.And(n <= bound, z3_max(0, b - a) <= bound),
    )


def prefix_keys(full_chunks, swa_chunks) -> Keys:
    """HIT for exactly the chunks below ``full_chunks`` / ``swa_chunks``
    (what one request's dense stores, or a union of prefixes, give a later
    request): closed forms, no bound (obligation ``lookup-prefix-scan``)."""
    return Keys(
        full_end=lambda a, b: (z3_max(a, z3_min(z3_max(a, b), full_chunks)), []),
        swa_scan=lambda start, n, w, w0: ScanResult(
            prefix_scan_end(swa_chunks - start, n), z3.BoolVal(False), []),
        scope=lambda a, b, n: z3.BoolVal(True),
    )


def lookup(s: LookupSym, keys: Keys, widen_initial_by: int = 0,
           load_early_by: int = 0) -> LookupTerms:
    """``_lookup_complete_chunks`` (one pass) and the loaded chunk ranges
    against the manager's answers ``keys`` (:func:`bounded_keys`,
    :func:`prefix_keys`). ``widen_initial_by`` > 0 is the mutant of the
    obligation ``lookup-monotone`` (an initial run that many chunks wider);
    ``load_early_by`` > 0 the mutant of ``load-reads-checked`` (the SWA load
    starting that many chunks before ``update_state_after_alloc``'s first
    fresh block's chunk, not below chunk 0)."""
    local, T, C, Cf = s.local_hit_tokens, s.num_tokens, s.C, s.C_full
    K = s.key_tokens  # T without lookahead hashes (the same terms)
    r = s.release
    # kv_transfer_params["max_load_tokens"]: read from 0.31.0 on
    max_load = r.max_load_tokens
    if r.swa_reduction_before_caps:
        # 0.34.0: the SWA -1 comes first; a tighter cap is not reduced
        m = T - 1
        m = z3.If(s.has_max_load, z3_min(m, local + s.max_load_tokens), m) if max_load else m
    else:
        m = z3.If(s.has_max_load, z3_min(T, local + s.max_load_tokens), T) if max_load else T
        m = m - 1  # an SWA group exists: the last prompt token is recomputed
    zero = []
    # full-attention group (prefix lookup)
    m1 = z3_min(m, K / Cf * Cf)
    m1 = z3.If(s.has_max_load, m1 / Cf * Cf, m1) if max_load else m1
    f_start, f_stop = local / Cf, cdiv(m1, Cf)
    # the full-attention group's apply_eagle_drop (none under lookahead hashes)
    fe = s.full_eagle if s.full_eagle is None or s.L is None else z3.And(s.full_eagle, s.L == 0)
    if fe is not None and r.eagle_widening == "every group":
        # an unverified EAGLE group queries one chunk more (0.30.0 on)
        f_stop = z3.If(fe, z3_min(cdiv(z3_min(m1 + Cf, K / Cf * Cf), Cf), K / Cf), f_stop)
    f_end, f_side = keys.full_end(f_start, f_stop)
    f_hit_end = f_end if fe is None else f_end - z3.If(fe, 1, 0)  # EAGLE pop
    m2 = z3_min(m1, Cf * f_hit_end)
    zero.append(z3.And(s.has_full, z3.Or(m1 - local < Cf, f_end == f_start, m2 - local < Cf)))
    m2 = z3.If(s.has_full, m2, m)
    # SWA group (right-to-left scan), EAGLE pop
    n_keys = K / C
    m3 = z3_min(m2, n_keys * C)
    m3 = z3.If(s.has_max_load, m3 / C * C, m3) if max_load else m3
    query_max = z3.If(s.legacy_eagle, z3_min(m3 + C, n_keys * C), m3)
    num_chunks = z3_min(cdiv(query_max, C), n_keys)
    start = local / C
    w = window_chunks(s.W, s.extra, C, s.variant, r) + s.shift
    w0 = load_window_chunks(s.W, s.extra, C, z3_min(m3, (num_chunks - s.shift) * C), s.variant,
                            r) + s.shift
    w0 = w0 + widen_initial_by
    n = z3_max(0, num_chunks - start)
    scan = keys.swa_scan(start, n, w, w0)
    m4 = z3_min(m3, C * (start + scan.end - s.shift))
    zero.append(z3.Or(m3 - local < C, scan.end == 0, m4 - local < C))
    hit = z3.If(z3.Or(zero), 0, m4 - local)
    verified = (start + z3_max(0, scan.end - run_length(scan.end, n, w, w0)), start + scan.end)
    # update_state_after_alloc: loaded chunk ranges (the same in every release:
    # get_num_skipped_tokens counts extra_retained_tokens from 0.29.0 on)
    total = local + hit
    B = s.B
    skipped_blocks = z3_max(0, total - s.W + 1 - s.extra) / B
    swa_start_block = z3_max(cdiv(local, B), skipped_blocks)
    swa_loads = z3.And(hit > 0, swa_start_block < cdiv(total, B))
    swa_start_chunk = swa_start_block / s.bpc
    if load_early_by:
        swa_start_chunk = z3_max(0, swa_start_chunk - load_early_by)
    swa_loaded = (z3.If(swa_loads, swa_start_chunk, 0), z3.If(swa_loads, cdiv(total, C), 0))
    full_loads = z3.And(s.has_full, hit > 0)
    full_loaded = (z3.If(full_loads, cdiv(local, s.full_block_tokens) / s.bpc, 0),
                   z3.If(full_loads, cdiv(total, Cf), 0))
    scope = z3.Implies(s.has_full, keys.scope(f_start, f_stop, n))
    scope = z3.And(scope, keys.scope(0, 0, n))
    return LookupTerms(hit, swa_loaded, full_loaded, verified, f_side + scan.side, scope)


def link(s: SymConfig, lk: LookupSym) -> z3.BoolRef:
    """The lookup's groups are the store configuration's: the same SWA block,
    ``blocks_per_chunk`` and EAGLE flag; the store mask's window is
    ``sliding_window + extra_retained_tokens`` (``_reachable_store_block_mask``
    widens the spec), or ``sliding_window`` alone for a release without
    ``mask_window_extra`` (0.29.0's ``is_store_reachable_swa_chunk``, 0.30.0's
    mask); the alignment is the
    full-attention group's chunk (``SchedulerOffloadConfig.from_spec``), or the
    SWA chunk when the SWA group is the only group. (Two full-attention chunk
    sizes, no alignment, are outside this link.)"""
    mask_window = lk.W + lk.extra if lk.release.mask_window_extra else lk.W
    return z3.And(
        lk.B == s.B, lk.bpc == s.bpc, s.W == mask_window, lk.eagle == s.eagle,
        s.has_align, z3.If(lk.has_full, s.A == lk.C_full, s.A == s.C),
    )
