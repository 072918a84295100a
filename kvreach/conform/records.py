"""The records ``kvreach conform`` compares a tree with: every release
record (``kvreach.releases.RELEASES``) and the *rule twins*, a release's
record with one of kvreach's own store rules in place of the release's.

A rule twin is what a vLLM tree is when it carries kvreach's upstream patch:
``lookup-window`` on 0.34.0 is 0.34.0's record (its lookup, its finish
clamps, its lookahead hashes, its junction on lookup, its failed transfers)
with ``store_rule="lookup-window"`` (``kvreach.impl.rules``: the sliding-window
chunks before each boundary a later lookup can end at),
docs/upstream/lookup-window-0.34.0.patch. Conform names it, never "differs",
on a tree patched with it.
"""

from __future__ import annotations

from dataclasses import replace

from kvreach.releases import RELEASES, V0_34_0

# kvreach's lookup-window store rule on vLLM 0.34.0 (the current release's
# patch, docs/upstream/lookup-window-0.34.0.patch)
LOOKUP_WINDOW_0_34_0 = replace(V0_34_0, names=("lookup-window",), store_rule="lookup-window")

RULE_TWINS = (LOOKUP_WINDOW_0_34_0,)
RECORDS = (*RELEASES, *RULE_TWINS)
