"""Every hook a unirl plugin can implement.

Registration hooks follow tox's registrar pattern: the host passes a registry and the plugin adds
to it in one line, e.g. ``registry.add(MyFramework())``. Lifecycle hooks are called in the process
that runs the backend, so loggers and trajectory sinks see every backend the same way.
Implementations may accept any subset of a hook's arguments.

How they are called (:mod:`unirl.host.calls`): each plugin's implementation on its own, through pluggy's call loop
and in its order (``tryfirst``/``trylast`` hold). A registrar implementation receives a registry bound to its
plugin, so every entry records who added it. A lifecycle implementation that raises is reported once on stderr,
counted in the summary's ``plugin_errors`` and skipped: the run and its scoring go on. Wrapper implementations
(``wrapper=True``, ``hookwrapper=True``) are refused when the plugin loads, since there would be nothing to wrap.
``UNIRL_TRACE_PLUGINS=1`` prints every call.

Where lifecycle hooks fire: in TRL's runner for the whole run (``run.role == "run"``); in every process of a native
backend that scores rewards (``run.role == "scorer"``: verl's reward workers, OpenRLHF's engine actors, NeMo RL's
environment actor, slime's rollout process), which fires ``unirl_run_start`` when it first scores,
``unirl_rollouts_scored`` for each batch it scores and ``unirl_run_end`` when it exits or the reward policy aborts.
Those processes load the plugins the host staged with the light core (see :mod:`unirl.backend.environment`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from hydra.core.config_store import ConfigStore

    from unirl.backend.contract import Framework
    from unirl.backend.rollout import RolloutEngine
    from unirl.environments.contract import EnvironmentSpec
    from unirl.host.registry import Registry
    from unirl.launch.scheduler import Scheduler
    from unirl.record.layout import RunInfo
    from unirl.rewards.contract import RewardFunction

PROJECT = "unirl"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- the kinds of component -------------------------------------------------------------


@hookspec
def unirl_add_frameworks(registry: Registry[Framework]) -> None:
    """Add trainer backends (frameworks) such as TRL or verl to the registry."""


@hookspec
def unirl_add_rollout_engines(registry: Registry[RolloutEngine]) -> None:
    """Add rollout (generation) engines such as HF generate, vLLM or SGLang; a recipe's ``rollout.engine`` is one."""


@hookspec
def unirl_add_rewards(registry: Registry[RewardFunction]) -> None:
    """Add reward functions (objects made by ``@unirl.reward``, or lazy "module:attr" paths)."""


@hookspec
def unirl_add_environments(registry: Registry[EnvironmentSpec]) -> None:
    """Add multi-turn environments: ``registry.add(unirl.environments.contract.spec_of(MyEnv))`` for a class decorated
    with ``@unirl.environment`` (decorated classes in a plugin's modules are added without it); a recipe's
    ``environment.name`` is one."""


@hookspec
def unirl_add_schedulers(registry: Registry[Scheduler]) -> None:
    """Add schedulers that launch a plan: local process, Ray job, Slurm job, ..."""


# --- run lifecycle ---------------------------------------------------------------------------


@hookspec
def unirl_run_start(run: RunInfo) -> None:
    """A run (or, for ``run.role == "scorer"``, this process's part of it) is starting: directory and recipe known."""


@hookspec
def unirl_rollouts_scored(run: RunInfo, step: int | None, records: list[dict[str, Any]]) -> None:
    """A batch of rollouts was scored; one record per completion with every reward component.

    ``step`` is the training step, or None where the backend does not say (native adapters score per call)."""


@hookspec
def unirl_metrics(run: RunInfo, step: int, metrics: dict[str, float]) -> None:
    """The backend logged training metrics for ``step`` (already in unirl's names)."""


@hookspec
def unirl_eval_done(run: RunInfo, step: int, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """A held-out evaluation finished at ``step``; ``summary`` has accuracy and mean reward."""


@hookspec
def unirl_run_end(run: RunInfo, summary: dict[str, Any]) -> None:
    """A run (or a scorer's part) ended (``summary["state"]`` is completed, failed or interrupted)."""


# --- configuration ---------------------------------------------------------------------------


@hookspec
def unirl_add_configs(config_store: ConfigStore, frameworks: Registry[Framework],
                      schedulers: Registry[Scheduler]) -> None:
    """Store Hydra config nodes (groups, options) in ``config_store`` (Hydra's ConfigStore) before the command line
    is composed; unirl's own implementation stores one ``framework=<name>`` and ``scheduler=<name>`` option each."""
