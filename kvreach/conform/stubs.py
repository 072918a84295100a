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

    def __getattr__(self, name):  # only for names the fields lack
        if not name.startswith("__"):
            _MISSES.append(f"SlidingWindowSpec.{name}")
        raise AttributeError(name)


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


class Gap(Exception):
    """The extracted code needs what the stubs do not give (a new parameter,
    attribute or helper): the role cannot be checked on this tree, which is
    not a difference. ``what`` says what it now reads."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


# What the stubs were asked for and lacked during the current tree call
# (kept even when the extracted code swallows the AttributeError, e.g. a
# ``getattr(x, name, default)``): see :func:`reads_missing`.
_MISSES: list[str] = []
# The tree whose class members a stub falls back to (set by compare).
ACTIVE_TREE: list = [None]


class Stub(types.SimpleNamespace):
    """A plain namespace standing in for one vLLM object (``what`` names its
    class). An attribute it lacks is first looked up as a member of that
    class in the tree under test (a method is bound, a property evaluated:
    a renamed or new helper of the class runs as the tree has it); failing
    that the read is recorded and raises AttributeError."""

    def __init__(self, what: str, **kw):
        super().__init__(**kw)
        object.__setattr__(self, "_stub_what", what)

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "_stub_what":
            raise AttributeError(name)
        what = self.__dict__.get("_stub_what", "?")
        ex = ACTIVE_TREE[0]
        if ex is not None:
            member = ex.member(what, name)
            if member is not None:
                fn, is_property = member
                if is_property:
                    return fn(self)
                bound = types.MethodType(fn, self)
                object.__setattr__(self, name, bound)
                return bound
        _MISSES.append(f"{what}.{name}")
        raise AttributeError(f"{what} stub has no attribute {name!r}")


def reads_missing() -> list[str]:
    """The reads the stubs lacked since the last call (and forget them)."""
    out = list(dict.fromkeys(_MISSES))
    _MISSES.clear()
    return out


class Quiet:
    """Logger, stats, events tracker: every call is accepted and ignored."""

    def __getattr__(self, name):
        return lambda *a, **k: None


def stub_namespace() -> dict:
    def round_down(x, m):
        return x // m * m

    def round_up(x, m):
        return cdiv(x, m) * m

    ns = dict(cdiv=cdiv, round_down=round_down, round_up=round_up,
              SlidingWindowSpec=SlidingWindowSpec, FullAttentionSpec=FullAttentionSpec,
              ChunkedLocalAttentionSpec=ChunkedLocalAttentionSpec, MambaSpec=MambaSpec,
              LookupResult=LookupResult, RequestStatus=RequestStatus, replace=dataclasses.replace,
              chain=itertools.chain, logger=Quiet(), _ConnectorMetricName=Quiet(),
              TransferJobStatus=lambda **k: types.SimpleNamespace(**k),
              TransferJob=lambda **k: types.SimpleNamespace(**k),
              GPULoadStoreSpec=lambda *a, **k: None,
              time=types.SimpleNamespace(monotonic=lambda: 0.0))
    ns["__builtins__"] = __builtins__
    return ns


class ManagerStub:
    """The offload manager: ``lookup`` answers from a table of keys."""

    def __init__(self, answer: Callable):
        self.answer = answer
        self.stored: list = []

    def lookup(self, key, req_context=None):
        return _ANSWER[self.answer(key)]

    def prepare_store(self, keys, req_context=None):
        self.stored.extend(keys)
        return types.SimpleNamespace(keys_to_store=list(keys), store_spec=None)
