"""What a trainer-backend plugin provides: capabilities, a mapping table, plan and validate.

A backend plugin is read top to bottom: its capability declaration, its mapping table (data, not
code scattered through functions), ``plan``, ``validate``, and the runner it points to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from unirl.plan import LaunchPlan
from unirl.recipe import Recipe


@dataclass(frozen=True)
class Capabilities:
    algorithms: tuple[str, ...]
    rollout_engines: tuple[str, ...]
    placement: tuple[str, ...]  # colocated, disaggregated
    modes: tuple[str, ...]  # sync, async
    training_backends: tuple[str, ...]
    multi_node: str
    custom_reward: str
    runs_on_cpu: bool
    kl_estimators: tuple[str, ...] = ()
    loss_aggregations: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mapping:
    """One recipe field and how it becomes a native key.

    ``convert`` takes the recipe and returns the native value; ``supported`` says which recipe
    values the backend can honour (anything else is an error naming the field).
    """

    recipe_field: str
    native_key: str
    convert: Callable[[Recipe], Any]
    note: str = ""
    supported: Callable[[Recipe], bool] | None = None
    supported_text: str = ""


@runtime_checkable
class Framework(Protocol):
    name: str
    description: str
    capabilities: Capabilities
    options: dict[str, Any]
    """Defaults of the backend's own options; becomes the Hydra node ``framework/<name>``."""

    def installed_version(self) -> str | None:
        """The backend's version in the interpreter it will run in, or None; imports nothing heavy."""

    def plan(self, recipe: Recipe) -> LaunchPlan:
        """Translate the recipe; raises Unsupported/RecipeInvalid for what the backend cannot do."""

    def validate(self, plan: LaunchPlan) -> None:
        """Check the plan against the backend's own schema, where the backend is installed."""


@dataclass
class FrameworkOptions:
    """Options every framework accepts under ``framework.*`` (a plugin's ``options`` start from these)."""

    name: str = ""
    python: str | None = None
    """The backend's interpreter when it lives in another environment; null = unirl's own (in-process)."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Raw native keys applied after the mapping table: the escape hatch, shown in ``unirl plan``."""
