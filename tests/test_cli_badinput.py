"""Bad and odd input for every option of every command:
one line on stderr starting ``error: ``, exit 2, no traceback, and quickly.

The property test reads the commands and their options from the click
command tree (so a new option is attacked as soon as it exists) and
generates bad values per option kind: integers below the minimum, past
int64 or past kvreach's limits, text that is no integer; strings that are no
rule / load model / obligation; output paths that cannot be written; input
files of the wrong shape or encoding; values given to on/off flags; extra
positionals and unknown options. The specific cases of the issue follow.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.main import get_command
from typer.testing import CliRunner

from kvreach.cli import app
from kvreach.conform import MAX_CASES
from kvreach.models import PRESETS
from kvreach.params import LOAD_MODELS, MAX_INT, MAX_TOKENS, RULES
from kvreach.proofs.obligations import OBLIGATIONS
from kvreach.proofs.scenarios import PR_54362, example_flags
from kvreach.releases import RELEASES

from _calls import invoke_counted

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
# Bad input is refused before any work: in fewer Python / C calls than this
# (a refusal makes ~30 000; a valid 100 000-token simulate ~240 000, one proof
# row far more). Calls, not seconds: the same on any machine.
REFUSAL_CALLS = 200_000
CLICK = get_command(app)
COMMANDS = sorted(CLICK.commands)

PR = example_flags(PR_54362)

# Integer options: the smallest value each accepts (below it is bad input).
MINIMUM = {
    "--swa-block-size": 1, "--window": 1, "--prompt": 1, "--budget": 1,
    "--full-block-size": 1, "--blocks-per-chunk": 1, "--dcp": 1,
    "--retention-interval": 0, "--max-offload-tokens": 0, "--abort-after-step": 0,
    "--decode": 0, "--extra-retained-tokens": 0, "--later-prompt": 1,
    "--later-diverges-at": 0, "--later-local-hit": 0, "--later-max-load-tokens": 0,
    "--cases": 1, "--seed": 0,
}
# Integer options with a limit below int64 (kvreach's stated limits).
LIMIT = {"--prompt": MAX_TOKENS, "--decode": MAX_TOKENS, "--later-prompt": MAX_TOKENS,
         "--cases": MAX_CASES}
CHOICES = {"--rule": RULES, "--load-model": LOAD_MODELS, "--obligation": tuple(OBLIGATIONS),
           "--compare": RULES, "--vllm": tuple(v for r in RELEASES for v in r.names),
           "--model": tuple(PRESETS)}


def base(command: str, tmp: Path) -> list[str]:
    """A valid invocation of ``command`` that is quick (the options under
    test replace one of its values or are added)."""
    return {
        "simulate": ["simulate", "--rule", "vllm-0.33", *PR],
        "lookup": ["lookup", "--rule", "vllm-0.33", *PR],
        "plot": ["plot", "--rule", "vllm-0.33", *PR, "--out", str(tmp / "m.png")],
        "prove": ["prove", "--obligation", "soundness"],
        "counterexample": ["counterexample", "soundness", "--rule", "vllm-0.29",
                           "--load-model", "intended"],
        "catalog": ["catalog", "--results", str(ROOT / "docs/proof-results.json"),
                    "--out", str(tmp / "proofs.md")],
        "diagram": ["diagram", "--check", "--doc", str(ROOT / "docs/lifecycle.md")],
        "conform": ["conform", "--cases", "1", "--vllm-src", str(_tiny_vllm_tree(tmp))],
    }[command]


def _tiny_vllm_tree(tmp: Path) -> Path:
    """A tree with an offloading scheduler.py and none of the functions:
    conform runs in milliseconds (and reports that no record matches)."""
    sched = tmp / "tiny-vllm" / "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
    sched.parent.mkdir(parents=True, exist_ok=True)
    sched.write_text("def unrelated():\n    return 1\n")
    return tmp / "tiny-vllm"


def with_option(args: list[str], flag: str, value: str | None) -> list[str]:
    """``args`` with ``flag``'s value replaced (or the flag added)."""
    out = list(args)
    if flag in out:
        i = out.index(flag)
        del out[i: i + (1 if value is None else 2)]
        if flag == "--compare":
            del out[i]
    if flag in ("--rule", "--compare") and out[0] == "plot":
        for f in ("--rule", "--compare"):
            if f in out:
                i = out.index(f)
                del out[i: i + 2]
    return out + ([flag] if value is None else [flag, value])


def options(command: str):
    """(flag, click parameter) of every option of ``command`` but --help."""
    for p in CLICK.commands[command].params:
        if p.param_type_name == "option" and "--help" not in p.opts:
            yield max(p.opts, key=len), p


