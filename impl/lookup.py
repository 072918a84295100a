"""vLLM 0.33.0's offload lookup as plain Python: the hit a later request gets
from the offload tier, and the chunks its load then requests.

This is the load side, and it is what kvreach calls *loadable*. It is written
from vLLM's lookup code, not from the store mask's assumption about it
(``SlidingWindowManager._contiguous_blocks_for_hit``). Each function names the
vLLM code it models (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/``):

- ``config.py`` ``get_sliding_window_size_in_chunks`` -> :meth:`LookupGroup.window_chunks`
- ``scheduler.py`` ``GroupOffloadConfig.load_window_size_in_chunks`` ->
  :meth:`LookupGroup.load_window_chunks`
- ``OffloadingConnectorScheduler._maximal_prefix_lookup`` -> :func:`maximal_prefix_lookup`
- ``OffloadingConnectorScheduler._sliding_window_lookup`` -> :func:`sliding_window_lookup`
  (the loop; its closed form is :func:`sliding_window_end`, checked equal by
  its contract here and by the Z3 obligation ``lookup-scan-closed-form``)
- ``OffloadingConnectorScheduler._lookup_complete_chunks`` -> :func:`lookup_hit_tokens`
- ``OffloadingConnectorScheduler.update_state_after_alloc`` (``keys_to_load``),
  with the blocks ``SlidingWindowManager`` allocates for the hit
  (``get_num_skipped_tokens``, null padding in ``add_local_computed_blocks``)
  -> :func:`loaded_chunks`

Out of scope, and why (each is off for the configurations kvreach models):
partial tails (``supports_partial_tail`` needs a recurrent group with
``mamba_cache_mode='align'``), the Mamba hit rounding (``_mamba_align_size``),
the delay while another request loads the same keys (``_chunks_being_loaded``,
a timing effect that only defers), ``skip_reading_prefix_cache``, chunked-local
attention groups. ``max_num_new_tokens`` is modelled although vLLM's scheduler
passes none.

Coordinates: chunk indices are the *later request's* (its ``offload_keys``);
tokens are absolute positions of that request.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Sequence

import deal

from kvreach.impl import contracts as _contracts  # noqa: F401  (sets the default mode)
from kvreach.params import ParamError, need_int, cdiv


# The lookup variants: "vllm-window", ``get_sliding_window_size_in_chunks`` as
# vLLM has it (each release's: :class:`LookupGroup`'s ``window_extra``), and
# "read-window", the load-side change docs/findings.md F7 proposes (the run is
# the chunks the load reads, ``ceil((W - 1 + extra) / C)``, not also
# ``ceil(W / C)``). Everything else of the lookup is the same in both.
VLLM_WINDOW, READ_WINDOW = "vllm-window", "read-window"
LOOKUP_VARIANTS = (VLLM_WINDOW, READ_WINDOW)

# The parts of the lookup that differ between vLLM releases
# (``kvreach.releases.Release``), each a parameter whose default is vLLM
# 0.33.0's: per group the window's extra and the padded initial window
# (:class:`LookupGroup`), for the whole lookup :class:`LookupParts`.
PENDING = ("in the run", "any scanned")
EAGLE_WIDENING = ("every group", "SWA groups")


class Answer(enum.Enum):
    """``vllm.v1.kv_offload.base.LookupResult``: the manager's answer for a key."""

    HIT = "hit"
    HIT_PENDING = "hit_pending"
    RETRY = "retry"
    MISS = "miss"


