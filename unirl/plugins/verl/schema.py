"""verl's key schema without verl: the keys of its composed ``ppo_trainer`` config, snapshotted per version.

Used by ``validate`` when verl is not installed where unirl can run it (the real check composes verl's own
config). ``keys_<version>.json`` is written by ``python -m unirl.plugins.verl.native_check --keys`` in verl's
environment; a test compares it with the installed verl.
"""

from __future__ import annotations

import functools
import json
from importlib.resources import files
from typing import Any

SNAPSHOT_VERSION = "0.9.1"


@functools.cache
def _snapshot(version: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((files("unirl.plugins.verl") / f"keys_{version}.json").read_text())
    return loaded


def known_keys(version: str = SNAPSHOT_VERSION) -> frozenset[str]:
    return frozenset(_snapshot(version)["keys"])


def default_values(version: str = SNAPSHOT_VERSION) -> dict[str, Any]:
    """Each leaf key's default in verl's composed config, as written (``${...}`` interpolations unresolved)."""
    return dict(_snapshot(version)["defaults"])


def unknown_keys(overrides: dict[str, Any], version: str = SNAPSHOT_VERSION) -> list[str]:
    """Hydra's rule: a plain key must exist; a ``+key`` must not exist yet but its parent must be a node."""
    problems = []
    for raw in overrides:
        why = key_problem(raw, version)
        if why is not None:
            problems.append(f"{raw}: {why}")
    return problems


def key_problem(raw: str, version: str = SNAPSHOT_VERSION) -> str | None:
    """Why verl's Hydra refuses the override key ``raw`` (``key``, ``+key``; ``++key`` always goes), or None."""
    keys = known_keys(version)
    key = raw.lstrip("+")
    if raw.startswith("++"):
        return None
    if raw.startswith("+"):
        return f"verl {version} already has {key}; drop the '+'" if key in keys else None
    if key in keys:
        return None
    near = sorted(k for k in keys if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1])[:3]
    hint = f" (keys with that name: {', '.join(near)})" if near else ""
    return f"not a key of verl {version}'s ppo_trainer config{hint}"
