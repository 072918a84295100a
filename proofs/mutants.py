"""Mutants: deliberately wrong rules each obligation must reject.

A mutant is rejected when the obligation finds a concrete counterexample
against it (BMC from the initial state for lifecycle obligations; a model of
the negated property for static ones). Each mutant names the mistake it
plants, in vLLM terms.
"""

from __future__ import annotations

import z3

from kvreach.spec import mask
from kvreach.spec.rules import StoreStep, v033_store


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
    from kvreach.spec.rules import lookup_window_store

    return lookup_window_store(s, cursor, n, finished, c, aux, short_by=1)


def behind_store(s, cursor, n, finished, c, aux):
    """vllm-0.33 that also offers the chunk just before its cursor (a store
    range starting one chunk early)."""
    real = v033_store(s, cursor, n, finished, c, aux)
    return StoreStep(z3.Or(real.submitted, z3.And(c == cursor - 1, c < n)),
                     real.next_cursor, real.side)


# obligation -> (mutant name, store fn or None, static variant or None)
MUTANTS = {
    "soundness": ("prefix-horizon", prefix_horizon_store, None),
    "completeness": ("no-final-tail", no_final_tail_store, None),
    "exactly-once": ("reconsider-resubmits", resubmit_store, None),
    "computed-before-stored": ("store-ahead-of-frontier", ahead_store, None),
    "invariant": ("stuck-cursor", stuck_cursor_store, None),
    "mask-equivalence": ("need-ceil-W-over-B", None, "need-ceil-W"),
    "load-witness": ("witness-one-segment-early", None, "witness-early"),
    "chunk-mask-closed-form": ("tail-off-by-one", None, "tail-off-by-one"),
    "load-window-blocks": ("need-ceil-W-over-B", None, "need-ceil-W"),
    "lookup-scan-closed-form": ("scan-keeps-initial-window", None, "scan-keeps-initial-window"),
    "lookup-prefix-scan": ("prefix-scan-one-short", None, "prefix-scan-one-short"),
    "hit-preservation": ("lookup-window-one-chunk-short", lookup_window_short_store, None),
    "no-waste": ("keeps-every-chunk", None, "keeps-every-chunk"),
    # world "vllm" (proofs/restarts.py)
    "exactly-once-incarnation": ("reconsider-resubmits", resubmit_store, None),
    "exactly-once-restarts": ("reconsider-resubmits", resubmit_store, None),
    "computed-before-stored-restarts": ("store-ahead-of-frontier", ahead_store, None),
    "refused-retried": ("offers-before-cursor", behind_store, None),
}


# --- static mutants ----------------------------------------------------------
from dataclasses import replace  # noqa: E402

from kvreach.spec import load  # noqa: E402


def need_ceil_w(s):
    """``s`` with ``need0 = ceil(W / B)`` (0.29's window formula at block level)."""
    nm = z3.Int("need0_mutant")
    side = z3.And((nm - 1) * s.B < s.W, s.W <= nm * s.B)
    return replace(s, need0=nm), side


def wanted_early_witness(s, model, c, H):
    """``load.wanted`` whose segment witness is one segment too early."""
    return load.wanted(s, model, c, H, witness_early=1)


def chunk_reachable_off_by_one(s, c, F=None):
    """``mask.chunk_reachable`` with ``r > per_segment - need`` instead of ``>=``."""
    return mask.chunk_reachable(s, c, F, tail_off_by_one=True)


def scan_keeps_initial_window(*args, **kw):
    """``spec.lookup.scan_end`` with ``reset_window_on_break=False``: the
    closed form keeps the initial (possibly wider) window after a MISS / RETRY
    instead of falling back to ``sliding_window_size`` as
    ``_sliding_window_lookup`` does. A parameter of the one closed form."""
    from kvreach.spec import lookup

    return lookup.scan_end(*args, reset_window_on_break=False, **kw)