@dataclass(frozen=True)
class LookupGroup:
    """One KV-cache group as the offload lookup sees it (``GroupOffloadConfig``).

    block_tokens: ``tokens_per_block`` (block size times the DCP size).
    blocks_per_chunk: ``SchedulerOffloadConfig.blocks_per_chunk``.
    window_tokens: ``SlidingWindowSpec.sliding_window``; None for full attention.
    extra_retained_tokens: ``SlidingWindowSpec.extra_retained_tokens``.
    eagle: ``is_eagle_group`` (EAGLE/MTP draft layers).
    lookup_variant: which ``get_sliding_window_size_in_chunks`` the lookup
        runs (:data:`LOOKUP_VARIANTS`): ``"vllm-window"`` (vLLM's) or
        ``"read-window"`` (docs/findings.md F7: the chunks the load reads).
    window_extra: the window and the padded initial window count
        ``extra_retained_tokens`` (vLLM 0.31.0 on); False: vLLM 0.29.0 /
        0.30.0's ``cdiv(W, C)`` and ``cdiv(W - 1 + padding, C)``.
    padded_initial_window: the first run needs
        ``load_window_size_in_chunks`` (vLLM 0.30.0 on); False: vLLM
        0.29.0, whose every run needs the window.
    """

    block_tokens: int
    blocks_per_chunk: int = 1
    window_tokens: int | None = None
    extra_retained_tokens: int = 0
    eagle: bool = False
    lookup_variant: str = VLLM_WINDOW
    window_extra: bool = True
    padded_initial_window: bool = True

    def __post_init__(self) -> None:
        need_int("block_tokens", self.block_tokens, 1)
        need_int("blocks_per_chunk", self.blocks_per_chunk, 1)
        if self.window_tokens is not None:
            need_int("window_tokens", self.window_tokens, 1)
        need_int("extra_retained_tokens", self.extra_retained_tokens, 0)
        if self.window_tokens is None and self.extra_retained_tokens:
            raise ParamError("extra_retained_tokens", self.extra_retained_tokens,
                             "0 for a full-attention group (a SlidingWindowSpec field)")
        if self.lookup_variant not in LOOKUP_VARIANTS:
            raise ParamError("lookup_variant", self.lookup_variant,
                             "one of " + ", ".join(LOOKUP_VARIANTS))

    @property
    def is_swa(self) -> bool:
        return self.window_tokens is not None

    @property
    def chunk_tokens(self) -> int:
        """``GroupOffloadConfig.tokens_per_chunk``."""
        return self.block_tokens * self.blocks_per_chunk

    @property
    def window_chunks(self) -> int | None:
        """``get_sliding_window_size_in_chunks``: ``max(ceil(W / C),
        ceil((W - 1 + extra_retained_tokens) / C))``; None for full attention.
        Variant ``"read-window"``: ``max(1, ceil((W - 1 + extra) / C))``, the
        chunks the load reads before a chunk-aligned hit (at least one: the
        scan needs a run of one)."""
        if self.window_tokens is None:
            return None
        C = self.chunk_tokens
        if not self.window_extra:  # vLLM 0.29.0 / 0.30.0
            return cdiv(self.window_tokens, C)
        reads = cdiv(self.window_tokens - 1 + self.extra_retained_tokens, C)
        if self.lookup_variant == READ_WINDOW:
            return max(1, reads)
        return max(cdiv(self.window_tokens, C), reads)

    def load_window_chunks(self, candidate_end_tokens: int) -> int | None:
        """``GroupOffloadConfig.load_window_size_in_chunks``: one chunk wider
        when the candidate end is not chunk-aligned and the window's left edge
        then falls a chunk further left."""
        if self.window_tokens is None:
            return None
        assert self.window_chunks is not None
        if not self.padded_initial_window:  # vLLM 0.29.0: no padded first run
            return self.window_chunks
        C = self.chunk_tokens
        right_padding = -candidate_end_tokens % C
        extra = self.extra_retained_tokens if self.window_extra else 0
        return max(self.window_chunks,
                   cdiv(self.window_tokens - 1 + extra + right_padding, C))

    def skipped_tokens(self, num_computed_tokens: int) -> int:
        """``SlidingWindowManager.get_num_skipped_tokens`` (0 for full attention)."""
        if self.window_tokens is None:
            return 0
        return max(0, num_computed_tokens - self.window_tokens + 1 - self.extra_retained_tokens)


