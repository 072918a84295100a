"""Install a vLLM release into the running environment, as this project runs it.

    python -m kvreach.vllm_install            # the current release, 0.34.0
    python -m kvreach.vllm_install 0.33.0

Most releases install with ``pip install vllm==X``. vLLM 0.34.0 does not from
the package index this project uses: it pins ``flashinfer-python==0.7.3``,
which the index does not serve (it has 0.7.2.post1 and 0.7.4). For a release
listed in :data:`OVERRIDES`, this reads the wheel's own ``Requires-Dist``
lines, replaces each overridden requirement, installs them, then installs
the wheel with ``--no-deps``. Nothing on vLLM's scheduler side (the part
kvreach runs) imports flashinfer. The README's test command and ``.ci/run``
call this; ``tests/vllm_releases.py`` uses it for its per-release venvs.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

CURRENT = "0.34.0"

# release -> {distribution name: the requirement installed instead}
OVERRIDES: dict[str, dict[str, str]] = {
    "0.34.0": {"flashinfer-python": "flashinfer-python==0.7.4"},
}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(metadata: str, overrides: dict[str, str]) -> list[str]:
    """The wheel's ``Requires-Dist`` lines, each overridden one replaced.

    Only the header is read (up to the first blank line; the long
    description after it is not metadata). A requirement whose marker names
    an extra is dropped (pip installs no extra here). ValueError when an override names no requirement of the
    wheel (the override is stale: the release no longer pins it)."""
    out: list[str] = []
    seen: set[str] = set()
    wanted = {_canonical(k): v for k, v in overrides.items()}
    for line in metadata.splitlines():
        if not line.strip():
            break  # end of the header
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        if re.search(r"\bextra\s*==", req):
            continue
        name = _canonical(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
        if name in wanted:
            seen.add(name)
            req = wanted[name]
        out.append(req)
    stale = sorted(set(wanted) - seen)
    if stale:
        raise ValueError(f"override {', '.join(stale)}: the wheel does not require it")
    return out


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def install(version: str = CURRENT, wheel_dir: Path | None = None, quiet: bool = True) -> None:
    """Install ``vllm==version`` (and its requirements) into this interpreter."""
    q = ["-q"] if quiet else []
    overrides = OVERRIDES.get(version)
    if not overrides:
        _pip("install", *q, f"vllm=={version}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        d = wheel_dir or Path(tmp)
        found = sorted(d.glob(f"vllm-{version}-*.whl"))
        if not found:
            _pip("download", *q, "--no-deps", f"vllm=={version}", "-d", str(d))
            found = sorted(d.glob(f"vllm-{version}-*.whl"))
        if not found:
            raise RuntimeError(f"pip download vllm=={version} left no wheel in {d}")
        wheel = found[0]
        with zipfile.ZipFile(wheel) as z:
            meta = z.read(f"vllm-{version}.dist-info/METADATA").decode()
        reqs = Path(tmp) / "requirements.txt"
        reqs.write_text("\n".join(requirements(meta, overrides)) + "\n")
        _pip("install", *q, "-r", str(reqs))
        _pip("install", *q, "--no-deps", str(wheel))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kvreach.vllm_install",
                                description="Install a vLLM release as kvreach runs it.")
    p.add_argument("version", nargs="?", default=CURRENT,
                   help=f"the vLLM release (default {CURRENT}, the current release)")
    p.add_argument("--wheel-dir", type=Path, default=None,
                   help="a folder holding the release's wheel (downloaded there if absent)")
    a = p.parse_args(argv)
    if not re.fullmatch(r"\d+\.\d+\.\d+", a.version):
        p.error(f"version={a.version!r}: expected a release such as {CURRENT}")
    install(a.version, a.wheel_dir, quiet=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