def keeps_every_chunk():
    """A rule that keeps every chunk (dense): the obligation ``no-waste``
    selects it by name, and some stored chunk is then loaded by no lookup."""


def prefix_scan_one_short():
    """``spec.lookup.prefix_scan_end`` one key short: ``max(0, end - 1)``
    (the obligation ``lookup-prefix-scan`` selects it by name)."""


# Static variant (MUTANTS' third field) -> the function that plants it; the
# proof catalog (docs/proofs.md) quotes their docstrings.
VARIANTS = {
    "keeps-every-chunk": keeps_every_chunk,
    "scan-keeps-initial-window": scan_keeps_initial_window,
    "prefix-scan-one-short": prefix_scan_one_short,
    "need-ceil-W": need_ceil_w,
    "witness-early": wanted_early_witness,
    "tail-off-by-one": chunk_reachable_off_by_one,
}


# Static variant -> the mutation parameters it sets (``Ctx.mutant``, read by
# its obligation and passed to the one function it mutates): the runner plants
# them; no obligation names a variant.
PLANTS = {
    "keeps-every-chunk": {"keep_every_chunk": True},  # obligations.one_shot_mask
    "scan-keeps-initial-window": {"reset_window_on_break": False},  # spec.lookup.scan_end
    "prefix-scan-one-short": {"short_by": 1},  # spec.lookup.prefix_scan_end
    "need-ceil-W": {"config": need_ceil_w},  # the configuration (need0)
    "witness-early": {"witness_early": 1},  # spec.load.wanted
    "tail-off-by-one": {"tail_off_by_one": True},  # spec.mask.chunk_reachable
}


# --- issue 10's obligations (appended) ----------------------------------------


def initial_run_two_wider():
    """``spec.lookup.lookup`` whose initial run is two chunks wider than
    ``load_window_size_in_chunks`` (``widen_initial_by=2``): a right end that
    becomes a hit then asks for a run reaching past the break below it, so
    storing one more key can lose the hit. vLLM's initial run is at most one
    chunk wider than the later runs (the right padding is at most one token
    here), which is what the obligation ``lookup-monotone`` rests on."""


MUTANTS.update({
    "hit-preservation-read-window": (
        "lookup-window-one-chunk-short", lookup_window_short_store, None),
    "hit-preservation-read-window-aligned": (
        "lookup-window-one-chunk-short", lookup_window_short_store, None),
    "no-waste-read-window": ("keeps-every-chunk", None, "keeps-every-chunk"),
    "lookup-monotone": ("initial-run-two-wider", None, "initial-run-two-wider"),
})
VARIANTS["initial-run-two-wider"] = initial_run_two_wider
PLANTS["initial-run-two-wider"] = {"widen_initial_by": 2}  # spec.lookup.lookup


def verified_run_one_short():
    """``lookup-run-stored``'s reading of the dense lookup's verified SWA run
    starting one chunk late (``verified_short_by=1``): a store missing only
    the run's first chunk then looks complete, yet its hit is shorter."""


MUTANTS["lookup-run-stored"] = ("verified-run-one-short", None, "verified-run-one-short")
MUTANTS["lookup-run-stored-read-window"] = MUTANTS["lookup-run-stored"]
VARIANTS["verified-run-one-short"] = verified_run_one_short
PLANTS["verified-run-one-short"] = {"verified_short_by": 1}  # obligations._lookup_run_stored


def read_window_lookup():
    """``hit-preserving-wastes`` under the lookup variant ``read-window``
    (``get_sliding_window_size_in_chunks`` returning the chunks the load
    reads): the run's first chunk is then loaded by the very hit it serves,
    so the claim must fail: it is a claim about vLLM 0.33.0's lookup."""


MUTANTS["hit-preserving-wastes"] = ("read-window-lookup", None, "read-window-lookup")
VARIANTS["read-window-lookup"] = read_window_lookup
PLANTS["read-window-lookup"] = {"read_window_lookup": True}  # obligations._hit_preserving_wastes
