"""What a trainer-backend plugin provides: capabilities, a mapping table, plan, validate, prepare.

A backend plugin is read top to bottom: its capability declaration, its mapping table (data, not
code scattered through functions), ``plan``, ``validate``, and the runner it points to. The same
table drives ``unirl plan``, ``unirl diff`` and the docs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from unirl.backend.plan import LaunchPlan, MappedField
from unirl.errors import FieldError, Unsupported
from unirl.recipe.schema import Recipe
from unirl.versions import matches


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
    needs_gpu: bool = False
    """Training cannot start without a GPU (or NPU): unirl checks before launching."""
    distribution: str | None = None
    """The backend's package name on the package index, to read its installed version; None = not on the index."""
    tested_version: str = ""
    """The version unirl's translation and tests are made against (the target when none is installed)."""
    install: str = ""
    """How a user gets the backend (pip line, container image, git checkout)."""
    image: str = ""
    """The backend's own published container image that docker/<name>/Dockerfile builds on."""
    native_algorithms: tuple[str, ...] = ()
    """What the backend itself implements (``algorithms`` is what unirl's recipe maps onto it today)."""


OMIT = object()
"""A mapping's ``convert`` returns this to send nothing for the field (the backend's default applies)."""
NO_DEFAULT = object()


@dataclass(frozen=True)
class Mapping:
    """One recipe field and how it becomes a native key.

    ``convert`` takes the recipe and returns the native value (or :data:`OMIT`); ``supported`` says
    which recipe values the backend can honour (anything else is an error naming the field);
    ``versions`` gates the row to the backend versions that have this key (e.g. ``">=0.10.2"``);
    ``native_default`` is what the backend uses when the key is not sent, shown by ``unirl diff``.
    """

    recipe_field: str
    native_key: str
    convert: Callable[[Recipe], Any]
    note: str = ""
    supported: Callable[[Recipe], bool] | None = None
    supported_text: str = ""
    versions: str = ""
    native_default: Any = field(default=NO_DEFAULT)


def field_value(recipe: Recipe, dotted: str) -> Any:
    obj: Any = recipe
    for part in dotted.replace("[]", "").split("."):
        obj = getattr(obj, part, None)
    return obj


def translate(recipe: Recipe, table: tuple[Mapping, ...], backend: str, version: str
              ) -> tuple[list[MappedField], dict[str, Any], list[FieldError]]:
    """Apply a mapping table: the rows shown to users, the native key -> value dict, and what is unsupported.

    Rows whose version gate excludes ``version`` are skipped; a row whose ``convert`` returns :data:`OMIT`
    is shown (value null) but sends nothing; a row whose ``supported`` fails becomes an :class:`Unsupported`.
    """
    rows: list[MappedField] = []
    native: dict[str, Any] = {}
    problems: list[FieldError] = []
    for m in table:
        if m.versions and not matches(version, m.versions):
            continue
        if m.supported is not None and not m.supported(recipe):
            problems.append(Unsupported(m.recipe_field, field_value(recipe, m.recipe_field), backend,
                                        m.supported_text))
            continue
        value = m.convert(recipe)
        default = None if m.native_default is NO_DEFAULT else m.native_default
        if value is OMIT:
            rows.append(MappedField(m.recipe_field, m.native_key, None, m.note or "not sent: backend default",
                                    default))
            continue
        rows.append(MappedField(m.recipe_field, m.native_key, value, m.note, default))
        if not m.native_key.startswith("("):
            native[m.native_key] = value
    return rows, native, problems



@runtime_checkable
class Framework(Protocol):
    name: str
    description: str
    capabilities: Capabilities
    mapping: tuple[Mapping, ...]
    """The recipe -> native-key table: drives plan, ``unirl diff`` and the docs."""
    options: dict[str, Any]
    """Defaults of the backend's own options; becomes the Hydra node ``framework/<name>``."""

    def installed_version(self, python: str | None = None) -> str | None:
        """The backend's version in ``python`` (default: its configured interpreter), or None; imports nothing heavy."""

    def plan(self, recipe: Recipe) -> LaunchPlan:
        """Translate the recipe; raises Unsupported/RecipeInvalid for what the backend cannot do."""

    def validate(self, plan: LaunchPlan) -> None:
        """Check the plan against the backend's own schema, where the backend is installed."""

    def prepare(self, plan: LaunchPlan, run_dir: Path, host: Any) -> LaunchPlan:
        """Write what the launch needs into ``run_dir`` and check the machine; returns the resolved plan."""


@dataclass
class FrameworkOptions:
    """Options every framework accepts under ``framework.*`` (a plugin's ``options`` start from these)."""

    name: str = ""
    python: str | None = None
    """The backend's interpreter when it lives in another environment; null = unirl's own."""
    image: str | None = None
    """A container image holding the backend (docker or apptainer runs it); null = no container."""
    container_runtime: str = "docker"
    """docker or apptainer, for ``image``."""
    version: str | None = None
    """The backend version to translate for when it is not installed where unirl can see it; null = the tested one."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """Raw native keys applied after the mapping table: the escape hatch, shown in ``unirl plan``."""
