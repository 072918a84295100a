"""A vLLM release's source distribution (its source tree and its ``tests/``),
fetched once and cached, for running vLLM's own tests against kvreach.

    python -m kvreach.vllm_sdist            # the installed vLLM's release
    python -m kvreach.vllm_sdist 0.34.0     # prints the unpacked tree's path

``pip download --no-binary`` cannot fetch vLLM's sdist without building it,
so this asks pip's own package finder (the index pip is configured with) for
the ``vllm-X.tar.gz`` link, downloads it into the cache and unpacks it there:
``$VLLM_SRC_CACHE`` if set, else ``${XDG_CACHE_HOME:-~/.cache}/kvreach/vllm-sdist``
(never inside the repository). A tree already unpacked there is used as is.
scripts/run_vllm_own_tests.sh calls it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tarfile
from pathlib import Path

MARKER = "tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py"


def cache_dir() -> Path:
    env = os.environ.get("VLLM_SRC_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvreach" / "vllm-sdist"


def installed_version() -> str | None:
    from importlib import metadata

    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def download(version: str, dest: Path) -> Path:
    """The sdist archive of ``vllm==version`` in ``dest`` (downloaded if absent)."""
    found = sorted(dest.glob(f"vllm-{version}.tar.gz"))
    if found:
        return found[0]
    from pip._internal.index.collector import LinkCollector
    from pip._internal.index.package_finder import PackageFinder
    from pip._internal.models.search_scope import SearchScope
    from pip._internal.models.selection_prefs import SelectionPreferences
    from pip._internal.network.session import PipSession

    index = os.environ.get("PIP_INDEX_URL") or "https://pypi.org/simple"
    session = PipSession()
    scope = SearchScope.create(find_links=[], index_urls=[index], no_index=False)
    finder = PackageFinder.create(
        link_collector=LinkCollector(session=session, search_scope=scope),
        selection_prefs=SelectionPreferences(allow_yanked=False),
    )
    for cand in finder.find_all_candidates("vllm"):
        if str(cand.version) == version and cand.link.filename.endswith(".tar.gz"):
            archive = dest / cand.link.filename
            part = archive.with_suffix(".part")
            with session.get(cand.link.url, stream=True) as resp:
                resp.raise_for_status()
                with open(part, "wb") as out:
                    for chunk in resp.iter_content(1 << 20):
                        out.write(chunk)
            part.rename(archive)
            return archive
    raise FileNotFoundError(f"vllm {version}: the index {index} serves no sdist")


def tree(version: str) -> Path:
    """vLLM ``version``'s unpacked source tree (with ``tests/``), cached."""
    dest = cache_dir()
    root = dest / f"vllm-{version}"
    if (root / MARKER).is_file():
        return root
    dest.mkdir(parents=True, exist_ok=True)
    archive = download(version, dest)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    if not (root / MARKER).is_file():
        raise FileNotFoundError(f"{archive}: no {MARKER} in the unpacked sdist")
    return root


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvreach.vllm_sdist",
                                description="Fetch and unpack a vLLM sdist (cached).")
    p.add_argument("version", nargs="?", default=None,
                   help="the vLLM release (default: the installed one)")
    a = p.parse_args(argv)
    version = a.version or installed_version()
    if version is None:
        p.error("version: no vLLM is installed; expected a release such as 0.34.0")
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        p.error(f"version={version!r}: expected a release such as 0.34.0")
    try:
        print(tree(version))
    except (OSError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
