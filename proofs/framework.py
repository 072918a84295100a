"""The proof framework's types: what an obligation is (:class:`Obligation`,
its :class:`Role` and :class:`Mutant`), the symbols its queries share
(:class:`Ctx`) and a query (:class:`Query`). The obligations themselves are
``kvreach.proofs.obligations``; the induction and BMC queries of lifecycle
obligations ``kvreach.proofs.induction``; the runner decides them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Callable

import z3

from kvreach.releases import DEFAULT as DEFAULT_RELEASE, Release
from kvreach.spec.config import SymConfig
from kvreach.spec.lookup import VLLM_WINDOW, LookupSym


def _fresh_lookup():
    return LookupSym.fresh("later_")


@dataclass
class Ctx:
    """Symbols shared by one obligation's queries."""

    s: SymConfig
    rule: str
    model: str
    c: z3.ArithRef = field(default_factory=lambda: z3.Int("chunk"))
    boundary_block: z3.ArithRef = field(default_factory=lambda: z3.Int("boundary_block"))
    final_horizon_chunks: z3.ArithRef = field(default_factory=lambda: z3.Int("final_horizon_chunks"))
    budget: z3.ArithRef = field(default_factory=lambda: z3.Int("budget"))
    store_fn: Callable | None = None  # a lifecycle mutant's store decision
    # the later request of the lookup obligations (world: single request)
    lk: object = field(default_factory=lambda: _fresh_lookup())
    shared: z3.ArithRef = field(default_factory=lambda: z3.Int("later_shared_tokens"))
    pins: list = field(default_factory=list)  # a geometry's pins (grid obligations)
    # a static mutant's mutation parameters (``Mutant.plant``), each passed to
    # the one function it mutates
    mutant: dict = field(default_factory=dict)
    # the lookup variant the later request(s) look up under
    # (``spec.lookup.LOOKUP_VARIANTS``), fixed when the context is made
    lookup_variant: str = VLLM_WINDOW
    # the vLLM release (``kvreach.releases``) whose parts the spec applies
    # (lookup, mask window, world "restarts"'s cursor and null filter)
    release: Release = DEFAULT_RELEASE
    # a lifecycle row with L symbolic whose obligation has
    # ``Obligation.lookahead_cube``: its case split is config.cube's lookahead cube
    lookahead_cube: bool = False
    # the lifecycle steps built on this context (``induction``: one per
    # obligation and pins, shared by an induction step and its lemma
    # queries); not copied by ``dataclasses.replace``, not compared
    built_steps: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.lk.variant != self.lookup_variant or self.lk.release is not self.release:
            self.lk = replace(self.lk, variant=self.lookup_variant, release=self.release)

    def base(self) -> list:
        return [self.s.well_formed(), self.budget >= 1, *self.pins]


@dataclass
class Query:
    premise: list  # assumptions (checked satisfiable: non-vacuity)
    violation: z3.BoolRef  # negated property


class Role(enum.Enum):
    """What an obligation is to the others: a property, or an inductive
    invariant the single-request world's lifecycle proofs rest on (run first;
    etcd-io/raft's ``MCetcdraft.cfg`` lists its INVARIANTS the same way)."""

    PROPERTY = "property"
    INVARIANT = "invariant"


@dataclass(frozen=True)
class Mutant:
    """A deliberately wrong rule the obligation must reject, in vLLM terms.
    ``plant``: a lifecycle obligation's store decision (replacing the rule's),
    or a static obligation's mutation parameters (``Ctx.mutant``, each read
    by the one function it mutates; ``lookup_variant``: the later request's
    lookup variant). ``doc``: what it plants (docs/proofs.md quotes it)."""

    name: str
    plant: Callable | dict
    doc: str

    @property
    def store_fn(self) -> Callable | None:
        return None if isinstance(self.plant, dict) else self.plant

    @property
    def params(self) -> dict | None:
        return self.plant if isinstance(self.plant, dict) else None

    @classmethod
    def of_store(cls, name: str, store_fn: Callable) -> "Mutant":
        """A lifecycle mutant: its store function, described by its docstring."""
        return cls(name, store_fn, store_fn.__doc__)


@dataclass(frozen=True)
class Replay:
    """How an obligation's decoded counterexample is run on vLLM's real
    scheduler (``kvreach.vllm_harness.replay.REPLAYS``, ``kvreach
    counterexample --replay-vllm``): ``kind`` names the replayer, one of
    :data:`REPLAY_KINDS`; ``witness`` the key of the witness in both halves
    of ``replay_lifecycle``'s result (None: the replayer's own test, a hit
    shorter than dense or a kept chunk no later request loads).
    ``on_releases``: the counterexample also replays on an installed
    release's own code, 0.29.0 .. 0.33.0 (``python -m
    kvreach.vllm_harness.release_replay OBLIGATION --cex FILE``, by the
    release replayer of ``kind``)."""

    kind: str
    witness: str | None = None
    on_releases: bool = False


