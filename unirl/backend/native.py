"""What every backend that runs outside unirl's process shares: translation by mapping table, the
backend's environment, validation in the backend's own interpreter, and the launch's files.

verl, OpenRLHF, NeMo RL, slime and vime plugins subclass :class:`NativeFramework` and add their capabilities, mapping
table and key schema, plus the few steps of :meth:`NativeFramework.plan` that differ (extra checks, the native config,
the command, notes, the data export format); nothing here knows a particular backend.
"""

from __future__ import annotations

import importlib.metadata as md
import shutil
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend.auto import resolve
from unirl.backend.contract import OMIT, Capabilities, FrameworkOptions, Mapping, RunInputs, translate
from unirl.backend.environment import (
    CORE_DIR,
    check_environment,
    check_gpus,
    package_dir,
    python_option,
    run_check,
    stage_light_core,
    stage_plugins,
    version_in,
)
from unirl.backend.export import export_path, write_export
from unirl.backend.plan import BackendEnvironment, DataExport, LaunchPlan, MappedField, in_run_dir
from unirl.data.run_length import counted_at_launch, epoch_steps
from unirl.environments.contract import EnvironmentSpec
from unirl.environments.runtime import ENVIRONMENT_SPEC_ENV, ENVIRONMENT_SPEC_FILE, EnvironmentRuntimeSpec
from unirl.errors import FieldError, RecipeInvalid, UnirlError, Unsupported
from unirl.recipe.schema import BUILTIN_PREFIX, HUB_PREFIX, Recipe, is_local_path, recipe_from_dict
from unirl.record.layout import NATIVE_CONFIG, PLAN, write_json
from unirl.record.trajectory_log import TrajectorySampling
from unirl.versions import matches, tables_version

SPEC_FILE = "reward_spec.json"
SPEC_PATH = in_run_dir(SPEC_FILE)
"""The run's reward specification, as the plan names it (every adapter reads it)."""
CORE_PATH = in_run_dir(CORE_DIR)
"""The staged light core, as the plan names it (on the backend's PYTHONPATH)."""
ENVIRONMENT_DIR = "environment"  # inside the run directory: a file-defined environment's copy
CHECKPOINTS = in_run_dir("checkpoints")
"""Where every native backend is told to write its checkpoints."""
# Always staged into the backend's environment: unirl's core, the built-in rewards, and pluggy (unirl's one
# runtime dependency that a backend's environment may lack; pure Python).
CORE_PACKAGES = ("unirl", "pluggy")  # unirl holds its plugins (the backend's, the built-in rewards)


MODEL_DIR = "model"
# What every native backend declares alike: GPU trainers on a Ray cluster that can colocate rollouts with training
# and shard the training state. Each plugin adds what sets it apart (async rollouts, model parallelism, launcher).
GPU_ON_RAY: dict[str, Any] = {"runs_on_cpu": False, "needs_gpu": True, "colocated_rollouts": True,
                              "ray_across_nodes": True, "shards_training_state": True}
BUILTIN_MODEL_FILES = {f"{MODEL_DIR}/": "<the builtin model and tokenizer>"}
BUILTIN_MODEL_NOTE = f"the builtin model is written to {in_run_dir(MODEL_DIR)} at launch"


DEFAULT_PROMPT_TOKENS = 512
"""The prompt budget every native backend gets when ``data.max_prompt_tokens`` is null: verl's and NeMo RL's own
default (verl/trainer/config/data/legacy_data.yaml ``max_prompt_length: 512``; NeMo RL's grpo_math_1B.yaml
``max_total_sequence_length: 512``), sent explicitly so that no backend falls back to a budget of its own (OpenRLHF's
2048 tokens for prompt *and* completion)."""


def prompt_budget(recipe: Recipe) -> int:
    """Prompt tokens the backend is told to make room for: ``data.max_prompt_tokens``, else
    :data:`DEFAULT_PROMPT_TOKENS`."""
    return recipe.data.max_prompt_tokens or DEFAULT_PROMPT_TOKENS


def prompt_budget_note(recipe: Recipe, how: str) -> str:
    """A plan row's note for the prompt budget: says when null was resolved to the default, then how it is sent."""
    if recipe.data.max_prompt_tokens:
        return how
    return f"data.max_prompt_tokens=null resolved to unirl's default of {DEFAULT_PROMPT_TOKENS} tokens; {how}"


