"""Helpers shared by the tests: run-directory readers, optional components, the backends' own venvs.

The ``unirl`` command itself is run by :mod:`tests.support.cli`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from types import ModuleType
from typing import NoReturn


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("manifest.json"))


def read_jsonl(path: Path) -> list[dict]:
    # Split on "\n" only: JSON leaves U+2028 and U+0085 unescaped inside strings, and str.splitlines breaks there.
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()]


REPO = Path(__file__).resolve().parents[2]


def missing(message: str) -> NoReturn:
    """A component the test command installs is absent: skip here (a partial setup), fail in CI.

    The one place that decides: every optional component (an extra, a backend venv, Slurm) comes through here, so
    a CI machine that lost one fails instead of going green with tests silently skipped. Usable at module level.
    """
    import pytest

    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message, allow_module_level=True)


def require_module(name: str, install: str) -> ModuleType:
    """An optional extra (math-verify, ray, Hydra's launchers, torch) that the README's test command installs; the
    module itself when it is there."""
    import importlib
    import importlib.util

    if importlib.util.find_spec(name.split(".")[0]) is None or importlib.util.find_spec(name) is None:
        missing(f"{name} is not installed: {install}")
    return importlib.import_module(name)


def backend_python(backend: str) -> Path:
    """The interpreter of a backend's own venv (scripts/backend_venv.sh). Missing: skip here, fail in CI."""
    python = Path(os.environ.get("UNIRL_VENVS_DIR", REPO / ".venvs")) / backend / "bin" / "python"
    if not python.exists():
        missing(f"{python} is missing: run scripts/backend_venv.sh {backend}")
    return python


def run_harness(backend: str, *args: str, env: dict[str, str] | None = None, timeout: float = 600,
                script_name: str | None = None) -> subprocess.CompletedProcess[str]:
    """A tests/backends/<backend>_harness.py script (or ``script_name``), in that backend's own venv."""
    script = REPO / "tests" / "backends" / (script_name or f"{backend}_harness.py")
    return subprocess.run([str(backend_python(backend)), str(script), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, cwd=REPO)


def point_at_backend(monkeypatch: object, backend: str) -> Path:
    """Make unirl find ``backend`` in its own venv (``UNIRL_<NAME>_PYTHON``), as a user points at theirs."""
    python = backend_python(backend)
    monkeypatch.setenv(f"UNIRL_{backend.upper()}_PYTHON", str(python))  # type: ignore[attr-defined]
    return python
