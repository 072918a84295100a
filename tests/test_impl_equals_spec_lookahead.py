"""vLLM 0.34.0's lookahead block hashes (``num_hash_lookahead_tokens`` L):
the executable model (``kvreach.impl``) equals the Z3 spec with L symbolic
(``SymConfig.fresh(lookahead=True)``, the configuration of the 0.34.0
``soundness`` rows) at concrete values, step by step.

Each step compares ``storable_chunks`` of the step's offloadable tokens (the
hashed cap of ``_calc_num_offloadable_tokens``), the spec transition's
tokens, count, cursor and frontier, and the chunks it submits (whose final
tail reads the step's hashed prompt horizon). EAGLE groups are drawn: with
L >= 1 they are plain groups without a final tail on both sides. Rule
``vllm-0.33`` only: 0.34.0's rule (kvreach's ``lookup-window`` reads the
prompt's offloadable tokens without the mode in the spec).

``test_the_step_horizon_is_what_tells_l_apart`` keeps the check honest: the
spec's store step with the prompt horizon of the whole prompt (the term
without the mode) submits other chunks than impl at F14's example.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreach.impl import lifecycle as ilc
from kvreach.impl import rules as irules
from kvreach.impl.lifecycle import Lifecycle, run
from kvreach.params import GroupConfig, RequestConfig
from kvreach.proofs.scenarios import LOOKAHEAD_HASHED_END
from kvreach.scenario import run_scenario
from kvreach.spec.evaluate import Evaluator

SCALE = int(os.environ.get("KVREACH_EQ_SCALE", "1"))
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                      HealthCheck.data_too_large])
RULE = "vllm-0.33"
_MAX_CHUNKS_CHECKED = 24


@st.composite
def lookahead_configs(draw, max_prompt: int = 80):
    block_size = draw(st.integers(1, 8))
    dcp = draw(st.integers(1, 2))
    B = block_size * dcp
    bpc = draw(st.integers(1, 3))
    C = B * bpc
    window = draw(st.one_of(st.integers(2, 40), st.integers(2, max(2, min(40, 4 * B)))))
    alignment = draw(st.one_of(st.none(), st.integers(1, 8).map(lambda k: k * C)))
    retention = None
    if alignment is not None:
        retention = draw(st.one_of(st.none(), st.just(0), st.integers(1, 4).map(lambda k: k * C)))
    # tokens_per_hash: the GCD of the groups' blocks times DCP, a divisor of B
    tph = draw(st.sampled_from([d for d in range(1, B + 1) if B % d == 0]))
    L = draw(st.integers(0, 4))
    g = GroupConfig(block_size=block_size, window=window, alignment_tokens=alignment,
                    blocks_per_chunk=bpc, dcp_world_size=dcp, eagle=draw(st.booleans()),
                    retention_interval=retention, lookahead_hashes=L > 0)
    r = RequestConfig(prompt_tokens=draw(st.integers(1, max_prompt)),
                      max_offload_tokens=draw(st.one_of(st.none(), st.integers(0, max_prompt))),
                      offload_prompt_only=draw(st.booleans()),
                      hash_lookahead_tokens=L, tokens_per_hash=tph)
    return g, r


@st.composite
def lifecycles(draw, prompt_tokens: int):
    budget = draw(st.integers(1, max(1, prompt_tokens)))
    decode = draw(st.integers(0, 4))
    steps = -(-prompt_tokens // budget) + decode
    abort = draw(st.one_of(st.none(), st.integers(0, min(steps, 4))))
    return Lifecycle(budget=budget, decode=decode, abort_after_step=abort)


@settings(max_examples=20 * SCALE, **SETTINGS)
@given(cfg=lookahead_configs(), data=st.data())
def test_lifecycle_steps_equal_spec_with_lookahead(cfg, data):
    g, r = cfg
    lc = data.draw(lifecycles(r.prompt_tokens), label="lifecycle")
    ev = Evaluator(g, r, lookahead=True)  # L symbolic, pinned to r's (0 included)
    trace = run(RULE, g, r, lc)
    pre_f = 0
    for stp in trace.steps[:7]:
        finished = stp.kind in ("finish", "abort")
        assert ev.storable_chunks(RULE, stp.tokens_after_batch, stp.num_tokens,
                                  finished) == stp.num_chunks, stp
        t = ev.transition(RULE, pre_f, stp.cursor_before, stp.kind, stp.scheduled_tokens,
                          lc.budget)
        assert (t.tokens_after, t.n, t.finished, t.cursor, t.f) == (
            stp.tokens_after_batch, stp.num_chunks, finished, stp.cursor_after,
            stp.num_computed_tokens), stp
        lo = max(0, stp.num_chunks + 1 - _MAX_CHUNKS_CHECKED)
        for c in range(lo, stp.num_chunks + 1):
            assert t.submitted(c) == (c in stp.submitted), (stp, c)
        pre_f = stp.num_computed_tokens


@pytest.mark.parametrize("L", [0, 1, 2])
def test_store_step_reads_the_steps_hashed_prompt_horizon(L):
    """One store step at a given ``num_tokens``: the spec's submitted chunks
    (``aux["num_tokens"]``) are impl's (``RequestConfig.at``), during the
    prompt (num_tokens = P: the hashed end) and after it."""
    g = GroupConfig(block_size=2, window=4, alignment_tokens=8, lookahead_hashes=L > 0)
    r = RequestConfig(14, hash_lookahead_tokens=L, tokens_per_hash=2)
    ev = Evaluator(g, r, lookahead=True)
    for num_tokens in (14, 15, 16, 17):
        for n in range(0, 8):
            for cursor in (0, 2, n):
                w = irules.store_step(RULE, g, r.at(num_tokens), cursor, n, False)
                spec = {c for c in range(0, n + 1)
                        if ev.submitted(RULE, cursor, n, False, c, num_tokens)}
                assert spec == set(w.chunks), (num_tokens, n, cursor)


def test_the_step_horizon_is_what_tells_l_apart():
    """F14's example (L = 1): the prompt step stores {2, 3, 4, 5} on both
    sides; the spec's step without its num_tokens (the prompt horizon of the
    whole prompt, 7 chunks) would store {2, 3, 5, 6}, so the comparison above
    fails for a spec that ignores the hashed horizon."""
    trace = run_scenario(RULE, LOOKAHEAD_HASHED_END)
    first = trace.steps[0]
    assert first.submitted == (2, 3, 4, 5)
    ev = Evaluator(trace.group, trace.request)
    assert ev.s.L is not None  # L >= 1: the configuration has the mode
    args = (RULE, first.cursor_before, first.num_chunks, False)
    with_step = [c for c in range(8) if ev.submitted(*args, c, first.num_tokens)]
    without = [c for c in range(8) if ev.submitted(*args, c)]
    assert with_step == [2, 3, 4, 5] and without != with_step
    assert ilc.check_lookahead(trace.group, trace.request) is None


# ---------------------------------------------------------------------------
# the later request's lookup with lookahead hashes (``LookupSym.L``, read by
# no-waste's 0.34.0 rows): keys for ``num_tokens - L`` tokens, no legacy
# EAGLE drop with L >= 1, against the twin (``LaterRequest.hash_lookahead_tokens``)
# ---------------------------------------------------------------------------

import random  # noqa: E402

from kvreach import releases  # noqa: E402
from kvreach.impl.release import lookup_group, lookup_parts  # noqa: E402
from kvreach.impl import lookup as ilookup  # noqa: E402
from kvreach.spec.evaluate import lookup_values  # noqa: E402

V034 = releases.release("0.34.0")


def _lookahead_lookup_case(rnd: random.Random) -> dict:
    """A later request with L in 0 .. 4 (half of them 0), one optional
    full-attention group (an EAGLE group sometimes), one SWA group (an EAGLE
    group sometimes), HIT / MISS chunks."""
    B = rnd.choice([2, 4, 6, 8])
    bpc = rnd.randint(1, 3)
    C = B * bpc
    fb = rnd.choice([None, B, 2 * B, 4 * B])
    T = rnd.randint(1, 12 * C)
    L = rnd.choice([0, 0, 1, 2, 3, 4])
    n = max(0, T - L)
    n_swa, n_full = n // C, (n // (fb * bpc) if fb else 0)
    swa = {c for c in range(n_swa) if rnd.random() < 0.8}
    full = set(range(n_full)) if rnd.random() < 0.7 else set(range(rnd.randint(0, n_full)))
    return dict(full_block=fb, B=B, bpc=bpc, W=rnd.randint(2, 6 * B),
                extra=rnd.choice([0, 0, 1, B]), eagle=rnd.random() < 0.3,
                full_eagle=(rnd.random() < 0.3) if fb else None, T=T, L=L,
                max_load=rnd.randint(0, T) if rnd.random() < 0.3 else None,
                full=sorted(full), swa=sorted(swa))


def _rng(x: range) -> tuple[int, int]:
    return (x.start, x.stop) if len(x) else (0, 0)


def _twin(x: dict) -> tuple:
    groups = ([lookup_group(V034, x["full_block"], x["bpc"], None, 0, bool(x["full_eagle"]))]
              if x["full_block"] else []) + [
        lookup_group(V034, x["B"], x["bpc"], x["W"], x["extra"], x["eagle"])]
    req = ilookup.LaterRequest(x["T"], 0, x["max_load"], hash_lookahead_tokens=x["L"])
    content = ilookup.StoreContent.of_chunks(([x["full"]] if x["full_block"] else []) + [x["swa"]])
    hit = ilookup.lookup_hit_tokens(groups, req, content, lookup_parts(V034))
    loaded = ilookup.loaded_chunks(groups, req, hit) if hit else tuple(range(0) for _ in groups)
    return hit, _rng(loaded[-1])


def _spec(x: dict, L: int | None) -> tuple:
    v = lookup_values(
        full_block_tokens=x["full_block"], swa_block_tokens=x["B"], blocks_per_chunk=x["bpc"],
        window=x["W"], extra_retained_tokens=x["extra"], eagle=x["eagle"], num_tokens=x["T"],
        local_hit_tokens=0, max_load_tokens=x["max_load"], full_chunks=x["full"],
        swa_chunks=x["swa"], release=V034, full_eagle=x["full_eagle"], hash_lookahead_tokens=L)
    swa = v["swa_loaded"] if v["swa_loaded"][0] < v["swa_loaded"][1] else (0, 0)
    return v["hit_tokens"], swa


LOOKAHEAD_LOOKUP_CASES = 30 * SCALE


def test_lookup_with_lookahead_equals_spec():
    """The spec's lookup with L (``LookupSym.fresh(lookahead=True)``) equals
    the twin's for vLLM 0.34.0 on drawn cases, and L >= 1 matters: on some
    of them the spec without the term (L left out) differs from the twin."""
    rnd = random.Random("lookup/lookahead")
    cases = [_lookahead_lookup_case(rnd) for _ in range(LOOKAHEAD_LOOKUP_CASES)]
    told_apart = 0
    for x in cases:
        twin = _twin(x)
        assert _spec(x, x["L"]) == twin, x
        if x["L"] and _spec(x, None) != twin:
            told_apart += 1
    assert told_apart >= 1