DEFAULT_MICRO_BATCH = 4
"""The most completions per GPU per forward/backward pass a GPU backend gets when ``algorithm.micro_batch_size`` is
null: NeMo RL's own default (grpo_math_1B.yaml ``train_micro_batch_size: 4``); a whole per-GPU share (128 completions
and more) would exhaust a GPU's memory on any real model."""


def micro_batch(recipe: Recipe, training_gpus: int | None = None) -> int:
    """Completions per GPU per forward/backward pass: ``algorithm.micro_batch_size``, else the largest divisor of one
    training GPU's share of an update (:meth:`Recipe.micro_batch`) up to :data:`DEFAULT_MICRO_BATCH` (every backend
    needs the share split into whole micro-batches)."""
    if recipe.algorithm.micro_batch_size:
        return recipe.algorithm.micro_batch_size
    share = recipe.micro_batch(training_gpus)
    return max(d for d in range(1, min(share, DEFAULT_MICRO_BATCH) + 1) if share % d == 0)


def logprob_micro_batch(recipe: Recipe, training_gpus: int | None = None) -> int:
    """Completions per GPU per log-probability forward pass: ``algorithm.logprob_micro_batch_size``, else the training
    micro-batch (:func:`micro_batch`)."""
    return recipe.algorithm.logprob_micro_batch_size or micro_batch(recipe, training_gpus)


def micro_batch_note(recipe: Recipe, training_gpus: int | None = None) -> str:
    """The plan row's note: says what a null micro-batch was resolved to, and from which share."""
    if recipe.algorithm.micro_batch_size:
        return "completions per GPU per pass"
    share = recipe.micro_batch(training_gpus)
    return (f"algorithm.micro_batch_size=null resolved to {micro_batch(recipe, training_gpus)} completions per GPU per "
            f"pass: the largest divisor of one GPU's share of an update ({share}) up to {DEFAULT_MICRO_BATCH}")


MICRO_BATCH_NOTE = (f"completions per GPU per pass; null: the largest divisor of one GPU's share of an update up to "
                    f"{DEFAULT_MICRO_BATCH}")
LOGPROB_MICRO_BATCH_NOTE = "completions per GPU per log-prob pass; null: the training micro-batch"


def model_location(recipe: Recipe) -> str:
    """Where the backend loads the model from: a builtin model is written into the run directory at launch
    (every GPU backend loads models from a path), anything else is passed as given."""
    return in_run_dir(MODEL_DIR) if recipe.model.path.startswith(BUILTIN_PREFIX) else recipe.model.path


@dataclass
class Translation:
    """The first half of every ``plan``: the version translated for, the mapping table applied, the problems."""

    version: str
    """What the backend is (installed, ``framework.version``, else the tested one): the plan's target_version."""
    installed: str | None
    tables_version: str
    """The version the mapping rows and the key schema were chosen for (see :func:`unirl.versions.tables_version`)."""
    rows: list[MappedField]
    native: dict[str, Any]
    problems: list[FieldError]
    notes: list[str]
    """What the plan must say about the translation itself (a version translated as another)."""


