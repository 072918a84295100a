"""`kvreach plot` and `counterexample --plot`: the sets the chunk map drew
(read back from the drawn bars) equal the sets `kvreach simulate --json`
reports for the same scenario; the files are valid PNG and SVG; bad input
gives one line on stderr and exit 2."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from typer.testing import CliRunner  # noqa: E402

from kvreach import plot as kplot  # noqa: E402
from kvreach.cli import app  # noqa: E402
from kvreach.proofs.scenarios import PR_54362_WASTED, example_flags  # noqa: E402

runner = CliRunner()

PR = example_flags()  # PR #54362's example
WASTED = set(PR_54362_WASTED)  # F1
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SCENARIOS = {
    "pr-029": ["--rule", "vllm-0.29", *PR, "--load-model", "intended"],
    "pr-033": ["--rule", "vllm-0.33", *PR, "--load-model", "intended"],
    "pr-029-aligned": ["--rule", "vllm-0.29", *PR, "--load-model", "aligned"],
    "abort-after-1": ["--rule", "vllm-0.33", *PR, "--abort-after-step", "1",
                      "--load-model", "intended"],
    "abort-after-1-async-029": ["--rule", "vllm-0.29", *PR, "--abort-after-step", "1", "--async",
                                "--load-model", "intended"],
    "decode-40-F2": ["--rule", "vllm-0.33", *PR, "--decode", "40", "--no-offload-prompt-only",
                     "--load-model", "intended"],
    "eagle-retention-F3": ["--rule", "vllm-0.33", *PR[:6], "--eagle", "--retention-interval",
                           "0", "--prompt", "30", "--budget", "1000", "--load-model", "intended"],
    "eagle-decode-029": ["--rule", "vllm-0.29", *PR, "--eagle", "--decode", "8",
                         "--no-offload-prompt-only", "--load-model", "intended"],
}


def invoke(*args: str):
    return runner.invoke(app, list(args))


def sim_json(args: list[str]) -> dict:
    r = invoke("simulate", *args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def drawn(monkeypatch):
    """Records what every kplot.draw call of the CLI drew (read back)."""
    calls: list[list[kplot.ChunkMap]] = []
    real = kplot.draw

    def spy(maps, out, suptitle=None):
        got = real(maps, out, suptitle=suptitle)
        calls.append(got)
        return got

    monkeypatch.setattr(kplot, "draw", spy)
    return calls


def assert_valid_files(png: Path, svg: Path) -> None:
    assert png.read_bytes()[:8] == PNG_MAGIC
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"


def assert_map_equals_simulation(m: kplot.ChunkMap, swa: dict) -> None:
    steps = m.step_rows
    assert [r.label for r in steps] == [f"{s['step']} {s['kind']}" for s in swa["steps"]]
    held: set[int] = set()
    for row, s in zip(steps, swa["steps"]):
        assert row.chunks(kplot.SUBMITTED, kplot.SUBMITTED_WASTED) == set(s["submitted"])
        assert row.chunks(kplot.SUBMITTED_WASTED) == set(s["not_loadable"])
        assert row.chunks(kplot.EARLIER, kplot.EARLIER_WASTED) == held - set(s["submitted"])
        assert row.frontier == s["num_chunks"]
        held |= set(s["submitted"])
    end = m.row(kplot.END_ROW)
    assert end.frontier == swa["final_chunks"]
    assert end.chunks(kplot.STORED, kplot.WASTED) == set(swa["stored"])
    assert end.chunks(kplot.WASTED) == set(swa["stored_not_loadable"])
    assert end.chunks(kplot.STORED, kplot.LOADABLE, kplot.MISSED) == set(swa["loadable"])
    assert end.chunks(kplot.MISSED) == set(swa["needed_not_stored"])
    assert m.counts == {
        "stored": len(set(swa["stored"])), "loadable": len(swa["loadable"]),
        "wasted": len(swa["stored_not_loadable"]), "missed": len(swa["needed_not_stored"]),
    }


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_plot_draws_the_simulated_sets(name, tmp_path, drawn):
    args = SCENARIOS[name]
    swa = sim_json(args)["groups"]["swa"]
    out = tmp_path / "map.png"
    r = invoke("plot", *args, "--out", str(out))
    assert r.exit_code == 0, r.stderr
    assert len(drawn) == 1 and len(drawn[0]) == 1
    assert_map_equals_simulation(drawn[0][0], swa)
    assert_valid_files(out, tmp_path / "map.svg")
    assert f"wrote {out} and {tmp_path / 'map.svg'}" in r.stdout


@pytest.mark.parametrize("name", ["pr-029", "pr-033", "abort-after-1", "decode-40-F2"])
def test_plot_by_default_draws_the_lookups_sets(name, tmp_path, drawn):
    """Without --load-model the map's end row is simulate's lookup view:
    wasted = stored and loaded by no later request, missed = asked for by a
    later lookup and not stored."""
    args = [a for a in SCENARIOS[name] if a not in ("--load-model", "intended")]
    view = sim_json(args)["groups"]["swa"]["lookup"]
    r = invoke("plot", *args, "--out", str(tmp_path / "map.png"))
    assert r.exit_code == 0, r.stderr
    end = drawn[0][0].row(kplot.END_ROW)
    assert end.chunks(kplot.WASTED) == set(view["stored_not_loaded"])
    assert end.chunks(kplot.MISSED) == set(view["asked_not_stored"])
    assert end.chunks(kplot.STORED) == set(view["loaded"])
    assert "'s lookup, " in r.stdout


def test_plot_data_equals_drawn():
    """chunk_map on simulate --json's own trace equals what draw read back."""
    doc = sim_json(SCENARIOS["pr-029"])
    m = kplot.chunk_map(doc["trace"])
    assert_map_equals_simulation(m, doc["groups"]["swa"])


