"""vLLM release wheels, source distributions and their Python sources for
the tests, fetched once with this project's own code (no tool outside the
checkout).

``wheel("0.30.0")`` downloads ``vllm==0.30.0`` (``pip download --no-deps``,
about 320 MB) into ``$KVREACH_CACHE/wheels`` (default
``~/.cache/kvreach/wheels``) unless it is there already; ``source(v)``
unpacks the wheel's ``.py`` files into ``$KVREACH_CACHE/vllm-<v>`` once.
``sdist_archive(v)`` is the release's source distribution (``vllm-<v>.tar.gz``,
about 45 MB, with vLLM's own tests), from ``$VLLM_SRC_CACHE`` or
``$KVREACH_CACHE/vllm-sdist``, else downloaded into the latter;
``sdist(v)`` is it unpacked there once (a tree with ``vllm/`` and ``tests/``;
read it, do not change it). Nothing is installed or imported.

From a shell: ``python tests/vllm_releases.py sdist 0.33.0`` prints the
unpacked tree (``sdist-archive``, ``wheel``, ``source`` likewise).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
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


def sdist_dirs() -> list[Path]:
    """Where a release's sdist archive is looked for, in order: ``$VLLM_SRC_CACHE``
    (if set), then ``$KVREACH_CACHE/vllm-sdist`` (where it is downloaded)."""
    dirs = [Path(os.environ["VLLM_SRC_CACHE"])] if os.environ.get("VLLM_SRC_CACHE") else []
    return dirs + [cache_dir() / "vllm-sdist"]


# ``pip download --no-binary :all: vllm==X`` builds the sdist (a CUDA build)
# before it stops; pip's own package finder gives the archive's link instead.
# Run in a child interpreter: pip's internals keep global state.
_FIND_SDIST = """
import sys
from pip._internal.index.collector import LinkCollector
from pip._internal.index.package_finder import PackageFinder
from pip._internal.models.search_scope import SearchScope
from pip._internal.models.selection_prefs import SelectionPreferences
from pip._internal.network.session import PipSession

version, want = sys.argv[1], sys.argv[2]
session = PipSession()
scope = SearchScope.create(find_links=[], index_urls=["https://pypi.org/simple"], no_index=False)
finder = PackageFinder.create(
    link_collector=LinkCollector(session=session, search_scope=scope),
    selection_prefs=SelectionPreferences(allow_yanked=False))
for cand in finder.find_all_candidates("vllm"):
    if str(cand.version) == version and cand.link.filename == want:
        with session.get(cand.link.url, stream=True) as resp:
            resp.raise_for_status()
            with open(sys.argv[3], "wb") as out:
                for chunk in resp.iter_content(1 << 20):
                    out.write(chunk)
        sys.exit(0)
sys.exit(f"no sdist {want} of vllm {version} on PyPI")
"""


def sdist_archive(version: str, fetch: bool = True) -> Path:
    """vLLM ``version``'s source distribution ``vllm-<version>.tar.gz``: from
    :func:`sdist_dirs`, else (``fetch``) downloaded once from PyPI with pip's
    package finder into the last of them. ``RuntimeError`` saying why when
    it is neither cached nor fetchable."""
    name = f"vllm-{version}.tar.gz"
    for d in sdist_dirs():
        if (d / name).is_file():
            return d / name
    dest = sdist_dirs()[-1]
    if not fetch:
        raise RuntimeError(f"{name} in none of {', '.join(map(str, sdist_dirs()))}")
    dest.mkdir(parents=True, exist_ok=True)
    part = dest / f"{name}.part{os.getpid()}"
    r = subprocess.run([sys.executable, "-c", _FIND_SDIST, version, name, str(part)],
                       capture_output=True, text=True)
    if r.returncode != 0 or not part.is_file():
        part.unlink(missing_ok=True)
        raise RuntimeError(f"fetching {name} from PyPI failed: "
                           + (r.stderr.strip().splitlines() or ["no archive written"])[-1])
    part.replace(dest / name)  # whole or not at all, also with two fetches at once
    return dest / name


def sdist(version: str) -> Path:
    """vLLM ``version``'s sdist unpacked once beside its archive: the tree
    ``vllm-<version>`` with ``vllm/`` and vLLM's own ``tests/``."""
    archive = sdist_archive(version)
    tree = archive.parent / f"vllm-{version}"
    done = tree / ".kvreach-unpacked"
    if not done.exists():
        with tarfile.open(archive) as tar:
            tar.extractall(archive.parent, filter="data")
        if not (tree / "tests").is_dir():
            raise RuntimeError(f"{archive}: no vllm-{version}/tests in the archive")
        done.write_text(version)
    return tree


def venv(version: str) -> Path:
    """A virtualenv holding ``vllm==<version>`` and this kvreach, made once.

    ``$KVREACH_CACHE/venvs/vllm-<version>`` (about 9 GB: vLLM brings a CUDA
    build of torch, nothing of which needs a GPU to import).  The first call
    runs ``pip install vllm==<version>`` there (a few minutes), then installs
    kvreach from this checkout with ``--no-deps`` plus the one dependency the
    harness imports, ``z3-solver`` (vLLM's tilelang pins it, so it comes with
    vLLM) and ``typer``/``rich``/``deal`` only if vLLM did not bring them.
    torchvision, torchaudio and torchcodec are removed when they do not
    import: where pip takes torch from a local wheel folder (this machine's
    ``find-links`` holds ``torch-2.13.0+cpu``, the very version 0.29.0 and
    0.30.0 pin) and those three from PyPI (built for the CUDA torch),
    importing vLLM fails (``operator torchvision::nms does not exist``;
    ``Could not load this library``: ``_torchaudio.abi3.so``,
    ``libtorchcodec_image.so``, an OSError 0.30.0's ``multimodal/media/audio.py``
    does not catch). The scheduler side needs none of them, and vLLM and
    ``transformers`` import them only if installed.
    Returns the venv's ``bin/python``.
    """
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
    subprocess.run(pip + [f"vllm=={version}"], check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(repo)], check=True)
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


if __name__ == "__main__":
    _what = {"sdist": sdist, "sdist-archive": sdist_archive, "wheel": wheel, "source": source}
    if len(sys.argv) != 3 or sys.argv[1] not in _what:
        sys.exit("usage: python tests/vllm_releases.py {" + ",".join(_what) + "} VERSION")
    try:
        print(_what[sys.argv[1]](sys.argv[2]))
    except (RuntimeError, subprocess.CalledProcessError) as e:
        sys.exit(f"error: {e}")
