"""The worked examples and the findings' concrete scenarios, as data.

PR #54362's example (full-attention block 36, SWA block 4, window 16, a
1200-token prompt, a 1000-token budget) and every finding of
docs/findings.md (one record per ``## F<n>.`` section, checked by
``tests/test_scenarios.py``) with what it must show (:class:`Finding`) and
how it is reproduced: its scenario stated once as
``kvreach.scenario.Scenario`` values (what ``kvreach simulate`` / ``kvreach
lookup`` take), the obligation whose counterexample it is, or its replays on
a release's own code (:class:`ReleaseReplay`). The proof
runner pins counterexamples to the example (``decode.pr_example_pins``), the
lookup geometries decode at their prompts (``proofs/geometries.py``), and
tests, bench and docs use the same numbers (``tests/test_scenarios.py``
checks the commands docs/findings.md shows). Apart from the core spec, the
way etcd-io/raft keeps its model-checking configuration and regression
scenarios apart from the protocol's spec.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvreach.scenario import Scenario

# PR #54362's worked example.
PR_54362 = Scenario(swa_block_size=4, window=16, prompt=1200, budget=1000, full_block_size=36)

# vLLM 0.34.0 with lookahead block hashes (L = 1): the prompt's hashed end
# taken as its horizon (F14): full 8, SWA 2, window 4, a 14-token prompt.
LOOKAHEAD_HASHED_END = Scenario(swa_block_size=2, window=4, prompt=14, budget=100,
                                full_block_size=8, hash_lookahead_tokens=1)

# The measurement of window 17, a prompt of 33 alignments (F6).
MEASURED_W17 = replace(PR_54362, window=17, prompt=1188)


@dataclass(frozen=True)
class Outcome:
    """What a release replay must print on the listed releases (the fields of
    ``release_replay``'s JSON it is checked by; None: not checked).
    ``hit_tokens`` / ``loaded_miss``: its one lookup's hit and the chunks
    (group, chunk) it loaded that the manager answered MISS;
    ``cpu_manager_load``: the prefix of what the release's own
    ``CPUOffloadingManager.prepare_load`` did with each load (``"ok"``, an
    exception's type), ``()`` for no load; ``same_step_error``: the prefix of
    the error a same-step reload raises and the function it names, ``""`` for
    none."""

    releases: tuple[str, ...]
    hit_tokens: int | None = None
    loaded_miss: tuple[tuple[int, int], ...] | None = None
    cpu_manager_load: tuple[str, ...] | None = None
    same_step_error: tuple[str, str] | str | None = None


@dataclass(frozen=True)
class ReleaseReplay:
    """A finding reproduced on a release's own ``Scheduler``,
    ``KVCacheManager`` and stock connector: ``python -m
    kvreach.vllm_harness.release_replay CASE ARGS`` run with that release's
    python (the offload manager's answers scripted), and what it prints on
    each release (:class:`Outcome`). ``cex``: the counterexample the case
    replays, ``kvreach counterexample OBLIGATION --rule RULE [--vllm V]
    --json`` given as ``--cex FILE``. ``tests/test_release_replays.py``
    replays every record's cases."""

    case: str
    outcomes: tuple[Outcome, ...]
    args: tuple[str, ...] = ()
    cex: tuple[str, str, str | None] | None = None  # (obligation, rule, vllm)

    def command(self) -> str:
        cex = " --cex FILE" if self.cex else ""
        return " ".join(["python -m kvreach.vllm_harness.release_replay", self.case + cex,
                         *self.args]).strip()


@dataclass(frozen=True)
class Finding:
    """A finding of docs/findings.md as a scenario with its expected outcome
    (etcd-io/raft's ``SplitBrain456.tla`` style: the trace and what it must
    show). ``command`` (``simulate`` or ``lookup``) and ``rule`` are what
    docs/findings.md runs the scenario with; ``tests/test_scenarios.py``
    replays each through the executable rule and the spec evaluator,
    ``tests/vllm/test_findings_vllm.py`` on vLLM's scheduler.

    What it must show: ``stored_not_loadable`` (``simulate``: the SWA
    chunks stored that no hit boundary of the scenario's load model
    requests); ``hit_tokens`` / ``dense_hit_tokens`` / ``swa_loaded`` /
    ``missing`` (``lookup``: a later request repeating the prompt, its hit
    against the rule's stores and against dense ones, the SWA chunks its
    lookup loads and those the dense lookup loads that the rule did not
    store). A finding without such a scenario has ``command`` None and says
    why in ``no_scenario``. ``found_by``: the obligation whose counterexample
    it is (``kvreach counterexample OBLIGATION``), or the check that found it.
    ``release_replays``: the finding reproduced on releases' own code
    (:class:`ReleaseReplay`), where its scenario is not one request that
    ``simulate`` or ``lookup`` takes."""

    finding: str  # its section of docs/findings.md (F1, F2, ...)
    shows: str  # what it must show, in words
    found_by: str
    command: str | None = None  # "simulate" | "lookup"; None: no replayable scenario
    rule: str | None = None
    scenario: Scenario | None = None
    stored_not_loadable: frozenset[int] | None = None
    hit_tokens: int | None = None
    dense_hit_tokens: int | None = None
    swa_loaded: tuple[int, ...] | None = None
    missing: tuple[int, ...] | None = None
    no_scenario: str | None = None  # why there is no replayable scenario
    release_replays: tuple[ReleaseReplay, ...] = ()


FINDINGS: tuple[Finding, ...] = (
    Finding("F1", "vllm-0.29 submits 246 and 247 at the 1000-token frontier (250 chunks), the "
            "tail of a segment that is not final: stored, never loadable",
            "soundness", "simulate", "vllm-0.29", PR_54362,
            stored_not_loadable=frozenset({246, 247})),
    Finding("F2", "with offload_prompt_only off, the prompt's final-segment tail 297-299 is "
            "stored at the prompt horizon (300 chunks); decode ends at 310 chunks and no hit "
            "boundary requests it",
            "soundness", "simulate", "vllm-0.33",
            replace(PR_54362, decode=40, offload_prompt_only=False),
            stored_not_loadable=frozenset({297, 298, 299})),
    Finding("F3", "an EAGLE group with a retention interval and a prompt shorter than one "
            "alignment keeps chunk 0 (replay boundary 0), which no hit requests",
            "mask-equivalence", "simulate", "vllm-0.33",
            replace(PR_54362, eagle=True, retention_interval=0, prompt=30,
                    hash_lookahead_tokens=0),  # legacy EAGLE hashes (not with L >= 1)
            stored_not_loadable=frozenset({0})),
    Finding("F4", "aborted after the 1000-token step, the request stores the tail 246-249; "
            "a later request repeating the prompt hits 972 tokens (27 full-attention chunks) "
            "and loads SWA chunks 239-242, not the tail",
            "soundness", "lookup", "vllm-0.33", replace(PR_54362, abort_after_step=1),
            hit_tokens=972, dense_hit_tokens=972, swa_loaded=(239, 240, 241, 242), missing=()),
    Finding("F5", "the need >= per_segment dense fallback of an EAGLE group (block 1, window "
            "3, alignment 3) stores every block, block 0 included, which no aligned hit "
            "requests",
            "mask-equivalence", "simulate", "vllm-0.33",
            Scenario(swa_block_size=1, window=3, prompt=6, budget=100, full_block_size=3,
                     eagle=True, load_model="aligned",
                     hash_lookahead_tokens=0),  # legacy EAGLE hashes (not with L >= 1)
            stored_not_loadable=frozenset({0})),
    Finding("F6", "the measurement of window 17: the lookup asks for runs of 5 SWA chunks, the mask "
            "keeps 4; the repeated prompt hits 0 tokens against the rule's stores, 1187 "
            "against dense ones (chunk 292 missing from the run)",
            "hit-preservation", "lookup", "vllm-0.33", MEASURED_W17,
            hit_tokens=0, dense_hit_tokens=1187, swa_loaded=(), missing=(292,)),
    Finding("F7", "every sparse rule stores a chunk no later request's lookup loads; where "
            "W - 1 is a multiple of the chunk no rule is both hit-preserving and waste-free",
            "no-waste",
            no_scenario="a claim over every later request (and, for the trade-off, every "
            "rule): the counterexamples of no-waste and hit-preserving-wastes show it, one "
            "request's simulate or lookup does not"),
    Finding("F8", "with a retention interval vLLM 0.33.0 also keeps the tail of "
            "Request.shared_prefix_boundary",
            "trace validation (tests/vllm/test_trace_validation.py: seed 0, request r0-22)",
            no_scenario="shared_prefix_boundary is set by vLLM's scheduler per step (world "
            "\"vllm\"); neither simulate nor lookup takes it"),
    Finding("F9", "under AsyncScheduler a decode step's cursor reaches a crossed chunk one "
            "step after the frontier (nothing lost)",
            "trace validation (tests/vllm/test_trace_validation.py: seed 1010, request "
            "r1010-29)",
            no_scenario="found by trace validation of vLLM's own asynchronous runs (seed "
            "1010); the lag is in vLLM's bookkeeping of num_tokens, which simulate's "
            "executable lifecycle does not reproduce step for step"),
    Finding("F10", "every restart (a new lookup) offers the computed chunks again; only "
            "prepare_store's de-duplication keeps them from a second transfer",
            "exactly-once-restarts",
            no_scenario="a restart is a transition of world \"restarts\" (preemption, a resumed "
            "lookup), which simulate's single incarnation does not have"),
    Finding("F11", "vLLM 0.29.0 and 0.30.0's lookups load chunks the manager answered MISS and "
            "their own CPUOffloadingManager.prepare_load asserts; 0.31.0 on load only HIT keys",
            "load-reads-checked",
            no_scenario="a later request against a store missing chunks the rule would keep: "
            "the offload manager's answers, not a rule's stores, which simulate and lookup "
            "compute",
            release_replays=(
                ReleaseReplay("unchecked-load-029", (
                    Outcome(("0.29.0",), hit_tokens=22, loaded_miss=((1, 3),),
                            cpu_manager_load=("AssertionError: Block ",)),
                    Outcome(("0.30.0", "0.33.0"), hit_tokens=12, loaded_miss=(),
                            cpu_manager_load=("ok",)))),
                ReleaseReplay("unchecked-load-030", (
                    Outcome(("0.29.0", "0.30.0"), hit_tokens=6, loaded_miss=((0, 0),),
                            cpu_manager_load=("AssertionError: ",)),
                    Outcome(("0.33.0",), hit_tokens=0, loaded_miss=(), cpu_manager_load=()))),
            )),
    Finding("F12", "vLLM 0.29.0 .. 0.32.0's build_connector_meta asserts when a request a cache "
            "reset preempted reloads from the offload tier in the next step; 0.33.0 runs it",
            "replaying exactly-once-restarts' counterexamples on the releases' own code",
            no_scenario="a cache reset's preemption and a loaded start in the next step are "
            "transitions of world \"restarts\" and the connector's transfer-job bookkeeping, "
            "which simulate's single incarnation does not have",
            release_replays=(
                ReleaseReplay("exactly-once-restarts", (
                    Outcome(("0.29.0",), same_step_error=("AssertionError", "build_connector_meta")),
                ), args=("--same-step",), cex=("exactly-once-restarts", "vllm-0.29", None)),
                ReleaseReplay("exactly-once-restarts", (
                    Outcome(("0.30.0", "0.32.0"),
                            same_step_error=("AssertionError", "build_connector_meta")),
                    Outcome(("0.33.0",), same_step_error=""),
                ), args=("--same-step",), cex=("exactly-once-restarts", "vllm-0.33", "0.30.0")),
            )),
    Finding("F13", "vLLM 0.29.0 .. 0.33.0 store a request finished with FINISHED_ERROR up to its "
            "whole prompt, chunks whose tokens were never computed; 0.34.0 caps the finish by "
            "the computed tokens and stores none",
            "computed-before-stored-restarts",
            no_scenario="the error finish is a transition of world \"restarts\" (the proof run's "
            "counterexample, decoded by kvreach counterexample computed-before-stored-restarts); "
            "tests/vllm/test_error_finish_vllm.py runs the 8-token case on the installed "
            "release's scheduler"),
    Finding("F14", "vLLM 0.34.0 with lookahead block hashes (L = 1) takes the prompt's hashed end "
            "(12 of 14 tokens: 6 chunks) as its horizon while the prompt is computed and stores "
            "that horizon's final-segment tail, chunk 4, which no hit boundary of the final "
            "horizon (7 chunks) requests",
            "soundness", "simulate", "vllm-0.33", LOOKAHEAD_HASHED_END,
            stored_not_loadable=frozenset({4})),
)


def finding(name: str) -> Finding:
    """The record of finding ``name`` (``"F1"``, ...)."""
    return next(f for f in FINDINGS if f.finding == name)


# PR #54362's example as the tests quote it: the chunks vllm-0.29 stores at
# the 1000-token frontier that no hit loads (F1), the frontier's and the
# prompt's horizon (chunks).
PR_54362_WASTED: tuple[int, ...] = tuple(sorted(finding("F1").stored_not_loadable))
PR_54362_FRONTIER_CHUNKS = PR_54362.budget // PR_54362.swa_block_size
PR_54362_PROMPT_CHUNKS = PR_54362.prompt // PR_54362.swa_block_size


def example_flags(s: Scenario = PR_54362) -> list[str]:
    """A scenario's groups and request as the command-line options the docs
    write them in (full-attention block, SWA block, window, prompt, budget)."""
    return ["--full-block-size", str(s.full_block_size), "--swa-block-size", str(s.swa_block_size),
            "--window", str(s.window), "--prompt", str(s.prompt), "--budget", str(s.budget)]
