"""Entry point ``unirl:ray``: registers the Ray job scheduler (Ray itself is imported only to submit)."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry
from unirl.plugins.ray.scheduler import RayScheduler


@hookimpl
def unirl_add_schedulers(registry: Registry[Any]) -> None:
    registry.add(RayScheduler())
