"""no-waste-family's counterexamples, member by member, replayed on the
installed vLLM's real lookup (0.33.0 or 0.34.0, each with the rows about it).

The proof run finds, at every member of the block-shape family, a chunk the
rule keeps at its request's final horizon that no later request loads, each
confirmed through the executable model (``Obligation.confirm_each``). Here
each member's counterexample (the same search the row runs:
``search.static_counterexample``) is replayed as test_no_waste_vllm.py
replays the per-geometry row's (``replay_no_waste``): the manager answers HIT
for exactly the SWA chunks the rule kept, every later request of 1 .. ``H * C
+ 2C + 1`` tokens is scheduled by the real ``Scheduler``, each lookup must
equal kvreach's twin's, and none may load the chunk.
Every member is replayed (up to about 6,000 later requests for a chunk of
1024 tokens; about 3.5 minutes for the four rows about 0.34.0).
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")

from kvreach.vllm_harness.replay import replay_no_waste, reproduced  # noqa: E402

from kvreach.proofs import search  # noqa: E402
from kvreach.proofs.obligations import OBLIGATIONS  # noqa: E402
from kvreach.proofs.rows import rows_for  # noqa: E402

import installed_release  # noqa: E402

pytestmark = pytest.mark.vllm

CASES = [(name, rule) for name in ("no-waste-family", "no-waste-read-window-family")
         for rule in OBLIGATIONS[name].rules
         if any(True for _ in rows_for(name, rule, "any", installed_release.INSTALLED))]


@functools.lru_cache(maxsize=None)
def counterexample(name: str, rule: str, member) -> dict | None:
    vllm = next(g for *_, g in rows_for(name, rule, "any", installed_release.INSTALLED))
    return search.static_counterexample(name, rule, "any", member, vllm)


def _params():
    for name, rule in CASES:
        for g in OBLIGATIONS[name].grid:
            yield pytest.param(name, rule, g, id=f"{name}-{rule}-{g.name.removeprefix('family: ')}")


@pytest.mark.parametrize("name, rule, member", list(_params()))
def test_no_later_request_on_vllm_loads_the_members_kept_chunk(offline_model_dir, name, rule,
                                                                member):
    cex = counterexample(name, rule, member)
    assert cex is not None and cex["replayed_violation"], member.name
    got = replay_no_waste(offline_model_dir, cex, rule, release=installed_release.twin_release())
    assert reproduced(name.removesuffix("-family"), got), got


def test_every_row_about_the_installed_release_is_replayed():
    """The cases are the family rows about the installed release: on 0.34.0
    both rules of both obligations, on 0.33.0 at least vLLM's rule."""
    assert ("no-waste-family", "vllm-0.33") in CASES
    if installed_release.INSTALLED == "0.34.0":
        assert len(CASES) == 4, CASES
