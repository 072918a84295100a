"""Per-step ``_build_store_jobs`` time: kvreach scheduler vs stock vLLM 0.33.0.

64 concurrent requests of 32k prompt tokens (full attention + SWA), driven
through vLLM's real scheduler with the harness of ``kvreach.vllm_harness`` (fake model
outputs; the offload manager accepts every store). Four connectors run in
lockstep in one process, one scheduler step each in turn: stock, kvreach with
contracts and monitor off, kvreach with ``kvreach.monitor=log`` (contracts
off), kvreach with ``kvreach.check_contracts=log`` (deal's switch is
process-wide, so it is set before each step). Only ``_build_store_jobs`` is
timed. Prints the ratio of total time and the median per-step ratio against
stock, and exits 1 if the monitor's median or total ratio exceeds 1.2
(``--limit``).

    python bench/bench_connector.py [--requests 64] [--prompt 32768] [--budget 8192]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kvreach.vllm_harness.runner import (  # noqa: E402
    KVREACH,
    STOCK,
    SchedulerRun,
    Setup,
    full,
    swa,
)
from kvreach.vllm_harness.cpu_shims import hybrid_kv_cache_shim, write_offline_model  # noqa: E402
from vllm.v1.kv_offload.base import PrepareStoreOutput  # noqa: E402

from kvreach.impl import contracts  # noqa: E402
from kvreach.proofs.scenarios import PR_54362  # noqa: E402


def accept_all(keys, req_context):
    keys = list(keys)
    return PrepareStoreOutput(keys_to_store=keys, store_spec=None, evicted_keys=[])


def timed(run: SchedulerRun, samples: list[int]):
    inner = run.offload._build_store_jobs

    def wrapper(scheduler_output):
        t = time.perf_counter_ns()
        out = inner(scheduler_output)
        samples.append(time.perf_counter_ns() - t)
        return out

    run.offload._build_store_jobs = wrapper


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=32768)
    ap.add_argument("--budget", type=int, default=8192)
    ex = PR_54362  # PR #54362's group (proofs/scenarios.py)
    ap.add_argument("--full-block", type=int, default=ex.full_block_size)
    ap.add_argument("--swa-block", type=int, default=ex.swa_block_size)
    ap.add_argument("--window", type=int, default=ex.window)
    ap.add_argument("--decode", type=int, default=4)
    ap.add_argument("--limit", type=float, default=1.2,
                    help="largest monitor-log / stock ratio (median and total) that passes")
    args = ap.parse_args()

    setup = Setup(
        (full(args.full_block), swa(args.swa_block, args.window)),
        budget=args.budget, max_num_seqs=args.requests,
        max_model_len=args.prompt + args.decode + 16,
        num_gpu_blocks=args.requests * (args.prompt // args.full_block + 8) * 2
        + args.requests * 64,
    )
    # name: (connector, deal mode set before each step, extra config)
    modes = {"stock": (STOCK, None, None),
             "kvreach-off": (KVREACH, "off", {"kvreach.check_contracts": "off"}),
             "monitor-log": (KVREACH, "off", {"kvreach.check_contracts": "off",
                                              "kvreach.monitor": "log"}),
             "contracts-log": (KVREACH, "log", {"kvreach.check_contracts": "log"})}
    with tempfile.TemporaryDirectory() as tmp, hybrid_kv_cache_shim():
        model = write_offline_model(tmp)
        runs, samples = {}, {}
        for name, (which, mode, extra) in modes.items():
            run = SchedulerRun(setup, which, model, extra, record=False)
            run.manager.prepare_store = accept_all
            for i in range(args.requests):
                run.add_request(f"r{i}", args.prompt, max_tokens=args.decode + 1, seed=i)
            samples[name] = []
            timed(run, samples[name])
            runs[name] = run
        steps = 0
        while any(r.busy() for r in runs.values()):
            for name, run in runs.items():
                mode = modes[name][1]
                if mode:
                    contracts.set_mode(mode)
                if run.busy():
                    if not run.scheduler.requests and not run.scheduler.finished_req_ids:
                        run.flush()
                        if not run.busy():
                            continue
                    run.step()
            steps += 1
        contracts.set_mode("off")

    base = samples["stock"]
    print(f"{args.requests} requests x {args.prompt} prompt tokens, budget {args.budget}, "
          f"full-attention block {args.full_block}, SWA block {args.swa_block}, "
          f"window {args.window}; {steps} steps")
    for name, s in samples.items():
        assert len(s) == len(base), (name, len(s), len(base))
        print(f"  {name:12s} total {sum(s) / 1e6:9.1f} ms   median/step "
              f"{statistics.median(s) / 1e3:8.1f} us   slowest step {max(s) / 1e3:9.1f} us "
              f"(step {s.index(max(s)) + 1})")
    ratios = {}
    for name in ("kvreach-off", "monitor-log", "contracts-log"):
        s = samples[name]
        total = sum(s) / sum(base)
        per_step = statistics.median(a / b for a, b in zip(s, base) if b > 0)
        ratios[name] = (total, per_step)
        print(f"ratio {name:13s} / stock: total {total:.3f}, median per-step {per_step:.3f}")
    off = runs["monitor-log"].offload
    print(f"monitor-log: {off.kvreach_monitor_chunks} chunks checked, violations "
          f"{off.kvreach_monitor_violations or 0}, fallbacks {off.kvreach_fallbacks or 0}, "
          f"unloadable {off.kvreach_monitor_unloadable}, slow {off.kvreach_slow_decisions}; "
          f"contracts-log violations {runs['contracts-log'].offload.kvreach_contract_violations}")
    total, per_step = ratios["monitor-log"]
    if total > args.limit or per_step > args.limit:
        print(f"FAIL: monitor-log / stock exceeds {args.limit} (total {total:.3f}, "
              f"median per-step {per_step:.3f})")
        sys.exit(1)
    print(f"ok: monitor-log / stock within {args.limit}")


if __name__ == "__main__":
    main()
