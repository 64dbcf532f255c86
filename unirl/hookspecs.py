"""Every hook a unirl plugin can implement.

Registration hooks follow tox's registrar pattern: the host passes a registry and the plugin adds
to it in one line, e.g. ``registry.add(MyFramework())``. Lifecycle hooks are called in the process
that runs the backend, so loggers and trajectory sinks see every backend the same way.
Implementations may accept any subset of a hook's arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from unirl.backend.contract import Framework
    from unirl.backend.rollout import RolloutEngine
    from unirl.host.registry import Registry
    from unirl.launch.scheduler import Scheduler
    from unirl.record.layout import RunInfo
    from unirl.rewards.contract import RewardFunction

PROJECT = "unirl"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- the four kinds of component -------------------------------------------------------------


@hookspec
def unirl_add_frameworks(registry: Registry[Framework]) -> None:
    """Add trainer backends (frameworks) such as TRL or verl to the registry."""


@hookspec
def unirl_add_rollout_engines(registry: Registry[RolloutEngine]) -> None:
    """Add rollout (generation) engines such as HF generate, vLLM or SGLang to the registry."""


@hookspec
def unirl_add_rewards(registry: Registry[RewardFunction]) -> None:
    """Add reward functions (objects made by ``@unirl.reward``, or lazy "module:attr" paths)."""


@hookspec
def unirl_add_schedulers(registry: Registry[Scheduler]) -> None:
    """Add schedulers that launch a plan: local process, Ray job, Slurm job, ..."""


# --- run lifecycle ---------------------------------------------------------------------------


@hookspec
def unirl_run_start(run: RunInfo) -> None:
    """A run is about to train: its directory, recipe and plan are known."""


@hookspec
def unirl_rollouts_scored(run: RunInfo, step: int, records: list[dict[str, Any]]) -> None:
    """A batch of rollouts was scored; one record per completion with every reward component."""


@hookspec
def unirl_metrics(run: RunInfo, step: int, metrics: dict[str, float]) -> None:
    """The backend logged training metrics for ``step`` (already in unirl's names)."""


@hookspec
def unirl_eval_done(run: RunInfo, step: int, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """A held-out evaluation finished at ``step``; ``summary`` has accuracy and mean reward."""


@hookspec
def unirl_run_end(run: RunInfo, summary: dict[str, Any]) -> None:
    """A run ended (``summary["state"]`` is completed, failed or interrupted)."""


# --- configuration ---------------------------------------------------------------------------


@hookspec
def unirl_add_configs(config_store: Any) -> None:
    """Store extra Hydra config nodes (groups, options) before the command line is composed."""

