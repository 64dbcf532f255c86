"""Entry point ``unirl:openrlhf``: registers the OpenRLHF framework (OpenRLHF itself runs in its own environment)."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry
from unirl.plugins.openrlhf.framework import OpenRlhfFramework


@hookimpl
def unirl_add_frameworks(registry: Registry[Any]) -> None:
    registry.add(OpenRlhfFramework())
