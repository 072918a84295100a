"""The release matrix: which vLLM releases each proof row stands for.

A row of ``kvreach prove`` is (obligation, rule, load model, vllm). Its
``vllm`` is a group of releases (``kvreach.releases``) the row's queries are
the same for: the releases whose store rule is the row's rule (``vllm-0.29``:
0.29.0; ``vllm-0.33``: 0.30.0 and later) that agree in every part the
obligation's queries read (:attr:`Obligation.reads`), named by all of them
(``"0.30.0/0.31.0/0.32.0/0.33.0"``). So an obligation that reads no release
part has one row per rule, and one that reads the lookup's parts has a row
per distinct lookup. The queries are built for the group's newest release
(:func:`representative`); ``tests/test_release_matrix.py`` checks that every
release of a group gives the same query text, so a group never hides a
release whose queries differ.

kvreach's own rule (``lookup-window``) and lookup variant (``read-window``)
are proposals for the current vLLM: their rows are scored against 0.33.0's
parts only, the group of the releases equal to it in what the obligation
reads (every release when it reads none).
"""

from __future__ import annotations

from kvreach.params import ParamError
from kvreach.releases import DEFAULT, RELEASES, Release, release
from kvreach.spec.lookup import VLLM_WINDOW

# The parts of a release the single-request world's lookup obligations read
# (``spec.lookup``: the lookup and the store mask's window it is linked to).
LOOKUP_PARTS = frozenset({
    "mask_window_extra", "lookup_window_extra", "padded_initial_window", "eagle_widening",
    "max_load_tokens", "swa_reduction_before_caps",
})
# World "restarts" (``spec.lifecycle``: the cursor on a lookup, the null-block
# filter, the error finish's cap by the computed tokens, and 0.34.0's failed
# transfers: the steps store-failed, load-failed and load-recompute, the load_failed ghost
# that disables a loaded start). 0.34.0's ``junction_on_lookup`` changes no
# world-"restarts" query: ``shared_prefix_boundary`` is already any value at
# every step.
WORLD_RESTARTS_PARTS = frozenset({"cursor_on_lookup", "null_block_filter", "finish_computed_clamp",
                              "failed_transfers"})

# rule -> the releases whose store rule it is (kvreach's own rule: none)
RELEASE_RULES = ("vllm-0.29", "vllm-0.33")


def check_vllm(version: str) -> str:
    """A vLLM version of ``kvreach.releases`` (0.29.0 .. 0.34.0), else
    ParamError naming the known ones."""
    known = [v for r in RELEASES for v in r.names]
    if version not in known:
        raise ParamError("vllm", version, "one of " + ", ".join(known))
    return version


def group_name(group: tuple[Release, ...]) -> str:
    """``"0.30.0/0.31.0/0.32.0/0.33.0"``: every version of every record."""
    return "/".join(v for r in group for v in r.names)


def groups(reads: frozenset, rule: str, lookup_variant: str = VLLM_WINDOW) -> list[tuple[Release, ...]]:
    """The release groups of an obligation's rows under ``rule``, oldest
    first (see the module's docstring). ``rule="any"``: every release."""
    if rule in RELEASE_RULES:
        candidates = [r for r in RELEASES if r.store_rule == rule]
    else:
        candidates = list(RELEASES)
    parts = sorted(reads)
    by_parts: dict[tuple, list[Release]] = {}
    for r in candidates:
        by_parts.setdefault(tuple(getattr(r, p) for p in parts), []).append(r)
    out = [tuple(g) for g in by_parts.values()]
    if rule not in RELEASE_RULES and rule != "any" or lookup_variant != VLLM_WINDOW:
        out = [g for g in out if DEFAULT in g]  # kvreach's own: scored against 0.33.0
    return out


def representative(group_or_name) -> Release:
    """The release a group's queries are built for: its newest."""
    if isinstance(group_or_name, str):
        return release(group_or_name.split("/")[-1])
    return group_or_name[-1]


def versions(name: str) -> tuple[str, ...]:
    """The versions a group name stands for."""
    return tuple(name.split("/"))


def covers(name: str, version: str) -> bool:
    """The row of group ``name`` is about vLLM ``version``."""
    return version in versions(name)
