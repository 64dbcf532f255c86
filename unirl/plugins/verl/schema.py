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
    keys = known_keys(version)
    problems = []
    for raw in overrides:
        key = raw.lstrip("+")
        if raw.startswith("++"):
            continue
        if raw.startswith("+"):
            if key in keys:
                problems.append(f"{raw}: verl {version} already has {key}; drop the '+'")
            continue
        if key not in keys:
            near = sorted(k for k in keys if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1])[:3]
            hint = f" (keys with that name: {', '.join(near)})" if near else ""
            problems.append(f"{key}: not a key of verl {version}'s ppo_trainer config{hint}")
    return problems
