"""Shared fixtures: every test runs in its own directory with its own runs dir and a fresh plugin host."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.slurm_cluster import slurm_cluster  # noqa: F401  (a session fixture for slurm tests)
from unirl.host.manager import reset_host


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("UNIRL_RUNS_DIR", str(tmp_path / "runs"))
    for var in ("UNIRL_PLUGINS_BLOCK", "UNIRL_DISABLE_PLUGIN_AUTOLOAD", "UNIRL_PLUGINS", "UNIRL_PLUGIN_FILE"):
        monkeypatch.delenv(var, raising=False)
    reset_host()
    yield tmp_path
    reset_host()

