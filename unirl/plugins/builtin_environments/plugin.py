"""Registers the built-in environments, lazily: their modules load only when a recipe or a command uses them."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry


@hookimpl
def unirl_add_environments(registry: Registry[Any]) -> None:
    registry.add("unirl.plugins.builtin_environments.lookup:LOOKUP", name="lookup")
    registry.add("unirl.plugins.builtin_environments.python_tool:PYTHON", name="python")