@dataclass(frozen=True)
class LaterRequest:
    """The request that looks up (``RequestOffloadState`` of a new request).

    num_tokens: ``Request.num_tokens`` (its prompt, for a new request).
    local_hit_tokens: ``num_locally_computed_tokens``, the block-aligned GPU
        prefix-cache hit the scheduler passes to ``get_num_new_matched_tokens``.
    max_load_tokens: ``kv_transfer_params["max_load_tokens"]``.
    max_num_new_tokens: the cap argument of ``get_num_new_matched_tokens``.
    hash_lookahead_tokens: ``vllm_config.num_hash_lookahead_tokens`` (L,
        vLLM 0.34.0): each block hash covers the L tokens after its block,
        so the request has ``(num_tokens - L) // tokens_per_hash`` hashes and
        ``(num_tokens - L) // tokens_per_chunk`` keys per group
        (:func:`num_keys`), and with L > 0 (``use_lookahead_block_hashes``)
        no group is looked up as a legacy EAGLE group (``apply_eagle_drop``
        False: no widening, no pop). 0: legacy hashes.
    """

    num_tokens: int
    local_hit_tokens: int = 0
    max_load_tokens: int | None = None
    max_num_new_tokens: int | None = None
    hash_lookahead_tokens: int = 0

    def __post_init__(self) -> None:
        need_int("num_tokens", self.num_tokens, 1)
        need_int("hash_lookahead_tokens", self.hash_lookahead_tokens, 0)
        need_int("local_hit_tokens", self.local_hit_tokens, 0)
        if self.local_hit_tokens > self.num_tokens:
            raise ParamError("local_hit_tokens", self.local_hit_tokens,
                             f"at most num_tokens ({self.num_tokens})")
        if self.max_load_tokens is not None:
            need_int("max_load_tokens", self.max_load_tokens, 0)
        if self.max_num_new_tokens is not None:
            need_int("max_num_new_tokens", self.max_num_new_tokens, 0)


@dataclass(frozen=True)
class LookupParts:
    """The parts of ``_lookup_complete_chunks`` that differ between vLLM
    releases (``kvreach.releases.Release``); the defaults are vLLM 0.33.0's.

    pending: ``_sliding_window_lookup``'s HIT_PENDING (:data:`PENDING`):
        ``"in the run"`` defers only for a pending key of the run it returns,
        ``"any scanned"`` (vLLM 0.29.0) for one anywhere it read.
    eagle_widening: an unverified EAGLE group queries one chunk more
        (:data:`EAGLE_WIDENING`): ``"every group"`` (0.30.0 on) or ``"SWA
        groups"`` (0.29.0: a full-attention EAGLE group is not widened).
    max_num_new_tokens: the cap argument is applied (0.30.0 on); False: the
        lookup has no such argument (0.29.0).
    max_load_tokens: ``kv_transfer_params["max_load_tokens"]`` is honoured,
        each group's bound rounded down to its chunk (0.31.0 on).
    swa_reduction_before_caps: the SWA ``1`` (the last prompt token
        recomputed for its logprobs) is taken off ``num_tokens`` before the
        ``max_num_new_tokens`` / ``max_load_tokens`` caps, so a hit the caps
        bound is not reduced (0.34.0 on); False: after the caps, reducing a
        capped hit too (a cap at a chunk boundary then loses that chunk).
    """

    pending: str = "in the run"
    eagle_widening: str = "every group"
    max_num_new_tokens: bool = True
    max_load_tokens: bool = True
    swa_reduction_before_caps: bool = False

    def __post_init__(self) -> None:
        if self.pending not in PENDING:
            raise ParamError("pending", self.pending, "one of " + ", ".join(PENDING))
        if self.eagle_widening not in EAGLE_WIDENING:
            raise ParamError("eagle_widening", self.eagle_widening,
                             "one of " + ", ".join(EAGLE_WIDENING))


VLLM_0_33 = LookupParts()


@dataclass(frozen=True)
class StoreContent:
    """What the offload tier holds, as the manager's ``lookup`` answers for
    the later request's keys ``(group_idx, chunk_idx)``; any other key is a MISS."""

    hit: frozenset[tuple[int, int]] = frozenset()
    pending: frozenset[tuple[int, int]] = frozenset()
    retry: frozenset[tuple[int, int]] = frozenset()

    def answer(self, group_idx: int, chunk_idx: int) -> Answer:
        key = (group_idx, chunk_idx)
        if key in self.hit:
            return Answer.HIT
        if key in self.pending:
            return Answer.HIT_PENDING
        if key in self.retry:
            return Answer.RETRY
        return Answer.MISS

    @staticmethod
    def of_chunks(chunks_per_group: Sequence[Sequence[int]]) -> "StoreContent":
        return StoreContent(hit=frozenset(
            (g, c) for g, cs in enumerate(chunks_per_group) for c in cs))


