"""Built-in plugin: one Hydra option per registered framework and scheduler (``framework=verl``, ``scheduler=ray``),
each node the component's own ``options``; a plugin that adds a framework gets its option here with no more code.

Hydra composes only what its ConfigStore holds, so this runs (through ``unirl_add_configs``) before any command line
is composed; third-party plugins store their own groups (recipes, presets) through the same hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from unirl.hookspecs import hookimpl

if TYPE_CHECKING:
    from hydra.core.config_store import ConfigStore

    from unirl.backend.contract import Framework
    from unirl.host.registry import Registry
    from unirl.launch.scheduler import Scheduler


@hookimpl
def unirl_add_configs(config_store: ConfigStore, frameworks: Registry[Framework],
                      schedulers: Registry[Scheduler]) -> None:
    for name in frameworks.names():
        config_store.store(group="framework", name=name, node=dict(frameworks.get(name).options), package="framework")
    for name in schedulers.names():
        config_store.store(group="scheduler", name=name, node=dict(schedulers.get(name).options), package="scheduler")
