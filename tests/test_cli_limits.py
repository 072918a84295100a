"""Large inputs, interrupts, progress and help:
a 10^7-token prompt within 10 s and 1 GB, any window without extra cost,
Ctrl-C stopping ``prove`` within a second with no worker left, one progress
line per row when stderr is not a terminal, ``--version``, help naming the
obligations, rules and load models, and every option with help."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.cli.render import write_json
from kvreach.params import LOAD_MODELS, MAX_TOKENS, RULES
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.scenarios import PR_54362, example_flags

runner = CliRunner()
KVREACH = shutil.which("kvreach", path=str(Path(sys.executable).parent)) or "kvreach"
PR = example_flags(PR_54362)[:6]  # PR #54362's groups


def timed(args: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``kvreach args`` in a child: (result, seconds, peak MB of the child)."""
    code = ("import resource, subprocess, sys, json, time; t = time.perf_counter(); "
            "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, "
            "text=True); print(json.dumps([r.returncode, r.stderr, time.perf_counter() - t, "
            "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024]))")
    out = subprocess.run([sys.executable, "-c", code, KVREACH, *args], capture_output=True,
                         text=True, timeout=120, **kw)
    rc, err, secs, mb = json.loads(out.stdout)
    return subprocess.CompletedProcess(args, rc, "", err), secs, mb


@pytest.mark.parametrize("mode", [[], ["--json"]], ids=["text", "json"])
def test_ten_million_token_prompt_within_10_s_and_1_gb(mode):
    r, secs, mb = timed(["simulate", "--rule", "vllm-0.33", *PR, "--prompt", str(MAX_TOKENS),
                         "--budget", "1000", *mode])
    assert r.returncode == 0, r.stderr
    assert secs < 10 and mb < 1024, (secs, mb)


def test_lookup_of_a_ten_million_token_prompt():
    r, secs, mb = timed(["lookup", "--rule", "vllm-0.33", *PR, "--prompt", str(MAX_TOKENS),
                         "--budget", "1000"])
    assert r.returncode == 0, r.stderr
    assert secs < 10 and mb < 1024, (secs, mb)


@pytest.mark.parametrize("window", ["1000000000", str(2**63 - 1)])
def test_any_window_costs_nothing_extra(window):
    r, secs, mb = timed(["simulate", "--rule", "vllm-0.33", "--full-block-size", "36",
                         "--swa-block-size", "4", "--window", window, "--prompt", "100000",
                         "--budget", "1000", "--json"])
    assert r.returncode == 0, r.stderr
    assert secs < 5 and mb < 400, (secs, mb)


@pytest.mark.parametrize("flag", ["--swa-block-size", "--full-block-size", "--dcp",
                                  "--blocks-per-chunk", "--extra-retained-tokens"])
def test_huge_sizes_cost_nothing_extra(flag):
    args = ["simulate", "--rule", "vllm-0.33", "--full-block-size", "36", "--swa-block-size",
            "4", "--window", "16", "--prompt", "100000", "--budget", "1000"]
    if flag in args:
        i = args.index(flag)
        del args[i:i + 2]
    t0 = time.perf_counter()
    r = runner.invoke(app, [*args, flag, str(2**62)])
    assert r.exit_code in (0, 2) and "Traceback" not in r.output, r.output
    assert time.perf_counter() - t0 < 5


@settings(max_examples=60, deadline=None)
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


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("after", [2.0, 6.0], ids=["in-process-rows", "worker-rows"])
def test_ctrl_c_stops_prove_within_a_second(after):
    """SIGINT to the process group, as a terminal's Ctrl-C sends it."""
    p = subprocess.Popen([KVREACH, "prove"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    time.sleep(after)
    kids = _children(p.pid)
    t0 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=30)
    secs = time.monotonic() - t0
    assert p.returncode == 130, (p.returncode, err)
    assert secs < 1.0, secs
    lines = [x for x in err.splitlines() if not x.startswith("[")]  # progress lines
    assert len(lines) == 1 and lines[0].startswith("interrupted"), err
    assert "Traceback" not in err and out == ""
    time.sleep(0.3)
    assert not [k for k in kids if _alive(k)], kids


def test_progress_is_one_line_per_row_when_stderr_is_not_a_terminal():
    r = subprocess.run([KVREACH, "prove", "--obligation", "chunk-mask-closed-form"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("[1/1] chunk-mask-closed-form any any: proved (ok) ")
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