class NativeFramework:
    """A backend launched as its own process, in its own interpreter or container.

    A plugin declares the class attributes below and overrides the plan steps it needs (:meth:`extra_problems`,
    :meth:`launch_keys`, :meth:`native_config`, :meth:`command`, :meth:`notes`, :meth:`extra_files`); :meth:`plan`
    itself is the one skeleton every native backend shares.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    mapping: ClassVar[tuple[Mapping, ...]]
    plugin_package: ClassVar[str]
    """This plugin's package: staged with the light core (its check module and launcher live there)."""
    export_format: ClassVar[str]
    """How the recipe's data is written for the backend: a format of :data:`unirl.backend.export.FORMATS`."""
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

    # --- plan: the skeleton -----------------------------------------------------------------------------

    def plan(self, recipe: Recipe) -> LaunchPlan:
        """Translate by the mapping table, refuse everything the backend cannot run (every problem at once), add the
        keys every launch needs, apply ``framework.overrides`` last, then let the steps below assemble the launch."""
        resolution = resolve(recipe, self)
        recipe = self.with_defaults(resolution.recipe)
        t = self.translation(recipe)
        self.refuse(t.problems + self.extra_problems(recipe))
        raw = self.overrides(recipe)
        native = self.apply_overrides({**t.native, **self.launch_keys(recipe)}, raw)
        policy = recipe.reward_policy.resolved(self.capabilities.can_exclude_rewards)
        rows = [*t.rows, *raw, MappedField("reward_policy.on_error", "(unirl reward adapter)", policy.on_error,
                                           "what a failed reward call scores; counted and logged either way")]
        builtin = recipe.model.path.startswith(BUILTIN_PREFIX)
        return LaunchPlan(
            framework=self.name, framework_version=t.installed, target_version=t.version,
            entrypoint=f"{self.plugin_package}:{self.name}",
            native_config=self.native_config(recipe, native, t.tables_version), mapping=rows,
            command=self.command(recipe, native, t.tables_version),
            env={"UNIRL_REWARD_SPEC": SPEC_PATH,
                 **({ENVIRONMENT_SPEC_ENV: in_run_dir(ENVIRONMENT_SPEC_FILE)} if recipe.environment.name else {}),
                 **self.launch_env(recipe)},
            files={SPEC_FILE: "<the run's reward specification (rewards, weights, kwargs, policy), written at launch>",
                   **({ENVIRONMENT_SPEC_FILE: "<the run's environment (class, kwargs, limits), written at launch>"}
                      if recipe.environment.name else {}),
                   **self.extra_files(recipe), **(BUILTIN_MODEL_FILES if builtin else {})},
            in_process=False, notes=[*t.notes, *self.notes(recipe), *([BUILTIN_MODEL_NOTE] if builtin else [])],
            recipe=asdict(recipe), data=self.data_exports(recipe), environment=self.environment(recipe),
            auto=list(resolution.values), record_follower=True)

    # --- plan: the steps a plugin overrides ------------------------------------------------------------------

    def with_defaults(self, recipe: Recipe) -> Recipe:
        """The recipe the plan is made from (a plugin may fill in its options' defaults); by default as given."""
        return recipe

    def extra_problems(self, recipe: Recipe) -> list[FieldError]:
        """What the backend would refuse beyond its mapping table (placement, resources), named by field."""
        return []

    def launch_keys(self, recipe: Recipe) -> dict[str, Any]:
        """Native keys every launch needs that no recipe field maps to (not shown as rows; overrides may replace)."""
        return {}

    def launch_env(self, recipe: Recipe) -> dict[str, str]:
        """Environment variables the launched command needs beyond the reward spec's (by default none)."""
        return {}

    def native_config(self, recipe: Recipe, native: dict[str, Any], version: str) -> dict[str, Any]:
        """The backend's configuration as the plan records it, from the translated keys (``version``: the tables')."""
        return {"overrides": native}

    def command(self, recipe: Recipe, native: dict[str, Any], version: str) -> list[str]:
        """The command line the launch runs (before any container wrapping)."""
        raise NotImplementedError(f"{type(self).__name__} must say how {self.name} is launched")

    def notes(self, recipe: Recipe) -> list[str]:
        """What the plan must tell the user about this backend's run (differences from unirl's own semantics)."""
        return []

    def extra_files(self, recipe: Recipe) -> dict[str, str]:
        """Files of the plugin's own that the launch writes (path -> description), see :meth:`write_files`."""
        return {}

    def data_exports(self, recipe: Recipe) -> list[DataExport]:
        """The train file holds exactly the prompts of the run, in the seeded order; the eval file every row."""
        fmt = self.export_format
        counted = epoch_steps(recipe)
        if counted_at_launch(recipe):  # every row once: the backend makes algorithm.epochs passes over them
            train = DataExport("train", recipe.data.train, fmt, export_path("train", fmt))
        else:
            train = DataExport("train", recipe.data.train, fmt, export_path("train", fmt), rows=recipe.prompts_per_run,
                               pass_rows=counted.per_pass * recipe.algorithm.prompts_per_step if counted else None)
        data = [train]
        if recipe.data.eval:
            data.append(DataExport("eval", recipe.data.eval, fmt, export_path("eval", fmt)))
        return data

    def overrides(self, recipe: Recipe) -> list[MappedField]:
        """The ``framework.overrides`` escape hatch, shown as rows like the mapped fields.

        Nested keys flatten to dotted ones, so ``+framework.overrides.trainer.val_only=true`` (Hydra nests
        it) sends ``trainer.val_only``."""
        flat = flatten(recipe.framework.get("overrides") or {})
        return [MappedField(f"framework.overrides.{k}", k, v, "raw native key, applied last")
                for k, v in sorted(flat.items())]

    def apply_overrides(self, native: dict[str, Any], raw: list[MappedField]) -> dict[str, Any]:
        """The translated keys with the raw overrides applied (a key sent twice keeps the override's value)."""
        return {**native, **{row.native_key: row.value for row in raw}}

    # --- plan: shared pieces ---------------------------------------------------------------------------------

    def translation(self, recipe: Recipe) -> Translation:
        """Version, the mapping table applied, and every problem found so far (not raised yet)."""
        version, installed = self.target_version(recipe)
        tables, note = tables_version(version, self.capabilities.tested_version)
        problems = self.common_problems(recipe)
        if self.supported_versions and not matches(tables, self.supported_versions):
            problems.append(Unsupported("framework.version", version, self.name,
                                        f"versions {self.supported_versions} ({self.supported_versions_text})"))
        rows, native, unsupported = translate(recipe, self.mapping, self.name, tables)
        return Translation(version, installed, tables, rows, native, problems + unsupported, [note] if note else [])

    def common_problems(self, recipe: Recipe) -> list[FieldError]:
        """What the backend's declared capabilities rule out, named by field."""
        problems: list[FieldError] = []
        caps = self.capabilities
        cpu_asked = bool(caps.cpu_mode) and recipe.resources.device == "cpu"
        if caps.needs_gpu and recipe.gpus_per_node < 1 and not cpu_asked:
            problems.append(Unsupported("resources.gpus_per_node", recipe.resources.gpus_per_node, self.name,
                                        ">= 1: it trains on GPUs only (set the GPUs per node the run may use)"))
        if caps.needs_gpu and recipe.resources.device == "cpu" and not caps.cpu_mode:
            problems.append(Unsupported("resources.device", "cpu", self.name, "cuda (or auto): it trains on GPUs"))
        if recipe.rollout.engine not in caps.rollout_engines:
            problems.append(Unsupported("rollout.engine", recipe.rollout.engine, self.name,
                                        " and ".join(caps.rollout_engines)))
        if recipe.algorithm.name not in caps.algorithms:
            problems.append(Unsupported("algorithm.name", recipe.algorithm.name, self.name,
                                        ", ".join(caps.algorithms)))
        if recipe.resources.sharding is not None:  # not mapped yet: each shards its own way, set natively
            problems.append(Unsupported("resources.sharding", recipe.resources.sharding, self.name,
                                        "null: it shards the training state with its own engine (verl FSDP, "
                                        "OpenRLHF DeepSpeed ZeRO, NeMo RL DTensor or Megatron, slime Megatron); "
                                        "set that through framework.overrides"))
        if recipe.reward_policy.on_error == "exclude" and not caps.can_exclude_rewards:
            problems.append(Unsupported("reward_policy.on_error", "exclude", self.name,
                                        "fallback or abort: it needs a number for every sample"))
        return problems + self.tensor_parallel_problems(recipe)

    def rollout_engine_gpus(self, recipe: Recipe) -> int:
        """GPUs the rollout engines run on: every GPU of the run when colocated, else ``rollout.gpus`` (a plugin
        that places its engines otherwise says so)."""
        return recipe.total_gpus if recipe.rollout.colocated else recipe.rollout_gpus

    def tensor_parallel_problems(self, recipe: Recipe) -> list[FieldError]:
        """Each rollout engine takes ``rollout.tensor_parallel`` GPUs, so the engines' GPUs must hold whole engines:
        a larger degree leaves no engine at all (verl builds ``gpus // tp`` replicas and crashes after start-up,
        verl/workers/rollout/replica.py:107-117), and one that does not divide them leaves GPUs no engine uses
        (OpenRLHF asserts it, train_ppo_ray.py:56-64; NeMo RL, vllm_generation.py:108-114)."""
        tp, gpus = recipe.rollout.tensor_parallel, self.rollout_engine_gpus(recipe)
        if gpus < 1 or tp < 1 or (tp <= gpus and gpus % tp == 0):
            return []  # no GPUs: refused by resources.gpus_per_node (or rollout.gpus) already
        where = ("every GPU of the run, nodes x gpus_per_node" if recipe.rollout.colocated
                 else "the rollout GPUs (rollout.gpus)")
        return [FieldError("rollout.tensor_parallel", tp,
                           f"must divide the {gpus} GPUs {self.name}'s rollout engines run on ({where}): each engine "
                           "takes tensor_parallel GPUs, so a larger degree leaves no engine at all")]

    def environment(self, recipe: Recipe) -> BackendEnvironment:
        options = recipe.framework
        image, python = options.get("image"), python_option(self.name, options)
        kind = "image" if image else "interpreter"
        return BackendEnvironment(
            kind=kind, python=python or ("python3" if image else "python"), image=image,
            container_runtime=options.get("container_runtime", "docker") if image else None,
            nodes=recipe.resources.nodes, gpus_per_node=recipe.gpus_per_node,
            light_core=list(CORE_PACKAGES), reward_paths=reward_paths(recipe), mounts=local_inputs(recipe))

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

    def require_resumable(self, run_dir: Path) -> None:
        """Native backends resume from their own checkpoints (verl's ``trainer.resume_mode``, ...): nothing to check
        on unirl's side."""

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

    def plan_tables_version(self, plan: LaunchPlan) -> str:
        """The version whose key schema a plan is checked against (the one its mapping rows were chosen for)."""
        tested = self.capabilities.tested_version
        return tables_version(plan.target_version or tested, tested)[0]

    # --- launch ---------------------------------------------------------------------------------------

    def prepare(self, plan: LaunchPlan, run_dir: Path, inputs: RunInputs) -> LaunchPlan:
        """Check the machine, then stage the light core (with the lifecycle plugins the host staged for the run's
        processes), the reward spec, the data and the plugin's files."""
        check_environment(plan.environment)
        check_gpus(self.name, plan.environment)
        recipe = recipe_from_dict(plan.recipe)
        resolved = plan.resolve(str(run_dir))
        run_dir.mkdir(parents=True, exist_ok=True)
        spec = inputs.rewards
        sampling = TrajectorySampling.from_logging(plan.recipe.get("logging", {}))
        log = str(run_dir / sampling.file_name()) if recipe.logging.trajectories else None
        spec = replace(spec, trajectory_log=log, trajectory_per_group=sampling.per_group)
        packages = [*CORE_PACKAGES, *user_reward_packages(spec)]
        if inputs.environment is not None and recipe.environment.name:
            packages += [p for p in environment_packages(inputs.environment) if p not in packages]
        stage_plugins(stage_light_core(run_dir / CORE_DIR, packages), inputs.plugins)
        spec.write(run_dir / SPEC_FILE)
        if inputs.environment is not None and recipe.environment.name:
            write_environment_spec(recipe, inputs.environment, run_dir)
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


