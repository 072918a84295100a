"""A proof run: every selected row of ``kvreach prove``, invariants first.

The rows (:func:`kvreach.proofs.runner.run_row`) run in a pool of solver
processes, one per core, started largest first by the resources each row
spent in the committed run (:func:`schedule`), and are reported in table
order; proved rows of an unchanged source come from the result cache
(:func:`kvreach.proofs.runner.cached_row`). The workers leave SIGINT, SIGTERM
and SIGHUP to the parent and die with it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor

from kvreach.params import RULES, ParamError, check_load_model, check_rule
from kvreach.proofs.matrix import check_vllm
from kvreach.proofs import cache
from kvreach.proofs.config import measured_rlimits
from kvreach.proofs.framework import Role
from kvreach.proofs.obligations import INVARIANTS, OBLIGATIONS, run_order
from kvreach.proofs.rows import Row, expected_table, invariant_status, rows_for, selected_rows
from kvreach.proofs.runner import cached_row, rest_on, run_row


def _worker_init(parent_pid: int) -> None:
    """A pool worker's start-up. SIGINT, SIGTERM and SIGHUP are the parent's
    to handle (``kvreach prove`` kills the workers and writes one line; no
    traceback per worker, no worker dying first and breaking the pool under
    the parent's feet), and on Linux the worker is killed when the parent
    dies however it dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), so no worker
    outlives the run."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's kill only
        return
    if os.getppid() != parent_pid:  # the parent died before the prctl
        os._exit(1)


def run(obligation=None, rule=None, model=None, progress=None, jobs: int | None = None,
        vllm: str | None = None, deep: bool = False):
    """Yield one Row per (obligation, rule, load model, vllm group),
    invariants first; ``vllm``: a version, the rows about it."""
    if obligation is not None and obligation not in OBLIGATIONS:

        raise ParamError("obligation", obligation, "one of " + ", ".join(OBLIGATIONS))
    if rule is not None:
        check_rule(rule)
    if model is not None:
        check_load_model(model)
    if vllm is not None:
        check_vllm(vllm)
    table = expected_table()
    todo = selected_rows(obligation, rule, model, vllm, deep)
    rules = RULES if rule is None else (rule,)
    # Lifecycle proofs rest on their rule's invariant. Every row runs at once,
    # as if each invariant held; a proof whose invariant then fails is
    # reported unknown (rest_on), so no row waits for the invariant rows.
    # only the invariants a selected row needs (or that are selected)
    needed = {r for name, r, _, _ in todo
              if (OBLIGATIONS[name].rests_on_invariant or OBLIGATIONS[name].role is Role.INVARIANT)
              and r in rules}
    # an invariant reads no release part but vLLM 0.34.0's lookahead hashes:
    # a row per rule, and one with L symbolic where the rule's rows read it
    # (a deep invariant, the invariant with L symbolic, only in a deep run or
    # for a selected row that models L: selected_rows's own test)
    invs = [key for inv in INVARIANTS for r in rules if r in needed
            if not inv.deep or deep or obligation is not None and _reads_lookahead(obligation)
            for key in rows_for(inv.name, r, "any")]
    rest = [key for key in run_order(todo) if key not in invs]
    assume = {k: True for r in rules for k in (r, (r, "lookahead"))}
    keys = invs + rest
    # proved rows of an unchanged source, their sat checks solved again
    hits = {i: row for i, key in enumerate(keys)
            if (row := cached_row(*key) if cache.enabled() else None) is not None}
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(keys) - len(hits)))
    pool = None
    if jobs == 1:
        def get(i: int) -> Row:
            return hits[i] if i in hits else _run_row(keys[i], {} if i < len(invs) else assume)
    else:
        # One solver process per core; largest first (longest-processing-time
        # order, :func:`schedule`), results still reported in table order.
        # Processes are reused: a fresh process per row (max_tasks_per_child=1)
        # made the resources schedule-independent (docs/conformance.md) but a
        # child spawned during Ctrl-C does not ignore SIGINT yet and breaks
        # the pool, so it is not used.
        # The workers are spawned (by the submits) with SIGINT, SIGTERM and
        # SIGHUP blocked, a mask they inherit: a signal during a worker's
        # start-up (before its initializer) is not a traceback in it. Here the
        # signals stay pending (or go to another thread, ``kvreach prove``'s
        # watcher) until the mask is restored.
        # The resource tracker is started first: starting it unblocks SIGINT
        # and SIGTERM (multiprocessing.resource_tracker.ensure_running).
        from multiprocessing import resource_tracker

        resource_tracker.ensure_running()
        stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, stops)
        try:
            pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_worker_init, initargs=(os.getpid(),))
            futs = {i: pool.submit(_run_row, keys[i], {} if i < len(invs) else assume)
                    for i in schedule(keys) if i not in hits}
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

        def get(i: int) -> Row:
            return hits[i] if i in hits else futs[i].result()
    inv_rows = [get(i) for i in range(len(invs))]
    results = (get(len(invs) + i) for i in range(len(rest)))
    try:
        invariant_ok = invariant_status(inv_rows)
        for row in inv_rows:
            if row.key in todo:
                row.expected = table.get(row.key, "?")
                if progress:
                    progress(row)
                yield row
        for row in results:
            rest_on(row, invariant_ok)
            row.expected = table.get(row.key, "?")
            if progress:
                progress(row)
            yield row
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def _reads_lookahead(obligation: str) -> bool:
    """A selected obligation whose rows may model L (lookahead hashes):
    its rows rest on the invariant row with L symbolic."""
    return "lookahead_hashes" in OBLIGATIONS[obligation].reads


def _run_row(key: tuple[str, str, str, str], invariant_ok: dict) -> Row:
    name, rule, model, vllm = key
    return run_row(name, rule, model, invariant_ok, vllm)


def schedule(keys: list[tuple[str, str, str, str]], measured: dict | None = None) -> list[int]:
    """The order the pool starts ``keys`` in (indices): the invariant rows
    first (every lifecycle row's report waits for them), then the rows the
    committed run (:func:`kvreach.proofs.config.measured_rlimits`) does not
    have (new: their cost is unknown), then the largest ``rlimit`` first;
    ties in table order."""
    measured = measured_rlimits() if measured is None else measured

    def rank(i: int):
        key = keys[i]
        ob = OBLIGATIONS.get(key[0])
        return (ob is None or ob.role is not Role.INVARIANT, key in measured,
                -measured.get(key, 0), i)
    return sorted(range(len(keys)), key=rank)

