"""Entry point ``unirl:trl``: registers the TRL framework (light; TRL itself loads only to run)."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry
from unirl.plugins.trl.framework import TrlFramework


@hookimpl
def unirl_add_frameworks(registry: Registry[Any]) -> None:
    registry.add(TrlFramework())
