"""The request lifecycle as a transition system (Z3), for one tracked chunk.

State (after a scheduler step): ``f`` = ``Request.num_computed_tokens``,
``cursor`` = ``RequestGroupState.next_stored_chunk_idx``, ``stored`` = the
tracked chunk ``c`` was submitted before, ``ended``.

Transitions (``Scheduler.schedule`` + ``OffloadingConnectorScheduler._build_store_jobs``):

- ``prefill``: ``1 <= s <= budget`` prompt tokens; the store side sees
  ``num_computed_tokens + s`` with ``num_tokens = P``;
- ``decode``: after the prompt, one token; ``num_tokens = f + 1``;
- ``finish``: normal finish after the prompt (``num_tokens = f + 1``: the last
  sampled token is never fed); tokens per ``finish_tokens``;
- ``abort``: ``FINISHED_ABORTED`` at any point; the store side reads
  ``num_computed_tokens = f``. vLLM advances ``num_computed_tokens`` when it
  schedules, in synchronous and asynchronous scheduling alike, so both modes
  give the store side the same value (async only has the last step's output in
  flight); the transition covers both.

Every transition submits the tracked chunk or not (``StoreStep``), and the
cursor moves to ``max(cursor, n)`` (the manager accepts every store).
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from kvreach.spec.config import R_NONE, SymConfig, _max
from kvreach.spec.rules import RULES, finish_tokens, storable_chunks

KINDS = ("prefill", "decode", "finish", "abort")
K_PREFILL, K_DECODE, K_FINISH, K_ABORT = range(4)


@dataclass
class State:
    f: z3.ArithRef
    cursor: z3.ArithRef
    stored: z3.BoolRef
    ended: z3.BoolRef

    @staticmethod
    def fresh(tag: str) -> "State":
        return State(
            z3.Int(f"f_{tag}"), z3.Int(f"cursor_{tag}"),
            z3.Bool(f"stored_{tag}"), z3.Bool(f"ended_{tag}"),
        )


@dataclass
class Transition:
    kind: z3.ArithRef  # one of K_*
    sched: z3.ArithRef  # tokens scheduled
    tokens_after: z3.ArithRef  # num_tokens_after_batch
    n: z3.ArithRef  # storable_chunks
    submitted: z3.BoolRef
    finished: z3.BoolRef
    constraints: z3.BoolRef


def init(st: State) -> z3.BoolRef:
    return z3.And(st.f == 0, st.cursor == 0, z3.Not(st.stored), z3.Not(st.ended))


def num_tokens(s: SymConfig, f) -> z3.ArithRef:
    """``Request.num_tokens`` between steps: the prompt, then one sampled
    token not yet fed."""
    return z3.If(f < s.P, s.P, f + 1)


def transition(
    s: SymConfig, rule: str, pre: State, post: State, c, budget, tag: str, store_fn=None
) -> Transition:
    """One scheduler step; ``store_fn`` replaces the rule's store decision
    (used for mutants), the rest of the rule (storable chunks, finish tokens)
    stays ``rule``'s."""
    kind = z3.Int(f"kind_{tag}")
    sched = z3.Int(f"sched_{tag}")
    aux = {"wc": z3.Int(f"wc_{tag}")}
    finished = z3.Or(kind == K_FINISH, kind == K_ABORT)
    nt = num_tokens(s, pre.f)
    tokens_after = z3.If(
        kind == K_PREFILL, pre.f + sched,
        z3.If(kind == K_DECODE, pre.f + 1,
              z3.If(kind == K_FINISH, finish_tokens(s, rule, nt), pre.f)),
    )
    nt_step = z3.If(kind == K_DECODE, pre.f + 1, nt)
    off = s.offloadable(tokens_after, nt_step)
    n = storable_chunks(s, rule, off, finished)
    step = (store_fn or RULES[rule])(s, pre.cursor, n, finished, c, aux)
    new_f = z3.If(kind == K_PREFILL, pre.f + sched, z3.If(kind == K_DECODE, pre.f + 1, pre.f))
    cons = z3.And(
        z3.Not(pre.ended),
        z3.Or(kind == K_PREFILL, kind == K_DECODE, kind == K_FINISH, kind == K_ABORT),
        z3.Implies(kind == K_PREFILL, z3.And(1 <= sched, sched <= budget, pre.f + sched <= s.P)),
        z3.Implies(kind != K_PREFILL, sched == z3.If(kind == K_DECODE, 1, 0)),
        z3.Implies(z3.Or(kind == K_DECODE, kind == K_FINISH), pre.f >= s.P),
        post.f == new_f,
        post.cursor == step.next_cursor,
        post.stored == z3.Or(pre.stored, step.submitted),
        post.ended == finished,
        step.side,
    )
    return Transition(kind, sched, tokens_after, n, step.submitted, finished, cons)


def cursor_of(s: SymConfig, rule: str, f) -> z3.ArithRef:
    """The cursor after the step that reached frontier ``f`` (not ended)."""
    n_running = storable_chunks(s, rule, s.offloadable(f, z3.If(f <= s.P, s.P, f)), False)
    n_prompt = storable_chunks(s, rule, s.offloadable(s.P, s.P), False)
    return z3.If(f == 0, 0, z3.If(f <= s.P, n_running, _max(n_prompt, n_running)))


def invariant(s: SymConfig, rule: str, st: State, c) -> z3.BoolRef:
    """Inductive invariant of the running (not ended) states.

    vllm-0.33: the tracked chunk is stored iff it lies below the cursor and the
    mask at the non-final horizon keeps it (the prompt horizon; for c beyond
    it the final tail is empty, so the same mask gives the decode rule).
    vllm-0.29: stored chunks lie below the cursor.
    """
    from kvreach.spec import mask

    base = z3.And(
        z3.Not(st.ended), st.f >= 0, st.cursor == cursor_of(s, rule, st.f),
    )
    if rule == "vllm-0.33":
        return z3.And(base, st.stored == z3.And(
            c >= 0, c < st.cursor, mask.chunk_reachable(
                s, c, z3.If(z3.Or(s.eagle, s.rmode != R_NONE), -1, s.prompt_horizon * s.bpc)
            ),
        ))
    return z3.And(base, z3.Implies(st.stored, c < st.cursor))