# ---------------------------------------------------------------------------
# The SWA scan: the loop, and its closed form.
# ---------------------------------------------------------------------------


def _breaks(a: Answer) -> bool:
    """A MISS or RETRY ends a run of hits (``_sliding_window_lookup``)."""
    return a in (Answer.MISS, Answer.RETRY)


def sliding_window_end(
    answers: Sequence[Answer], window_chunks: int, initial_window_chunks: int,
    reset_window_on_break: bool = True, pending: str = "in the run",
) -> int | None:
    """Closed form of :func:`sliding_window_lookup`. With ``n = len(answers)``
    and ``req(n) = initial_window_chunks``, ``req(e) = window_chunks`` for
    ``e < n``: the end is the largest ``e`` in ``[0, n]`` such that ``e == n``
    or key ``e`` breaks the run, and no key of ``[max(0, e - req(e)), e)``
    breaks it. It is deferred (None) when a RETRY lies in ``[e, n)`` or a
    HIT_PENDING in ``[max(0, e - req(e)), e)``.

    ``reset_window_on_break=False`` is the mutant that keeps the wider initial
    window after a break (the obligation ``lookup-scan-closed-form`` rejects it).
    ``pending="any scanned"`` (vLLM 0.29.0): a HIT_PENDING anywhere in
    ``[max(0, e - req(e)), n)``, every key the loop read, defers."""
    n = len(answers)

    def req(e: int) -> int:
        return initial_window_chunks if (e == n or not reset_window_on_break) else window_chunks

    for e in range(n, -1, -1):
        if e != n and not _breaks(answers[e]):
            continue
        lo = max(0, e - req(e))
        if any(_breaks(a) for a in answers[lo:e]):
            continue
        pending_hi = n if pending == "any scanned" else e
        deferred = (any(a is Answer.RETRY for a in answers[e:])
                    or any(a is Answer.HIT_PENDING for a in answers[lo:pending_hi]))
        return None if deferred else e
    raise AssertionError("unreachable: the lowest break (or n) always qualifies")


@deal.pre(lambda answers, window_chunks, initial_window_chunks: 1 <= window_chunks <= initial_window_chunks)
@deal.ensure(lambda answers, window_chunks, initial_window_chunks, result:
             result == sliding_window_end(answers, window_chunks, initial_window_chunks))
def sliding_window_lookup(
    answers: Sequence[Answer], window_chunks: int, initial_window_chunks: int
) -> int | None:
    """``_sliding_window_lookup``, the loop as vLLM runs it: scanning from the
    right end, the end index of the first run of ``required_window``
    consecutive hits; the first run needs ``initial_window_chunks``, any run
    after a MISS or RETRY ``window_chunks``. 0 on a miss, None if deferred."""
    return scan(answers, window_chunks, initial_window_chunks)


def scan(answers: Sequence[Answer], window_chunks: int, initial_window_chunks: int,
         reset_window_on_break: bool = True, pending: str = "in the run") -> int | None:
    """The loop of :func:`sliding_window_lookup`. ``reset_window_on_break=False``
    is the mutant that keeps the initial window after a break (CrossHair must
    find it: tests/conformance/test_crosshair.py). ``pending="any scanned"``
    is vLLM 0.29.0's loop: a HIT_PENDING defers the lookup for good
    (``defer_lookup = True``), a later MISS does not clear it."""
    sticky = pending == "any scanned"
    defer = in_run = False
    consecutive = 0
    required = initial_window_chunks or window_chunks
    for idx in range(len(answers) - 1, -1, -1):
        a = answers[idx]
        if a is Answer.HIT:
            consecutive += 1
        elif a is Answer.HIT_PENDING:
            defer |= sticky
            in_run = True
            consecutive += 1
        else:  # RETRY or MISS
            defer |= a is Answer.RETRY
            consecutive, in_run = 0, False
            if reset_window_on_break:
                required = window_chunks
        if consecutive == required:
            return None if defer or in_run else idx + required
    return None if defer or in_run else consecutive


