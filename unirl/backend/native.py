"""What every backend that runs outside unirl's process shares: translation by mapping table, the
backend's environment, validation in the backend's own interpreter, and the launch's files.

verl, OpenRLHF, NeMo RL, slime and vime plugins subclass :class:`NativeFramework` and add their
capabilities, mapping table, ``plan`` and a key schema; nothing here knows a particular backend.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend.contract import OMIT, Capabilities, FrameworkOptions, Mapping, translate
from unirl.backend.environment import (
    CORE_DIR,
    check_environment,
    check_gpus,
    package_dir,
    python_option,
    run_check,
    stage_light_core,
    version_in,
)
from unirl.backend.plan import RUN_DIR, BackendEnvironment, LaunchPlan, MappedField
from unirl.errors import FieldError, RecipeInvalid, UnirlError, Unsupported
from unirl.recipe.schema import BUILTIN_PREFIX, HUB_PREFIX, Recipe, is_local_path, recipe_from_dict
from unirl.record.layout import NATIVE_CONFIG, PLAN, write_json
from unirl.record.trajectory_log import TrajectorySampling
from unirl.versions import matches

SPEC_FILE = "reward_spec.json"
# Always staged into the backend's environment: unirl's core, the built-in rewards, and pluggy (unirl's one
# runtime dependency that a backend's environment may lack; pure Python).
CORE_PACKAGES = ("unirl", "pluggy")  # unirl holds its plugins (the backend's, the built-in rewards)


MODEL_DIR = "model"


def model_location(recipe: Recipe) -> str:
    """Where the backend loads the model from: a builtin model is written into the run directory at launch
    (every GPU backend loads models from a path), anything else is passed as given."""
    return f"{RUN_DIR}/{MODEL_DIR}" if recipe.model.path.startswith(BUILTIN_PREFIX) else recipe.model.path


@dataclass
class Translation:
    """The first half of every ``plan``: the version translated for, the mapping table applied, the problems."""

    version: str
    installed: str | None
    rows: list[MappedField]
    native: dict[str, Any]
    problems: list[FieldError]


class NativeFramework:
    """A backend launched as its own process, in its own interpreter or container."""

    name: ClassVar[str]
    description: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    mapping: ClassVar[tuple[Mapping, ...]]
    plugin_package: ClassVar[str]
    """This plugin's package: staged with the light core (its check module and launcher live there)."""
    check_module: ClassVar[str | None] = None
    """``python -m`` module validating a plan inside the backend's interpreter; None = key schema only."""
    extra_options: ClassVar[dict[str, Any]] = {}
    supported_versions: ClassVar[str] = ""
    """A version gate the whole plugin is written for (e.g. ``">=0.9,<0.10"``); empty = no gate."""
    supported_versions_text: ClassVar[str] = ""
    """What the refusal says a user can do instead (e.g. the release whose layout the table follows)."""

    @property
    def options(self) -> dict[str, Any]:
        return {**asdict(FrameworkOptions(name=self.name)), **self.extra_options}

    # --- versions -------------------------------------------------------------------------------------

    def installed_version(self, python: str | None = None) -> str | None:
        dist = self.capabilities.distribution
        if dist is None:
            return None
        python = python or python_option(self.name, {})
        if python:
            return version_in(python, dist)
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    def target_version(self, recipe: Recipe) -> tuple[str, str | None]:
        """(the version to translate for, the installed version or None)."""
        options = recipe.framework
        installed = None if options.get("image") else self.installed_version(python_option(self.name, options))
        wanted = options.get("version")
        if wanted and installed and wanted != installed:
            raise FieldError("framework.version", wanted,
                             f"{self.name} {installed} is installed in the backend's interpreter; translate for the "
                             "installed version (leave framework.version null) or point framework.python elsewhere")
        return wanted or installed or self.capabilities.tested_version, installed

    # --- shared plan pieces ---------------------------------------------------------------------------

    def translation(self, recipe: Recipe) -> Translation:
        """Version, the mapping table applied, and every problem found so far (not raised yet)."""
        version, installed = self.target_version(recipe)
        problems = self.common_problems(recipe)
        if self.supported_versions and not matches(version, self.supported_versions):
            problems.append(Unsupported("framework.version", version, self.name,
                                        f"versions {self.supported_versions} ({self.supported_versions_text})"))
        rows, native, unsupported = translate(recipe, self.mapping, self.name, version)
        return Translation(version, installed, rows, native, problems + unsupported)

    def common_problems(self, recipe: Recipe) -> list[FieldError]:
        """What no GPU-only backend can do, named by field."""
        problems: list[FieldError] = []
        caps = self.capabilities
        if caps.needs_gpu and recipe.resources.gpus_per_node < 1:
            problems.append(Unsupported("resources.gpus_per_node", recipe.resources.gpus_per_node, self.name,
                                        ">= 1: it trains on GPUs only (set the GPUs per node the run may use)"))
        if caps.needs_gpu and recipe.resources.device == "cpu":
            problems.append(Unsupported("resources.device", "cpu", self.name, "cuda (or auto): it trains on GPUs"))
        if recipe.rollout.engine not in caps.rollout_engines:
            problems.append(Unsupported("rollout.engine", recipe.rollout.engine, self.name,
                                        " and ".join(caps.rollout_engines)))
        if recipe.algorithm.name not in caps.algorithms:
            problems.append(Unsupported("algorithm.name", recipe.algorithm.name, self.name,
                                        ", ".join(caps.algorithms)))
        if recipe.reward_policy.on_error == "exclude":
            problems.append(Unsupported("reward_policy.on_error", "exclude", self.name,
                                        "fallback or abort: it needs a number for every sample"))
        return problems

    def environment(self, recipe: Recipe) -> BackendEnvironment:
        options = recipe.framework
        image, python = options.get("image"), python_option(self.name, options)
        kind = "image" if image else "interpreter"
        return BackendEnvironment(
            kind=kind, python=python or ("python3" if image else "python"), image=image,
            container_runtime=options.get("container_runtime", "docker") if image else None,
            nodes=recipe.resources.nodes, gpus_per_node=recipe.resources.gpus_per_node,
            light_core=list(CORE_PACKAGES),
            reward_paths=sorted({str(Path(s.file).expanduser().resolve().parent) for s in recipe.rewards if s.file}),
            mounts=local_inputs(recipe))

    def overrides(self, recipe: Recipe) -> list[MappedField]:
        """The ``framework.overrides`` escape hatch, shown as rows like the mapped fields.

        Nested keys flatten to dotted ones, so ``+framework.overrides.trainer.val_only=true`` (Hydra nests
        it) sends ``trainer.val_only``."""
        flat = flatten(recipe.framework.get("overrides") or {})
        return [MappedField(f"framework.overrides.{k}", k, v, "raw native key, applied last")
                for k, v in sorted(flat.items())]

    def build_plan(self, recipe: Recipe, *, version: str, installed: str | None, native_config: dict[str, Any],
                   rows: list[MappedField], command: list[str], data: list[Any], notes: list[str],
                   files: dict[str, str] | None = None, env: dict[str, str] | None = None) -> LaunchPlan:
        policy = recipe.reward_policy.resolved(self.name)
        rows = [*rows, MappedField("reward_policy.on_error", "(unirl reward adapter)", policy.on_error,
                                   "what a failed reward call scores; counted and logged either way")]
        return LaunchPlan(
            framework=self.name, framework_version=installed, target_version=version,
            entrypoint=f"{self.plugin_package}:{self.name}", native_config=native_config, mapping=rows,
            command=command, env={"UNIRL_REWARD_SPEC": f"{RUN_DIR}/{SPEC_FILE}", **(env or {})},
            files={SPEC_FILE: "<the run's reward specification (rewards, weights, kwargs, policy), written at launch>",
                   **(files or {})},
            in_process=False, notes=notes, recipe=asdict(recipe), data=data, environment=self.environment(recipe))

    def refuse(self, problems: list[FieldError]) -> None:
        if problems:
            raise RecipeInvalid(problems, context=f"recipe for {self.name}")

    # --- validation -----------------------------------------------------------------------------------

    def check_in_backend(self, plans: list[LaunchPlan], **extra: Any) -> list[dict[str, Any]]:
        """Run the plugin's check module on ``plans`` in the backend's own interpreter (one process for all)."""
        if not self.check_module:
            raise UnirlError(f"{self.name} has no check that runs in its own interpreter")
        python = python_option(self.name, plans[0].recipe.get("framework", {})) if plans else None
        result = run_check(python or sys.executable, self.check_module,
                           {"plans": [p.to_dict() for p in plans], **extra}, list(CORE_PACKAGES))
        return [{**r, "version": result.get("version")} for r in result.get("results", [result])]

    def validate(self, plan: LaunchPlan) -> None:
        """Against the backend's own code where it is installed, else against the plugin's key schema."""
        # plan.framework_version is what plan() found installed in the backend's interpreter (None: not there).
        if self.check_module and plan.environment.kind != "image" and plan.framework_version:
            [result] = self.check_in_backend([plan])
            if result.get("problems"):
                lines = "\n".join(f"  - {p}" for p in result["problems"])
                raise UnirlError(f"{self.name} {result.get('version')} rejected the generated configuration "
                                 f"({len(result['problems'])} problem(s)):\n{lines}")
            return
        problems = self.schema_problems(plan)
        if problems:
            lines = "\n".join(f"  - {p}" for p in problems)
            raise UnirlError(f"the plan does not fit {self.name} {plan.target_version}'s key schema:\n{lines}")

    def schema_problems(self, plan: LaunchPlan) -> list[str]:
        """Problems found by the plugin's key schema (written from the backend's documented config)."""
        return []

    # --- launch ---------------------------------------------------------------------------------------

    def prepare(self, plan: LaunchPlan, run_dir: Path, host: Any) -> LaunchPlan:
        """Check the machine, then stage the light core, the reward spec, the data and the plugin's files."""
        from unirl.backend.export import write_export
        from unirl.rewards.spec import spec_from_recipe

        check_environment(plan.environment)
        check_gpus(self.name, plan.environment)
        recipe = recipe_from_dict(plan.recipe)
        resolved = plan.resolve(str(run_dir))
        run_dir.mkdir(parents=True, exist_ok=True)
        spec = spec_from_recipe(recipe, host.rewards, self.name)
        sampling = TrajectorySampling.from_logging(plan.recipe.get("logging", {}))
        log = str(run_dir / sampling.file_name()) if recipe.logging.trajectories else None
        spec = replace(spec, trajectory_log=log, trajectory_per_group=sampling.per_group)
        packages = [*CORE_PACKAGES, *user_reward_packages(spec)]
        stage_light_core(run_dir / CORE_DIR, packages)
        spec.write(run_dir / SPEC_FILE)
        for export in resolved.data:
            write_export(recipe, export)
        if recipe.model.path.startswith(BUILTIN_PREFIX):
            from unirl.data.builtin import tiny_model

            seed = recipe.model.init_seed if recipe.model.init_seed is not None else recipe.seed
            tiny_model.save(recipe.model.path[len(BUILTIN_PREFIX):], seed, run_dir / MODEL_DIR)
        self.write_files(resolved, run_dir)
        write_json(run_dir / PLAN, resolved.to_dict())
        write_json(run_dir / NATIVE_CONFIG, resolved.native_config)
        return resolved

    def write_files(self, plan: LaunchPlan, run_dir: Path) -> None:
        """Plugin-specific files (a reward module, a config file); the plan's ``files`` say which."""


def local_inputs(recipe: Recipe) -> list[str]:
    """A local model directory: a container sees only what is bound into it."""
    path = recipe.model.path
    if path.startswith((BUILTIN_PREFIX, HUB_PREFIX)) or not is_local_path(path):
        return []
    return [str(Path(path).expanduser().resolve())]


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, dotted))
        else:
            flat[dotted] = value
    return flat


def user_reward_packages(spec: Any) -> list[str]:
    """Top-level packages of installed third-party rewards, staged so the backend imports the same code."""
    found: list[str] = []
    for entry in spec.rewards:
        top = entry.ref.partition(":")[0].split(".")[0]
        if entry.file or top in CORE_PACKAGES or top in found:
            continue
        if package_dir(top) is None:
            raise UnirlError(f"reward {entry.name!r} comes from {top!r}, which is not a pure-Python package that "
                             "unirl can stage into the backend's environment; install it there")
        found.append(top)
    return found


__all__ = ["OMIT", "NativeFramework", "Translation", "model_location", "translate"]