def test_compare_two_panels_same_range(tmp_path, drawn):
    out = tmp_path / "cmp.svg"
    r = invoke("plot", "--compare", "vllm-0.29", "vllm-0.33", *PR, "--load-model", "intended",
               "--out", str(out))
    assert r.exit_code == 0, r.stderr
    (maps,) = drawn
    assert [m.rule for m in maps] == ["vllm-0.29", "vllm-0.33"]
    assert {(m.lo, m.hi) for m in maps} == {(0, 300)}
    for m in maps:
        assert_map_equals_simulation(m, sim_json(["--rule", m.rule, *PR])["groups"]["swa"])
    assert maps[0].row(kplot.END_ROW).chunks(kplot.WASTED) == WASTED
    assert maps[1].counts == {"stored": 135, "loadable": 135, "wasted": 0, "missed": 0}
    assert kplot.panel_title(maps[0]).endswith("stored 137, loadable 135, wasted 2, missed 0")
    assert_valid_files(tmp_path / "cmp.png", out)


def test_chunks_zoom_clips_every_set(tmp_path, drawn):
    r = invoke("plot", "--rule", "vllm-0.29", *PR, "--chunks", "230:260",
               "--out", str(tmp_path / "z.png"))
    assert r.exit_code == 0, r.stderr
    (m,) = drawn[0]
    assert (m.lo, m.hi) == (230, 260)
    swa = sim_json(["--rule", "vllm-0.29", *PR])["groups"]["swa"]
    for row, s in zip(m.step_rows, swa["steps"]):
        assert row.chunks(kplot.SUBMITTED, kplot.SUBMITTED_WASTED) == {
            c for c in s["submitted"] if 230 <= c < 260}
    assert m.row(kplot.END_ROW).chunks(kplot.WASTED) == WASTED
    assert m.counts["stored"] == len([c for c in swa["stored"] if 230 <= c < 260])
    assert "chunks 230-259: stored" in kplot.panel_title(m)


def _range_totals(swa: dict, lo: int, hi: int) -> dict[str, int]:
    """simulate --json's sets summed over chunks [lo, hi)."""
    def n(key: str) -> int:
        return len({c for c in swa[key] if lo <= c < hi})
    return {"stored": n("stored"), "loadable": n("loadable"),
            "wasted": n("stored_not_loadable"), "missed": n("needed_not_stored")}


