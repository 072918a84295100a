"""vLLM release wheels and their Python sources for the tests, fetched once.

``wheel("0.30.0")`` downloads ``vllm==0.30.0`` (``pip download --no-deps``,
about 320 MB) into ``$KVREACH_CACHE/wheels`` (default
``~/.cache/kvreach/wheels``) unless it is there already; ``source(v)``
unpacks the wheel's ``.py`` files into ``$KVREACH_CACHE/vllm-<v>`` once
(nothing installed or imported). ``venv(v)`` is a python holding that release
(this one, or a venv made once with ``python -m kvreach.vllm_install v``), so
a test about 0.33.0 runs on 0.33.0 whichever release the checkout's venv holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

RELEASES = ("0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")


def cache_dir() -> Path:
    env = os.environ.get("KVREACH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kvreach"


def wheel(version: str) -> Path:
    d = cache_dir() / "wheels"
    found = sorted(d.glob(f"vllm-{version}-*.whl"))
    if found:
        return found[0]
    d.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    f"vllm=={version}", "-d", str(d)], check=True)
    found = sorted(d.glob(f"vllm-{version}-*.whl"))
    if not found:
        raise RuntimeError(f"pip download vllm=={version} left no wheel in {d}")
    return found[0]


def source(version: str) -> Path:
    """The release's Python sources (a tree with ``vllm/`` at its top)."""
    root = cache_dir() / f"vllm-{version}"
    done = root / ".unpacked"
    if not done.exists():
        with zipfile.ZipFile(wheel(version)) as z:
            for name in z.namelist():
                if name.startswith("vllm/") and name.endswith(".py"):
                    z.extract(name, root)
        done.write_text(version)
    return root


def venv(version: str) -> Path:
    """A python whose environment holds ``vllm==<version>`` and this kvreach.

    This interpreter when its installed vLLM is that release. Otherwise a
    virtualenv ``$KVREACH_CACHE/venvs/vllm-<version>``, made once (about 9 GB:
    vLLM brings a CUDA build of torch, nothing of which needs a GPU to
    import). The first call installs kvreach from this checkout there with
    ``--no-deps``, then the release as the project installs it,
    ``python -m kvreach.vllm_install <version>`` (a few minutes; for 0.34.0
    its unserved ``flashinfer-python`` pin overridden, the wheel with
    ``--no-deps``), then kvreach's own dependencies ``z3-solver`` (vLLM's
    tilelang pins it, so it comes with vLLM), ``typer``, ``rich`` and
    ``deal`` only if vLLM did not bring them.
    torchvision, torchaudio and torchcodec are removed when they do not
    import: where pip takes torch from a local wheel folder (this machine's
    ``find-links`` holds ``torch-2.13.0+cpu``, the very version 0.29.0 and
    0.30.0 pin) and those three from PyPI (built for the CUDA torch),
    importing vLLM fails (``operator torchvision::nms does not exist``;
    ``Could not load this library``: ``_torchaudio.abi3.so``,
    ``libtorchcodec_image.so``, an OSError 0.30.0's ``multimodal/media/audio.py``
    does not catch). The scheduler side needs none of them, and vLLM and
    ``transformers`` import them only if installed.
    Returns the python (``bin/python`` of the venv).
    """
    from kvreach.vllm_sdist import installed_version

    if installed_version() == version:
        return Path(sys.executable)
    root = cache_dir() / "venvs" / f"vllm-{version}"
    python = root / "bin" / "python"
    done = root / ".installed"
    repo = Path(__file__).resolve().parent.parent
    pip = [str(python), "-m", "pip", "install", "-q"]
    if done.exists():
        # kvreach there is editable: point it at this checkout if another made the venv
        # (asked from the venv's folder: from a checkout's root, its own
        # kvreach/ folder would answer, whatever the venv maps)
        where = subprocess.run([str(python), "-c", "import kvreach; print(kvreach.__file__)"],
                               capture_output=True, text=True, cwd=root).stdout.strip()
        if not where or Path(where).resolve().parent.parent != repo:
            subprocess.run(pip + ["--no-deps", "-e", str(repo)], check=True)
        return python
    root.parent.mkdir(parents=True, exist_ok=True)
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(repo)], check=True)
    # kvreach.vllm_install needs only the standard library (kvreach/__init__ is empty)
    subprocess.run([str(python), "-m", "kvreach.vllm_install", version], check=True, cwd=root)
    missing = subprocess.run(
        [str(python), "-c",
         "import importlib.util as u\n"
         "print(' '.join(p for m, p in [('z3', 'z3-solver'), ('typer', 'typer'),"
         " ('rich', 'rich'), ('deal', 'deal')] if u.find_spec(m) is None))"],
        check=True, capture_output=True, text=True).stdout.split()
    if missing:
        subprocess.run(pip + missing, check=True)
    for module in ("torchvision", "torchaudio", "torchcodec"):
        if subprocess.run([str(python), "-c", f"import {module}"],
                          capture_output=True).returncode != 0:
            subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", module],
                           check=True)
    subprocess.run([str(python), "-c", "import vllm.v1.core.sched.scheduler"], check=True)
    done.write_text(version)
    return python
