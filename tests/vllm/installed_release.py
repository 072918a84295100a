"""The vLLM release the vLLM-driven tests run on (the installed one) and how a
test says which release it is about.

- A test is about the installed release: its expected numbers come from
  kvreach's row or twin of that release (:func:`twin_release`), so it runs
  on 0.33.0 and on 0.34.0 alike (CI runs tests/vllm on both).
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


def twin_release():
    """The ``release`` argument of the harness's replays and twins for the
    installed vLLM: None (0.33.0's own twin) on 0.33.0, else kvreach's record
    of the installed release (skip while there is none)."""
    return None if INSTALLED == "0.33.0" else record()


def recorder_and_twin():
    """``kvreach.vllm_harness.lookups.recorder_and_twin`` for the installed
    release (:func:`twin_release`)."""
    from kvreach.vllm_harness.lookups import recorder_and_twin as rt

    return rt(twin_release())


def twin_hit(groups, later, content) -> int | None:
    """kvreach's lookup of the installed release: hit tokens of ``later``
    against ``content`` over the lookup ``groups``."""
    from kvreach.impl.lookup import lookup, lookup_hit_tokens

    r = twin_release()
    if r is None:
        return lookup_hit_tokens(groups, later, content)
    from kvreach.impl import release as release_params

    return lookup([release_params.with_lookup_of(r, g) for g in groups], later, content,
                  parts=release_params.lookup_parts(r)).hit_tokens
