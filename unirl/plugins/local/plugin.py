"""Entry point ``unirl:local``: registers the local scheduler."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry
from unirl.plugins.local.scheduler import LocalScheduler


@hookimpl
def unirl_add_schedulers(registry: Registry[Any]) -> None:
    registry.add(LocalScheduler())
