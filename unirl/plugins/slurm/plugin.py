"""Entry point ``unirl:slurm``: registers the Slurm scheduler."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry
from unirl.plugins.slurm.scheduler import SlurmScheduler


@hookimpl
def unirl_add_schedulers(registry: Registry[Any]) -> None:
    registry.add(SlurmScheduler())
