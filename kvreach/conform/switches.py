"""The configuration switches that change a record's behaviour, read from a
vLLM tree's source (``ast``, nothing imported), so that conform checks each
mode the tree can be in rather than the one a harness happens to build:

- **lookahead block hashes** (0.34.0): the offloading scheduler reads
  ``use_lookahead_block_hashes`` (``vllm_config.num_hash_lookahead_tokens >
  0``), and vLLM turns it on for an EAGLE-like drafter whose trailing block
  is dropped, unless ``disable_lookahead_block_hashes``, and only when the KV
  connector says ``supports_lookahead_block_hashes`` (``VllmConfig.
  _resolve_num_hash_lookahead_tokens``); 0.33.0's
  ``num_hash_lookahead_tokens`` is 0 under any KV connector.
- **retention**: ``CacheConfig.prefix_cache_retention_interval``'s default
  (0: only the replay boundary and shared-prefix junctions are retained;
  None: dense; k: every k tokens too), which the offloading scheduler takes
  as its ``retention_interval``.
- **extra_retained_tokens**: ``SlidingWindowSpec.extra_retained_tokens``'s
  default.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from kvreach.conform.extract import CACHE_CONFIG_FILE, CONNECTOR_FILE, KV_INTERFACE_FILE, SCHEDULER_FILE, VLLM_CONFIG_FILE, Tree, find_def


@dataclass(frozen=True)
class Switches:
    scheduler_reads_lookahead: bool
    connector_supports_lookahead: bool | None  # None: the tree has no such hook
    config_consults_connector: bool
    retention_default: object  # int | None | "unknown"
    extra_retained_default: object

    @property
    def lookahead_reachable(self) -> bool:
        """An offloading connector can run with lookahead hashes on."""
        return (self.scheduler_reads_lookahead and bool(self.connector_supports_lookahead)
                and self.config_consults_connector)

    def lines(self) -> list[str]:
        la = ("on with an EAGLE-like drafter (unless disable_lookahead_block_hashes): the "
              "offloading scheduler reads it and OffloadingConnector.supports_lookahead_block_hashes "
              "is True" if self.lookahead_reachable else
              "never on under the offloading connector ("
              + ", ".join(w for w, c in (
                  ("the scheduler does not read it", not self.scheduler_reads_lookahead),
                  ("the connector does not support it", not self.connector_supports_lookahead),
                  ("num_hash_lookahead_tokens is 0 under any KV connector",
                   not self.config_consults_connector)) if c) + ")")
        return [f"  lookahead block hashes: {la}",
                f"  prefix_cache_retention_interval default: {self.retention_default!r}",
                f"  extra_retained_tokens default: {self.extra_retained_default!r}"]


def _class_field_default(tree: Tree, f: str, cls: str, name: str) -> object:
    if f not in tree.files:
        return "unknown"
    for node in ast.walk(tree.parsed(f)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for st in node.body:
                if (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
                        and st.target.id == name and st.value is not None):
                    v = st.value
                    if isinstance(v, ast.Call):  # Field(default=...)
                        for kw in v.keywords:
                            if kw.arg == "default":
                                v = kw.value
                                break
                    try:
                        return ast.literal_eval(v)
                    except ValueError:
                        return "unknown"
    return "unknown"


def _returns_true(tree: Tree, f: str, qualname: str) -> bool | None:
    if f not in tree.files:
        return None
    node = find_def(tree.parsed(f), qualname.split("."))
    if node is None:
        return None
    rets = [n for n in ast.walk(node) if isinstance(n, ast.Return)]
    return bool(rets) and all(isinstance(r.value, ast.Constant) and r.value.value is True for r in rets)


def read(tree: Tree) -> Switches:
    sched = tree.files.get(SCHEDULER_FILE, "")
    cfg = tree.files.get(VLLM_CONFIG_FILE, "")
    return Switches(
        scheduler_reads_lookahead="num_hash_lookahead_tokens" in sched,
        connector_supports_lookahead=_returns_true(
            tree, CONNECTOR_FILE, "OffloadingConnector.supports_lookahead_block_hashes"),
        config_consults_connector="supports_lookahead_block_hashes" in cfg,
        retention_default=_class_field_default(tree, CACHE_CONFIG_FILE, "CacheConfig",
                                               "prefix_cache_retention_interval"),
        extra_retained_default=_class_field_default(tree, KV_INTERFACE_FILE, "SlidingWindowSpec",
                                                    "extra_retained_tokens"),
    )
