"""vLLM releases 0.29.0 .. 0.34.0 as data: one record per distinct release.

Each field is one part of the offloading scheduler's SWA store rule or of its
offload lookup that differs between releases, with the value the release's
code has (read from each release's wheel,
``vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``
unless a field says otherwise). Releases whose code agrees in every part are
one record named by all of them (:attr:`Release.names`). Pure data: this
module imports nothing from kvreach, so the parameters, the spec and impl
may all read it; ``kvreach.conform`` turns a record into the parameters of
``kvreach.impl``'s rule and lookup and checks a vLLM tree against it.

Parts every release in the range shares (and so no field): the cursor after
an offload-hit start (``update_state_after_alloc`` sets
``next_stored_chunk_idx`` to the hit's chunks under the default chunk-level
policy, named ``BLOCK_LEVEL`` in 0.29.0), ``advance_stored_idx``,
``_maximal_prefix_lookup``'s answer, ``SlidingWindowManager
._contiguous_blocks_for_hit`` and ``get_num_skipped_tokens``, and which chunks
a hit loads for a new request (``update_state_after_alloc``: 0.29.0 scans
for the first fresh block from block 0, later releases from the local hit;
the same block when every locally computed block is hashed).

Not a part of a record but of the configuration: vLLM 0.34.0's lookahead
block hashes (``num_hash_lookahead_tokens``, L), which its
``lookahead_hashes`` part honours: ``kvreach.params.RequestConfig
.hash_lookahead_tokens`` and ``GroupConfig.lookahead_hashes``, by default
what vLLM derives (``kvreach.scenario.derived_hash_lookahead_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

_SCHED = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py"
_CONFIG = "vllm/distributed/kv_transfer/kv_connector/v1/offloading/config.py"
_MANAGER = "vllm/v1/core/single_type_kv_cache_manager.py"

# The vLLM functions a record's parts are read from, by role: (file, qualified
# name). ``kvreach conform`` extracts these from a tree; a role a release
# lacks is absent from its mapping.
_LOOKUP_FUNCTIONS = (
    ("window", (_SCHED, "get_sliding_window_size_in_chunks")),
    ("sliding_window_lookup", (_SCHED, "OffloadingConnectorScheduler._sliding_window_lookup")),
    ("maximal_prefix_lookup", (_SCHED, "OffloadingConnectorScheduler._maximal_prefix_lookup")),
    ("lookup_complete_chunks", (_SCHED, "OffloadingConnectorScheduler._lookup_complete_chunks")),
    ("storable_chunks", (_SCHED, "RequestOffloadState.storable_chunks")),
)


@dataclass(frozen=True)
class Release:
    """One distinct vLLM release (or several equal ones).

    names: the vLLM versions whose code has every part below.

    Store side (``_build_store_jobs`` and what it calls):

    store_rule: ``"vllm-0.29"``, the pre-fix chunk rule
        ``is_store_reachable_swa_chunk`` (the step's storable count taken as
        the final horizon), or ``"vllm-0.33"``, PR #54362's
        ``_reachable_store_block_mask`` over
        ``SlidingWindowManager.reachable_block_mask`` (kvreach's rule names).
    mask_window_extra: the store mask's window is ``sliding_window +
        extra_retained_tokens`` (``_reachable_store_block_mask`` widens the
        spec); False: ``sliding_window`` alone. The pre-fix rule's window is
        ``get_sliding_window_size_in_chunks``, without extra in 0.29.0.
    eagle_tail_lifted_at_finish: ``RequestOffloadState.storable_chunks``
        stores an EAGLE group's trailing chunk once the request finished.
    storable_keyed_cap: ``storable_chunks`` is also capped by the keyed chunks
        (``len(offload_keys)``).
    finish_clamp: a normally finished request stores up to
        ``max(num_prompt_tokens, num_tokens - 1)``; False: ``num_tokens``.
    null_block_filter: which null (0) block ids drop a chunk in
        ``_build_store_jobs``: ``"last block"`` (the chunk's last block, the
        one its key is read from) or ``"every reachable block"`` (also any
        block the mask keeps, or any block when the mask is dense).
    cursor_on_lookup: ``get_num_new_matched_tokens`` leaves
        ``next_stored_chunk_idx`` (``"kept"``) or resets it to 0
        (``"reset to 0"``).
    retention_interval: the store rule honours
        ``prefix_cache_retention_interval`` (0.29.0's offloading ignores it).
    swa_only_alignment: ``SchedulerOffloadConfig.from_spec``'s alignment with
        no full-attention group: ``"none"`` (dense) or ``"largest chunk"``.
    unannotated_spec_decode_eagle: with EAGLE speculative decoding and no
        group annotated ``is_eagle_group``, ``from_spec`` treats ``"every
        group"`` or ``"no group"`` as an EAGLE group.

    Lookup side (``_lookup_complete_chunks`` and what it calls):

    lookup_window_extra: ``get_sliding_window_size_in_chunks`` is
        ``max(cdiv(W, C), cdiv(W - 1 + extra, C))`` and the padded initial
        window counts extra too; False: ``cdiv(W, C)`` and no extra anywhere.
    padded_initial_window: the first run of ``_sliding_window_lookup`` needs
        ``GroupOffloadConfig.load_window_size_in_chunks`` (widened for an
        unaligned candidate end); False: every run needs the window.
    pending: ``_sliding_window_lookup``'s HIT_PENDING: ``"any scanned"``
        defers the lookup for a pending key anywhere it scanned, ``"in the
        run"`` only for one in the run it returns (a MISS or RETRY clears it).
    eagle_widening: the unverified EAGLE group's query is one chunk wider for
        ``"SWA groups"`` only or for ``"every group"``.
    max_num_new_tokens: ``get_num_new_matched_tokens`` takes and applies the
        ``max_num_new_tokens`` cap.
    max_load_tokens: the lookup honours ``kv_transfer_params
        ["max_load_tokens"]`` (and rounds each group's bound down to its chunk).
    window_module: the file that defines ``get_sliding_window_size_in_chunks``.

    Parts 0.34.0 added (False in every earlier release):

    swa_reduction_before_caps: ``_lookup_complete_chunks`` subtracts the SWA
        ``1`` (the last prompt token recomputed) from ``num_tokens`` before
        the ``max_num_new_tokens`` / ``max_load_tokens`` caps, so a capped hit
        is not reduced; False: after the caps.
    finish_computed_clamp: a finished request's ``num_tokens_after_batch``
        in ``_build_store_jobs`` is also capped by ``num_computed_tokens``
        (``min(num_computed_tokens, max(P, num_tokens - 1))``): a request
        finished before its prefill completed (``FINISHED_ERROR``) stores no
        uncomputed token.
    lookahead_hashes: the offloading scheduler honours lookahead block
        hashes (``use_lookahead_block_hashes`` =
        ``vllm_config.num_hash_lookahead_tokens > 0``): EAGLE groups are
        stored and looked up without the legacy drop, shift and widening,
        and ``_calc_num_offloadable_tokens`` is capped by the hashed tokens
        (``len(block_hashes) * tokens_per_hash``); False: no such mode
        (0.33.0 forces lookahead hashes off under any KV connector).
    junction_on_lookup: ``_maybe_register_shared_prefix_junction``: under a
        retention interval an offload lookup that a sparse group cut below
        the full-attention boundary pins that boundary as the request's
        ``shared_prefix_boundary``.
    failed_transfers: a failed store job is dropped (``complete_store(...,
        success=False)``) and a failed load makes every later lookup of the
        request return 0 (``RequestOffloadState.load_failed``).
    """

    names: tuple[str, ...]
    store_rule: str
    mask_window_extra: bool
    eagle_tail_lifted_at_finish: bool
    storable_keyed_cap: bool
    finish_clamp: bool
    null_block_filter: str
    cursor_on_lookup: str
    retention_interval: bool
    swa_only_alignment: str
    unannotated_spec_decode_eagle: str
    lookup_window_extra: bool
    padded_initial_window: bool
    pending: str
    eagle_widening: str
    max_num_new_tokens: bool
    max_load_tokens: bool
    window_module: str = _SCHED
    swa_reduction_before_caps: bool = False
    finish_computed_clamp: bool = False
    lookahead_hashes: bool = False
    junction_on_lookup: bool = False
    failed_transfers: bool = False

    @property
    def name(self) -> str:
        """``"0.31.0/0.32.0"``: every version of the record."""
        return "/".join(self.names)

    def parts(self) -> dict[str, object]:
        """Every part by field name (``names`` and ``window_module`` excluded)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in ("names", "window_module")}

    def functions(self) -> dict[str, tuple[str, str]]:
        """The vLLM functions of this release by role: (file, qualified name)."""
        out = dict(_LOOKUP_FUNCTIONS)
        out["window"] = (self.window_module, "get_sliding_window_size_in_chunks")
        if self.padded_initial_window:
            out["load_window"] = (_SCHED, "GroupOffloadConfig.load_window_size_in_chunks")
        if self.store_rule == "vllm-0.29":
            out["store_rule"] = (_SCHED, "is_store_reachable_swa_chunk")
        else:
            out["store_mask"] = (_SCHED, "OffloadingConnectorScheduler._reachable_store_block_mask")
            out["block_mask"] = (_MANAGER, "SlidingWindowManager.reachable_block_mask")
            out["contiguous_blocks"] = (_MANAGER, "SlidingWindowManager._contiguous_blocks_for_hit")
        return out


V0_29_0 = Release(
    names=("0.29.0",),
    store_rule="vllm-0.29",
    mask_window_extra=False,
    eagle_tail_lifted_at_finish=False,
    storable_keyed_cap=False,
    finish_clamp=False,
    null_block_filter="last block",
    cursor_on_lookup="kept",
    retention_interval=False,
    swa_only_alignment="none",
    unannotated_spec_decode_eagle="every group",
    lookup_window_extra=False,
    padded_initial_window=False,
    pending="any scanned",
    eagle_widening="SWA groups",
    max_num_new_tokens=False,
    max_load_tokens=False,
)

V0_30_0 = Release(
    names=("0.30.0",),
    store_rule="vllm-0.33",
    mask_window_extra=False,
    eagle_tail_lifted_at_finish=True,
    storable_keyed_cap=True,
    finish_clamp=True,
    null_block_filter="last block",
    cursor_on_lookup="kept",
    retention_interval=True,
    swa_only_alignment="largest chunk",
    unannotated_spec_decode_eagle="no group",
    lookup_window_extra=False,
    padded_initial_window=True,
    pending="in the run",
    eagle_widening="every group",
    max_num_new_tokens=True,
    max_load_tokens=False,
)

V0_31_0 = Release(
    names=("0.31.0", "0.32.0"),
    store_rule="vllm-0.33",
    mask_window_extra=True,
    eagle_tail_lifted_at_finish=True,
    storable_keyed_cap=True,
    finish_clamp=True,
    null_block_filter="last block",
    cursor_on_lookup="kept",
    retention_interval=True,
    swa_only_alignment="largest chunk",
    unannotated_spec_decode_eagle="no group",
    lookup_window_extra=True,
    padded_initial_window=True,
    pending="in the run",
    eagle_widening="every group",
    max_num_new_tokens=True,
    max_load_tokens=True,
)

V0_33_0 = Release(
    names=("0.33.0",),
    store_rule="vllm-0.33",
    mask_window_extra=True,
    eagle_tail_lifted_at_finish=True,
    storable_keyed_cap=True,
    finish_clamp=True,
    null_block_filter="every reachable block",
    cursor_on_lookup="reset to 0",
    retention_interval=True,
    swa_only_alignment="largest chunk",
    unannotated_spec_decode_eagle="no group",
    lookup_window_extra=True,
    padded_initial_window=True,
    pending="in the run",
    eagle_widening="every group",
    max_num_new_tokens=True,
    max_load_tokens=True,
    window_module=_CONFIG,
)

# 0.34.0 is 0.33.0 in every earlier part; the parts it added are its own.
V0_34_0 = replace(
    V0_33_0,
    names=("0.34.0",),
    swa_reduction_before_caps=True,
    finish_computed_clamp=True,
    lookahead_hashes=True,
    junction_on_lookup=True,
    failed_transfers=True,
)

# 0.34.0, the current release, is the default.
RELEASES: tuple[Release, ...] = (V0_29_0, V0_30_0, V0_31_0, V0_33_0, V0_34_0)
DEFAULT = V0_34_0


def release(version: str) -> Release:
    """The record of ``version`` (``"0.32.0"`` -> the 0.31.0/0.32.0 record);
    ValueError naming the known versions for any other."""
    for r in RELEASES:
        if version in r.names:
            return r
    known = ", ".join(v for r in RELEASES for v in r.names)
    raise ValueError(f"vllm={version!r}: expected one of {known}")
