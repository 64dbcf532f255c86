"""How unirl calls its hooks: each plugin's implementation on its own, through pluggy's call loop.

pluggy calls every implementation of a hook in one loop and hands them all the same arguments, and its loop stops
at the first implementation that raises. unirl needs two things that loop does not give: each registration must
know the plugin that made it, and a failing tracker must not stop the run's own record or the other trackers. So
unirl asks pluggy for one plugin's implementation at a time (:meth:`pluggy.PluginManager.subset_hook_caller`, in
pluggy's own order: ``tryfirst``/``trylast`` and registration order hold): every call still goes through pluggy's
``_hookexec`` (tracing and hook-call monitoring see it, argument subsets and ``optionalhook`` work), a registrar
implementation gets a registry view bound to its plugin, and a lifecycle implementation that raises is logged
and skipped.

That leaves nothing for a wrapper implementation (``wrapper=True`` / ``hookwrapper=True``) to wrap: it would run
around its own plugin's call only. Rather than let it silently do less than its author meant, unirl refuses it
when the plugin registers (:func:`refuse_wrappers`); ``tryfirst``/``trylast`` order implementations instead.

``UNIRL_TRACE_PLUGINS=1`` logs one line per hook call, ``unirl trace: ...`` on stderr (the hook, the plugin, the
arguments in short), plus any exception: what datasette's ``DATASETTE_TRACE_PLUGINS`` does, through pluggy's
hook-call monitoring.
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

import pluggy

from unirl.errors import UnirlError
from unirl.host.registry import RUNTIME_SOURCE, Registry
from unirl.record.layout import RunInfo

TRACE_ENV = "UNIRL_TRACE_PLUGINS"

log = logging.getLogger(__name__)
trace_log = logging.LoggerAdapter(logging.getLogger(f"{__name__}.trace"), {"prefix": "unirl trace"})
REGISTRARS = ("unirl_add_frameworks", "unirl_add_rollout_engines", "unirl_add_rewards", "unirl_add_schedulers")
LIFECYCLE = ("unirl_run_start", "unirl_rollouts_scored", "unirl_metrics", "unirl_eval_done", "unirl_run_end")


def implementations(pm: pluggy.PluginManager, hook: str) -> list[pluggy.HookImpl]:
    """The hook's implementations in the order pluggy calls them (it keeps them last-called-first)."""
    return list(reversed(getattr(pm.hook, hook).get_hookimpls()))


def call_one(pm: pluggy.PluginManager, hook: str, impl: pluggy.HookImpl, kwargs: Mapping[str, object]) -> Any:
    """One plugin's implementation of ``hook``, through pluggy's call loop (monitoring, tracing)."""
    others = [other.plugin for other in getattr(pm.hook, hook).get_hookimpls() if other.plugin is not impl.plugin]
    return pm.subset_hook_caller(hook, remove_plugins=others)(**kwargs)


def refuse_wrappers(pm: pluggy.PluginManager, plugin: object | None = None) -> None:
    """A wrapper implementation of a unirl hook (all plugins', or one plugin's) is an error naming it."""
    for name in dir(pm.hook):
        if not name.startswith("unirl_"):
            continue
        for impl in getattr(pm.hook, name).get_hookimpls():
            if (plugin is None or impl.plugin is plugin) and (impl.wrapper or impl.hookwrapper):
                raise UnirlError(
                    f"plugin {impl.plugin_name!r} implements {name} as a wrapper; unirl calls each plugin's "
                    "implementation on its own (so each registration knows its plugin and a failing tracker cannot "
                    "stop the others), which leaves a wrapper nothing to wrap: make it a plain implementation, "
                    "ordered with tryfirst=True or trylast=True")


def fill(pm: pluggy.PluginManager, hook: str, registry: Registry[Any], plugin: object | None = None) -> None:
    """Call a registrar hook plugin by plugin (or only ``plugin``'s), each with the registry bound to it.

    A registrar that raises stops the host (a half-registered plugin is worse than none); the error says which."""
    for impl in implementations(pm, hook):
        if plugin is not None and impl.plugin is not plugin:
            continue
        try:
            call_one(pm, hook, impl, {"registry": registry.for_plugin(impl.plugin_name)})
        except Exception as exc:
            _name_plugin(exc, impl.plugin_name, hook)
            raise


