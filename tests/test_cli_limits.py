"""Large inputs, interrupts, progress and help, with no wall-clock limit
(the seconds: ``bench/bench_limits.py``): a 10^7-token prompt growing
linearly from 10^6 within 1 GB, any window or size without extra calls or
memory, Ctrl-C / SIGTERM / SIGHUP stopping ``prove`` with one line and no
worker left, one progress
line per row when stderr is not a terminal, ``--version``, help naming the
obligations, rules and load models, and every option with help."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.cli.render import write_json
from kvreach.params import LOAD_MODELS, MAX_TOKENS, RULES
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.scenarios import PR_54362, example_flags

from _calls import invoke_counted

runner = CliRunner()
KVREACH = shutil.which("kvreach", path=str(Path(sys.executable).parent)) or "kvreach"
PR = example_flags(PR_54362)[:6]  # PR #54362's groups


def timed(args: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``kvreach args`` in a child: (result, CPU seconds of the child,
    its peak resident MB)."""
    code = ("import resource, subprocess, sys, json; "
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, "
            "text=True); u = resource.getrusage(resource.RUSAGE_CHILDREN); "
            "print(json.dumps([r.returncode, r.stderr, u.ru_utime + u.ru_stime, "
            "u.ru_maxrss / 1024]))")
    out = subprocess.run([sys.executable, "-c", code, KVREACH, *args], capture_output=True,
                         text=True, timeout=600, **kw)
    rc, err, cpu, mb = json.loads(out.stdout)
    return subprocess.CompletedProcess(args, rc, "", err), cpu, mb


# A 10^7-token request costs at most this many times a 10^6-token one in CPU
# time, both measured here, in one test (linear: at most 10, start-up
# included in both; quadratic work would be ~100). And at most 1 GB resident.
GROWTH_BOUND, MAX_MB = 15, 1024


