"""Stubs for what the extracted vLLM functions touch: the spec classes,
``LookupResult``, ``RequestStatus``, a quiet logger, vLLM's small helpers
(``cdiv``, ``round_down``, ...), and the offload manager. Each names the vLLM
class it stands in for."""

from __future__ import annotations

import dataclasses
import enum
import itertools
import types
from dataclasses import dataclass
from typing import Callable

from kvreach.impl import lookup as lk
from kvreach.params import cdiv


@dataclass(frozen=True)
class SlidingWindowSpec:
    """``vllm.v1.kv_cache_interface.SlidingWindowSpec``: the fields read here."""

    block_size: int
    sliding_window: int
    extra_retained_tokens: int = 0


class FullAttentionSpec:
    """``FullAttentionSpec`` (only ``isinstance`` is asked of it)."""


class ChunkedLocalAttentionSpec:
    pass


class MambaSpec:
    pass


class LookupResult(enum.Enum):
    HIT = "hit"
    HIT_PENDING = "hit_pending"
    RETRY = "retry"
    MISS = "miss"


_ANSWER = {lk.Answer.HIT: LookupResult.HIT, lk.Answer.HIT_PENDING: LookupResult.HIT_PENDING,
           lk.Answer.RETRY: LookupResult.RETRY, lk.Answer.MISS: LookupResult.MISS}


class RequestStatus(enum.Enum):
    RUNNING = 1
    FINISHED_STOPPED = 2
    FINISHED_ABORTED = 3


class _Quiet:
    """Logger, stats, events tracker: every call is accepted and ignored."""

    def __getattr__(self, name):
        return lambda *a, **k: None


def _namespace() -> dict:
    def round_down(x, m):
        return x // m * m

    def round_up(x, m):
        return cdiv(x, m) * m

    ns = dict(cdiv=cdiv, round_down=round_down, round_up=round_up,
              SlidingWindowSpec=SlidingWindowSpec, FullAttentionSpec=FullAttentionSpec,
              ChunkedLocalAttentionSpec=ChunkedLocalAttentionSpec, MambaSpec=MambaSpec,
              LookupResult=LookupResult, RequestStatus=RequestStatus, replace=dataclasses.replace,
              chain=itertools.chain, logger=_Quiet(), _ConnectorMetricName=_Quiet(),
              TransferJobStatus=lambda **k: types.SimpleNamespace(**k),
              TransferJob=lambda **k: types.SimpleNamespace(**k),
              GPULoadStoreSpec=lambda *a, **k: None,
              time=types.SimpleNamespace(monotonic=lambda: 0.0))
    ns["__builtins__"] = __builtins__
    return ns


class _Manager:
    """The offload manager: ``lookup`` answers from a table of keys."""

    def __init__(self, answer: Callable):
        self.answer = answer
        self.stored: list = []

    def lookup(self, key, req_context=None):
        return _ANSWER[self.answer(key)]

    def prepare_store(self, keys, req_context=None):
        self.stored.extend(keys)
        return types.SimpleNamespace(keys_to_store=list(keys), store_spec=None)
