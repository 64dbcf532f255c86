"""The run's reward specification: which rewards, weights, arguments and error policy, as plain data.

The host builds it from the recipe; every adapter (inside TRL, verl, OpenRLHF, NeMo RL, slime, vime
processes, often in another interpreter) reads it back from a JSON file and imports each reward by its
reference. It also fixes the component keys, so all backends log the same columns.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from unirl.errors import FieldError, UnirlError
from unirl.rewards import RewardFunction

ON_ERROR_CHOICES = ("auto", "exclude", "fallback", "abort")


@dataclass(frozen=True)
class RewardEntry:
    name: str
    ref: str  # "module:qualname"
    file: str | None = None  # the defining file, used when the module is not importable by name
    weight: float = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)
    components: tuple[str, ...] = ()
    kind: str = "sample"


@dataclass
class RewardPolicy:
    """How reward calls run and what a failure costs: the recipe's ``reward_policy`` group."""

    on_error: str = "auto"
    """What a sample with a failed reward call scores: exclude (no reward, TRL only), fallback
    (``fallback_score``), abort the run, or auto (exclude where the backend can drop a sample's reward,
    else fallback; ``unirl plan`` shows which). Failures are counted and logged in every case."""

    def resolved(self, backend: str | None) -> RewardPolicy:
        """The policy with ``auto`` decided for ``backend`` (None: a backend that can exclude)."""
        if self.on_error != "auto":
            return self
        can_exclude = backend is None or backend in EXCLUDE_CAPABLE
        return replace(self, on_error="exclude" if can_exclude else "fallback")
    fallback_score: float = 0.0
    """The score a failed reward call gets under ``on_error=fallback``."""
    max_error_rate: float = 0.05
    """Abort the run when more than this fraction of reward calls so far failed (checked from min_calls on)."""
    min_calls: int = 100
    """Reward calls before max_error_rate is checked, so one early failure does not abort."""
    timeout_s: float = 30.0
    """Per reward call, in seconds; an overrunning call's worker process is killed and the call counted failed."""
    workers: int = 2
    """Reward worker processes scoring in parallel; 0 scores in the trainer's thread (then only async rewards
    can time out)."""

    def problems(self) -> list[FieldError]:
        found = []
        if self.on_error not in ON_ERROR_CHOICES:
            found.append(FieldError("reward_policy.on_error", self.on_error, f"one of {list(ON_ERROR_CHOICES)}"))
        if not 0 <= self.max_error_rate <= 1:
            found.append(FieldError("reward_policy.max_error_rate", self.max_error_rate, "must be in [0, 1]"))
        if self.min_calls < 1:
            found.append(FieldError("reward_policy.min_calls", self.min_calls, "must be >= 1"))
        if not self.timeout_s > 0:
            found.append(FieldError("reward_policy.timeout_s", self.timeout_s, "must be > 0 seconds"))
        if self.workers < 0:
            found.append(FieldError("reward_policy.workers", self.workers,
                                    "must be >= 0 (0 scores in the trainer's thread)"))
        return found


@dataclass(frozen=True)
class RewardRuntimeSpec:
    rewards: tuple[RewardEntry, ...]
    policy: RewardPolicy = field(default_factory=RewardPolicy)
    trajectory_log: str | None = None
    """The run's trajectories.jsonl; adapters inside backend processes append every scored sample to it."""

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rewards]

    def component_keys(self) -> list[str]:
        """The fixed ``<reward>/<component>`` keys every scored sample carries."""
        return [f"{r.name}/{c}" for r in self.rewards for c in r.components]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    def write(self, path: Path) -> Path:
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardRuntimeSpec:
        rewards = tuple(RewardEntry(**{**r, "components": tuple(r.get("components", ()))}) for r in data["rewards"])
        spec = cls(rewards, RewardPolicy(**data.get("policy", {})).resolved(None), data.get("trajectory_log"))
        spec.check()
        return spec

    @classmethod
    def read(cls, path: str | Path) -> RewardRuntimeSpec:
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except FileNotFoundError as exc:
            raise UnirlError(f"reward specification {path} does not exist") from exc

    def check(self, backend: str | None = None) -> None:
        p = self.policy
        problems = p.problems()
        if problems:
            raise problems[0]
        if p.on_error == "exclude" and backend is not None and backend not in EXCLUDE_CAPABLE:
            raise FieldError("reward_policy.on_error", p.on_error,
                             f"fallback or abort on {backend}: it needs a number for every sample "
                             f"(exclude works on {', '.join(EXCLUDE_CAPABLE)})")
        names = self.names
        if len(set(names)) != len(names):
            raise FieldError("rewards", names, "each reward at most once")


# Backends whose reward column may hold "no value": TRL ignores None rewards (NaN-aware sums).
EXCLUDE_CAPABLE = ("trl",)


def entry_for(fn: RewardFunction, weight: float = 1.0, kwargs: dict[str, Any] | None = None) -> RewardEntry:
    return RewardEntry(name=fn.name, ref=fn.ref, file=fn.file, weight=float(weight), kwargs=dict(kwargs or {}),
                       components=tuple(fn.components), kind=fn.kind)


def register_reward_files(recipe: Any, registry: Any) -> None:
    """Rewards from files named in the recipe register like any other (before names are checked)."""
    from unirl.plugins import add_decorated

    for i, spec in enumerate(recipe.rewards):
        if spec.file:
            try:
                load_reward_file(spec.file)
            except FieldError as exc:
                raise FieldError(f"rewards[{i}].file", spec.file, exc.allowed) from None
            except Exception as exc:
                raise FieldError(f"rewards[{i}].file", spec.file, f"a file that imports cleanly; it raised {exc!r}") \
                    from exc
    add_decorated(registry)


def spec_from_recipe(recipe: Any, registry: Any, backend: str | None = None) -> RewardRuntimeSpec:
    """The recipe's ``rewards`` and ``reward_policy`` resolved through the host's reward registry, checked for
    ``backend``. Reward files load here too: a backend in another interpreter did not run the host's preflight."""
    register_reward_files(recipe, registry)
    entries = tuple(entry_for(registry.get(s.name), s.weight, s.kwargs) for s in recipe.rewards)
    spec = RewardRuntimeSpec(entries, RewardPolicy(**asdict(recipe.reward_policy)).resolved(backend))
    spec.check(backend)
    return spec


def load_reward_file(path: str | Path) -> Any:
    """Import a local reward file (its ``@unirl.reward`` functions register) under a stable module name."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FieldError("rewards[].file", str(path), "an existing Python file")
    module_name = f"unirl_reward_file_{file.stem}_{hashlib.sha256(str(file).encode()).hexdigest()[:8]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[module_name]
        raise
    return module


def load_reward(entry: RewardEntry) -> RewardFunction:
    """Import the reward an entry points at, by module name or, failing that, by its defining file."""
    module_name, _, qualname = entry.ref.partition(":")
    if module_name == "__main__":
        raise UnirlError(f"reward {entry.name!r} is defined in __main__, which worker processes cannot import; "
                         "move it into a module or a file named in the recipe, or use reward_policy.workers=0")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if entry.file is None or (exc.name != module_name.split(".")[0] and exc.name != module_name):
            raise
        module = load_reward_file(entry.file)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, RewardFunction):
        raise UnirlError(f"reward {entry.name!r}: {entry.ref} is a {type(obj).__name__}, not a @unirl.reward function")
    return obj
