"""Which vLLM release record (``kvreach.releases``) a vLLM tree equals.

A tree is the installed vLLM, a wheel, or a source directory (a release's
sdist, a maintainer's branch). The functions the records speak of are found
by name in the tree's offloading scheduler, its ``offloading/config.py`` and
``single_type_kv_cache_manager.py`` (their module and name differ by
release), *extracted from the source text* with ``ast`` and executed with
small stubs for the classes they touch (``SlidingWindowSpec``,
``LookupResult``, ``self`` and the request state as plain namespaces).
Importing the tree instead would pull in its whole package (torch, compiled
kernels of its own build) and, in one process, collide with the installed
vLLM; extraction reads a wheel or a branch without installing anything and
runs in milliseconds per case. What the stubs stand in for is named at each
harness below; nothing of kvreach is handed to the extracted code except the
inputs, and 0.29.0's ``alignment_chunk_count`` (computed inside
``SchedulerOffloadConfig.from_spec``, which needs a whole ``VllmConfig``),
which comes from ``kvreach.impl.mask.v029_alignment_chunk_count``.

Each *role* (a function, or a method driven through a harness) is run on
the same seeded random inputs for the tree and for every record's kvreach
twin (``kvreach.impl`` with the record's parts as parameters); the tree
equals a record when every role runs and agrees on every case. A role whose
code the stubs cannot run (its function not found, a new required
parameter, an attribute or helper the stubs lack, a result of a new shape)
is "cannot check role X on this tree: it now reads Y", never a difference;
a renamed or new helper of a stubbed class, and a module-level helper of the
tree, run as the tree has them. Where a function lives is shown, never
compared: a moved function is a refactor.

The package, in the order a run goes: :mod:`.extract` (trees, finding and
compiling the functions), :mod:`.stubs` (what the extracted code touches),
:mod:`.checks` (the roles: inputs, the tree's value, a record's twin),
:mod:`.compare` (the run and its verdict), :mod:`.report` (the lines the
CLI prints).
"""

from kvreach.conform.checks import (
    CHECKS,
    UNCHECKED,
    Role,
)
from kvreach.conform.compare import (
    DEFAULT_CASES,
    DEFAULT_SEED,
    DIFFERS,
    EQUALS,
    EXIT,
    MAX_CASES,
    UNDECIDED,
    Difference,
    Unchecked,
    Verdict,
    conform,
)
from kvreach.conform.extract import (
    CONFIG_FILE,
    FILES,
    MANAGER_FILE,
    ROLES,
    SCHEDULER_FILE,
    ConformError,
    Extracted,
    Tree,
    extract,
)
from kvreach.conform.report import render
from kvreach.conform.stubs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    LookupResult,
    MambaSpec,
    RequestStatus,
    SlidingWindowSpec,
)

__all__ = [
    "CHECKS", "CONFIG_FILE", "MANAGER_FILE", "SCHEDULER_FILE", "DEFAULT_CASES", "DEFAULT_SEED", "DIFFERS", "EQUALS", "EXIT", "UNDECIDED", "Unchecked", "FILES", "MAX_CASES", "ROLES", "UNCHECKED",
    "ChunkedLocalAttentionSpec", "ConformError", "Difference", "Extracted", "FullAttentionSpec",
    "LookupResult", "MambaSpec", "RequestStatus", "Role", "SlidingWindowSpec", "Tree", "Verdict",
    "conform", "extract", "render",
]