# the replayers of kvreach.vllm_harness: one request's lifecycle, a static
# mask at one horizon, a plan with restarts (replay_lifecycle); a later
# request's hit, a kept chunk's later lookups, world (b)'s neighbours (replay)
REPLAY_KINDS = ("lifecycle", "mask", "restarts", "hit-preservation", "no-waste", "neighbours")


@dataclass
class Obligation:
    name: str
    statement: str
    kind: str  # "lifecycle" | "static"
    mutant: Mutant
    # the runner's base scope of the obligation's rows (built from
    # proofs/config.py values; a lifecycle row adds how it was decided)
    scope: str
    # static: ctx -> queries; lifecycle: (ctx, pre, tr, post) -> violation of one step
    queries: Callable | None = None
    step_violation: Callable | None = None
    bmc_violation: Callable | None = None
    role: Role = Role.PROPERTY
    rule_specific: bool = True
    model_specific: bool = True
    split: bool = True  # the runner's case split on the store configuration applies
    rules: tuple[str, ...] | None = None  # the rules it is run for (None: every rule)
    grid: tuple | None = None  # geometries (proofs.geometries): one proof per geometry
    # the world of kvreach.spec.lifecycle.table: "single" (one incarnation, every
    # store accepted; rests on the invariant obligation) or "restarts" (
    # preemption, the manager's answers; the obligation's own `invariant`,
    # (ctx, state) -> Bool, proved in the same row by base case and step);
    # "neighbours": world (b), static
    world: str = "single"
    invariant: Callable | None = None
    bmc_depths: tuple[int, ...] | None = None  # None: the runner's BMC_DEPTHS
    # facts of one step, (ctx, pre, tr, post) -> [Bool], each proved from the
    # step's premise (and the facts before it) on its own, then assumed by the
    # main query: world "restarts"'s, and world "single"'s with vLLM 0.34.0's
    # lookahead hashes symbolic (``store.lookahead_lemmas``)
    lemmas: Callable | None = None
    # ctx -> [[Bool]], counterexample shapes the real scheduler can run
    # (tests/vllm, ``--replay-vllm``), tried in order by the counterexample
    # search (static: once the query is sat); the verdict never depends on them.
    replayable: Callable | None = None
    # (ctx, states, steps) -> [[Bool]], a lifecycle obligation's traces in shapes vLLM's
    # scheduler replays (tests/vllm): a named counterexample search
    # (``named_bmc``), whose model is not the written query's, tries
    # those shapes first, in order (the verdict never depends on them)
    named_shapes: Callable | None = None
    bounds: dict = field(default_factory=dict)  # the bounds its scope states (proofs/config.py)
    lookup_variant: str = VLLM_WINDOW  # the later request's (spec.lookup.LOOKUP_VARIANTS)
    # the fields of a vLLM release record (``kvreach.releases.Release``) its
    # queries read beyond the store rule: its rows are one per group of
    # releases agreeing in them (``kvreach.proofs.matrix``)
    reads: frozenset = frozenset()
    # the rules whose rows read ``reads``' "lookahead_hashes" (None: every
    # rule): the others' rows are scoped L = 0 (:meth:`reads_for`)
    lookahead_rules: tuple[str, ...] | None = None
    # its lifecycle rows with L symbolic are split by config.cube's lookahead
    # cube (step kind, L >= 1 or 0), each leaf one check (measured per obligation)
    lookahead_cube: bool = False
    # a static obligation's own decoder of a sat query's model, (model, ctx)
    # -> the counterexample (a function of the context's symbols alone: the
    # query builder's terms are rebuilt from it); None: decode.decode_static's
    # store configuration and chunk
    cex_decoder: Callable | None = None
    # its own replay of a decoded counterexample: cex -> the chunks witnessing
    # the violation, [] if the replay does not confirm it (None: decode's
    # replay through impl.lifecycle / the later lookup applies)
    witness: Callable | None = None
    # its counterexample on vLLM's real scheduler (None: no replay there)
    vllm_replay: Replay | None = None
    # (trace, load model, cex) -> the chunks witnessing the violation in the
    # decoded counterexample's replay through the executable rule (the trace
    # of ``impl.lifecycle.run``, world "restarts": the steps of ``run_vllm``);
    # [] if the replay does not show it. ``witness``, where given, comes first.
    trace_witness: Callable | None = None
    # a static obligation whose counterexample is a chunk set at one horizon,
    # drawn by ``kvreach counterexample --plot`` (lifecycle ones of world
    # "single" always are)
    chunk_map: bool = False
    # The solver-naming flags: the queries whose arithmetic if-then-else terms
    # are named (``proofs/flatten.py``: the same query, other terms for Z3's
    # preprocessing). Chosen by measurement per obligation (the numbers are
    # at each obligation that sets one); the verdict never depends on them.
    # ``named_ites``: its step, lemma and base-case queries (never BMC: those
    # models are the decoded counterexamples vLLM's scheduler replays).
    # Measured and left off: the world "single" invariant's step (2.0 M ->
    # 9.1 M units), computed-before-stored-restarts (vllm-0.33: exhausted its
    # 200 M budget).
    named_ites: bool = False
    # ``named_bmc``: its rows' BMC counterexample searches
    # (``search.find_counterexample``). A named query finds other models than
    # the written one, so a named search first looks for a trace in the shape
    # the replay runs (``named_shapes``), and an obligation with it had its
    # rows' counterexamples replayed on vLLM again. Measured and left off:
    # soundness (vllm-0.33 / intended 12.1 M -> 1.3 M, but its counterexample
    # is then another EAGLE tail, one vLLM's later lookups do not load, and
    # the replay reads that), completeness (vllm-0.29 2.1 M -> 0.85 M, but the
    # named search finds an alignment no full-attention group gives, then with
    # a real one and the scheduler's cut a finish store vLLM 0.33.0's
    # bookkeeping does not make), computed-before-stored-restarts (1.2 M ->
    # 3.3 M), hit-preservation (vllm-0.29 1.5 M -> 1.9 M).
    named_bmc: bool = False
    # ``named_mutant``: its mutant checks (``mutant_check.run_mutant``: the BMC
    # search or the query with the mutant planted). A mutant's model is only
    # ever "sat" (the mutant rejected), never decoded nor replayed, so a
    # different model changes nothing reported. Measured and left off (units
    # per mutant grew named): invariant's 0.37 M -> 0.82 M,
    # chunk-mask-closed-form's 12 K -> 94 K, computed-before-stored(-restarts)'
    # and completeness'; most static ones did not move (their queries are
    # named already or have no arithmetic if-then-else).
    named_mutant: bool = False
    # a static obligation's rows with vLLM 0.34.0's lookahead hashes symbolic
    # (``rows.models_lookahead``): (geometry, ctx -> pins) of F14's example
    # in the class the mode adds, which their counterexample search tries
    # before the grid (a sat check there is a counterexample; an unsat one
    # decides nothing: the grid's queries do)
    lookahead_example: tuple | None = None
    # what those rows' scope adds to ``config.SCOPE_LOOKAHEAD_SYMBOLIC`` (how
    # the obligation's own queries read L)
    lookahead_scope: str = ""
    # run by ``kvreach prove --deep`` only (or when selected by name): its
    # rows cost more than the default run's budget holds
    # (docs/proofs-cost.md); rows_for lists them like every other
    deep: bool = False
    # its rows are only those about releases with lookahead block hashes
    # (vLLM 0.34.0 on) and read them (L symbolic): the deep companion of an
    # obligation whose every-release rows read L = 0 (``store.with_lookahead``)
    lookahead_only: bool = False
    # a static obligation's case splits (ctx -> [Bool], tried in order) for
    # the geometries that ask for one (``geometries.BlockShape.split``): each
    # of its queries is decided by ``solve.solve_split`` over them (a short
    # try per inner node, split further on unknown; every leaf unsat for a
    # proof) instead of one check; None: one check per query everywhere
    static_splits: Callable | None = None
    # a grid lifecycle row's counterexample search at every geometry whose
    # step fails, not only the first: each needs a BMC counterexample that
    # replays through the executable rule (the row's ``counterexample``
    # lists them, ``geometries_confirmed``), else the row is unknown
    # (a failing step alone may be an unreachable state)
    confirm_each: bool = False
    # its rows are only those about these vLLM releases (None: every
    # release): a deep companion over the family of a row that is a
    # counterexample elsewhere (the per-geometry rows keep those)
    releases: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        assert self.vllm_replay is None or self.vllm_replay.kind in REPLAY_KINDS, self.vllm_replay

    def reads_for(self, rule: str | None) -> frozenset:
        """The release parts the rows of ``rule`` read: :attr:`reads`, less
        ``lookahead_hashes`` for a rule outside :attr:`lookahead_rules`
        (None: every rule's)."""
        if rule is None or self.lookahead_rules is None or rule in self.lookahead_rules:
            return self.reads
        return self.reads - {"lookahead_hashes"}

    @property
    def rests_on_invariant(self) -> bool:
        """A lifecycle proof by 1-step induction in the single-request world:
        it assumes the rule's invariant (the invariant obligation's)."""
        return self.kind == "lifecycle" and self.world == "single" and self.role is Role.PROPERTY