def bad_int(flag: str) -> st.SearchStrategy[str]:
    lo = MINIMUM.get(flag, 0)
    top = LIMIT.get(flag, MAX_INT)
    return st.one_of(
        st.integers(max_value=lo - 1).map(str),
        st.integers(min_value=top + 1, max_value=10**40).map(str),
        st.sampled_from(["", "1.5", "1e30", "0x10", "ten", "--", "١٢", " 7x"]),
        st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8)
        .filter(lambda s: not s.strip().lstrip("+-").isdigit()),
    )


def bad_choice(flag: str) -> st.SearchStrategy[str]:
    return st.text(min_size=0, max_size=12).filter(
        lambda s: s not in CHOICES[flag] and not s.startswith("-"))


def bad_path(command: str, flag: str, tmp: Path) -> st.SearchStrategy[str]:
    """Paths an option cannot use: a directory, a path under a regular file,
    a wrong suffix for the drawings, a missing file to read."""
    reg = tmp / "regular-file"
    reg.write_text("x")
    bad = [str(tmp), str(reg / "under-a-file.json")]
    if flag in ("--out", "--plot") and command in ("plot", "counterexample"):
        bad += [str(tmp / "map.pdf"), str(tmp / "map"), "-"]
    if flag in ("--results", "--against", "--doc"):
        bad += [str(tmp / "missing.json")]
    if flag == "--repo":
        bad += [str(tmp)]
    return st.sampled_from(bad)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(
        st.sampled_from(["rows", "run", "obligation", "rule", "load_model", "verdict", "scope",
                         "seconds", "expected", "selection"]), kids, max_size=6),
    max_leaves=12)


def bad_value(command: str, flag: str, param, tmp: Path) -> st.SearchStrategy:
    """-> (args, note) for one bad use of ``flag``."""
    args = base(command, tmp)
    if getattr(param, "is_flag", False):  # an on/off flag given a value
        return st.sampled_from(["true", "false", "1", "yes"]).map(
            lambda v: args + [(param.opts + param.secondary_opts)[0], v])
    if flag in CHOICES:
        if flag == "--compare":
            return st.tuples(st.sampled_from(RULES), bad_choice(flag)).map(
                lambda rv: with_option(args, "--compare", rv[0]) + [rv[1]])
        return bad_choice(flag).map(lambda v: with_option(args, flag, v))
    if param.bare_type() == "int":
        return bad_int(flag).map(lambda v: with_option(args, flag, v))
    if flag == "--chunks":
        return st.one_of(
            st.text(max_size=8).filter(lambda s: not s.startswith("-")),
            st.tuples(st.integers(0, 10**12), st.integers(0, 10**12))
            .filter(lambda t: not 0 <= t[0] < t[1] <= 300).map(lambda t: f"{t[0]}:{t[1]}"),
        ).map(lambda v: with_option(args, flag, v))
    if flag == "--results":
        def shaped(doc):
            p = tmp / f"results-{abs(hash(json.dumps(doc, sort_keys=True)))}.json"
            p.write_text(json.dumps(doc))
            return with_option(args, flag, str(p))
        return st.one_of(bad_path(command, flag, tmp).map(lambda v: with_option(args, flag, v)),
                         JSON.map(shaped))
    if flag == "--doc":
        def raw(data: bytes):
            p = tmp / f"doc-{abs(hash(data))}.md"
            p.write_bytes(data)
            return with_option(args, flag, str(p))
        return st.one_of(bad_path(command, flag, tmp).map(lambda v: with_option(args, flag, v)),
                         st.binary(max_size=40).map(raw))
    if flag == "--against":
        return bad_path(command, flag, tmp).map(
            lambda v: with_option(args, "--check", None) + ["--verdicts-only", "--against", v])
    return bad_path(command, flag, tmp).map(lambda v: with_option(args, flag, v))


def cases(tmp: Path):
    out = []
    for command in COMMANDS:
        out.append(st.text(min_size=1, max_size=6).filter(lambda s: not s.startswith("-")).map(
            lambda s, c=command: base(c, tmp) + [s]))  # a stray positional
        out.append(st.sampled_from(["--nope", "--promt", "--nope=1", "-x"]).map(
            lambda s, c=command: base(c, tmp) + [s]))
        for flag, p in options(command):
            if flag == "--check" or flag == "--verdicts-only" or flag == "--partial":
                continue  # on/off switches whose bad use is a value: covered below
            out.append(bad_value(command, flag, p, tmp))
        for flag, p in options(command):
            if getattr(p, "is_flag", False) and not p.secondary_opts:
                out.append(st.just(base(command, tmp) + [flag, "true"]))
    return st.one_of(out)


