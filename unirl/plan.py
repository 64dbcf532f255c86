"""The LaunchPlan: what a backend will receive, as plain data.

``plan`` is pure (same recipe, same plan, byte for byte): it is what ``unirl plan`` prints, what the
run directory keeps, and what a scheduler submits. Everything in it is JSON-serialisable.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class MappedField:
    """One row of a backend's translation: recipe field -> native key, with the value sent."""

    recipe_field: str
    native_key: str
    value: Any
    note: str = ""


@dataclass
class LaunchPlan:
    framework: str
    framework_version: str | None
    entrypoint: str
    """``module:function`` run in the backend's interpreter with the plan as its argument."""
    native_config: dict[str, Any]
    """The backend's own configuration, exactly as it will receive it."""
    mapping: list[MappedField] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    """The equivalent command line, for a backend launched as a process."""
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Files the launch writes (relative path -> content)."""
    in_process: bool = False
    """The local scheduler may call the entrypoint in the unirl process (same interpreter)."""
    notes: list[str] = field(default_factory=list)
    recipe: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchPlan:
        data = dict(data)
        data["mapping"] = [MappedField(**m) for m in data.get("mapping", [])]
        return cls(**data)
