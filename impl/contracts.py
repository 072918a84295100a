"""Run-time switch for impl's contracts (deal).

Contracts are written with ``deal`` (pre/post/ensure), which both CrossHair
(``crosshair check --analysis_kind=deal``) and deal itself enforce. At run
time they are *off* by default (production), and switched on by tests or by
the connector option ``kvreach.check_contracts`` (``log`` | ``raise``).
The environment variable ``KVREACH_CHECK_CONTRACTS=1`` turns them on at import.
"""

from __future__ import annotations

import os

import deal

MODES = ("off", "log", "raise")
_mode = "off"


def set_mode(mode: str) -> None:
    """Switch contract enforcement: ``off`` disables every deal contract."""
    global _mode
    if mode not in MODES:
        from kvreach.params import ParamError

        raise ParamError("kvreach.check_contracts", mode, "one of " + ", ".join(MODES))
    _mode = mode
    if mode == "off":
        deal.disable(warn=False)  # off is the production default, also under CI
    else:
        deal.enable()


def mode() -> str:
    return _mode


set_mode("raise" if os.environ.get("KVREACH_CHECK_CONTRACTS") == "1" else "off")