@deal.ensure(lambda answers, result: result is None or all(
    a is Answer.HIT for a in answers[:result]))
def maximal_prefix_lookup(answers: Sequence[Answer]) -> int | None:
    """``_maximal_prefix_lookup``: the number of leading hit keys (up to the
    first MISS); None if a RETRY or HIT_PENDING came before it."""
    hits, defer = 0, False
    for a in answers:
        if a is Answer.MISS:
            break
        if a is Answer.RETRY:
            defer = True
        else:
            hits += 1
            defer |= a is Answer.HIT_PENDING
    return None if defer else hits


# ---------------------------------------------------------------------------
# The whole lookup of one later request.
# ---------------------------------------------------------------------------


def lookup_order(groups: Sequence[LookupGroup]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``OffloadingConnectorScheduler.__init__``: full-attention groups in
    order, then SWA groups by decreasing ``window_chunks`` (a stable sort)."""
    full = tuple(i for i, g in enumerate(groups) if not g.is_swa)
    swa = sorted((i for i, g in enumerate(groups) if g.is_swa),
                 key=lambda i: groups[i].window_chunks or 0, reverse=True)
    return full, tuple(swa)


def num_keys(g: LookupGroup, req: LaterRequest) -> int:
    """``len(offload_keys)`` of a new request: one key per complete hashed
    chunk (``update_offload_keys``: every ``hashes_per_chunk``-th block hash),
    ``(num_tokens - L) // tokens_per_chunk`` with L lookahead tokens (the
    hash block divides the chunk)."""
    return max(0, req.num_tokens - req.hash_lookahead_tokens) // g.chunk_tokens


def lookup_hit_tokens(
    groups: Sequence[LookupGroup], req: LaterRequest, content: StoreContent,
    parts: LookupParts = VLLM_0_33,
) -> int | None:
    """``_lookup_complete_chunks``: tokens beyond ``local_hit_tokens`` the
    offload tier can load (0: no hit; None: the manager deferred).
    ``parts``: the release's lookup (:class:`LookupParts`)."""
    local = req.local_hit_tokens
    max_hit = req.num_tokens
    max_num_new = req.max_num_new_tokens if parts.max_num_new_tokens else None
    max_load = req.max_load_tokens if parts.max_load_tokens else None
    full, swa = lookup_order(groups)
    # the last prompt token is recomputed for its logprobs: before the caps
    # (0.34.0 on) or after them (a capped hit reduced too)
    reduce_first = bool(swa) and parts.swa_reduction_before_caps
    if reduce_first:
        max_hit -= 1
    if max_num_new is not None:
        max_hit = min(max_hit, local + max_num_new)
    if max_load is not None:
        max_hit = min(max_hit, local + max_load)
    if swa and not reduce_first:
        max_hit -= 1
    num_hit = 0
    defer = False
    eagle_verified: set[int] = set()
    todo: tuple[int, ...] = full + swa
    while todo:
        looked_up_swa = False
        this_pass, todo = todo, ()
        for gi in this_pass:
            g = groups[gi]
            C = g.chunk_tokens
            n_keys = num_keys(g, req)
            apply_eagle_drop = g.eagle and not req.hash_lookahead_tokens
            unverified = apply_eagle_drop and gi not in eagle_verified
            max_hit = min(max_hit, n_keys * C)
            if max_load is not None:
                max_hit = max_hit // C * C
            if max_hit - local < C:
                return 0
            widened = unverified and (g.is_swa or parts.eagle_widening == "every group")
            query_max = min(max_hit + C, n_keys * C) if widened else max_hit
            num_chunks = min(cdiv(query_max, C), n_keys)
            start = local // C
            answers = [content.answer(gi, c) for c in range(start, num_chunks)]
            hit_chunks: int | None
            if not g.is_swa:
                hit_chunks = maximal_prefix_lookup(answers)
            else:
                assert g.window_chunks is not None
                candidate_end = min(max_hit, (num_chunks - int(unverified)) * C)
                initial = g.load_window_chunks(candidate_end)
                assert initial is not None
                if parts.pending == "in the run":
                    hit_chunks = sliding_window_lookup(
                        answers, g.window_chunks + int(unverified), initial + int(unverified))
                else:
                    hit_chunks = scan(answers, g.window_chunks + int(unverified),
                                      initial + int(unverified), pending=parts.pending)
            if hit_chunks == 0:
                return 0
            if hit_chunks is None:
                defer = True
            else:
                if unverified:
                    hit_chunks -= 1
                    eagle_verified.add(gi)
                max_hit = min(max_hit, C * (start + hit_chunks))
            new_hit = max_hit - local
            if new_hit < C:
                return 0
            if new_hit < num_hit:
                if not apply_eagle_drop:
                    eagle_verified.clear()
                if defer:
                    defer = False
                    todo = full + swa
                elif looked_up_swa and not todo:
                    todo = swa
            looked_up_swa |= g.is_swa
            num_hit = new_hit
    return None if defer else num_hit


