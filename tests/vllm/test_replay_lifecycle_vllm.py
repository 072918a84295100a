"""World-"single" lifecycle and static counterexamples, replayed on vLLM
0.33.0's real scheduler (``replay_lifecycle.py``).

For each expected counterexample row of ``proofs/expected.toml`` that can
run on the real scheduler, the decoded configuration and lifecycle drive the
real ``Scheduler`` (stock connector for vllm-0.33, ``KvReachOffloadingConnector``
under ``kvreach.rule`` for vllm-0.29): the SWA chunks ``prepare_store``
receives per step, and the obligation's witness (soundness: stored chunks no
hit wants, and which later lookups load them; completeness: wanted chunks not
stored; mask-equivalence: the one-shot mask at the final horizon against the
wanted chunks), must equal kvreach's, and the witness must be non-empty: the
bug happens on vLLM. The rows whose decoded scenario the real scheduler
cannot run must say why (ValueError). A replay under the wrong rule must
differ: the comparison can fail.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness.replay_lifecycle import WITNESS, replay_lifecycle  # noqa: E402

from kvreach.proofs import runner, search  # noqa: E402
from kvreach.proofs.obligations import OBLIGATIONS  # noqa: E402
from kvreach.proofs.scenarios import PR_54362_WASTED  # noqa: E402

pytestmark = pytest.mark.vllm


# soundness's row about 0.34.0 has vLLM 0.34.0's lookahead hashes symbolic
# and decodes to F14 (L = 1; test_lookahead_counterexample_happens_on_vllm);
# the vllm-0.33 rows replayed here are the 0.30.0 .. 0.33.0 row's (L = 0)
_ROW_VLLM = {("soundness", "vllm-0.33"): "0.33.0"}


@functools.lru_cache(maxsize=None)
def counterexample(obligation: str, rule: str, model: str, vllm: str | None = None) -> dict:
    """The runner's decoded counterexample: BMC for a lifecycle row, the
    row's static check otherwise (``vllm``: the row about that release;
    default :data:`_ROW_VLLM`'s, else the runner's default row)."""
    vllm = vllm or _ROW_VLLM.get((obligation, rule))
    if OBLIGATIONS[obligation].kind == "static":
        row = runner.run_row(obligation, rule, model, {}, vllm)
        assert row.verdict == "counterexample", row
        return row.counterexample
    _, cex = search.find_counterexample(obligation, rule, model, vllm=vllm)
    assert cex is not None and cex.get("replayed_violation"), (obligation, rule, model)
    return cex


@functools.lru_cache(maxsize=None)
def replayed(model_dir: str, obligation: str, rule: str, model: str, connector_rule: str,
             vllm: str | None = None) -> dict:
    """One replay per row and connector (tests read it more than once)."""
    return replay_lifecycle(model_dir, obligation, counterexample(obligation, rule, model, vllm),
                            connector_rule, model)


REPLAYED = [
    ("soundness", "vllm-0.29", "aligned"),
    ("soundness", "vllm-0.29", "intended"),
    ("soundness", "vllm-0.33", "aligned"),
    ("soundness", "vllm-0.33", "intended"),
    ("completeness", "vllm-0.29", "aligned"),
    ("completeness", "vllm-0.29", "intended"),
    ("mask-equivalence", "vllm-0.29", "aligned"),
    ("mask-equivalence", "vllm-0.29", "intended"),
    ("mask-equivalence", "vllm-0.33", "aligned"),
    ("mask-equivalence", "vllm-0.33", "intended"),
    ("exactly-once-restarts", "vllm-0.33", "any"),
    ("exactly-once-restarts", "lookup-window", "any"),
]


@pytest.mark.parametrize("obligation,rule,model", REPLAYED, ids=["/".join(r) for r in REPLAYED])
def test_counterexample_happens_on_vllm(offline_model_dir, obligation, rule, model):
    out = replayed(offline_model_dir, obligation, rule, model, rule)
    assert out["vllm"] == out["kvreach"]
    assert out["vllm"][WITNESS[obligation]], out  # the bug is reproduced


def test_soundness_later_lookups(offline_model_dir):
    """The lookup side of soundness's witnesses: vLLM's real lookup never
    loads the PR example's intermediate-frontier tails 246, 247 (stored for
    nothing), while the EAGLE replay tail at chunk 0 of the vllm-0.33 /
    intended counterexample is loaded by later requests (its load model
    does not want it, vLLM's lookup does)."""
    pr = replayed(offline_model_dir, "soundness", "vllm-0.29", "aligned", "vllm-0.29")
    assert pr["vllm"]["violating"] == list(PR_54362_WASTED) and pr["vllm"]["later"]["hits"] > 0
    assert pr["vllm"]["later"]["loads_violating"] == []
    eagle = replayed(offline_model_dir, "soundness", "vllm-0.33", "intended", "vllm-0.33")
    assert eagle["vllm"]["later"]["loads_violating"]


@pytest.mark.parametrize("model,violating", [("aligned", [4, 5]), ("intended", [4])])
def test_lookahead_counterexample_happens_on_vllm(offline_model_dir, model, violating):
    """soundness's row about 0.34.0 (L symbolic) decodes to F14 (full 8, SWA
    2, window 4, prompt 14, L = 1); on vLLM 0.34.0's scheduler with
    ``num_hash_lookahead_tokens`` 1 and the stock connector the per-step
    stores equal kvreach's and the violating chunks are stored."""
    from kvreach.impl.vllm.vllm_release import LOOKAHEAD_HASHES

    if not LOOKAHEAD_HASHES:
        pytest.skip("vLLM before 0.34.0 has no lookahead block hashes")
    cex = counterexample("soundness", "vllm-0.33", model, "0.34.0")
    assert cex["config"]["request"]["hash_lookahead_tokens"] == 1
    out = replayed(offline_model_dir, "soundness", "vllm-0.33", model, "vllm-0.33", "0.34.0")
    assert out["vllm"] == out["kvreach"]
    assert out["vllm"]["violating"] == violating
    assert out["vllm"]["later"]["loads_violating"] == []  # stored for nothing


UNREPLAYABLE = [
    # 0.29's finish offloads up to num_tokens; the clamp of num_tokens_after_batch to the
    # commit point is vLLM 0.33.0's bookkeeping, which kvreach's connector keeps (and
    # alignment 5 with 4 blocks per chunk has no full-attention group either)
    ("computed-before-stored", "vllm-0.29", "any", "replaces only the chunk selection"),
    # world "restarts" with a refused prepare_store and a recompute step: not replayed
    ("computed-before-stored-restarts", "vllm-0.29", "any", "world 'restarts'"),
    # the row is about vLLM 0.29.0, whose lookup keeps the store cursor: its submission
    # twice needs a loaded start that moves the cursor back, which vLLM 0.33.0 (cursor
    # reset to 0 on every lookup) cannot run
    ("exactly-once-restarts", "vllm-0.29", "any", "'loaded' step"),
]


@pytest.mark.parametrize("obligation,rule,model,why", UNREPLAYABLE,
                         ids=["/".join(r[:3]) for r in UNREPLAYABLE])
def test_unreplayable_row_says_why(offline_model_dir, obligation, rule, model, why):
    with pytest.raises(ValueError) as err:
        replay_lifecycle(offline_model_dir, obligation, counterexample(obligation, rule, model),
                         rule, model)
    assert obligation in str(err.value) and rule in str(err.value) and why in str(err.value)


def test_unreal_alignment_says_why(offline_model_dir):
    """An alignment no full-attention group gives (9 tokens with 2 blocks
    per chunk: ``SchedulerOffloadConfig.from_spec`` takes a full-attention
    block times ``blocks_per_chunk``) is refused, not run as something else."""
    cex = counterexample("mask-equivalence", "vllm-0.29", "aligned")
    group = cex["config"]["group"] | {"alignment_tokens": 9, "blocks_per_chunk": 2,
                                      "retention_interval": None}
    cex = cex | {"config": cex["config"] | {"group": group}}
    with pytest.raises(ValueError, match="alignment_tokens 9"):
        replay_lifecycle(offline_model_dir, "mask-equivalence", cex, "vllm-0.29", "aligned")


def test_wrong_rule_differs(offline_model_dir):
    """vllm-0.29's soundness counterexample under vLLM 0.33.0's stock
    connector: the per-step stores differ from the counterexample's and vLLM
    stores no violating chunk (PR #54362's fix)."""
    out = replayed(offline_model_dir, "soundness", "vllm-0.29", "intended", "vllm-0.33")
    assert out["vllm"]["steps"] != out["kvreach"]["steps"]
    assert out["vllm"]["violating"] == [] != out["kvreach"]["violating"]


def test_restart_witness_needs_the_preemption(offline_model_dir):
    """The same request without the preemption (prefill 1000 tokens, then
    abort) offers no chunk twice on vLLM: the re-offers of
    ``exactly-once-restarts`` come from the restart (``reset_prefix_cache``
    preempting the request, the resuming lookup resetting the cursor)."""
    from kvreach.vllm_harness.replay_lifecycle import replay_restarts

    cex = counterexample("exactly-once-restarts", "vllm-0.33", "any")
    assert [st["kind"] for st in cex["plan"]] == ["prefill", "preempt", "lookup", "prefill", "abort"]
    keep = [0, 4]
    short = cex | {"plan": [cex["plan"][i] for i in keep],
                   "replay": [cex["replay"][0], cex["replay"][4] | {"incarnation": 0}]}
    out = replay_restarts(offline_model_dir, "exactly-once-restarts", short, "vllm-0.33")
    assert out["vllm"]["offered_again"] == [] and out["kvreach"]["offered_again"] == []
    assert replayed(offline_model_dir, "exactly-once-restarts", "vllm-0.33", "any",
                    "vllm-0.33")["vllm"]["offered_again"]
