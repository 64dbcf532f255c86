"""From overrides to a plan, with the loaded plugins: Hydra composition over their config groups, the recipe checked
against what they provide (rewards, rollout engines, frameworks, schedulers; reward files loaded as plugins), the
translation by the framework's plugin, and what a run's backend side needs from the host (:class:`RunInputs`).

This is the one place where the recipe meets the plugin manager: :mod:`unirl.recipe` knows only its schema, and
:mod:`unirl.rewards` only the reward specification it is handed.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from unirl.backend.auto import resolve
from unirl.backend.contract import RunInputs
from unirl.backend.plan import LaunchPlan
from unirl.data.checks import data_problems, missing_data_files
from unirl.errors import FieldError, UnirlError
from unirl.host.calls import call_each
from unirl.host.manager import Host, add_decorated
from unirl.host.registry import Registry
from unirl.recipe.algorithm_presets import GROUP as ALGORITHM_GROUP
from unirl.recipe.algorithm_presets import apply_chosen_preset
from unirl.recipe.compose import CONFIG_MODULE, shipped_recipes
from unirl.recipe.schema import TRACKER_MODULES, Recipe, recipe_from_dict, uninstalled_tracker_problems, validate
from unirl.recipe.toy_settings import warn_toy_settings
from unirl.rewards.contract import RewardFunction
from unirl.rewards.spec import RewardPolicy, RewardRuntimeSpec, entry_for, load_reward_file, probe_reward_file

log = logging.getLogger(__name__)

_REGISTERED: set[int] = set()


def register_configs(host: Host) -> None:
    """Store the schema and the recipes in Hydra's ConfigStore, then whatever the plugins store through
    ``unirl_add_configs`` (unirl's own ``config_groups`` plugin: one option per framework and scheduler).

    Registration must happen before Hydra composes (Hydra reads only what its ConfigStore and search path hold),
    so the CLI calls this first, for runs, plans and sweeps alike."""
    if id(host) in _REGISTERED:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    cs = ConfigStore.instance()
    cs.store(name="unirl_schema", node=Recipe)
    for name, resource in shipped_recipes().items():
        cs.store(group="recipe", name=name, node=OmegaConf.create(resource.read_text()), package="_global_")
    call_each(host.pm, "unirl_add_configs", config_store=cs, frameworks=host.frameworks, schedulers=host.schedulers)
    _REGISTERED.add(id(host))


_last_composed: tuple[tuple[str, ...], Path | None] = ((), None)
"""The latest :func:`compose`'s overrides and the ``hydra.run.dir`` it resolved: the run's lock needs the directory
before Hydra runs, and composing again costs half a second."""


def composed_run_dir(overrides: list[str]) -> Path | None:
    """The run directory the latest :func:`compose` of exactly these overrides resolved (None: another compose)."""
    done, run_dir = _last_composed
    return run_dir if done == tuple(overrides) else None


def compose(host: Host, overrides: list[str]) -> Any:
    """The composed config for ``overrides`` (no run directory is made)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from unirl.launch.run_lock import hydra_run_dir

    register_configs(host)
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
    global _last_composed
    try:
        _last_composed = (tuple(overrides), hydra_run_dir(cfg))
    except Exception:  # an exotic hydra.run.dir: the lock resolves it again, or the task takes it
        _last_composed = (tuple(overrides), None)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    apply_chosen_preset(cfg, overrides, choices.get(ALGORITHM_GROUP))
    # The framework and scheduler groups come before the recipe in the defaults list (conf/config.yaml), so a recipe
    # file's framework:/scheduler: options win over the groups' defaults; its ``name`` must not pick another backend
    # than the group Hydra composed the options of.
    for group in ("framework", "scheduler"):
        chosen, named = choices.get(group), cfg[group].get("name")
        if chosen and named != chosen:
            raise FieldError(f"{group}.name", named,
                             f"{chosen!r}, the {group} selected with {group}={chosen} (the default unless given): a "
                             f"recipe file's {group}.name does not select the {group}; pass {group}=NAME instead")
    return cfg


def plan_recipe(host: Host, recipe: Recipe) -> LaunchPlan:
    """Validate the recipe and translate it with its framework's plugin (pure: nothing is launched). The plan's
    ``recipe`` is the one its backend runs: every ``auto`` field resolved (:mod:`unirl.backend.auto`)."""
    check(host, recipe)
    plan = host.frameworks.get(recipe.framework["name"]).plan(recipe)
    away = missing_data_files(recipe)
    if away:  # planned without reading them: a plan made here may be for a run that reads its data elsewhere
        plan = replace(plan, notes=[*plan.notes, f"{', '.join(away)}: not on this machine, so the plan did not read "
                                                 f"{'them' if len(away) > 1 else 'it'}; a run launched from here "
                                                 "reads them here (the data exported into the run directory) and "
                                                 "stops before starting if one is still missing"])
    if recipe.environment.name:  # what the engine's episode loop loses on this backend, from the engine registry
        engine = host.rollout_engines.get(str(plan.recipe["rollout"]["engine"]))
        lost = engine.episodes_lose.get(plan.framework)
        if lost:
            plan = replace(plan, notes=[*plan.notes, f"environment {recipe.environment.name!r} on {plan.framework} "
                                                     f"through {engine.episodes[plan.framework]}: {lost}"])
    return plan


def check(host: Host, recipe: Recipe) -> None:
    """Validate a recipe against the schema's ranges, its data sources and what the loaded plugins provide, as its
    framework resolves its ``auto`` fields (a field left at auto is checked with the value it will have)."""
    name = recipe.framework.get("name")
    if not name:
        raise UnirlError("no framework selected: pass framework=<name> (installed: "
                         f"{', '.join(host.frameworks.names()) or 'none'})")
    host.frameworks.entry(name)
    validate(recipe, known_rewards=host.rewards.names(), known_engines=host.rollout_engines.names(),
             fields_only=True)  # a malformed auto field (gpus_per_node=eight) is named before anything resolves it
    recipe = resolve(recipe, host.frameworks.get(name)).recipe
    scheduler = recipe.scheduler.get("name")
    if scheduler:
        host.schedulers.entry(scheduler)
    register_reward_files(recipe, host.rewards)
    validate(recipe, known_rewards=host.rewards.names(), known_engines=host.rollout_engines.names(),
             more=[*data_problems(recipe, missing_files=False), *tracker_install_problems(host, recipe),
                   *environment_problems(host, recipe), *engine_episode_problems(host, recipe),
                   *reward_kwargs_problems(recipe, host.rewards)])
    warn_toy_settings(recipe)  # a valid recipe that is the toy's with a real model: say so, once


def tracker_install_problems(host: Host, recipe: Recipe) -> list[FieldError]:
    """Each of ``logging.trackers`` must be installed in the process that reports the run (``run.role == "run"``):
    the backend's interpreter (``framework.python``; unirl's own when unset), where TRL's runner trains and where a
    native backend's record follower runs (:mod:`unirl.record.follow`). Only ``importlib.util.find_spec`` of each
    tracker's top-level module runs there: nothing is imported. A container image is not looked into (its trackers
    fail, counted, at run time)."""
    modules = {TRACKER_MODULES[t]: t for t in recipe.logging.trackers if t in TRACKER_MODULES}
    host.frameworks.entry(recipe.framework["name"])
    if not modules or recipe.framework.get("image"):
        return []
    python = recipe.framework.get("python")
    # A folder of that name (W&B's own wandb/ output, say) is a namespace package with no origin, not the tracker.
    if python is None:
        missing = [m for m in modules if getattr(importlib.util.find_spec(m), "origin", None) is None]
    else:
        code = ("import importlib.util, sys\n"
                "print(*[m for m in sys.argv[1:] if getattr(importlib.util.find_spec(m), 'origin', None) is None])")
        try:
            out = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return []  # no such interpreter: the framework's own check names it
        missing = out.stdout.split() if out.returncode == 0 else []
    where = f"framework.python={python}" if python else f"this interpreter, {sys.executable}"
    return uninstalled_tracker_problems(recipe, [modules[m] for m in missing], where)


def register_reward_files(recipe: Recipe, registry: Registry[RewardFunction]) -> None:
    """Files named in the recipe become plugins of the registry's host (before names are checked): their
    ``unirl_add_rewards`` (and any other hook) runs like an installed plugin's, and their ``@unirl.reward``
    functions that no hook registered are added, attributed to the file's plugin (``reward_file:<path>``).

    Each file is imported in a throwaway interpreter first: a file that calls ``sys.exit`` or ``os._exit``, hangs,
    or crashes the interpreter at import would otherwise end or stall unirl itself, silently. Only a file that
    imported cleanly there is imported here.
    """
    budget = recipe.reward_policy.startup_timeout_s
    for i, spec in enumerate(recipe.rewards):
        if spec.file:
            field_name = f"rewards[{i}].file"
            probe_reward_file(spec.file, field_name, budget, recipe.reward_policy.worker_memory_mb)
            try:
                module = load_reward_file(spec.file)
            except FieldError as exc:
                raise FieldError(field_name, spec.file, exc.allowed) from None
            except BaseException as exc:  # SystemExit included: a file's import never ends unirl
                if isinstance(exc, KeyboardInterrupt):
                    raise
                raise FieldError(field_name, spec.file, f"a file that imports cleanly; it raised {exc!r}") from None
            if isinstance(registry.host, Host):
                try:
                    registry.host.add_plugin_file(module, Path(spec.file).expanduser())
                except UnirlError as exc:  # a name it decorates is taken
                    raise FieldError(field_name, spec.file, f"a file whose rewards and environments have names of "
                                     f"their own: {exc}") from None
    if not isinstance(registry.host, Host):  # a bare registry: the files' decorated rewards, added directly
        add_decorated(registry)


def environment_problems(host: Host, recipe: Recipe) -> list[FieldError]:
    """``environment.file`` loads as a plugin (imported in a throwaway interpreter first, as a reward file is), and
    ``environment.name`` must then be registered."""
    env = recipe.environment
    if env.file:
        probe_reward_file(env.file, "environment.file", recipe.reward_policy.startup_timeout_s,
                          recipe.reward_policy.worker_memory_mb)
        try:
            module = load_reward_file(env.file)
        except BaseException as exc:  # SystemExit included: a file's import never ends unirl
            if isinstance(exc, KeyboardInterrupt):
                raise
            return [FieldError("environment.file", env.file, f"a file that imports cleanly; it raised {exc!r}")]
        try:
            host.add_plugin_file(module, Path(env.file).expanduser())
        except UnirlError as exc:  # a name it decorates is taken
            return [FieldError("environment.file", env.file, f"a file whose environments and rewards have names of "
                               f"their own: {exc}")]
    if env.name is not None and env.name not in host.environments:
        return [FieldError("environment.name", env.name,
                           f"a registered environment: {host.environments.names() or 'none is registered'}")]
    if env.name is None and (env.file or env.kwargs or env.max_turns is not None):
        return [FieldError("environment.name", None, "set with environment.file, kwargs or max_turns")]
    if env.name is not None:
        # every episode constructs the environment with these: a wrong name fails here, not as every episode's error
        signature = inspect.signature(host.environments.get(env.name).cls)
        try:
            signature.bind(**env.kwargs)
        except TypeError as exc:
            takes = ", ".join(signature.parameters) or "none"
            return [FieldError("environment.kwargs", dict(env.kwargs),
                               f"the arguments {env.name!r} takes ({takes}): {exc}; a recipe's kwargs merge into "
                               "the base recipe's, so remove one with ~environment.kwargs.NAME")]
    return []


def reward_kwargs_problems(recipe: Recipe, registry: Registry[RewardFunction]) -> list[FieldError]:
    """Each reward's ``kwargs`` against its function's signature: every call passes them, so a misspelt name fails
    here, not as every reward call's error once training runs."""
    problems = []
    for i, spec in enumerate(recipe.rewards):
        if spec.name not in registry:
            continue  # named by the schema's own check
        fn = registry.get(spec.name).fn
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):  # a builtin or C function: nothing to read
            continue
        try:
            signature.bind(None, **spec.kwargs)  # the sample (or the batch) first, as every call passes it
        except TypeError as exc:
            takes = ", ".join(list(signature.parameters)[1:]) or "none"
            problems.append(FieldError(f"rewards[{i}].kwargs", dict(spec.kwargs),
                                       f"the keyword arguments {spec.name!r} takes ({takes}): {exc}"))
    return problems


