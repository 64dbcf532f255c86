"""What a trainer-backend plugin provides: capabilities, a mapping table, plan, validate, prepare.

A backend plugin is read top to bottom: its capability declaration, its mapping table (data, not
code scattered through functions), ``plan``, ``validate``, and the runner it points to. The same
table drives ``unirl plan``, ``unirl diff`` and the docs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from unirl.backend.environment import StagedPlugins
from unirl.backend.plan import LaunchPlan, MappedField
from unirl.environments.contract import EnvironmentSpec
from unirl.errors import FieldError, Unsupported
from unirl.recipe.fields import value_at
from unirl.recipe.schema import Recipe
from unirl.rewards.spec import RewardRuntimeSpec
from unirl.versions import matches

Launcher = Literal["in_process", "process", "container"]
"""How a backend starts: a call unirl can make in its own process (or one child runner), the backend's own command
in its interpreter, or only inside the backend's container image."""


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, from its plugin's own declaration.

    Two kinds of field: prose for people (``unirl frameworks``, ``unirl diff``; never parsed), and typed fields that
    unirl decides by (``advise``, schedulers, the reward policy). What a backend supports field by field (KL
    estimators, loss aggregations, ...) is its mapping table's (:attr:`Mapping.allowed`), not restated here.
    """

    # shown to people
    algorithms: tuple[str, ...]
    """The recipe's ``algorithm.name`` values the plugin maps (a recipe's other names are refused)."""
    rollout_engines: tuple[str, ...]
    """Registered rollout-engine names the plugin drives (a recipe's other engines are refused)."""
    placement: tuple[str, ...]
    """Prose: how rollout and training share GPUs (the colocated form first where ``colocated_rollouts``)."""
    modes: tuple[str, ...]
    """Prose: sync and async modes."""
    training_backends: tuple[str, ...]
    """Prose: the training engines (FSDP, DeepSpeed, Megatron-LM, ...)."""
    multi_node: str
    """Prose: how a multi-node run is launched."""
    custom_reward: str
    """Prose: how the backend loads a custom reward."""
    runs_on_cpu: bool
    # decided by
    needs_gpu: bool = False
    """Training cannot start without a GPU (or NPU): unirl checks before launching (see ``cpu_mode``)."""
    cpu_mode: str = ""
    """How a backend that ``needs_gpu`` trains on the CPU when the recipe asks for it (``resources.device=cpu``);
    empty: it cannot. ``auto`` never picks it: without a GPU the plan still assumes one (a GPU run planned here)."""
    launcher: Launcher = "process"
    """How it starts: ``in_process`` is what ``advise`` counts as "no cluster to start" for a first run."""
    async_rollouts: bool = False
    """Rollouts can overlap training (an asynchronous mode exists, whether or not unirl maps it yet)."""
    colocated_rollouts: bool = False
    """Rollout and training can share the same GPUs, taking turns."""
    ray_across_nodes: bool = False
    """A multi-node run is a Ray cluster over the nodes (a Slurm launch starts one across the allocation)."""
    can_exclude_rewards: bool = False
    """A sample whose reward call failed can be left out (no reward, no advantage): ``reward_policy.on_error=exclude``
    and what ``auto`` resolves to; otherwise the backend needs a number for every sample."""
    model_parallel: bool = False
    """Tensor/pipeline model parallelism (Megatron) for models too large to train by sharding alone."""
    shards_training_state: bool = False
    """Weights, gradients and optimizer state can be sharded over GPUs (FSDP, ZeRO, Megatron)."""
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
Scalar = str | int | float | bool | None


def store_true(on: bool) -> Any:
    """An argparse ``store_true`` flag: sent bare (True) when on, not sent (:data:`OMIT`, its default) when off."""
    return True if on else OMIT


def follows(value: Any, view: NativeView) -> dict[str, Any]:
    """The :attr:`Mapping.inverse` of a key that follows from a field another row imports (verl's load_format with
    LoRA, say): it says nothing of its own."""
    return {}


class NativeView(Protocol):
    """What an :attr:`Mapping.inverse` reads: the native configuration being imported and the recipe so far."""

    def get(self, key: str) -> Any:
        """A native key's value as imported, else the backend's default for it (the row's ``native_default``)."""

    def field(self, dotted: str) -> Any:
        """A recipe field as imported so far, else the recipe's default."""


@dataclass(frozen=True)
class Mapping:
    """One recipe field and how it becomes a native key.

    ``convert`` takes the recipe and returns the native value (or :data:`OMIT`); ``allowed`` lists the values of
    the row's recipe field the backend honours, as data (``unirl explain`` shows them), and ``supported`` is a
    predicate for what depends on other fields too; anything else is an error naming the field, saying
    ``supported_text`` (by default the allowed values). ``versions`` gates the row to the backend versions that have
    this key (e.g. ``">=0.10.2"``); ``native_default`` is what the backend uses when the key is not sent, shown by
    ``unirl diff`` and ``unirl explain``.
    """

    recipe_field: str
    native_key: str
    convert: Callable[[Recipe], Any]
    note: str = ""
    supported: Callable[[Recipe], bool] | None = None
    supported_text: str = ""
    versions: str = ""
    native_default: Any = field(default=NO_DEFAULT)
    allowed: tuple[Scalar, ...] = ()
    note_for: Callable[[Recipe], str] | None = None
    """The plan row's note for this recipe, when it depends on the recipe (a null resolved to a default, say);
    ``note`` stays the general text ``unirl explain`` shows."""
    inverse: Callable[[Any, NativeView], dict[str, Any]] | None = None
    """``unirl import``: the recipe fields (dotted name -> value) a native value of this row's key stands for, where
    ``convert`` is more than a rename or a lookup table (a unit conversion, a value that depends on other keys); it
    raises ValueError for a value the recipe cannot express (the key then stays in ``framework.overrides``). Rows
    without one are inverted generically (:mod:`unirl.backend.importing`)."""
    run_length: bool = False
    """The key is one of the backend's run-length keys (steps, epochs, sample caps): once its inverse read it, the
    plan's value may differ and still mean the same run (epochs the plan counts are unrolled into the exported data,
    so verl's total_epochs becomes 1), and the imported value is not kept as a native override."""

    def refusal(self, recipe: Recipe) -> str | None:
        """What the backend supports instead, when it cannot honour the recipe's value; None when it can."""
        if self.allowed and value_at(recipe, self.recipe_field) not in self.allowed:
            return self.supported_text or " and ".join(str(v) for v in self.allowed)
        if self.supported is not None and not self.supported(recipe):
            return self.supported_text
        return None


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
        refusal = m.refusal(recipe)
        if refusal is not None:
            problems.append(Unsupported(m.recipe_field, value_at(recipe, m.recipe_field), backend, refusal))
            continue
        value = m.convert(recipe)
        default = None if m.native_default is NO_DEFAULT else m.native_default
        note = m.note_for(recipe) if m.note_for is not None else m.note
        if value is OMIT:
            rows.append(MappedField(m.recipe_field, m.native_key, None, note or "not sent: backend default",
                                    default))
            continue
        rows.append(MappedField(m.recipe_field, m.native_key, value, note, default))
        if not m.native_key.startswith("("):
            native[m.native_key] = value
    return rows, native, problems


@dataclass(frozen=True)
class RunInputs:
    """What the host resolved for a run that the backend's side needs: the reward specification (for what this
    backend can do with a failed reward) and the lifecycle plugins its processes load for the run record."""

    rewards: RewardRuntimeSpec
    plugins: StagedPlugins = field(default_factory=lambda: StagedPlugins(()))
    environment: EnvironmentSpec | None = None
    """The registration of ``environment.name``, for a backend whose rollout engine runs it in its own processes."""


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

    def require_resumable(self, run_dir: Path) -> None:
        """Raise when ``run.resume=true`` cannot continue ``run_dir`` (nothing to resume from). Called before Hydra
        starts, so that a refusal leaves the directory as it was; a backend that resumes from its own checkpoints
        (or starts over) does nothing here."""

    def prepare(self, plan: LaunchPlan, run_dir: Path, inputs: RunInputs) -> LaunchPlan:
        """Write what the launch needs into ``run_dir`` and check the machine; returns the resolved plan.
        ``inputs``: what the host resolved for the run's backend side (:func:`unirl.host.planning.run_inputs`)."""


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
