"""Fixtures every test gets: its own directory, its own runs directory and a fresh plugin host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from unirl.host.manager import reset_host


@pytest.fixture(scope="session")
def unirl_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the session (the parity certificates runs reuse), never the user's own."""
    return tmp_path_factory.mktemp("unirl-cache")


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unirl_cache: Path) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("UNIRL_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("UNIRL_CACHE_DIR", str(unirl_cache))
    for var in ("UNIRL_PLUGINS_BLOCK", "UNIRL_DISABLE_PLUGIN_AUTOLOAD", "UNIRL_PLUGINS", "UNIRL_PLUGIN_FILE"):
        monkeypatch.delenv(var, raising=False)
    reset_host()
    yield tmp_path
    reset_host()

