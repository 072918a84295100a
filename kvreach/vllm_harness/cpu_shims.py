"""The two CPU shims the harness needs to build a ``VllmConfig`` on a machine
without a GPU and without hub access. Only harness callers apply them, around a
run: tests/vllm/conftest.py (a session fixture) and
:func:`kvreach.vllm_harness.replay.replay_on_vllm` (``kvreach counterexample
--replay-vllm``). Importing this module patches nothing, and the connector
(``kvreach.impl.vllm``) never imports it: in a served vLLM neither shim is
in effect.

- **Hybrid KV cache manager on CPU** (:func:`hybrid_kv_cache_shim`):
  ``VllmConfig`` refuses the hybrid KV cache manager (full attention + SWA
  groups) when ``current_platform.support_hybrid_kv_cache()`` is False, as it
  is without a GPU. The context manager makes that classmethod return True
  and restores it on exit.
- **Offline model config** (:func:`write_offline_model`): ``ModelConfig``
  resolves the model's config; with no hub access the caller writes a small
  Llama ``config.json`` (no weights: only the scheduler runs) into a
  directory, sets ``HF_HUB_OFFLINE=1``, and points ``ModelConfig(model=...)``
  at it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from unittest.mock import patch

from vllm.platforms import current_platform


@contextlib.contextmanager
def hybrid_kv_cache_shim():
    """Make ``current_platform.support_hybrid_kv_cache()`` return True (CPU
    runs only: the hybrid KV cache manager is refused on a platform without GPU)."""
    cls = type(current_platform)
    with patch.object(cls, "support_hybrid_kv_cache", classmethod(lambda c: True)):
        yield


def write_offline_model(directory: Path | str) -> str:
    """A small Llama ``config.json`` (no weights) for ``ModelConfig``: 2 query
    heads, 1 KV head (MQA), so DCP 2 with TP 2 passes vLLM's config checks.
    -> the directory, for ``ModelConfig(model=...)``."""
    from transformers import LlamaConfig

    path = Path(directory)
    LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=1 << 20, vocab_size=32000,
    ).save_pretrained(path)
    json.loads((path / "config.json").read_text())
    return str(path)