@pytest.mark.parametrize("lo,hi", [(234, 262), (0, 300), (100, 101)])
def test_zoomed_totals_count_the_drawn_range(lo, hi, tmp_path, drawn, monkeypatch):
    """Every printed total (stdout, both panel titles) counts the drawn chunks
    [lo, hi): summed from simulate --json's sets clipped to the range and
    from the drawn bars, the two agree and are what is printed; the figure's
    title is the command with --chunks."""
    titles: list[str] = []
    real_draw = kplot.draw

    def spy(maps, out, suptitle=None):
        titles.append(suptitle)
        return real_draw(maps, out, suptitle=suptitle)

    monkeypatch.setattr(kplot, "draw", spy)
    r = invoke("plot", "--compare", "vllm-0.29", "vllm-0.33", *PR, "--chunks", f"{lo}:{hi}",
               "--load-model", "intended", "--out", str(tmp_path / "z.png"))
    assert r.exit_code == 0, r.stderr
    assert f"--chunks {lo}:{hi}" in titles[-1]
    maps = drawn[0]
    lines = [x for x in r.stdout.splitlines() if ": stored " in x]
    assert len(lines) == 2
    for m, line in zip(maps, lines):
        swa = sim_json(["--rule", m.rule, *PR])["groups"]["swa"]
        want = _range_totals(swa, lo, hi)
        end = m.row(kplot.END_ROW)  # as drawn (read back from the bars)
        from_bars = {"stored": len(end.chunks(kplot.STORED, kplot.WASTED)),
                     "loadable": len(end.chunks(kplot.STORED, kplot.LOADABLE, kplot.MISSED)),
                     "wasted": len(end.chunks(kplot.WASTED)),
                     "missed": len(end.chunks(kplot.MISSED))}
        assert from_bars == want
        assert m.counts == want
        text = (f"stored {want['stored']}, loadable {want['loadable']}, "
                f"wasted {want['wasted']}, missed {want['missed']}")
        assert text in kplot.panel_title(m) and text in line
        rng = f"chunks {lo}-{hi - 1}"
        assert rng in kplot.panel_title(m) and rng in line
    if (lo, hi) == (234, 262):  # the drawn range holds F1's two wasted chunks
        assert [m.counts["wasted"] for m in maps] == [2, 0]