def _linear(args: list[str]) -> None:
    """``kvreach args --prompt 10^7`` against ``--prompt 10^6``: the CPU time
    ratio within GROWTH_BOUND, the 10^7 run within MAX_MB."""
    small, cpu6, _ = timed([*args, "--prompt", str(MAX_TOKENS // 10)])
    big, cpu7, mb = timed([*args, "--prompt", str(MAX_TOKENS)])
    assert small.returncode == 0 and big.returncode == 0, (small.stderr, big.stderr)
    assert cpu7 / cpu6 < GROWTH_BOUND and mb < MAX_MB, (cpu7, cpu6, mb)


@pytest.mark.parametrize("mode", [[], ["--json"]], ids=["text", "json"])
def test_ten_million_token_prompt_grows_linearly_within_1_gb(mode):
    _linear(["simulate", "--rule", "vllm-0.33", *PR, "--budget", "1000", *mode])


def test_lookup_of_a_ten_million_token_prompt_grows_linearly_within_1_gb():
    _linear(["lookup", "--rule", "vllm-0.33", *PR, "--budget", "1000"])


WINDOW_ARGS = ["simulate", "--rule", "vllm-0.33", "--full-block-size", "36",
               "--swa-block-size", "4", "--prompt", "100000", "--budget", "1000", "--json"]


def test_any_window_costs_nothing_extra():
    """Not O(window): windows 10^5 (the whole prompt), 10^9 and 2^63 - 1 keep
    the same chunks, and the larger windows make not one more call and
    allocate no more (5 %) than 10^5; window 16 (which keeps less of the
    prompt) makes at most as many calls. The output is O(prompt)."""
    cost = {}
    for w in ("16", "100000", "1000000000", str(2**63 - 1)):
        r, calls, peak = invoke_counted([*WINDOW_ARGS, "--window", w], memory=True)
        assert r.exit_code == 0, r.output
        cost[w] = calls, peak
    (c16, _), (c5, m5), (c9, m9), (c63, m63) = cost.values()
    assert c63 == c9 == c5 and max(m9, m63) <= 1.05 * m5, cost
    assert c16 <= c5, cost


@pytest.mark.parametrize("flag", ["--swa-block-size", "--full-block-size", "--dcp",
                                  "--blocks-per-chunk", "--extra-retained-tokens"])
def test_huge_sizes_cost_nothing_extra(flag):
    """2^62 for a size: answered (or refused with one line) in at most the
    calls of the same request with ordinary sizes."""
    args = ["simulate", "--rule", "vllm-0.33", "--full-block-size", "36", "--swa-block-size",
            "4", "--window", "16", "--prompt", "100000", "--budget", "1000"]
    _, base, _ = invoke_counted(args)
    if flag in args:
        i = args.index(flag)
        del args[i:i + 2]
    r, calls, _ = invoke_counted([*args, flag, str(2**62)])
    assert r.exit_code in (0, 2) and "Traceback" not in r.output, r.output
    assert calls <= 1.2 * base, (calls, base)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda kids: st.lists(kids) | st.tuples(kids) | st.dictionaries(st.text(), kids),
    max_leaves=30))
def test_streamed_json_is_json_dumps(doc):
    parts: list[str] = []
    write_json(doc, parts.append)
    assert "".join(parts) == json.dumps(doc, indent=2) + "\n"


# --- Ctrl-C, progress ---------------------------------------------------------


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                out.append(int(d))
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the pool's workers, the resource tracker)."""
    try:
        import psutil
    except ImportError:
        out, todo = [], [pid]
        while todo:
            kids = _children(todo.pop())
            out += kids
            todo += kids
        return out
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _workers(pids: list[int]) -> list[int]:
    """The pool workers among ``pids`` (spawned: ``--multiprocessing-fork``)."""
    out = []
    for k in pids:
        try:
            if b"--multiprocessing-fork" in Path(f"/proc/{k}/cmdline").read_bytes():
                out.append(k)
        except OSError:
            pass
    return out


def _prove_with_rows_running(settle: float = 1.0) -> tuple[subprocess.Popen, list[int]]:
    """A real ``kvreach prove`` whose pool workers exist (and, ``settle``
    seconds later, run their first rows), and every process below it then."""
    p = subprocess.Popen([KVREACH, "prove"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    want = min(2, os.cpu_count() or 1)
    for _ in range(1200):  # a hang guard (at most 2 min), not a time limit
        if len(_workers(_descendants(p.pid))) >= want or p.poll() is not None:
            break
        time.sleep(0.1)
    assert len(_workers(_descendants(p.pid))) >= want, ("no pool workers", p.poll())
    time.sleep(settle)  # 1 s: the workers are inside their first rows (Z3 running)
    return p, _descendants(p.pid)


def _assert_none_survive(kids: list[int]) -> None:
    """Every process recorded before the signal is gone (a zombie is gone:
    it only waits to be reaped). Polled: the kernel delivers the kill and
    reparents the orphans asynchronously."""
    for _ in range(100):  # a hang guard (at most 10 s), not a time limit
        left = [k for k in kids if _alive(k)]
        if not left:
            return
        time.sleep(0.1)
    assert not left, left


def _assert_one_interrupted_line(p: subprocess.Popen, out: str, err: str, rc: int) -> None:
    assert p.returncode == rc, (p.returncode, err)
    lines = [x for x in err.splitlines() if not x.startswith("[")]  # progress lines
    assert len(lines) == 1 and lines[0].startswith("interrupted: "), err
    proved, total = (int(x) for x in lines[0].split()[1:4:2])  # "interrupted: N of M row(s)"
    assert proved < total, lines  # it stopped the run, not waited for its end
    assert "Traceback" not in err and out == ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("sig, rc, group, settle", [
    (signal.SIGINT, 130, True, 1.0),  # a terminal's Ctrl-C: the whole process group
    (signal.SIGINT, 130, True, 0.0),  # ... while the workers start up
    (signal.SIGTERM, 143, False, 1.0),  # kill, timeout, CI runners: the main process only
    (signal.SIGTERM, 143, True, 0.0),
    (signal.SIGHUP, 129, False, 1.0),  # the terminal hung up
], ids=["ctrl-c", "ctrl-c-at-start", "sigterm", "sigterm-group-at-start", "sighup"])
def test_a_signal_stops_prove_with_one_line_and_no_worker_left(sig, rc, group, settle):
    """The signal once the workers run rows: exit 128 + the signal's number,
    one ``interrupted`` line, no process left of those the run had started.
    Without the handling, SIGTERM ended the main process and left both
    workers running."""
    p, kids = _prove_with_rows_running(settle)
    (os.killpg if group else os.kill)(p.pid, sig)
    out, err = p.communicate(timeout=60)  # a hang guard, not a time limit
    _assert_one_interrupted_line(p, out, err, rc)
    _assert_none_survive(kids)


_BROKEN_BY_THE_KILL = """
import multiprocessing, os, signal, sys, time
from kvreach.cli._interrupt import ExitOnInterrupt

def main():
    child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
    child.start()
    def slow_message():  # the watcher loses the race: main raises first
        time.sleep(2)
        return "interrupted: 0 of 1 row(s)"

    with ExitOnInterrupt(slow_message):
        os.kill(os.getpid(), signal.SIGTERM)
        child.join()  # the watcher kills it, as it kills the pool's workers
        raise RuntimeError("a process in the pool was terminated abruptly")
    print("after the block")  # not reached: the watcher ends the process

if __name__ == "__main__":
    main()
"""


def test_an_error_the_kill_causes_is_not_reported(tmp_path):
    """A deterministic form of the race sigterm-group-at-start can lose:
    the watcher kills the workers, the broken pool
    raises in the main thread before the watcher has written its line. The
    exception must not reach the error handler: one line, exit 143."""
    script = tmp_path / "broken_by_the_kill.py"
    script.write_text(_BROKEN_BY_THE_KILL)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=60)  # a hang guard, not a time limit
    assert p.returncode == 143, (p.returncode, p.stderr)
    assert p.stderr.splitlines() == ["interrupted: 0 of 1 row(s)"], p.stderr
    assert p.stdout == ""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
def test_workers_die_with_a_killed_prove():
    """SIGKILL cannot be handled: the workers still go (PR_SET_PDEATHSIG)."""
    p, kids = _prove_with_rows_running()
    p.kill()
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    _assert_none_survive(_workers(kids))


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("sig, rc", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_stops_counterexample_with_one_line(sig, rc):
    """``kvreach counterexample`` (no pool: the search runs in the process)."""
    p = subprocess.Popen([KVREACH, "counterexample", "completeness", "--rule", "vllm-0.33",
                          "--load-model", "intended"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(3.0)  # imports done, the search running (it takes far longer)
    assert p.poll() is None, p.communicate()
    os.kill(p.pid, sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == rc, (p.returncode, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("interrupted: searching"), err
    assert "Traceback" not in err


def test_progress_is_one_line_per_row_when_stderr_is_not_a_terminal():
    r = subprocess.run([KVREACH, "prove", "--obligation", "chunk-mask-closed-form"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("[1/1] chunk-mask-closed-form any any "
                               "vllm 0.29.0/0.30.0/0.31.0/0.32.0/0.33.0/0.34.0: proved (ok) ")
    assert r.stderr.count("\n") == 1


def test_full_stdout_is_one_line():
    with open("/dev/full", "w") as full:
        r = subprocess.run([KVREACH, "simulate", "--rule", "vllm-0.33", *example_flags(PR_54362),
                            "--json"], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: stdout: ")
    assert r.stderr.count("\n") == 1, r.stderr


# --- version, help ------------------------------------------------------------


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.stdout.startswith("kvreach ")


def test_bare_kvreach_prints_the_usage_once():
    r = subprocess.run([KVREACH], capture_output=True, text=True, timeout=60)
    assert r.stdout.count("Usage:") == 1, r.stdout


def test_help_names_obligations_rules_and_load_models():
    top = runner.invoke(app, ["--help"]).stdout
    for name in (*OBLIGATIONS, *RULES, *LOAD_MODELS):
        assert name in top.replace("-\n", "-").replace("\n ", " ").replace("  ", " ") or \
            name in " ".join(top.split()).replace("- ", "-"), name
    prove = " ".join(runner.invoke(app, ["prove", "--help"]).stdout.split()).replace("- ", "-")
    for name in OBLIGATIONS:
        assert name in prove, name


def test_every_option_has_help_and_flags_no_placeholder():
    group = get_command(app)
    for name, cmd in group.commands.items():
        for p in cmd.params:
            if "--help" in getattr(p, "opts", ()):
                continue
            assert (p.help or "").strip(), (name, p.opts)
        text = runner.invoke(app, [name, "--help"]).stdout
        assert "<bool>" not in text and "…" not in text, (name, text)
