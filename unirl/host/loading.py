"""How plugins arrive: unirl's own (one tuple), installed distributions' entry points, plugin files.

Environment variables (read when a plugin manager is made):
- ``UNIRL_DISABLE_PLUGIN_AUTOLOAD=1``: load no third-party entry points; only unirl's own
  built-ins, and the names listed in ``UNIRL_PLUGINS`` (comma separated).
- ``UNIRL_PLUGINS_BLOCK=a,b``: block these plugins by name (built-ins included, e.g. ``trl``).
- ``UNIRL_PLUGIN_FILE``: a project-local plugin file; default ``./unirlfile.py`` when it exists.
- ``UNIRL_TRACE_PLUGINS=1``: print every hook call (see :mod:`unirl.host.calls`).

The host loads everything (:func:`load_all`). A native backend's processes load only what the run record needs
(:func:`backend_plugin_manager`): the plugins the host staged next to the light core, else, outside a staged core,
the same rules as the host with only the built-ins marked ``in_backend``. Neither imports the CLI, Hydra or torch.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Iterable
from functools import cache, partial
from pathlib import Path
from types import ModuleType

import pluggy

from unirl import hookspecs
from unirl.backend.environment import StagedPlugin, staged_plugins
from unirl.host.builtin import BUILTIN_PLUGINS, BuiltinPlugin
from unirl.host.calls import enable_trace, refuse_wrappers, trace_requested

log = logging.getLogger(__name__)

LOCAL_PLUGIN_FILE = "unirlfile.py"
LOCAL_PREFIX = "local:"
LOCAL_FILE = "local file"
REWARD_FILE = "reward file"
"""What ``unirl plugins`` shows as the distribution of a project-local plugin file and of a recipe's reward file
(the path as the version)."""

Distributions = dict[str, tuple[str, str]]
"""plugin name -> (distribution, version); for plugin files ("local file" or "reward file", the path)."""


@cache
def own_version() -> str:
    """unirl's installed version ("source" where it runs from a checkout or a staged core without metadata)."""
    try:
        return md.version("unirl")
    except md.PackageNotFoundError:
        return "source"


def csv_env(name: str) -> list[str]:
    return [part.strip() for part in os.environ.get(name, "").split(",") if part.strip()]


def new_plugin_manager(blocked: Iterable[str] = ()) -> pluggy.PluginManager:
    """unirl's hook specifications, the blocked names (``UNIRL_PLUGINS_BLOCK`` and ``blocked``), tracing if asked."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name in [*csv_env("UNIRL_PLUGINS_BLOCK"), *blocked]:
        pm.set_blocked(name)
    if trace_requested():
        enable_trace(pm)
    return pm


def load_builtins(pm: pluggy.PluginManager, distributions: Distributions, version: str,
                  builtins: Iterable[BuiltinPlugin] = BUILTIN_PLUGINS) -> None:
    for plugin in builtins:
        if not pm.is_blocked(plugin.name):
            pm.register(importlib.import_module(plugin.module), name=plugin.name)
            distributions[plugin.name] = ("unirl", version)


def load_entry_points(pm: pluggy.PluginManager, distributions: Distributions) -> None:
    """Third-party plugins through pluggy's own loader (it skips blocked and already-registered names)."""
    autoload = os.environ.get("UNIRL_DISABLE_PLUGIN_AUTOLOAD", "") in ("", "0", "false")
    if autoload:
        pm.load_setuptools_entrypoints(hookspecs.PROJECT)
    else:
        for name in csv_env("UNIRL_PLUGINS"):
            pm.load_setuptools_entrypoints(hookspecs.PROJECT, name=name)
    record_distributions(pm, distributions)


def record_distributions(pm: pluggy.PluginManager, distributions: Distributions) -> None:
    for plugin, dist in pm.list_plugin_distinfo():
        name = pm.get_name(plugin)
        if name is not None:
            distributions[name] = (dist.project_name, dist.version)