def loaded_chunks(
    groups: Sequence[LookupGroup], req: LaterRequest, hit_tokens: int
) -> tuple[range, ...]:
    """Chunks of each group whose keys ``update_state_after_alloc`` passes to
    ``prepare_load`` for a hit of ``hit_tokens`` beyond the local hit: from the
    first freshly allocated non-null block (SWA blocks wholly before the window
    of the next token are null: ``get_num_skipped_tokens``) to the chunk
    holding the last hit token. Empty ranges when nothing is loaded."""
    local = req.local_hit_tokens
    total = local + hit_tokens
    out = []
    for g in groups:
        if hit_tokens == 0:
            out.append(range(0))
            continue
        b = g.block_tokens
        num_gpu_blocks = cdiv(total, b)
        start_block = max(cdiv(local, b), g.skipped_tokens(total) // b)
        if start_block >= num_gpu_blocks:
            out.append(range(0))
            continue
        out.append(range(start_block // g.blocks_per_chunk, cdiv(total, g.chunk_tokens)))
    return tuple(out)


@dataclass(frozen=True)
class LookupOutcome:
    hit_tokens: int | None  # beyond local_hit_tokens; None: deferred
    loaded: tuple[range, ...]  # per group; empty when deferred or no hit

    def loaded_keys(self) -> set[tuple[int, int]]:
        return {(g, c) for g, r in enumerate(self.loaded) for c in r}


def _loads_only_hits(groups, req, content, result: LookupOutcome, parts=VLLM_0_33) -> bool:
    """The load asks only for keys the manager answered HIT (vLLM 0.31.0 on;
    0.29.0's and 0.30.0's lookups can load chunks they never checked:
    docs/versions.md, so the contract holds for the parts of 0.31.0 on only:
    0.33.0's, with the SWA reduction before or after the caps)."""
    if (dataclasses.replace(parts, swa_reduction_before_caps=False) != VLLM_0_33
            or not all(g.window_extra and g.padded_initial_window for g in groups)):
        return True
    return all(content.answer(g, c) is Answer.HIT for g, c in result.loaded_keys())


@deal.ensure(lambda groups, req, content, result, **_:
             result.hit_tokens is None or 0 <= result.hit_tokens <= req.num_tokens - req.local_hit_tokens)
@deal.ensure(_loads_only_hits)
@deal.raises(ParamError)
def lookup(groups: Sequence[LookupGroup], req: LaterRequest, content: StoreContent, *,
           parts: LookupParts = VLLM_0_33) -> LookupOutcome:
    """The offload hit of ``req`` against ``content`` and the chunks it loads
    (``get_num_new_matched_tokens`` then ``update_state_after_alloc``).
    ``parts``: the release's lookup (:class:`LookupParts`; vLLM 0.29.0 and
    0.30.0's lookups can load chunks they never checked, which breaks the
    contract ``_loads_only_hits``)."""
    if not groups:
        raise ParamError("groups", groups, "at least one KV-cache group")
    hit = lookup_hit_tokens(groups, req, content, parts)
    loaded = loaded_chunks(groups, req, hit) if hit else tuple(range(0) for _ in groups)
    return LookupOutcome(hit, loaded)
