"""The run's environment as plain data, for rollout engines in another interpreter (verl's agent-loop workers,
OpenRLHF's vLLM engine actors): which class, its arguments, the episode's limits and the reward specification the
recipe's rewards come from. The host writes it beside the reward spec; the engine reads it back and imports the
class by reference (or from its file, copied into the run directory), so every process runs the same environment.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from unirl.environments.contract import Environment, EnvironmentSpec, Task, decorated_environments
from unirl.environments.episode import EpisodeRunner
from unirl.errors import UnirlError
from unirl.rewards.spec import load_reward_file

ENVIRONMENT_SPEC_FILE = "environment_spec.json"
ENVIRONMENT_SPEC_ENV = "UNIRL_ENVIRONMENT_SPEC"
"""Where a rollout process finds the spec when nothing else can tell it (slime's generate function)."""


@dataclass(frozen=True)
class EnvironmentRuntimeSpec:
    name: str
    ref: str
    """``module:qualname`` of the class."""
    file: str | None = None
    """The defining file, when its module is not importable by name (``environment.file``, a unirlfile.py)."""
    metrics: tuple[str, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int | None = None
    timeout_s: float = 30.0
    max_new_tokens: int = 256
    """The episode's completion budget, every turn and observation included (``algorithm.max_new_tokens``)."""
    chat_template: bool | None = None
    """Render the episode through the tokenizer's chat template (``data.chat_template``), or as plain text; None:
    through the template when the tokenizer has one."""
    reward_spec: str | None = None
    """The run's reward specification: the recipe's rewards, scored on the episode's transcript."""

    @classmethod
    def of(cls, spec: EnvironmentSpec, **settings: Any) -> EnvironmentRuntimeSpec:
        return cls(spec.name, spec.ref, spec.file, tuple(spec.metrics), **settings)

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> EnvironmentRuntimeSpec:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise UnirlError(f"environment specification {path} does not exist") from exc
        return cls(**{**data, "metrics": tuple(data.get("metrics", ()))})

    def load(self) -> EnvironmentSpec:
        """The registration, with the class imported here (by module name, else from its file)."""
        module_name, _, qualname = self.ref.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if not self.file:
                raise
            module = load_reward_file(self.file)
        found: Any = module
        for part in qualname.split("."):
            found = getattr(found, part, None)
        if found is None:  # a class made by a factory (from_openenv): the module registered it by name
            found = next((s.cls for s in decorated_environments() if s.name == self.name
                          and s.cls.__module__ == module.__name__), None)
        if not (isinstance(found, type) and issubclass(found, Environment)):
            raise UnirlError(f"environment {self.name!r}: {self.ref} is not a unirl.Environment class")
        return EnvironmentSpec(self.name, found, self.metrics, (found.__doc__ or "").strip(), module.__name__,
                               qualname, self.file)

    def runner(self, spec: EnvironmentSpec, task: Task) -> EpisodeRunner:
        return EpisodeRunner(spec, self.kwargs, task, timeout_s=self.timeout_s, max_turns=self.max_turns)
