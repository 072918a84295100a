"""Fixtures for the vLLM integration tests (``@pytest.mark.vllm``).

The two CPU shims of ``kvreach.vllm_harness.cpu_shims``, applied here for the
whole session (the connector never applies them):

- **Offline model config.** ``VllmConfig`` resolves the model's config; with no
  hub access the session writes a small Llama ``config.json`` into a tmp dir and
  points ``ModelConfig(model=...)`` at it, with ``HF_HUB_OFFLINE=1``. No weights:
  only the scheduler runs.
- **Hybrid KV cache manager on CPU.** ``VllmConfig`` refuses the hybrid KV
  cache manager (full attention + SWA groups) when
  ``current_platform.support_hybrid_kv_cache()`` is False, as it is on a
  machine without a GPU. The session patches that classmethod to return True
  and restores it afterwards.

Every test module here calls ``pytest.importorskip("vllm")`` first, so the
directory is skipped with a reason when vLLM is not installed.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "vllm: drives the real vLLM scheduler, 0.33.0 or 0.34.0 (python -m kvreach.vllm_install)"
    )
    config.addinivalue_line(
        "filterwarnings", "ignore:It is pytest but deal is disabled:RuntimeWarning"
    )


@pytest.fixture(scope="session")
def offline_model_dir(tmp_path_factory) -> str:
    pytest.importorskip("vllm", reason="vllm is not installed (pip install kvreach[vllm])")
    from kvreach.vllm_harness.cpu_shims import write_offline_model

    return write_offline_model(tmp_path_factory.mktemp("offline-model"))


@pytest.fixture(scope="session", autouse=True)
def hybrid_kv_cache_on_cpu():
    try:
        import vllm  # noqa: F401
    except ImportError:
        yield
        return
    from kvreach.vllm_harness.cpu_shims import hybrid_kv_cache_shim

    with hybrid_kv_cache_shim():
        yield


@pytest.fixture(autouse=True)
def restore_contract_mode():
    """Connectors switch deal's process-wide mode; put it back after a test."""
    from kvreach.impl import contracts

    before = contracts.mode()
    yield
    contracts.set_mode(before)
