"""Entry point ``unirl:verl``: registers the verl framework (light; verl itself runs in its own environment)."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry
from unirl.plugins.verl.framework import VerlFramework


@hookimpl
def unirl_add_frameworks(registry: Registry[Any]) -> None:
    registry.add(VerlFramework())
