"""vLLM's offload groups (``SchedulerOffloadConfig.kv_group_configs``) as
kvreach parameters: which groups kvreach decides (an SWA group it models, as
a ``GroupConfig``) and the runtime monitor of each (``kvreach.impl.monitor``).
Every other group keeps vLLM's own selection."""

from __future__ import annotations

from vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler import (
    GroupOffloadConfig,
    SchedulerOffloadConfig,
)
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

from kvreach.impl import monitor
from kvreach.impl.vllm.metrics import logger
from kvreach.params import GroupConfig


def group_config(
    config: SchedulerOffloadConfig, gc: GroupOffloadConfig, lookahead_hashes: bool = False
) -> GroupConfig | None:
    """kvreach parameters of an SWA group; None keeps vLLM's path.

    ``lookahead_hashes``: the scheduler's ``use_lookahead_block_hashes``
    (vLLM 0.34.0). Under it vLLM stores an EAGLE group as a plain SWA group
    (no trailing drop, ``use_eagle=False`` in the mask) that still gets no
    final tail (``store_horizon_chunks`` is None for every EAGLE group), a
    group kvreach's rules do not have (``GroupConfig(eagle=True)`` is the
    legacy EAGLE mask, ``eagle=False`` gets a final tail): such a group keeps
    vLLM's selection, so the connector stores what vLLM stores and never the
    legacy EAGLE mask against 0.34.0's lookahead lookup."""
    spec = gc.kv_cache_spec
    if (
        not isinstance(spec, SlidingWindowSpec)
        or not issubclass(gc.manager_cls, SlidingWindowManager)
        or gc.requires_cow_source
    ):
        return None
    if lookahead_hashes and gc.is_eagle_group:
        logger.info(
            "kvreach: EAGLE group %d under lookahead block hashes keeps vLLM's "
            "store selection (a plain sliding-window mask without a final tail)",
            gc.group_idx,
        )
        return None
    dcp = config.dcp_world_size
    if gc.tokens_per_block != spec.block_size * dcp:
        # reachable_block_mask scales the block by DCP but the offload
        # group does not (dcp_sharded=False): no single GroupConfig.
        logger.info(
            "kvreach: group %d (offload block %d != %d * DCP %d) keeps "
            "vLLM's store selection", gc.group_idx, gc.tokens_per_block,
            spec.block_size, dcp,
        )
        return None
    alignment = config.alignment_tokens
    # With no alignment the mask is dense whatever the retention interval
    # (reachable_block_mask returns None first), as it is in kvreach with
    # retention_interval=None.
    retention = config.retention_interval if alignment is not None else None
    return GroupConfig(
        block_size=spec.block_size,
        # vLLM 0.33 widens only the store mask by the MTP re-prefill tokens
        # (_reachable_store_block_mask).
        window=spec.sliding_window, extra_retained_tokens=spec.extra_retained_tokens,
        alignment_tokens=alignment,
        blocks_per_chunk=config.blocks_per_chunk,
        dcp_world_size=dcp,
        eagle=gc.is_eagle_group,
        retention_interval=retention,
    )


def group_monitors(
    config: SchedulerOffloadConfig, groups: tuple[GroupConfig | None, ...]
) -> tuple[monitor.GroupMonitor | None, ...]:
    """A GroupMonitor per kvreach-modeled SWA group (``groups``: the
    :func:`group_config` of each offload group; None elsewhere)."""
    gcs = config.kv_group_configs
    n_swa = sum(gc.sliding_window_size_in_chunks is not None for gc in gcs)
    others_full = all(
        isinstance(gc.kv_cache_spec, FullAttentionSpec)
        for gc in gcs if gc.sliding_window_size_in_chunks is None
    )
    A = config.alignment_tokens
    has_full = any(
        isinstance(gc.kv_cache_spec, FullAttentionSpec) and gc.tokens_per_chunk == A
        for gc in gcs
    )
    out = []
    for g in groups:
        if g is None:
            out.append(None)
            continue
        # The world of monitor.loadable_chunk: one SWA group (not
        # EAGLE, sparse, no retention interval) beside full attention.
        world = (n_swa == 1 and others_full and has_full and A is not None
                 and not g.dense and not g.eagle and g.retention_interval is None)
        lo = monitor.Loadability(monitor.lookup_group(g), A) if world else None
        out.append(monitor.GroupMonitor(g, lo))
    return tuple(out)