def test_output_is_reproducible(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for d in (a, b):
        r = invoke("plot", "--rule", "vllm-0.29", *PR, "--out", str(d / "m.svg"))
        assert r.exit_code == 0, r.stderr
    for name in ("m.png", "m.svg"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert b"Matplotlib v" not in (a / "m.png").read_bytes()


# --- counterexample --plot ---------------------------------------------------


def test_counterexample_plot_lifecycle(tmp_path, drawn):
    out = tmp_path / "cex.png"
    r = invoke("counterexample", "soundness", "--rule", "vllm-0.29", "--load-model",
               "intended", "--json", "--plot", str(out))
    assert r.exit_code == 0, r.stderr
    cex = json.loads(r.stdout)["counterexample"]  # stdout stays pure JSON
    (m,) = drawn[0]
    trace = cex["trace"]
    for row, s in zip(m.step_rows, trace["steps"]):
        assert row.chunks(kplot.SUBMITTED, kplot.SUBMITTED_WASTED) == set(s["submitted"])
    end = m.row(kplot.END_ROW)
    assert end.chunks(kplot.WASTED) == set(cex["replayed_violation"]) == WASTED
    assert end.chunks(kplot.STORED, kplot.WASTED) == set(trace["stored"])
    assert_valid_files(out, tmp_path / "cex.svg")
    assert "wrote" in r.stderr


def test_counterexample_plot_mask_equivalence(tmp_path, drawn):
    out = tmp_path / "mask.svg"
    r = invoke("counterexample", "mask-equivalence", "--rule", "vllm-0.33", "--load-model",
               "intended", "--json", "--plot", str(out))
    assert r.exit_code == 0, r.stderr
    cex = json.loads(r.stdout)["counterexample"]
    (m,) = drawn[0]
    (row,) = m.rows
    H = cex["final_horizon_chunks"]
    assert row.frontier == H and (m.lo, m.hi) == (0, H)
    # the tracked chunk is kept but not loadable, or loadable but not kept
    assert cex["chunk"] in row.chunks(kplot.WASTED, kplot.MISSED)
    assert_valid_files(tmp_path / "mask.png", out)


# --- input errors -------------------------------------------------------------

PLOT = ["plot", "--rule", "vllm-0.33", *PR]


def one_line_error(r, flag_value: str, expected: str) -> None:
    assert r.exit_code == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and flag_value in lines[0], lines[0]
    assert expected in lines[0], lines[0]
    assert "Traceback" not in r.output


@pytest.mark.parametrize("args,flag_value,expected", [
    (PLOT + ["--out", "map.pdf"], "--out=map.pdf", ".png or .svg"),
    (PLOT + ["--out", "map"], "--out=map", ".png or .svg"),
    (PLOT + ["--out", "/nonexistent-dir/map.png"], "--out=/nonexistent-dir/map.png",
     "existing directory"),
    (["plot", "--compare", "vllm-0.29", "vllm-9", *PR, "--out", "m.png"],
     "--compare=vllm-9", "vllm-0.29, vllm-0.33"),
    (["plot", *PR, "--out", "m.png", "--compare", "vllm-0.29"], "--compare", "2 arguments"),
    (["plot", *PR, "--out", "m.png"], "--rule", "--compare RULE RULE"),
    (PLOT + ["--compare", "vllm-0.29", "vllm-0.33", "--out", "m.png"], "--compare",
     "not both"),
    (["plot", "--rule", "x", *PR, "--out", "m.png"], "--rule=x", "vllm-0.29"),
    (PLOT + ["--chunks", "9:3", "--out", "m.png"], "--chunks=9:3", "LO:HI"),
    (PLOT + ["--chunks", "a:b", "--out", "m.png"], "--chunks=a:b", "LO:HI"),
    (PLOT + ["--window", "0", "--out", "m.png"], "--window=0", "integer >= 1"),
    (PLOT + ["--load-model", "psychic", "--out", "m.png"], "--load-model=psychic", "aligned"),
    (PLOT, "--out", ""),
    (["counterexample", "soundness", "--rule", "vllm-0.29", "--load-model", "intended",
      "--plot", "x.jpg"], "--plot=x.jpg", ".png or .svg"),
    (["counterexample", "load-window-blocks", "--plot", "x.png"], "--plot=x.png",
     "mask-equivalence"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_bad_input_one_line_exit_2(args, flag_value, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke(*args)
    one_line_error(r, flag_value, expected)
    assert r.stdout == ""
    assert not list(tmp_path.iterdir())  # nothing written


def test_missing_matplotlib_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    r = invoke(*PLOT, "--out", str(tmp_path / "m.png"))
    one_line_error(r, "--out=", "pip install -e '.[plot]'")
    assert not list(tmp_path.iterdir())


def test_counterexample_plot_of_a_proved_row(tmp_path):
    r = invoke("counterexample", "exactly-once", "--rule", "vllm-0.33",
               "--plot", str(tmp_path / "m.png"))
    one_line_error(r, "--plot=", "counterexample to draw")
    assert "proved" in r.stdout  # the verdict is still shown
    assert not list(tmp_path.iterdir())


def test_prove_does_not_import_matplotlib():
    import subprocess

    code = ("import sys, kvreach.cli, kvreach.plot; "
            "sys.exit(1 if 'matplotlib' in sys.modules else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_counterexample_plot_draws_the_later_lookup(tmp_path, drawn):
    """hit-preservation's counterexample (F6): the map's last row is the later
    request's lookup, with the chunk it asks for and was never stored (292)
    and both hits; the text shows the lookup's sets, not an approximate load
    model's (which have nothing missing here)."""
    out = tmp_path / "f6.png"
    r = invoke("counterexample", "hit-preservation", "--rule", "vllm-0.33", "--vllm", "0.33.0",
               "--plot", str(out))
    assert r.exit_code == 0, r.stderr
    (m,) = drawn[0]
    row = m.rows[-1]
    assert row.label == "later lookup: hit 0, dense 1187"
    assert row.chunks(kplot.LOOKUP_MISSING) == {292}
    assert row.chunks(kplot.LOOKUP_LOADED) == set()
    assert row.chunks(kplot.LOOKUP_RUN) == {293, 294, 295, 296}
    assert m.end.label == kplot.END_ROW and 292 not in m.end.chunks(kplot.STORED, kplot.WASTED)
    assert "asked for by the later lookup, never stored (1): 292" in r.stdout
    assert "needed-not-stored" not in r.stdout
    assert "later lookup: hit 0, dense 1187: loads -; asks for, never stored: 292" in r.stdout