def call_each(pm: pluggy.PluginManager, hook: str, **kwargs: object) -> None:
    """Every plugin's implementation of a configuration hook, in pluggy's order; an error names the plugin."""
    for impl in implementations(pm, hook):
        try:
            call_one(pm, hook, impl, kwargs)
        except Exception as exc:
            _name_plugin(exc, impl.plugin_name, hook)
            raise


def _name_plugin(exc: Exception, plugin: str, hook: str) -> None:
    """Say which plugin raised, unless the message does already (a registry's refusal names it)."""
    if repr(plugin) not in str(exc):
        exc.add_note(f"(raised in plugin {plugin!r}'s {hook})")


class LifecycleCalls:
    """Fires lifecycle hooks into every plugin; an implementation that raises is logged once and skipped.

    The policy: a run's training (often GPU hours) and its scoring are worth more than any one sink, unirl's own
    run-directory writer included, so a sink's failure never reaches the trainer. The first failure of each
    (plugin, hook) is printed with its traceback, later ones are only counted; :meth:`failures` goes into the
    run's summary. Ctrl-C and ``SystemExit`` are not failures of a sink and still propagate.
    """

    def __init__(self, pm: pluggy.PluginManager, stream: TextIO | None = None) -> None:
        self.pm = pm
        self._stream = stream
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()  # native backends score from several threads at once

    def fire(self, hook: str, **kwargs: object) -> None:
        for impl in implementations(self.pm, hook):
            try:
                call_one(self.pm, hook, impl, kwargs)
            except Exception as exc:
                self._failed(impl.plugin_name, hook, exc)

    def failures(self) -> dict[str, int]:
        """``"<plugin>:<hook>"`` -> how many of its calls raised (only those that did)."""
        with self._lock:
            return dict(self._failures)

    def _failed(self, plugin: str, hook: str, exc: Exception) -> None:
        key = f"{plugin}:{hook}"
        with self._lock:
            first = key not in self._failures
            self._failures[key] = self._failures.get(key, 0) + 1
        if first:
            trace = "".join(traceback.format_exception(exc)).rstrip()
            message = (f"plugin {plugin!r} raised in {hook}; the run continues without it for this call (later "
                       f"failures of it are counted in the summary's plugin_errors):\n{trace}")
            if self._stream is not None:  # the caller's own stream, as it asked
                print(f"unirl: {message}", file=self._stream, flush=True)
            else:
                log.warning("%s", message)


# --- tracing ------------------------------------------------------------------------------------------------


def trace_requested() -> bool:
    return os.environ.get(TRACE_ENV, "") not in ("", "0", "false")


def enable_trace(pm: pluggy.PluginManager, stream: TextIO | None = None) -> None:
    """One line per hook call (hook, plugins, arguments in short) and one per exception, on ``stream``/stderr.

    pluggy's own ``enable_tracing`` prints every argument's full ``repr`` (a batch of trajectory records is
    megabytes); this keeps one readable line per call, with the plugin the call went to."""

    def write(line: str) -> None:
        if stream is not None:  # the caller's own stream, as it asked
            print(f"unirl trace: {line}", file=stream, flush=True)
        else:
            trace_log.info("%s", line)

    def before(hook: str, impls: Sequence[pluggy.HookImpl], kwargs: Mapping[str, object]) -> None:
        if hook.startswith("unirl_"):
            plugins = ", ".join(impl.plugin_name for impl in impls) or "no plugin"
            args = ", ".join(f"{key}={_short(value)}" for key, value in kwargs.items())
            write(f"{hook} -> {plugins} ({args})")

    def after(outcome: pluggy.Result[object], hook: str, impls: Sequence[pluggy.HookImpl],
              kwargs: Mapping[str, object]) -> None:
        if hook.startswith("unirl_") and outcome.exception is not None:
            plugins = ", ".join(impl.plugin_name for impl in impls)
            write(f"{hook} <- {plugins} raised {type(outcome.exception).__name__}: {outcome.exception}")

    pm.add_hookcall_monitoring(before, after)


def _short(value: object) -> str:
    if isinstance(value, Registry):
        bound = f" for {value.source!r}" if value.source != RUNTIME_SOURCE else ""
        return f"<{value.kind} registry{bound}>"
    if isinstance(value, list | tuple):
        return f"<{len(value)} items>"
    if isinstance(value, dict):
        return f"<{len(value)} keys>"
    if isinstance(value, RunInfo):
        return f"<run {value.run_dir} ({value.role})>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
