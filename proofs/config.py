"""The proof run's configuration, apart from what is proved: the scope, the
bounds, the solver budgets (Z3 ``rlimit``), the case splits, the BMC depths
and the scheduling hints. The obligations (``proofs/obligations/``) say what
is checked, the runner (``proofs/runner.py``, on ``proofs/solve.py``) how; this module says how far
and how hard. The expected verdicts are data too: ``proofs/expected.toml``
(:data:`EXPECTED`); the group geometries of the grid obligations:
``proofs/geometries.py``; the worked examples: ``proofs/scenarios.py``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import z3

from kvreach.params import RetentionMode
from kvreach.spec.lifecycle import K_DECODE, K_FINISH, K_PREFILL

EXPECTED = "expected.toml"  # the expected-verdict table, in the kvreach.proofs package

# Budgets in Z3 resource units (``rlimit``), never seconds: a check's
# verdict and the resources it spends depend on the query and the Z3 version
# only, not on machine load (docs/spec.md, Solver). Z3 4.15.4 spends roughly
# 5-15 million units per second here. Calibrated on the full run: the
# largest check with an answer outside a split used 11.3 M (CHECK_RL), no
# leaf was reached, the largest row 39 M (ROW_RL): every margin is > 2x.
CHECK_RL = 60_000_000  # one check outside a case split: BMC, mutants
ROOT_RL = 2_100_000  # the short try of a whole query before splitting it (2.0 M missed
# the single-request invariant of lookup-window by 6.7 K units and sent it to a 16 M split)
NODE_RL = 3_000_000  # an inner node of the case split (exhausted: split further)
LEAF_RL = 60_000_000  # a leaf (no split left)
CASES_RL = 200_000_000  # one query's whole case split
VACUITY_RL = 100_000_000  # the premises' case split (non-vacuity)
ROW_RL = 200_000_000  # all of a row's checks but its mutant's (those: as much again)
BMC_DEPTHS = (1, 2, 3)

# Which obligations' queries have their arithmetic if-then-else terms named
# (proofs/flatten.py) is each obligation's own (``Obligation.named_ites``,
# ``named_bmc``, ``named_mutant``), measured per obligation.

# The lookup obligations' later request: the full-attention group's EAGLE
# flag (``spec.lookup.LookupSym.full_eagle``: from 0.30.0 an EAGLE group of
# any type widens its query by one chunk and pops the last) is fixed off;
# only load-reads-checked makes it symbolic.
SCOPE_FULL_NOT_EAGLE = ("; the later request's full-attention group not an EAGLE group "
                        "(load-reads-checked lets it be one)")

# The scope of a symbolic row (a static obligation may state its own).
SCOPE_PARAMS = (
    "symbolic, unbounded: B = block_size*dcp_world_size >= 1, window >= 2, "
    "blocks_per_chunk >= 1, alignment (none or A = psA*B), retention (None, 0, "
    "R = k*chunk), eagle, prompt_tokens >= 1, max_offload_tokens, "
    "offload_prompt_only, budget >= 1, step sizes, chunk index"
)
SCOPE_SYMBOLIC = SCOPE_PARAMS + (
    "; excluded: alignment_tokens % B != 0 "
    "(vLLM's dense fallback), window 1, null blocks, prepare_store refusals, preemption"
)
# a static row's (one may state its own)
SCOPE_STATIC = SCOPE_SYMBOLIC + "; a single symbolic chunk / boundary / horizon (no steps)"
# world "restarts" (proofs/obligations/restarts.py adds what the world is)
SCOPE_WORLD_RESTARTS = SCOPE_PARAMS + "; excluded: alignment_tokens % B != 0; "


# A row whose releases have lookahead block hashes (vLLM 0.34.0) and whose
# obligation does not read the part: the row is about num_hash_lookahead_tokens L = 0 only
# (no EAGLE/MTP draft, or disable_lookahead_block_hashes); and world "restarts"'s
# 0.34.0's junction and failed transfers (SCOPE_WORLD_RESTARTS_034).
SCOPE_LOOKAHEAD_OFF = (
    "; vLLM 0.34.0 with lookahead block hashes off only (num_hash_lookahead_tokens L = 0: "
    "no EAGLE/MTP draft, or disable_lookahead_block_hashes; L >= 1 is not modelled)"
)
# A row whose obligation reads the part (``rows.models_lookahead``): L symbolic.
SCOPE_LOOKAHEAD_SYMBOLIC = (
    "; vLLM 0.34.0's lookahead block hashes symbolic: num_hash_lookahead_tokens L >= 0 "
    "(L = 0: off; L >= 1: the hashed cap of _calc_num_offloadable_tokens and the step's "
    "hashed prompt horizon, an EAGLE group stored as a plain SWA group without a final tail), "
    "tokens_per_hash >= 1 dividing B and the alignment; the counterexample search tries L >= 1 first"
)
SCOPE_WORLD_RESTARTS_034 = (
    "; 0.34.0's shared-prefix junction on lookup within shared_prefix_boundary's any value; "
    "its failed transfers as steps: store-failed (the job dropped, its chunks submitted, the "
    "cursor past them), load-failed (load_failed set, the frontier kept; enabled at any point, "
    "over-approximating the load it follows), load-recompute after it (kv_load_failure_policy "
    "recompute: num_computed_tokens 0; policy fail: an error step) and no loaded start after "
    "a failed load"
)


# What a lookup row's single-request step leaves symbolic when its geometry
# (block sizes, blocks_per_chunk, and for a worked geometry also the window,
# extra_retained_tokens, EAGLE and the retention interval) is fixed.
SCOPE_HIT_SYMBOLIC = (
    "symbolic, unbounded: prompt_tokens >= 1, max_offload_tokens, offload_prompt_only, "
    "budget >= 1, step sizes, chunk index, the later request (length, shared prefix, "
    "GPU-local hit, max_load_tokens); excluded: null blocks, prepare_store refusals, "
    "preemption"
)


def scope_grid(geometries, family_row: str | None = None, family_rule: str | None = None) -> str:
    """A lifecycle row proved per worked geometry of its grid (each names
    itself); ``family_row``: the deep row with the same step over the
    block-shape family, for ``family_rule`` (None: for each rule of this
    row)."""
    names = "; ".join(g.name for g in geometries)
    out = (SCOPE_HIT_SYMBOLIC + f"; geometry: each of the {len(geometries)} worked geometries "
           f"of proofs/geometries.py ({names}), each fixing the block sizes, blocks_per_chunk, "
           "window, extra_retained_tokens, EAGLE and the retention interval")
    if family_row is not None:
        out += (f"; the same step over the block-shape family: the deep row {family_row} "
                f"(its scope), for {family_rule or 'the same rule'}")
    return out + "; world: single request"


# Bounds of the bounded obligations.
# Obligation.confirm_each on a static row: a member's models the executable
# replay refutes that are excluded before it is reported unreplayed
CONFIRM_RETRIES = 4
NO_WASTE_MAX_TOKENS = 4096  # the search bound of no-waste (offloadable tokens)
SCAN_BOUND_KEYS = 12  # lookup-scan-closed-form: every key count up to this
NEIGHBOURS_REQUESTS = 3  # hit-preservation-neighbours: earlier requests whose stores the tier holds
MONOTONE_BOUND_CHUNKS = 10  # lookup-monotone: later requests of at most this many SWA chunks
RUN_STORED_BOUND_CHUNKS = 10  # lookup-run-stored: later requests of at most this many SWA chunks
LOAD_CHECKED_BOUND_KEYS = 12  # load-reads-checked: later requests of at most this many keys per group

# Small numbers for readable counterexamples (the search only; a
# counterexample within them is a counterexample): SymConfig field -> max,
# and the budget's.
READABLE_BOUNDS = dict(B=16, W=64, bpc=4, alignment_blocks=16, Rc=4, P=512, max_off=512)
READABLE_BUDGET = 512

# Scheduling only (never a verdict): the Z3 resource units (``rlimit``) each
# row spent in the committed run, docs/proof-results.json. The run (``proofs/pool.py``) starts
# the largest first (and the rows that file does not have before those), so no
# long row is the run's tail. Measured units, deterministic, not timings.
RESULTS = Path(__file__).resolve().parent.parent / "docs" / "proof-results.json"


def measured_rlimits(path: Path = RESULTS) -> dict[tuple[str, str, str, str], int]:
    """(obligation, rule, load model, vllm) -> the rlimit that row spent in
    the run recorded at ``path``; empty when there is none (an installed copy
    without the checkout's docs/) or it cannot be read."""
    try:
        rows = json.loads(path.read_text())["rows"]
        return {(r["obligation"], r["rule"], r["load_model"], r.get("vllm", "")): int(r["rlimit"])
                for r in rows}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def cube(ctx, lifecycle: bool) -> list[list]:
    """The case split made up front when the whole query is not decided
    quickly: every combination of the step kind (finish or not; lifecycle
    queries only), EAGLE or not, and the retention mode (None / 0 / > 0).
    Each dimension's cases are exhaustive and disjoint whatever the other
    constraints say, so the leaves partition the query."""
    s = ctx.s
    dims = [
        [s.eagle, z3.Not(s.eagle)],
        [s.retention_mode == RetentionMode.NONE, s.retention_mode == RetentionMode.ZERO,
         z3.And(s.retention_mode != RetentionMode.NONE, s.retention_mode != RetentionMode.ZERO)],
    ]
    if lifecycle:
        kind = z3.Int("kind_t")
        if s.L is None or not ctx.lookahead_cube:
            dims.insert(0, [kind == K_FINISH, kind != K_FINISH])
        else:  # vLLM 0.34.0's lookahead hashes symbolic: LOOKAHEAD_CUBE
            dims = [[kind == K_FINISH, kind == K_PREFILL, kind == K_DECODE,
                     z3.And(kind != K_FINISH, kind != K_PREFILL, kind != K_DECODE)],
                    [s.lookahead, z3.Not(s.lookahead)]] + dims
    return [list(case) for case in itertools.product(*dims)]


# A lifecycle row with vLLM 0.34.0's lookahead hashes symbolic (``s.L``) of
# an obligation with ``Obligation.lookahead_cube`` (``Ctx.lookahead_cube``):
# its cube also splits the step kind into finish / prefill / decode / the
# rest and L >= 1 from L = 0, and a leaf is one check of ``LEAF_RL`` with no
# further split (:func:`splits`). Measured on the invariant's step (vllm-0.33,
# with ``store.lookahead_lemmas``): a decode leaf with L >= 1 is unsat in
# 3 to 24 M units as one check, and exhausts 200 M under the splits below;
# exactly-once's row spent 143.7 M under it (the generic split: less).


def splits(ctx, lifecycle: bool) -> list:
    """Further case splits tried, in order, inside a cube leaf when Z3
    answers ``unknown`` on it: the nonlinear integer queries are decided far
    more often per case. A split only partitions the query; every leaf must
    be unsat for a proof."""
    s = ctx.s
    if lifecycle and s.L is not None and ctx.lookahead_cube:
        return []  # the lookahead cube's leaves are decided whole (cube)
    out = [s.has_align, s.dense, s.prompt_only, ctx.boundary_block % s.per_segment == 0]
    if lifecycle:
        out.append(ctx.c < z3.Int("cursor_pre"))
    return out + [s.has_max, s.bpc == 1, ctx.c < s.prompt_horizon,
                  ctx.final_horizon_chunks % s.per_segment == 0]
