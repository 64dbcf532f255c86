"""Entry point ``unirl:nemo_rl``: registers the NeMo RL framework (light; NeMo RL itself runs in its own image)."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry
from unirl.plugins.nemo_rl.framework import NemoRlFramework


@hookimpl
def unirl_add_frameworks(registry: Registry[Any]) -> None:
    registry.add(NemoRlFramework())
