"""The connector's options: the ``kvreach.*`` keys of
``KVTransferConfig.kv_connector_extra_config`` (vLLM's own offloading options
are read by vLLM's ``offloading/config.py``). No vLLM import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreach.impl import contracts, monitor
from kvreach.params import RULES, ParamError

OPTION_RULE = "kvreach.rule"
OPTION_CHECK_CONTRACTS = "kvreach.check_contracts"
OPTION_MONITOR = "kvreach.monitor"
OPTION_PREFIX = "kvreach."


@dataclass(frozen=True)
class KvReachOptions:
    """rule: the kvreach store rule. check_contracts: None (option absent)
    keeps the process-wide mode of ``kvreach.impl.contracts`` (``off`` unless
    ``KVREACH_CHECK_CONTRACTS=1``); a value sets it (deal's switch is
    process-wide, so the last connector built wins)."""

    rule: str = "vllm-0.33"
    check_contracts: str | None = None
    monitor: str = "off"

    @classmethod
    def from_extra_config(cls, extra: dict[str, Any] | None) -> KvReachOptions:
        """Parse ``kvreach.*`` keys; unknown keys or bad values raise
        ``ParamError`` (a ``ValueError``) naming option, value and expected."""
        extra = extra or {}
        known = (OPTION_RULE, OPTION_CHECK_CONTRACTS, OPTION_MONITOR)
        for key in extra:
            if isinstance(key, str) and key.startswith(OPTION_PREFIX) and key not in known:
                raise ParamError(key, extra[key], "a known option: " + ", ".join(known))
        rule = extra.get(OPTION_RULE, cls.rule)
        if rule not in RULES:
            raise ParamError(OPTION_RULE, rule, "one of " + ", ".join(RULES))
        mode = extra.get(OPTION_CHECK_CONTRACTS)
        if mode is not None and mode not in contracts.MODES:
            raise ParamError(OPTION_CHECK_CONTRACTS, mode, "one of " + ", ".join(contracts.MODES))
        mon = extra.get(OPTION_MONITOR, cls.monitor)
        if mon not in monitor.MODES:
            raise ParamError(OPTION_MONITOR, mon, "one of " + ", ".join(monitor.MODES))
        return cls(rule=rule, check_contracts=mode, monitor=mon)


def extra_config(vllm_config) -> dict[str, Any]:
    # getattr: vLLM's own tests build the scheduler from partial configs.
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    extra = getattr(ktc, "kv_connector_extra_config", None)
    return dict(extra) if extra else {}

