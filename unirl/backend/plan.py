"""The LaunchPlan: what a backend will receive, as plain data.

``plan`` is pure (same recipe, same plan, byte for byte): it is what ``unirl plan`` prints, what
``unirl diff`` compares, what the run directory keeps, and what a scheduler submits. Everything in it
is JSON-serialisable. Paths inside the run directory are written as ``{run_dir}/...``: the directory
does not exist when the plan is made, and :meth:`LaunchPlan.resolve` fills it in at launch.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

RUN_DIR = "{run_dir}"


def in_run_dir(*parts: str) -> str:
    """A path inside the run directory as a plan writes it: ``in_run_dir("data", "train.jsonl")``."""
    return "/".join((RUN_DIR, *parts))


@dataclass
class MappedField:
    """One row of a backend's translation: recipe field -> native key, with the value sent."""

    recipe_field: str
    native_key: str
    value: Any
    note: str = ""
    native_default: Any = None
    """What the backend would use if unirl did not set the key (None where it has no default or unirl knows none)."""


@dataclass(frozen=True)
class AutoValue:
    """One recipe field left at ``auto``, as the plan's backend resolved it (:mod:`unirl.backend.auto`)."""

    field: str
    value: Any
    why: str
    source: str = "auto"
    """What the value was resolved from: ``auto``, or another field (``algorithm.epochs=3`` for the steps it makes)."""

    def text(self) -> str:
        """``resources.gpus_per_node: auto -> 1 (why)``, as ``unirl plan`` prints it."""
        shown = str(self.value).lower() if isinstance(self.value, bool) else str(self.value)
        return f"{self.field}: {self.source} -> {shown} ({self.why})"


@dataclass
class DataExport:
    """One data file the launch writes from the recipe's data, in the backend's own format."""

    split: str  # train | eval
    source: str | list[str]  # the recipe's data.train / data.eval (one source or a list)
    format: str  # an exporter name from unirl.backend.export.FORMATS
    path: str  # where it is written, usually under {run_dir}
    rows: int | None = None
    """Exact number of rows to write (cycling through the data, reshuffled each pass); None = every row once."""
    pass_rows: int | None = None
    """Rows each pass keeps (``algorithm.epochs``: whole batches, a pass's incomplete last batch dropped as the
    backends drop it); None = passes run into each other."""


@dataclass
class BackendEnvironment:
    """Where the backend runs and what that place needs from unirl."""

    kind: str = "in_process"  # in_process | interpreter | image
    python: str = "python"
    """The backend's interpreter (inside the image, for kind=image)."""
    image: str | None = None
    container_runtime: str | None = None  # docker | apptainer
    nodes: int = 1
    gpus_per_node: int = 0
    """GPUs the launch expects on each node; checked before anything starts."""
    light_core: list[str] = field(default_factory=list)
    """unirl packages staged into the run directory and put on PYTHONPATH there (no pip install needed)."""
    reward_paths: list[str] = field(default_factory=list)
    """Directories of the recipe's reward files, also put on PYTHONPATH in the backend's environment."""
    mounts: list[str] = field(default_factory=list)
    """Local directories the backend reads besides the run directory (a local model), bound into a container."""


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
    """The command line the launch runs (before any container wrapping)."""
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Files the launch writes (path -> content, or a description in angle brackets when made at launch)."""
    in_process: bool = False
    """The local scheduler may call the entrypoint in the unirl process (same interpreter)."""
    notes: list[str] = field(default_factory=list)
    recipe: dict[str, Any] = field(default_factory=dict)
    data: list[DataExport] = field(default_factory=list)
    environment: BackendEnvironment = field(default_factory=BackendEnvironment)
    target_version: str | None = None
    """The backend version the translation was made for (the installed one, else the plugin's tested one)."""
    auto: list[AutoValue] = field(default_factory=list)
    """The recipe's ``auto`` fields and what this backend resolved each to (``recipe`` holds the resolved values)."""
    record_follower: bool = False
    """The launch runs ``command`` under unirl's follower (``python -m unirl.adapters.follow``), which reads the
    backend's own logs into the run record while it trains (every native backend; see unirl.record.follow)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LaunchPlan:
        data = dict(data)
        data["mapping"] = [MappedField(**m) for m in data.get("mapping", [])]
        data["data"] = [DataExport(**d) for d in data.get("data", [])]
        data["environment"] = BackendEnvironment(**data.get("environment", {}))
        data["auto"] = [AutoValue(**a) for a in data.get("auto", [])]
        return cls(**data)

    def resolve(self, run_dir: str) -> LaunchPlan:
        """The same plan with every ``{run_dir}`` replaced by the real directory."""
        return LaunchPlan.from_dict(_substitute(self.to_dict(), run_dir))


def _substitute(value: Any, run_dir: str) -> Any:
    if isinstance(value, str):
        return value.replace(RUN_DIR, run_dir)
    if isinstance(value, list):
        return [_substitute(v, run_dir) for v in value]
    if isinstance(value, dict):
        return {_substitute(k, run_dir): _substitute(v, run_dir) for k, v in value.items()}
    return value
