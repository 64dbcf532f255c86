"""The code's shape, checked like its behaviour: ruff's style rules, ``mypy --strict`` over ``unirl/`` (reward
authors import its types: it ships ``py.typed``), and the import-linter contracts in pyproject.toml that keep the
layering (cli > host > launch > backend > data > recipe > rewards | record; the light core in a backend's
interpreter never reaching the plugin manager; no layer importing a plugin)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import REPO, missing

pytestmark = pytest.mark.slow  # mypy over the package takes about a minute on 2 cores


def tool(name: str) -> str:
    """The tool installed beside this interpreter (the dev extra, which the test command installs)."""
    path = Path(sys.executable).parent / name
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        missing(f"{name} is not installed (pip install -e '.[dev]')")
    return found


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing() -> None:
    done = run(tool("ruff"), "check", "unirl", "tests", "benchmarks", "examples")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_finds_nothing() -> None:
    done = run(tool("mypy"))  # strict, over unirl/: [tool.mypy] in pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_layering_contracts_are_kept() -> None:
    done = run(tool("lint-imports"))
    assert done.returncode == 0 and "0 broken" in done.stdout, done.stdout + done.stderr
