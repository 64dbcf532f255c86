"""Host-internal plugins, registered like any other (pytest's terminal.py is the model)."""

from __future__ import annotations

import importlib
from types import ModuleType

BUILTIN_MODULES = {
    "unirl.record": "unirl.record",
    "unirl.progress": "unirl.progress",
    "unirl.rollout_engines": "unirl.rollout_engines",
}


def modules() -> list[tuple[str, ModuleType]]:
    return [(name, importlib.import_module(path)) for name, path in BUILTIN_MODULES.items()]
