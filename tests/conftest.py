"""Every test runs with its own empty proof result cache
(``XDG_CACHE_HOME`` in a temporary directory): a ``kvreach prove`` a test
starts neither reads nor fills the user's cache."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