def assert_one_line_error(args: list[str], r) -> None:
    assert r.exit_code == 2, (" ".join(args), r.exit_code, r.stdout[-300:], r.stderr)
    assert r.stderr.startswith("error: "), (args, r.stderr)
    assert r.stderr.count("\n") == 1, (args, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout, (args, r.stderr)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("badinput")


def test_every_option_of_every_command_is_attacked(tmp):
    """The generator covers each option (a new option without a bad-value
    strategy fails here)."""
    for command in COMMANDS:
        for flag, p in options(command):
            if flag in ("--check", "--verdicts-only", "--partial"):
                continue
            assert bad_value(command, flag, p, tmp) is not None, (command, flag)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_bad_input_is_one_line_exit_2(data, tmp):
    args = data.draw(cases(tmp))
    r, calls, _ = invoke_counted(args)
    assert_one_line_error(args, r)
    assert calls < REFUSAL_CALLS, (args, calls)


# --- the issue's classes, one test each --------------------------------------


@pytest.mark.parametrize("args, flag", [
    (["simulate", "--rule", "vllm-0.33", *PR[:6], "--prompt", "99999999999999999999999",
      "--budget", "1000"], "--prompt=99999999999999999999999"),
    (["simulate", "--rule", "vllm-0.33", *PR[:8], "--budget", "99999999999999999999999"],
     "--budget=99999999999999999999999"),
    (["simulate", "--rule", "vllm-0.33", *PR[:6], "--prompt", "1000000000", "--budget", "1000"],
     "--prompt=1000000000"),
    (["simulate", "--rule", "vllm-0.33", *PR, "--decode", "10000000"], "--decode=10000000"),
    (["simulate", "--rule", "vllm-0.33", *PR[:8], "--budget", "1", "--prompt", "10000000"],
     "--budget=1"),
    (["prove", "soundness"], "--obligation soundness"),
    (["counterexample", "soundness", "extra"], "extra"),
    (["simulate", "--rule", "vllm-0.33", *PR, "--eagle", "true"], "--eagle=true"),
    (["plot", "--compare", "vllm-0.29", *PR[2:], "--out", "m.png"],
     "--compare=vllm-0.29 --swa-block-size"),
])
def test_issue_cases(args, flag):
    r, calls, _ = invoke_counted(args)
    assert_one_line_error(args, r)
    assert flag in r.stderr, r.stderr
    assert calls < REFUSAL_CALLS, calls


@pytest.mark.parametrize("chunks", ["1000:2000", "0:1000000000", "300:301"])
def test_plot_chunks_outside_the_request(chunks, tmp):
    args = ["plot", "--rule", "vllm-0.33", *PR, "--out", str(tmp / "m.png"), "--chunks", chunks]
    r = runner.invoke(app, args)
    assert_one_line_error(args, r)
    assert "300 chunks" in r.stderr


def test_plot_too_many_steps_is_refused_before_drawing(tmp):
    args = ["plot", "--rule", "vllm-0.33", *PR[:6], "--prompt", "1000000", "--budget", "1000",
            "--out", str(tmp / "m.png")]
    r, calls, _ = invoke_counted(args)
    assert_one_line_error(args, r)
    # no drawing: at most the calls of simulating the same scenario
    _, simulate_calls, _ = invoke_counted(["simulate", *args[1:-2]])
    assert "at most 200 scheduler steps" in r.stderr and calls <= 1.2 * simulate_calls, \
        (calls, simulate_calls)


@pytest.mark.parametrize("doc", [[1, 2], [{}], {"rows": [{"obligation": "a", "rule": "b",
                                 "load_model": "c", "verdict": "proved", "seconds": 1}]},
                                 {"run": {"seconds": "12"}, "rows": []},
                                 {"rows": [{"obligation": "a", "rule": "b", "load_model": "c",
                                            "verdict": "proved", "scope": "s", "seconds": "1"}]},
                                 {"rows": []}])
@pytest.mark.parametrize("check", [[], ["--check"]])
def test_catalog_results_of_the_wrong_shape(doc, check, tmp):
    f = tmp / "shape.json"
    f.write_text(json.dumps(doc))
    args = ["catalog", "--results", str(f), "--out", str(tmp / "p.md"), *check]
    assert_one_line_error(args, runner.invoke(app, args))


def test_catalog_of_a_selection_is_refused_unless_partial(tmp):
    doc = json.loads((ROOT / "docs/proof-results.json").read_text())
    doc["rows"] = doc["rows"][:3]
    doc["run"]["selection"] = {"obligation": None, "rule": "vllm-0.29", "load_model": None}
    f = tmp / "partial.json"
    f.write_text(json.dumps(doc))
    args = ["catalog", "--results", str(f), "--out", str(tmp / "p.md")]
    r = runner.invoke(app, args)
    assert_one_line_error(args, r)
    assert "--partial" in r.stderr
    r = runner.invoke(app, args + ["--partial"])
    assert r.exit_code == 0 and r.stderr.startswith("warning: ") and "missing" in r.stderr


def test_diagram_doc_not_utf8(tmp):
    f = tmp / "latin1.md"
    f.write_bytes("caf\xe9".encode("latin-1"))
    args = ["diagram", "--doc", str(f)]
    r = runner.invoke(app, args)
    assert_one_line_error(args, r)
    assert "UTF-8" in r.stderr


def test_prove_output_paths_are_checked_before_any_proof(tmp):
    (tmp / "file").write_text("")
    for flag in ("--json", "--junit"):
        args = ["prove", flag, str(tmp / "file" / "x")]
        r, calls, _ = invoke_counted(args)
        assert_one_line_error(args, r)
        assert r.stderr.startswith(f"error: {flag}=") and calls < REFUSAL_CALLS, calls
    # a missing directory is created
    args = ["prove", "--obligation", "chunk-mask-closed-form",
            "--json", str(tmp / "new" / "r.json"), "--junit", "-"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stderr
    assert json.loads((tmp / "new" / "r.json").read_text())["rows"][0]["verdict"] == "proved"
    assert r.stdout.startswith("<?xml")


def test_a_failed_json_write_does_not_skip_junit(tmp):
    args = ["prove", "--obligation", "chunk-mask-closed-form", "--json", "/dev/full",
            "--junit", str(tmp / "j.xml")]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and r.stderr.count("error: ") == 1 and "--json=/dev/full" in r.stderr
    assert (tmp / "j.xml").read_text().startswith("<?xml")


# --- options once accepted and silently ignored: refused, one line each -------

LOOKUP = ["lookup", "--rule", "vllm-0.33", *PR]  # a 1200-token prompt, SWA chunks of 4 tokens


@pytest.mark.parametrize("args, value, expected", [
    (["simulate", "--rule", "vllm-0.33", *PR[2:], "--retention-interval", "0"],
     "--retention-interval=0", "--full-block-size"),
    (["plot", "--rule", "vllm-0.33", *PR[2:], "--retention-interval", "8", "--out", "m.png"],
     "--retention-interval=8", "--full-block-size"),
    ([*LOOKUP, "--later-diverges-at", "1201"], "--later-diverges-at=1201", "at most 1200"),
    ([*LOOKUP, "--later-prompt", "500", "--later-diverges-at", "600"],
     "--later-diverges-at=600", "at most 500"),
    ([*LOOKUP, "--later-evicted", "swa:300"], "--later-evicted=swa:300", "swa:0 to swa:299"),
    ([*LOOKUP, "--later-evicted", "full:30-40"], "--later-evicted=full:30-40",
     "full:0 to full:32"),
    ([*LOOKUP, "--later-prompt", "400", "--later-evicted", "swa:100"],
     "--later-evicted=swa:100", "swa:0 to swa:99"),
    ([*LOOKUP, "--load-model", "intended"], "--load-model=intended", "no --load-model"),
    ([*LOOKUP, "--load-model", "aligned"], "--load-model=aligned", "no --load-model"),
    (["prove", "--obligation", "hit-preservation", "--rule", "lookup-window", "--vllm", "0.29.0"],
     "--vllm=0.29.0", "no proof row has --vllm 0.29.0 with --obligation hit-preservation"),
    (["prove", "--obligation", "mask-equivalence", "--rule", "lookup-window"],
     "--rule=lookup-window", "no proof row has --rule lookup-window"),
])
def test_ignored_options_are_refused(args, value, expected, tmp):
    args = [str(tmp / a) if a == "m.png" else a for a in args]
    r, calls, _ = invoke_counted(args)
    assert_one_line_error(args, r)
    assert r.stderr.startswith(f"error: {value}: expected "), r.stderr
    assert expected in r.stderr, r.stderr
    assert calls < REFUSAL_CALLS, calls


@pytest.mark.parametrize("args", [
    [*LOOKUP, "--later-diverges-at", "1200"],
    [*LOOKUP, "--later-evicted", "swa:299", "--later-evicted", "full:32"],
])
def test_the_edge_of_what_is_refused_is_accepted(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.stderr


def test_a_counterexample_without_a_tracked_chunk_says_no_none():
    """A lookup counterexample tracks no chunk: its line names the replayed
    chunks, never "chunk None"."""
    from types import SimpleNamespace

    from kvreach.cli.render import cex_line

    row = SimpleNamespace(obligation="load-reads-checked", rule="any", load_model="any",
                          vllm="0.29.0", counterexample={"replayed_violation": [292, 293]})
    line = cex_line(row)
    assert "None" not in line and "replayed violation chunks: 292-293" in line
    row.counterexample = {"chunk": 7}
    assert cex_line(row).endswith(": chunk 7")
