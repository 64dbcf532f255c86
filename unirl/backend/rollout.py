"""Rollout (generation) engines: declarations that backends match against their capabilities."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RolloutEngine:
    name: str
    description: str
    needs_gpu: bool
    python_package: str | None = None  # importable module that must exist where the backend runs
