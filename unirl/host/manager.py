"""The host: one pluggy manager with every plugin loaded (see :mod:`unirl.host.loading`), and the registries its
registrar hooks filled (see :mod:`unirl.host.calls` for how hooks are called).

Each registry knows the protocol its components satisfy; a plugin registering anything else fails with its name.
A recipe's reward files become plugins too (:meth:`Host.add_plugin_file`), so their hooks run like anyone's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from unirl.backend.contract import Framework
from unirl.backend.environment import StagedPlugin, StagedPlugins
from unirl.backend.rollout import RolloutEngine
from unirl.environments.contract import EnvironmentSpec, decorated_environments
from unirl.errors import UnirlError
from unirl.host import calls, loading
from unirl.host.builtin import BUILTIN_PLUGINS
from unirl.host.registry import Registry
from unirl.launch.scheduler import Scheduler
from unirl.record.layout import RunInfo
from unirl.record.run_recorder import RunRecorder
from unirl.rewards.contract import RewardFunction, decorated_rewards

OWN_DISTRIBUTION = "unirl"
LOCAL_PLUGIN_FILE = loading.LOCAL_PLUGIN_FILE
REWARD_FILE_PREFIX = "reward_file:"


@dataclass
class PluginInfo:
    name: str
    module: str
    distribution: str
    version: str
    hooks: list[str] = field(default_factory=list)


@dataclass
class Host:
    """The loaded plugin manager plus the registries its plugins filled."""

    pm: pluggy.PluginManager
    frameworks: Registry[Framework]
    rollout_engines: Registry[RolloutEngine]
    rewards: Registry[RewardFunction]
    schedulers: Registry[Scheduler]
    environments: Registry[EnvironmentSpec]
    distributions: dict[str, tuple[str, str]]  # plugin name -> (distribution, version)
    lifecycle: calls.LifecycleCalls = field(init=False)

    def __post_init__(self) -> None:
        self.lifecycle = calls.LifecycleCalls(self.pm)
        for registry in self.registries().values():
            registry.host = self

    def registries(self) -> dict[str, Registry[Any]]:
        """Registrar hook -> the registry it fills."""
        return {"unirl_add_frameworks": self.frameworks, "unirl_add_rollout_engines": self.rollout_engines,
                "unirl_add_rewards": self.rewards, "unirl_add_schedulers": self.schedulers,
                "unirl_add_environments": self.environments}

    def plugins(self) -> list[PluginInfo]:
        """What is loaded, from which package, at which version, implementing which hooks."""
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked
                continue
            dist, version = self.distributions.get(name, ("local", "-"))
            infos.append(PluginInfo(name, getattr(plugin, "__name__", repr(plugin)), dist, version,
                                    self.hooks_of(plugin)))
        return sorted(infos, key=lambda i: (i.distribution != OWN_DISTRIBUTION, i.name))

    def hooks_of(self, plugin: object) -> list[str]:
        return sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or []
                      if caller.name.startswith("unirl_"))

    def blocked(self) -> list[str]:
        return sorted(name for name, plugin in self.pm.list_name_plugin() if plugin is None)

    def run_recorder(self, run: RunInfo) -> RunRecorder:
        """The recorder a run's side in this process feeds (the TRL runner's; see :mod:`unirl.record.run_recorder`)."""
        return RunRecorder(run, self.lifecycle)

    def add_plugin_file(self, module: ModuleType, path: Path) -> str:
        """Register an imported file (a recipe's reward file) as a plugin and run its registrar hooks.

        Its ``@unirl.reward`` functions that no hook registered are added too, attributed to it. A file already
        loaded as a plugin (the same module again, or the project's ``unirlfile.py`` named in a recipe too) is left
        as it is; a blocked name is skipped."""
        name = f"{REWARD_FILE_PREFIX}{path.resolve()}"
        loaded = {Path(where): plugin for plugin, (what, where) in self.distributions.items()
                  if what in (loading.LOCAL_FILE, loading.REWARD_FILE)}
        if path.resolve() in loaded:
            return loaded[path.resolve()]
        if self.pm.is_registered(module) or self.pm.is_blocked(name):
            return name
        self.pm.register(module, name=name)
        try:
            calls.refuse_wrappers(self.pm, module)
        except UnirlError:
            self.pm.unregister(module)
            raise
        self.distributions[name] = (loading.REWARD_FILE, str(path.resolve()))
        for hook, registry in self.registries().items():
            calls.fill(self.pm, hook, registry, plugin=module)
        add_plugin_rewards(self)
        return name

    def backend_plugins(self) -> StagedPlugins:
        """The plugins a native backend's processes load for the run record: every loaded plugin that implements a
        lifecycle hook and can be loaded again there (a module of unirl's, an entry point, a plugin file; a plugin
        object registered in this process only, such as a test's, cannot), and the blocked names."""
        builtins = {b.name: b.module for b in BUILTIN_PLUGINS}
        entry_points = {self.pm.get_name(plugin): dist for plugin, dist in self.pm.list_plugin_distinfo()}
        staged: list[StagedPlugin] = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None or not set(self.hooks_of(plugin)) & set(calls.LIFECYCLE):
                continue
            if name in builtins and getattr(plugin, "__name__", None) == builtins[name]:
                staged.append(StagedPlugin(name, "builtin", module=builtins[name]))
            elif name in entry_points:
                dist = entry_points[name]
                staged.append(StagedPlugin(name, "entry_point", distribution=dist.project_name, version=dist.version))
            elif self.distributions.get(name, ("", ""))[0] in (loading.LOCAL_FILE, loading.REWARD_FILE):
                staged.append(StagedPlugin(name, "file", path=str(Path(self.distributions[name][1]).resolve())))
        return StagedPlugins(tuple(staged), tuple(self.blocked()))


def build_host(extra_plugins: list[Any] | None = None) -> Host:
    """A fresh host; tests use this directly, the CLI uses the cached :func:`get_host`."""
    pm = loading.new_plugin_manager()
    distributions: dict[str, tuple[str, str]] = {}
    loading.load_all(pm, distributions, loading.own_version())
    for plugin in extra_plugins or []:
        pm.register(plugin)
    pm.check_pending()
    calls.refuse_wrappers(pm)
    host = Host(
        pm=pm,
        frameworks=Registry("framework", Framework, hint="see unirl.backend.contract.Framework"),
        rollout_engines=Registry("rollout engine", RolloutEngine, hint="make it a unirl.backend.rollout.RolloutEngine"),
        rewards=Registry("reward", RewardFunction, hint="make it with the @unirl.reward decorator"),
        schedulers=Registry("scheduler", Scheduler, hint="subclass unirl.launch.scheduler.SchedulerBase"),
        environments=Registry("environment", EnvironmentSpec,
                              hint="decorate a unirl.Environment subclass with @unirl.environment"),
        distributions=distributions,
    )
    for hook, registry in host.registries().items():
        calls.fill(pm, hook, registry)
    add_plugin_rewards(host)
    return host


def add_plugin_rewards(host: Host) -> None:
    """Add the ``@unirl.reward`` functions and ``@unirl.environment`` classes no hook registered that a loaded plugin
    defines (in its module, or in its package's modules) or a script defines in ``__main__``, each attributed to its
    plugin.

    Decorated components are remembered per process; asking which plugin a component's module belongs to keeps a
    blocked plugin's components out even when an earlier host in the same process imported its module."""
    modules = sorted(((plugin.__name__, name) for name, plugin in host.pm.list_name_plugin()
                      if isinstance(plugin, ModuleType)), key=lambda pair: -len(pair[0]))
    decorated: list[tuple[Registry[Any], list[Any]]] = [(host.rewards, decorated_rewards()),
                                                         (host.environments, decorated_environments())]
    for registry, components in decorated:
        for component in components:
            owner = next((name for module, name in modules if _owns(module, component.module)), None)
            if owner is None and component.module == "__main__":
                owner = "__main__"
            if owner is None:
                continue
            if component.name in registry:
                entry = registry.entry(component.name)
                if entry.target is component or entry.target == component or entry.source == owner:
                    continue  # itself again (a hook registered it, or an earlier pass did)
                # a decorated name that is taken: running the other one silently would be a different experiment
                raise UnirlError(f"{registry.kind} {component.name!r} from {owner!r} ({component.module}) is already "
                                 f"registered by {entry.source!r}; give it another name")
            registry.for_plugin(owner).add(component)


def add_decorated(registry: Registry[RewardFunction]) -> None:
    """Add every ``@unirl.reward`` function no hook registered, for callers that imported reward modules themselves
    (``unirl reward test --file``): attributed to its plugin where the registry's host has one, else its module."""
    host = registry.host if isinstance(registry.host, Host) else None
    modules = [(plugin.__name__, name) for name, plugin in host.pm.list_name_plugin()
               if isinstance(plugin, ModuleType)] if host is not None else []
    for reward in decorated_rewards():
        if reward.name not in registry:
            owner = next((name for module, name in modules if _owns(module, reward.module)), reward.module)
            registry.for_plugin(owner).add(reward)


def _owns(plugin_module: str, module: str) -> bool:
    """A plugin module owns itself and the other modules of its package (an entry point's package, say)."""
    package = plugin_module.rpartition(".")[0]
    return module == plugin_module or (bool(package) and module.startswith(f"{package}."))


_HOST: Host | None = None


def get_host() -> Host:
    """The process-wide host, built on first use."""
    global _HOST
    if _HOST is None:
        _HOST = build_host()
    return _HOST


def reset_host() -> None:
    global _HOST
    _HOST = None
