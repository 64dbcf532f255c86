"""The adversarial corpus: attacks a hostile completion, a buggy reward author or a careless user would make.

Each area is one module here with ``AREA`` (a short title) and ``CASES`` (a list of :class:`Case`). A case's
``check`` runs the attack against the real component and raises ``AssertionError`` (with what went wrong) when
the attack was not contained; returning means it was. ``tests/test_adversarial.py`` runs every case under pytest,
and ``python benchmarks/adversarial.py`` runs the same corpus and prints tried / contained / failed per area.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# One module per area; each owns its cases. Order is the order of the report table.
AREAS = ("reward_faults", "sandbox_programs", "grader_tricks", "reward_server", "run_directory", "bad_inputs",
         "model_text", "environment_faults")


@dataclass(frozen=True)
class Case:
    name: str
    """A short, unique (within its area) description of the attack, e.g. ``info holds a lambda``."""
    check: Callable[[Path], None]
    """Runs the attack in the given empty directory; raises AssertionError when it was not contained."""
    marks: tuple[str, ...] = field(default=())
    """pytest markers the case needs (``slow``, ``train``, ...)."""


def load_areas(names: tuple[str, ...] = AREAS) -> dict[str, tuple[str, list[Case]]]:
    """area module name -> (title, cases), for the areas whose module exists."""
    found: dict[str, tuple[str, list[Case]]] = {}
    for name in names:
        try:
            module = importlib.import_module(f"tests.adversarial.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"tests.adversarial.{name}":
                raise
            continue
        found[name] = (module.AREA, list(module.CASES))
    return found
