"""The vLLM release the vLLM-driven tests run on (the installed one) and how a
test says which release it is about.

- A test whose expected numbers are vLLM 0.33.0's behaviour (not the
  installed release's) carries :data:`only_033` (skipped elsewhere, with the
  reason; it runs in a 0.33.0 venv: ``tests/vllm_releases.venv("0.33.0")``,
  or any venv made with ``python -m kvreach.vllm_install 0.33.0``).
- A test comparing vLLM with kvreach's twin of the installed release takes
  :func:`twin` / :func:`record`: on a release kvreach has no record of yet
  (``kvreach.releases.RELEASES`` lacks it) it is skipped with that reason, and
  turns on by itself once the record is there.
"""

from __future__ import annotations

import pytest
import vllm

from kvreach import releases as R

INSTALLED: str = vllm.__version__
KNOWN: tuple[str, ...] = tuple(v for r in R.RELEASES for v in r.names)

only_033 = pytest.mark.skipif(
    INSTALLED != "0.33.0",
    reason=f"about vLLM 0.33.0's behaviour (the installed vLLM is {INSTALLED}); "
           "run it with vLLM 0.33.0 (tests/vllm_releases.venv('0.33.0'))",
)

needs_record = pytest.mark.skipif(
    INSTALLED not in KNOWN,
    reason=f"depends on kvreach's vLLM {INSTALLED} release record "
           f"(kvreach.releases.RELEASES lacks {INSTALLED})",
)


def record() -> R.Release:
    """kvreach's record of the installed release (skip if there is none)."""
    if INSTALLED not in KNOWN:
        pytest.skip(f"depends on kvreach's vLLM {INSTALLED} release record "
                    f"(kvreach.releases.RELEASES lacks {INSTALLED})")
    return R.release(INSTALLED)


def recorder_and_twin():
    """``kvreach.vllm_harness.lookups.recorder_and_twin`` for the installed
    release: 0.33.0's own twin on 0.33.0, the release record's elsewhere
    (skip while kvreach has no record of it)."""
    from kvreach.vllm_harness.lookups import recorder_and_twin as rt

    return rt(None if INSTALLED == "0.33.0" else record())
