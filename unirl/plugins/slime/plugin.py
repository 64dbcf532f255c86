"""Entry point ``unirl:slime``: registers slime and vime (light; both run in their own images)."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry
from unirl.plugins.slime.framework import SlimeFramework, VimeFramework


@hookimpl
def unirl_add_frameworks(registry: Registry[Any]) -> None:
    registry.add(SlimeFramework())
    registry.add(VimeFramework())
