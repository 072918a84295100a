"""The parts of vLLM's API the harness calls that differ between the releases
it runs on (0.29.0 .. 0.34.0), each feature-detected once at import, one name
per differing part (the harness runs on every release a replay needs, so it
detects the feature rather than naming the release).

- ``ModelRunnerOutput``: 0.34.0 has no ``req_id_to_index`` field
  (:func:`model_runner_output`).
- ``NewRequestData``: 0.34.0 requires ``prefill_token_ids``
  (:func:`new_request_data`).
- lookahead block hashes: 0.34.0's ``VllmConfig.num_hash_lookahead_tokens``
  and ``get_request_block_hasher(..., num_hash_lookahead_tokens)``
  (:func:`set_hash_lookahead`, :func:`block_hasher`); before 0.34.0 there is
  no such mode and a run asking for one is refused (ValueError, one line).
"""

from __future__ import annotations

import dataclasses
import inspect

from vllm.v1.core.kv_cache_utils import get_request_block_hasher
from vllm.v1.core.sched.output import NewRequestData
from vllm.v1.outputs import ModelRunnerOutput

MRO_HAS_REQ_ID_TO_INDEX: bool = any(
    f.name == "req_id_to_index" for f in dataclasses.fields(ModelRunnerOutput)
)

HAS_HASH_LOOKAHEAD: bool = (
    "num_hash_lookahead_tokens" in inspect.signature(get_request_block_hasher).parameters
)


def _need_lookahead(tokens: int) -> None:
    if tokens and not HAS_HASH_LOOKAHEAD:
        import vllm

        raise ValueError(f"hash_lookahead_tokens={tokens}: vLLM {vllm.__version__} has no "
                         "lookahead block hashes (0.34.0 has); expected 0")


def set_hash_lookahead(vllm_config, tokens: int) -> None:
    """``vllm_config.num_hash_lookahead_tokens = tokens`` (what vLLM derives
    from a drafter), read by the ``Scheduler`` and the offloading scheduler
    when they are built."""
    _need_lookahead(tokens)
    if HAS_HASH_LOOKAHEAD:
        vllm_config.num_hash_lookahead_tokens = tokens


def block_hasher(hash_block_size: int, hash_fn, tokens: int):
    """``get_request_block_hasher`` with ``tokens`` of lookahead (EngineCore's)."""
    _need_lookahead(tokens)
    if HAS_HASH_LOOKAHEAD:
        return get_request_block_hasher(hash_block_size, hash_fn, tokens)
    return get_request_block_hasher(hash_block_size, hash_fn)


def model_runner_output(req_ids: list[str], **kw) -> ModelRunnerOutput:
    """``ModelRunnerOutput(req_ids=..., **kw)``, with ``req_id_to_index`` where
    the release has that field (before 0.34.0)."""
    if MRO_HAS_REQ_ID_TO_INDEX:
        kw["req_id_to_index"] = {r: i for i, r in enumerate(req_ids)}
    return ModelRunnerOutput(req_ids=req_ids, **kw)


NRD_HAS_PREFILL_TOKEN_IDS: bool = any(
    f.name == "prefill_token_ids" for f in dataclasses.fields(NewRequestData)
)


def new_request_data(prefill_token_ids: list[int], **kw) -> NewRequestData:
    """``NewRequestData(**kw)``, with ``prefill_token_ids`` where the release
    has that field (0.34.0)."""
    if NRD_HAS_PREFILL_TOKEN_IDS:
        kw["prefill_token_ids"] = prefill_token_ids
    return NewRequestData(**kw)
