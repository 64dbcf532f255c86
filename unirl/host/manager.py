"""The plugin manager: loads built-in, installed and project-local plugins and fills the registries.

Environment variables (read once per process):
- ``UNIRL_DISABLE_PLUGIN_AUTOLOAD=1``: load no third-party entry points; only unirl's own
  built-ins, and the names listed in ``UNIRL_PLUGINS`` (comma separated).
- ``UNIRL_PLUGINS_BLOCK=a,b``: block these plugins by name (built-ins included, e.g. ``trl``).
- ``UNIRL_PLUGIN_FILE``: a project-local plugin file; default ``./unirlfile.py`` when it exists.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pluggy

from unirl import hookspecs
from unirl.host.registry import Registry

OWN_DISTRIBUTION = "unirl"
LOCAL_PLUGIN_FILE = "unirlfile.py"


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
    frameworks: Registry[Any]
    rollout_engines: Registry[Any]
    rewards: Registry[Any]
    schedulers: Registry[Any]
    distributions: dict[str, tuple[str, str]]  # plugin name -> (distribution, version)

    def plugins(self) -> list[PluginInfo]:
        """What is loaded, from which package, at which version, implementing which hooks."""
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked
                continue
            hooks = sorted(
                caller.name
                for caller in self.pm.get_hookcallers(plugin) or []
                if caller.name.startswith("unirl_")
            )
            dist, version = self.distributions.get(name, ("local", "-"))
            infos.append(PluginInfo(name, getattr(plugin, "__name__", repr(plugin)), dist, version, hooks))
        return sorted(infos, key=lambda i: (i.distribution != OWN_DISTRIBUTION, i.name))

    def blocked(self) -> list[str]:
        return sorted(name for name, plugin in self.pm.list_name_plugin() if plugin is None)


def _csv_env(name: str) -> list[str]:
    return [part.strip() for part in os.environ.get(name, "").split(",") if part.strip()]


def _load_entry_points(pm: pluggy.PluginManager, distributions: dict[str, tuple[str, str]]) -> None:
    """Third-party plugins through pluggy's own loader (it skips blocked and already-registered names)."""
    autoload = os.environ.get("UNIRL_DISABLE_PLUGIN_AUTOLOAD", "") in ("", "0", "false")
    if autoload:
        pm.load_setuptools_entrypoints(hookspecs.PROJECT)
    else:
        for name in _csv_env("UNIRL_PLUGINS"):
            pm.load_setuptools_entrypoints(hookspecs.PROJECT, name=name)
    for plugin, dist in pm.list_plugin_distinfo():
        name = pm.get_name(plugin)
        if name is not None:
            distributions[name] = (dist.project_name, dist.version)


def _load_local_file(pm: pluggy.PluginManager, distributions: dict[str, tuple[str, str]]) -> None:
    explicit = os.environ.get("UNIRL_PLUGIN_FILE")
    path = Path(explicit) if explicit else Path.cwd() / LOCAL_PLUGIN_FILE
    if not path.is_file():
        if explicit:
            raise FileNotFoundError(f"UNIRL_PLUGIN_FILE={explicit!r}: no such file")
        return
    name = f"local:{path.name}"
    if pm.is_blocked(name):
        return
    spec = importlib.util.spec_from_file_location(f"unirl_local_plugin_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    pm.register(module, name=name)
    distributions[name] = ("local file", str(path))


def _fill(pm: pluggy.PluginManager, hook_name: str, registry: Registry[Any]) -> None:
    """Call one registrar hook plugin by plugin, so each entry remembers which plugin added it."""
    caller = getattr(pm.hook, hook_name)
    for impl in reversed(caller.get_hookimpls()):  # pluggy's own call order
        registry.current_source = impl.plugin_name
        impl.function(**{arg: registry for arg in impl.argnames})
    registry.current_source = "runtime"


def build_host(extra_plugins: list[Any] | None = None) -> Host:
    """A fresh host; tests use this directly, the CLI uses the cached :func:`get_host`."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in _csv_env("UNIRL_PLUGINS_BLOCK"):
        pm.set_blocked(name)
    distributions: dict[str, tuple[str, str]] = {}
    from unirl.host.builtin import BUILTIN_PLUGINS

    for name, path in BUILTIN_PLUGINS:
        if not pm.is_blocked(name):
            pm.register(importlib.import_module(path), name=name)
            distributions[name] = (OWN_DISTRIBUTION, _own_version())
    _load_entry_points(pm, distributions)
    _load_local_file(pm, distributions)
    for plugin in extra_plugins or []:
        pm.register(plugin)
    pm.check_pending()
    host = Host(
        pm=pm,
        frameworks=Registry("framework"),
        rollout_engines=Registry("rollout engine"),
        rewards=Registry("reward"),
        schedulers=Registry("scheduler"),
        distributions=distributions,
    )
    _fill(pm, "unirl_add_frameworks", host.frameworks)
    _fill(pm, "unirl_add_rollout_engines", host.rollout_engines)
    _fill(pm, "unirl_add_rewards", host.rewards)
    _fill(pm, "unirl_add_schedulers", host.schedulers)
    add_decorated(host.rewards)
    return host


def add_decorated(registry: Registry[Any]) -> None:
    """Add rewards defined with ``@unirl.reward`` that no hook registered (plugin modules, reward files)."""
    from unirl.rewards.contract import drain_decorated

    for reward in drain_decorated():
        if reward.name not in registry:
            registry.current_source = reward.module
            registry.add(reward)


@cache
def _own_version() -> str:
    try:
        return md.version(OWN_DISTRIBUTION)
    except md.PackageNotFoundError:
        return "source"


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