def engine_episode_problems(host: Host, recipe: Recipe) -> list[FieldError]:
    """An environment needs a rollout engine that runs episodes on the recipe's backend (the engine registry's
    ``episodes``), so a recipe with an environment never runs single-turn silently."""
    backend, engine = recipe.framework.get("name"), recipe.rollout.engine
    if not recipe.environment.name or engine not in host.rollout_engines:
        return []
    if backend in host.rollout_engines.get(engine).episodes:
        return []
    offering = [f"{name} on {', '.join(sorted(e.episodes))}" for name in host.rollout_engines.names()
                if (e := host.rollout_engines.get(name)).episodes]
    others = [name for name in host.rollout_engines.names() if backend in host.rollout_engines.get(name).episodes]
    registered = "; ".join(offering) or "none"
    if not others:
        return [FieldError("environment.name", recipe.environment.name,
                           f"null on {backend}: no rollout engine runs environments there yet (engines that run "
                           f"episodes: {registered})")]
    return [FieldError("rollout.engine", engine, f"one of {others} on {backend} with environment.name="
                       f"{recipe.environment.name!r} (engines that run episodes: {registered})")]


def spec_from_recipe(recipe: Recipe, registry: Registry[RewardFunction], *, can_exclude: bool) -> RewardRuntimeSpec:
    """The recipe's ``rewards`` and ``reward_policy`` resolved through the host's reward registry, checked for a
    backend that can (or cannot) exclude a failed sample's reward (its ``Capabilities.can_exclude_rewards``). Reward
    files load here too: a backend in another interpreter did not run the host's preflight."""
    register_reward_files(recipe, registry)
    entries = tuple(entry_for(registry.get(s.name), s.weight, s.kwargs, s.inline) for s in recipe.rewards)
    spec = RewardRuntimeSpec(entries, RewardPolicy(**asdict(recipe.reward_policy)).resolved(can_exclude))
    spec.check(can_exclude=can_exclude, backend=recipe.framework.get("name") or "this backend")
    return spec


