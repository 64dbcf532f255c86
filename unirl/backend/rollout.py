"""Rollout (generation) engines: what generates a backend's completions, and on which backends it drives an
environment's episodes.

A backend declares the engines it generates with (``Capabilities.rollout_engines``); an engine declares, per
backend, the code that runs an environment's turn loop there (``episodes``: ``"module:name"``, imported only in the
backend's own processes). A recipe with ``environment.name`` is refused unless its engine has an entry for its
backend, so a plugin adds multi-turn support to a backend by registering an engine (``unirl_add_rollout_engines``).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RolloutEngine:
    name: str
    description: str
    needs_gpu: bool
    python_package: str | None = None  # importable module that must exist where the backend runs
    episodes: dict[str, str] = field(default_factory=dict)
    """backend name -> the ``module:name`` that runs an environment's episodes with this engine on that backend."""
    episodes_lose: dict[str, str] = field(default_factory=dict)
    """backend name -> what an environment loses there (shown by ``unirl plan``)."""