def environment_packages(env: EnvironmentSpec) -> list[str]:
    """The top-level package an environment's class comes from, when the backend's processes import it by name (an
    installed plugin's); an environment from a file is copied instead (:func:`write_environment_spec`)."""
    top = env.module.split(".")[0]
    return [top] if package_dir(top) is not None and env.module in sys.modules and not env.file_only else []


def write_environment_spec(recipe: Recipe, env: EnvironmentSpec, run_dir: Path) -> Path:
    """The environment as the backend's rollout engine reads it (:class:`EnvironmentRuntimeSpec`), with a file-defined
    environment's file copied into the run directory, so every process (a container's too) loads the same code."""
    file = None
    if env.file_only and env.file:
        folder = run_dir / ENVIRONMENT_DIR
        folder.mkdir(parents=True, exist_ok=True)
        file = str(shutil.copy2(env.file, folder / Path(env.file).name))
    settings, template = recipe.environment, recipe.data.chat_template
    runtime = EnvironmentRuntimeSpec.of(env, kwargs=dict(settings.kwargs), max_turns=settings.max_turns,
                                        timeout_s=settings.timeout_s, max_new_tokens=recipe.algorithm.max_new_tokens,
                                        chat_template=template if isinstance(template, bool) else None,
                                        reward_spec=str(run_dir / SPEC_FILE))
    return replace(runtime, file=file).write(run_dir / ENVIRONMENT_SPEC_FILE)


def reward_paths(recipe: Recipe) -> list[str]:
    """Directories of the recipe's reward files: on the backend's PYTHONPATH, so its workers import the same code."""
    return sorted({str(Path(s.file).expanduser().resolve().parent) for s in recipe.rewards if s.file})


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


__all__ = ["DEFAULT_MICRO_BATCH", "DEFAULT_PROMPT_TOKENS", "OMIT", "NativeFramework", "Translation",
           "logprob_micro_batch", "micro_batch", "micro_batch_note", "model_location", "prompt_budget",
           "prompt_budget_note", "translate"]