def run_inputs(host: Host, plan: LaunchPlan) -> RunInputs:
    """What the plan's backend stages for its processes: the reward specification (resolved for what the backend can
    do with a failed reward) and the lifecycle plugins its processes load (:meth:`Host.backend_plugins`)."""
    framework = host.frameworks.get(plan.framework)
    recipe = recipe_from_dict(plan.recipe)
    spec = spec_from_recipe(recipe, host.rewards, can_exclude=framework.capabilities.can_exclude_rewards)
    name = recipe.environment.name
    environment = host.environments.get(name) if name and name in host.environments else None
    return RunInputs(rewards=spec, plugins=host.backend_plugins(), environment=environment)


def prepare_run(host: Host, plan: LaunchPlan, run_dir: Path) -> LaunchPlan:
    """The plan's framework writes what its launch needs into ``run_dir``, with the recipe's parity certificate
    (``parity.json``, ``logging.parity``); returns the resolved plan."""
    inputs = run_inputs(host, plan)
    resolved = host.frameworks.get(plan.framework).prepare(plan, run_dir, inputs)
    recipe = recipe_from_dict(plan.recipe)
    if recipe.logging.parity:
        from unirl.backend.parity.run import PARITY_FILE, record_certificate
        from unirl.record.layout import write_json

        record = record_certificate(host, recipe, inputs.rewards, plan.framework)
        if "error" in record:
            log.warning("parity.json: no certificate for this run (%s)", record["error"])
        write_json(run_dir / PARITY_FILE, record)
    return resolved
