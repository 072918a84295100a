"""``kvreach catalog`` and ``kvreach diagram`` find the repository from the
current directory (upward: pyproject.toml and docs/) or ``--repo``, never
from where kvreach is installed; with neither, one line on stderr, exit 2.
No solver runs here."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvreach.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("command", ["catalog", "diagram"])
def test_outside_a_checkout_is_a_one_line_error(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke(command, "--check")
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: --repo=(missing): expected a kvreach checkout")
    assert str(tmp_path) in r.stderr and r.stderr.count("\n") == 1
    assert "Traceback" not in r.output


@pytest.mark.parametrize("command", ["catalog", "diagram"])
def test_repo_option(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke(command, "--check", "--repo", str(ROOT))
    assert r.exit_code == 0, r.output
    assert str(ROOT / "docs") in r.stdout
    r = invoke(command, "--check", "--repo", str(tmp_path))
    assert r.exit_code == 2
    assert r.stderr.startswith(f"error: --repo={tmp_path}: expected a kvreach checkout")


@pytest.mark.parametrize("command", ["catalog", "diagram"])
def test_found_upward_from_a_subdirectory(command, monkeypatch):
    monkeypatch.chdir(ROOT / "tests")
    r = invoke(command, "--check")
    assert r.exit_code == 0, r.output
    assert str(ROOT / "docs") in r.stdout


def test_from_the_root_the_defaults_read_as_before(monkeypatch):
    monkeypatch.chdir(ROOT)
    r = invoke("catalog", "--check")
    assert r.exit_code == 0, r.output
    assert r.stdout == "docs/proofs.md is up to date with docs/proof-results.json\n"