def local_plugin_file() -> Path | None:
    """``UNIRL_PLUGIN_FILE``, else ``./unirlfile.py`` when there is one."""
    explicit = os.environ.get("UNIRL_PLUGIN_FILE")
    path = Path(explicit) if explicit else Path.cwd() / LOCAL_PLUGIN_FILE
    if not path.is_file():
        if explicit:
            raise FileNotFoundError(f"UNIRL_PLUGIN_FILE={explicit!r}: no such file")
        return None
    return path


def load_local_file(pm: pluggy.PluginManager, distributions: Distributions) -> None:
    path = local_plugin_file()
    if path is None:
        return
    name = f"{LOCAL_PREFIX}{path.name}"
    if pm.is_blocked(name):
        return
    pm.register(import_plugin_file(path), name=name)
    distributions[name] = (LOCAL_FILE, str(path))


def import_plugin_file(path: Path) -> ModuleType:
    """A plugin file imported afresh (an edited ``unirlfile.py`` counts at the next host) under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"unirl_local_plugin_{path.stem}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def load_all(pm: pluggy.PluginManager, distributions: Distributions, version: str) -> None:
    """The host's plugins: built-ins, then entry points, then the project-local file (pluggy calls the later
    ones first)."""
    load_builtins(pm, distributions, version)
    load_entry_points(pm, distributions)
    load_local_file(pm, distributions)


# --- inside a native backend's processes ------------------------------------------------------------------


def backend_plugin_manager(version: str) -> pluggy.PluginManager:
    """The plugins a backend process that scores rewards loads for the run record.

    From the list the host staged next to the light core when there is one (exactly the plugins the host had that
    implement a lifecycle hook, and its blocked names): the backend's own environment variables do not change which
    plugins a run has. A plugin that fails to load here is reported on stderr and left out, so a tracker missing a
    dependency in the backend's environment never stops the run. Outside a staged core (a test, a user's own
    install of unirl in the backend's environment), the host's rules apply, with only the ``in_backend`` built-ins.
    """
    distributions: Distributions = {}
    found = staged_plugins()
    if found is None:
        pm = new_plugin_manager()
        load_builtins(pm, distributions, version, [b for b in BUILTIN_PLUGINS if b.in_backend])
        for name in _entry_point_names():
            _leniently(name, partial(pm.load_setuptools_entrypoints, hookspecs.PROJECT, name=name))
        _leniently(LOCAL_PLUGIN_FILE, partial(load_local_file, pm, distributions))
    else:
        staged, directory = found
        pm = new_plugin_manager(staged.blocked)
        for plugin in staged.plugins:
            _leniently(plugin.name, partial(_load_staged, pm, plugin, directory))
    pm.check_pending()
    refuse_wrappers(pm)
    return pm


def _entry_point_names() -> list[str]:
    """The ``unirl`` entry points the host's rules would load here, by name, except unirl's own distribution's
    (its plugins come from the built-in tuple; an older install's metadata may still list entry points)."""
    if os.environ.get("UNIRL_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0", "false"):
        return csv_env("UNIRL_PLUGINS")
    return sorted({ep.name for dist in md.distributions() if (dist.metadata["Name"] or "").lower() != "unirl"
                   for ep in dist.entry_points if ep.group == hookspecs.PROJECT})


def _leniently(name: str, load: Callable[[], object]) -> None:
    """Load one plugin; one that fails here is reported and left out, so a tracker missing a dependency in the
    backend's environment never stops the run's scoring."""
    try:
        load()
    except Exception as exc:
        log.warning("plugin %r could not be loaded in this backend process (%s: %s); the run record goes on without "
                    "it here", name, type(exc).__name__, exc)


def _load_staged(pm: pluggy.PluginManager, plugin: StagedPlugin, directory: Path) -> None:
    if pm.is_blocked(plugin.name) or pm.has_plugin(plugin.name):
        return
    if plugin.kind == "builtin":
        pm.register(importlib.import_module(plugin.module), name=plugin.name)
    elif plugin.kind == "entry_point":
        if not pm.load_setuptools_entrypoints(hookspecs.PROJECT, name=plugin.name):
            raise ModuleNotFoundError(f"no entry point {plugin.name!r} of distribution {plugin.distribution!r} "
                                      "is installed or staged here")
    else:
        pm.register(import_plugin_file(directory / plugin.path), name=plugin.name)
