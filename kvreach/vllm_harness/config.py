"""What a harness run is configured with: its KV cache groups (``Group``,
``full``, ``swa``), the connector (``kvreach`` or ``stock``) and its
``KVTransferConfig``, and ``Setup`` (budget, chunking, scheduling, retention,
DCP) with the kvreach ``GroupConfig`` it implies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from vllm.config import KVTransferConfig
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

from kvreach.params import GroupConfig, alignment_tokens


@dataclass(frozen=True)
class Group:
    """One KV cache group: ``full`` attention or ``swa`` (sliding window)."""

    kind: Literal["full", "swa"]
    block_size: int
    window: int | None = None
    eagle: bool = False
    extra_retained_tokens: int = 0

    def spec(self):
        common = dict(block_size=self.block_size, num_kv_heads=1, head_size=1,
                      dtype=torch.float32)
        if self.kind == "full":
            return FullAttentionSpec(**common)
        return SlidingWindowSpec(sliding_window=self.window,
                                 extra_retained_tokens=self.extra_retained_tokens,
                                 **common)


def full(block_size: int) -> Group:
    return Group("full", block_size)


def swa(block_size: int, window: int, eagle: bool = False, extra: int = 0) -> Group:
    return Group("swa", block_size, window, eagle, extra)


KVREACH = "kvreach"
STOCK = "stock"


def connector_config(which: str, extra: dict[str, Any]) -> KVTransferConfig:
    if which == KVREACH:
        return KVTransferConfig(
            kv_connector="KvReachOffloadingConnector",
            kv_connector_module_path="kvreach.impl.vllm_connector",
            kv_role="kv_both",
            kv_connector_extra_config=extra,
        )
    return KVTransferConfig(
        kv_connector="OffloadingConnector", kv_role="kv_both",
        kv_connector_extra_config=extra,
    )


@dataclass(frozen=True)
class Setup:
    groups: tuple[Group, ...]
    budget: int = 1000  # max_num_batched_tokens
    blocks_per_chunk: int = 1
    async_scheduling: bool = False
    retention_interval: int | None = None
    offload_prompt_only: bool = True
    dcp_world_size: int = 1
    num_gpu_blocks: int = 4000
    max_num_seqs: int = 16
    max_model_len: int = 65536
    extra: tuple[tuple[str, Any], ...] = ()  # more kv_connector_extra_config
    # vLLM 0.34.0's num_hash_lookahead_tokens (L): vLLM derives it from an
    # EAGLE/MTP drafter, which the harness has not, so a run sets it on the
    # VllmConfig and the block hasher itself, as EngineCore does. 0: off.
    hash_lookahead_tokens: int = 0

    def alignment_tokens(self) -> int | None:
        """``SchedulerOffloadConfig.from_spec``'s alignment by kvreach's rule
        (``kvreach.params.alignment_tokens``, also the CLI's); ``check_all``
        compares the group built from it with the connector's, which takes
        vLLM's own value."""
        return alignment_tokens([g.block_size for g in self.groups if g.kind == "full"],
                                [g.block_size for g in self.groups],
                                self.dcp_world_size, self.blocks_per_chunk)

    def kvreach_group(self, group_idx: int) -> GroupConfig:
        """The kvreach GroupConfig this setup implies for an SWA group."""
        g = self.groups[group_idx]
        assert g.kind == "swa"
        a = self.alignment_tokens()
        return GroupConfig(
            block_size=g.block_size, window=g.window, extra_retained_tokens=g.extra_retained_tokens,
            alignment_tokens=a, blocks_per_chunk=self.blocks_per_chunk,
            dcp_world_size=self.dcp_world_size, eagle=g.eagle,
            retention_interval=self.retention_interval if a is not None else None,
        )

    def swa_groups(self) -> list[int]:
        return [i for i, g in enumerate(self.groups) if g.kind == "swa"]
