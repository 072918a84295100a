"""``kvreach counterexample hit-preservation --rule vllm-0.33 --replay-vllm``
from a built wheel installed in a fresh venv, run outside the checkout: the
harness (``kvreach.vllm_harness``) and everything it reads ship in the wheel.

The wheel is built from a copy of the checkout by the project's PEP 517
backend (``[build-system] build-backend``, the hook ``pip wheel`` and
``python -m build`` call). The venv has no packages of its own but the wheel,
installed with ``pip install --no-deps``; the ``vllm`` extra and the other
dependencies come from the running interpreter's site-packages through a
``.pth`` file (a 9 GB install otherwise), which holds no kvreach module."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

import vllm  # noqa: E402

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
DEPENDENCIES = ("vllm", "z3", "typer", "rich", "deal", "torch", "transformers", "setuptools", "pip")
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                                    ".hypothesis", ".pytest_cache", "proof-results.json")


def _run(args, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(COLUMNS="200", NO_COLOR="1", TERM="dumb")
    r = subprocess.run(args, capture_output=True, text=True, env=env, **kw)
    assert r.returncode == 0, f"{args}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def _dependency_dirs() -> list[str]:
    import importlib.util

    dirs = []
    for name in DEPENDENCIES:
        d = Path(importlib.util.find_spec(name).origin).resolve().parents[1]
        assert not (d / "kvreach" / "__init__.py").exists(), f"{d} holds a kvreach package"
        if str(d) not in dirs:
            dirs.append(str(d))
    return dirs


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                .stdout.strip())
    (site / "zz_kvreach_dependencies.pth").write_text("\n".join(_dependency_dirs()) + "\n")
    backend = tomllib.loads((src / "pyproject.toml").read_text())["build-system"]["build-backend"]
    dist.mkdir()
    name = _run([str(py), "-c", f"import {backend} as b; print(b.build_wheel({str(dist)!r}))"],
                cwd=src).stdout.strip().splitlines()[-1]
    assert name.endswith(".whl") and (dist / name).exists(), name
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(dist / name)])
    return venv


def test_the_venv_imports_kvreach_from_the_wheel(wheel_venv):
    code = ("import kvreach, kvreach.vllm_harness.replay as r, kvreach.impl.vllm_connector as c; "
            "print(kvreach.__file__); print(r.__file__); print(c.__file__)")
    files = _run([str(wheel_venv / "bin" / "python"), "-c", code],
                 cwd=wheel_venv.parent).stdout.split()
    assert len(files) == 3
    for f in files:
        assert Path(f).resolve().is_relative_to(wheel_venv.resolve()), f
        assert not Path(f).resolve().is_relative_to(ROOT), f


def test_replay_vllm_runs_from_the_installed_wheel_outside_the_checkout(wheel_venv, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert not elsewhere.resolve().is_relative_to(ROOT)
    r = _run([str(wheel_venv / "bin" / "kvreach"), "counterexample", "hit-preservation",
              "--rule", "vllm-0.33", "--replay-vllm"], cwd=elsewhere)
    out = r.stdout
    assert "hit-preservation rule=vllm-0.33" in out and "counterexample" in out, out[-2000:]
    assert f"replayed on vLLM {vllm.__version__}'s scheduler" in out, out[-2000:]
    rows = {m["quantity"]: m for m in re.finditer(
        r"^\W*(?P<quantity>hit_tokens|dense_hit_tokens)\W+(?P<vllm>\d+)\W+(?P<kvreach>\d+)"
        r"\W+(?P<equal>yes|no)\W*$", out, re.M)}
    assert set(rows) == {"hit_tokens", "dense_hit_tokens"}, out[-2000:]
    assert all(m["equal"] == "yes" and m["vllm"] == m["kvreach"] for m in rows.values())
    # vLLM's own numbers show the violation: a shorter hit than with dense stores
    assert int(rows["hit_tokens"]["vllm"]) < int(rows["dense_hit_tokens"]["vllm"])
