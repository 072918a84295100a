"""The code this connector copies from vLLM, and only that, one module per
release whose code differs (the release is chosen at import from
``vllm.__version__``). Each copy is vLLM's function line for line, vLLM's
comments included, except at the seams its :class:`~.seams.Copy` declares,
each marked in the code by a ``# kvreach:`` comment.
tests/vllm/test_vllm_copy.py checks exactly that against the installed vLLM
(``inspect.getsource`` of each original; whitespace and the ``# kvreach:``
comments aside), so the copy in use cannot drift from the release it runs on;
a release without a copy here is refused at import (``ImportError``, one
line naming the releases that have one).

- ``StoreJobs``: ``OffloadingConnectorScheduler._build_store_jobs`` of the
  installed release (:mod:`.v0_33_0`, :mod:`.v0_34_0`: 0.34.0 changed the
  finish clamp, the EAGLE drop argument, the null pages kept inside a chunk
  and the job's key order), its per-group chunk selection (the loop over
  ``kv_group_configs`` that fills ``new_offload_keys`` and
  ``group_store_ranges``) replaced by a call of ``self._select_store_keys``
  (``KvReachOffloadingConnectorScheduler``'s), which fills the same two
  lists. Everything around it (the offloadable tokens, the reachable
  boundaries, ``prepare_store``, job building, fencing) is vLLM's.
- ``ConnectorInit``: ``OffloadingConnector.__init__``, unchanged from 0.33.0
  to 0.34.0 (:mod:`.connector_init`), building ``self.scheduler_class``.

Both are mixins, listed first among the bases of the class that uses them.
Why copies at all: vLLM's per-group loop has no hook; the selection sits in
the middle of ``_build_store_jobs``, between the offloadable-token count and
``prepare_store``. Why per release rather than one copy with branches: each
copy is then checked line for line against the only source it claims.
"""

from __future__ import annotations

import importlib

from kvreach.impl.vllm import vllm_release
from kvreach.impl.vllm.vllm_copy.connector_init import ConnectorInit
from kvreach.impl.vllm.vllm_copy.seams import Copy, Seam

# vLLM release -> the module holding its copies
MODULES = {"0.33.0": "v0_33_0", "0.34.0": "v0_34_0"}


def module_name(version: str) -> str:
    """The copy module for vLLM ``version``; ImportError (one line) for a
    release this connector has no copy of."""
    if version not in MODULES:
        raise ImportError(
            f"kvreach's vLLM connector runs on vLLM {', '.join(MODULES)}; "
            f"the installed vLLM is {version} (python -m kvreach.vllm_install installs 0.34.0)"
        )
    return f"{__name__}.{MODULES[version]}"


_release = importlib.import_module(module_name(vllm_release.VERSION))
ORIGIN: str = _release.ORIGIN
COPIES: tuple[Copy, ...] = _release.COPIES
StoreJobs = _release.StoreJobs

__all__ = ["COPIES", "ORIGIN", "ConnectorInit", "Copy", "MODULES", "Seam", "StoreJobs",
           "module_name"]
