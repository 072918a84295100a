"""Mutants: deliberately wrong rules each obligation must reject.

A mutant is rejected when the obligation finds a concrete counterexample
against it (BMC from the initial state for lifecycle obligations; a model of
the negated property for static ones). Each mutant names the mistake it
plants, in vLLM terms (``Mutant.doc``). A lifecycle mutant plants a store
decision; a static one sets mutation parameters (``Ctx.mutant``), each read
by the one function it mutates, named beside it here.
"""

from __future__ import annotations

from dataclasses import replace

import z3

from kvreach.proofs.framework import Mutant
from kvreach.spec.lookup import READ_WINDOW
from kvreach.spec.rules import StoreStep, lookup_window_store, v033_store

# --- store decisions (lifecycle obligations) ----------------------------------


def prefix_horizon_store(s, cursor, n, finished, c, aux):
    """vllm-0.33 with the pre-fix horizon: the step's count is the final end."""
    return v033_store(s, cursor, n, finished, c, aux, horizon_at_frontier=True)


def no_final_tail_store(s, cursor, n, finished, c, aux):
    """vllm-0.33 without the final-segment tail (horizon always None)."""
    return v033_store(s, cursor, n, finished, c, aux, final_tail=False)


def resubmit_store(s, cursor, n, finished, c, aux):
    """vllm-0.33 whose abort reconsideration forgets what was stored: it
    rescans the final partial segment from its start."""
    return v033_store(s, cursor, n, finished, c, aux, skip_stored=False)


def ahead_store(s, cursor, n, finished, c, aux):
    """vllm-0.33 that also submits the chunk after the frontier."""
    real = v033_store(s, cursor, n, finished, c, aux)
    return StoreStep(z3.Or(real.submitted, c == n), real.next_cursor, real.side)


def stuck_cursor_store(s, cursor, n, finished, c, aux):
    """vllm-0.33 whose cursor never advances."""
    real = v033_store(s, cursor, n, finished, c, aux)
    return StoreStep(real.submitted, cursor, real.side)


def lookup_window_short_store(s, cursor, n, finished, c, aux):
    """kvreach's ``lookup-window`` keeping one chunk fewer before each
    boundary (``short_by=1`` of the one rule): the run a repeated prompt of a
    whole number of alignments needs breaks."""

    return lookup_window_store(s, cursor, n, finished, c, aux, short_by=1)


def behind_store(s, cursor, n, finished, c, aux):
    """vllm-0.33 that also offers the chunk just before its cursor (a store
    range starting one chunk early)."""
    real = v033_store(s, cursor, n, finished, c, aux)
    return StoreStep(z3.Or(real.submitted, z3.And(c == cursor - 1, c < n)),
                     real.next_cursor, real.side)


PREFIX_HORIZON = Mutant.of_store("prefix-horizon", prefix_horizon_store)
NO_FINAL_TAIL = Mutant.of_store("no-final-tail", no_final_tail_store)
RECONSIDER_RESUBMITS = Mutant.of_store("reconsider-resubmits", resubmit_store)
STORE_AHEAD = Mutant.of_store("store-ahead-of-frontier", ahead_store)
STUCK_CURSOR = Mutant.of_store("stuck-cursor", stuck_cursor_store)
LOOKUP_WINDOW_SHORT = Mutant.of_store("lookup-window-one-chunk-short", lookup_window_short_store)
OFFERS_BEFORE_CURSOR = Mutant.of_store("offers-before-cursor", behind_store)


# --- mutation parameters (static obligations) ---------------------------------


def need_ceil_w(s):
    """``s`` with ``need0 = ceil(W / B)`` (0.29's window formula at block level)."""
    nm = z3.Int("need0_mutant")
    side = z3.And((nm - 1) * s.B < s.W, s.W <= nm * s.B)
    return replace(s, need0=nm), side


NEED_CEIL_W = Mutant(  # the configuration (need0)
    "need-ceil-W-over-B", {"config": need_ceil_w}, need_ceil_w.__doc__)
WITNESS_EARLY = Mutant(  # spec.load.wanted
    "witness-one-segment-early", {"witness_early": 1},
    "``load.wanted`` whose segment witness is one segment too early.")
TAIL_OFF_BY_ONE = Mutant(  # spec.mask.chunk_reachable
    "tail-off-by-one", {"tail_off_by_one": True},
    "``mask.chunk_reachable`` with ``r > per_segment - need`` instead of ``>=``.")
SCAN_KEEPS_INITIAL_WINDOW = Mutant(  # spec.lookup.scan_end
    "scan-keeps-initial-window", {"reset_window_on_break": False},
    """``spec.lookup.scan_end`` with ``reset_window_on_break=False``: the
    closed form keeps the initial (possibly wider) window after a MISS / RETRY
    instead of falling back to ``sliding_window_size`` as
    ``_sliding_window_lookup`` does. A parameter of the one closed form.""")
PREFIX_SCAN_ONE_SHORT = Mutant(  # spec.lookup.prefix_scan_end
    "prefix-scan-one-short", {"short_by": 1},
    """``spec.lookup.prefix_scan_end`` one key short: ``max(0, end - 1)``
    (the obligation ``lookup-prefix-scan`` selects it by name).""")
KEEPS_EVERY_CHUNK = Mutant(  # keep.one_shot_mask
    "keeps-every-chunk", {"keep_every_chunk": True},
    """A rule that keeps every chunk (dense): the obligation ``no-waste``
    selects it by name, and some stored chunk is then loaded by no lookup.""")
INITIAL_RUN_TWO_WIDER = Mutant(  # spec.lookup.lookup
    "initial-run-two-wider", {"widen_initial_by": 2},
    """``spec.lookup.lookup`` whose initial run is two chunks wider than
    ``load_window_size_in_chunks`` (``widen_initial_by=2``): a right end that
    becomes a hit then asks for a run reaching past the break below it, so
    storing one more key can lose the hit. vLLM's initial run is at most one
    chunk wider than the later runs (the right padding is at most one token
    here), which is what the obligation ``lookup-monotone`` rests on.""")
VERIFIED_RUN_ONE_SHORT = Mutant(  # obligations.lookup._lookup_run_stored
    "verified-run-one-short", {"verified_short_by": 1},
    """``lookup-run-stored``'s reading of the dense lookup's verified SWA run
    starting one chunk late (``verified_short_by=1``): a store missing only
    the run's first chunk then looks complete, yet its hit is shorter.""")
READ_WINDOW_LOOKUP = Mutant(  # the later request's lookup variant (Ctx.lookup_variant)
    "read-window-lookup", {"lookup_variant": READ_WINDOW},
    """``hit-preserving-wastes`` under the lookup variant ``read-window``
    (``get_sliding_window_size_in_chunks`` returning the chunks the load
    reads): the run's first chunk is then loaded by the very hit it serves,
    so the claim must fail: it is a claim about vLLM 0.33.0's lookup.""")
NEIGHBOURS_SHORT = Mutant(  # proofs.neighbours.keep
    "lookup-window-one-chunk-short", {"neighbours_short_by": 1},
    """``spec.rules.lookup_window_keep`` with ``short_by=1`` as both earlier
    requests' keep decision (whatever the row's rule): each run one chunk
    short, so the run a later request of a whole number of alignments needs
    breaks (the obligation ``hit-preservation-neighbours`` selects it by name).""")
