"""What every tracker shares: when it acts, what it is given, and how it ends.

A tracker acts only when the run's recipe names it in ``logging.trackers``, and only in the process that reports the
whole run (``run.role == "run"``: TRL's runner today; a native backend's scoring processes are ``"scorer"`` and are
left alone), so metric names and step axes are unirl's own on every backend: each ``unirl_metrics`` call is one
step of the ``metrics.jsonl`` vocabulary (``loss``, ``reward/total/mean``, ...) at unirl's step (one rollout batch),
each held-out evaluation is its numbers under ``eval/<key>`` at its step, the recipe is the run's config and the
summary (``state``, accuracies, reward errors, ...) is written when the run ends.

Each tracker is its own built-in plugin (``tensorboard``, ``wandb``, ``mlflow``, ``trackio`` in
``unirl/host/builtin.py``), so the host calls each on its own (:class:`unirl.host.calls.LifecycleCalls`): one that
raises is reported once with its traceback and counted in ``summary.json``'s ``plugin_errors`` as
``"<tracker>:<hook>"``, and neither the run nor the other trackers notice. A tracker whose start failed does nothing
for the rest of the run (its failure was counted once). The run's end closes every tracker it opened, whatever the
state (completed, failed, interrupted); a tracker that fails to close counts itself in the summary the recorder
writes (the host collects failures before the end hook runs).

The tracker libraries are imported when a run names them, never when the plugin loads: a plan, a backend's scoring
process or a run without trackers imports none of them.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from unirl.hookspecs import hookimpl
from unirl.record.layout import ROLE_RUN, RunInfo

EVAL_PREFIX = "eval/"


class Sink(Protocol):
    """One open tracker run: the recipe already logged as its config."""

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        """One training step's metrics, unirl's names."""

    def eval(self, step: int, summary: dict[str, float]) -> None:
        """One held-out evaluation's numbers, already named ``eval/<key>``."""

    def close(self, summary: dict[str, Any]) -> None:
        """The run ended (``summary["state"]``): record the summary, flush and close."""


Opener = Callable[[RunInfo, dict[str, Any]], Sink]
"""``(run, the tracker's logging.tracker_options)`` -> an open :class:`Sink`."""


def scalars(values: dict[str, Any]) -> dict[str, float]:
    """The plain numbers of a record (bools and non-numbers left out); NaN and infinity stay (each tracker has its
    own way to show them)."""
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def finite(values: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in values.items() if math.isfinite(v)}


def default_name(run: RunInfo) -> str:
    """The run's name in a tracker: the run directory's last two parts (``<run.name>-<time>``, ``<sweep>-<member>``)."""
    return f"{run.run_dir.parent.name}-{run.run_dir.name}"


def directory(run: RunInfo, option: str | None, default: str) -> Path:
    """A tracker's directory option: null = ``default`` inside the run directory; a relative path is taken from the
    run directory (the one place every scheduler agrees on), ``~`` expanded."""
    path = Path(option or default).expanduser()
    return path if path.is_absolute() else run.run_dir / path


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """A nested recipe as dotted keys (``algorithm.lr``); lists as JSON text (``rewards``)."""
    if isinstance(config, dict):
        out: dict[str, Any] = {}
        for key, value in config.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out if out or not prefix else {prefix[:-1]: "{}"}
    if isinstance(config, list | tuple):
        return {prefix[:-1]: json.dumps(config, default=str)}
    return {prefix[:-1]: config}


def config_text(recipe: dict[str, Any]) -> str:
    return json.dumps(recipe, indent=2, sort_keys=True, default=str)


class TrackerPlugin:
    """One tracker's lifecycle hooks; a tracker module exposes them as its own module-level hook functions."""

    def __init__(self, name: str, opener: Opener) -> None:
        self.name = name
        self.opener = opener
        self._sinks: dict[Path, Sink | None] = {}
        self._lock = threading.Lock()

    def wanted(self, run: RunInfo) -> bool:
        logging = run.recipe.get("logging") or {}
        return run.role == ROLE_RUN and self.name in (logging.get("trackers") or [])

    def options(self, run: RunInfo) -> dict[str, Any]:
        logging = run.recipe.get("logging") or {}
        return dict((logging.get("tracker_options") or {}).get(self.name) or {})

    def _sink(self, run: RunInfo) -> Sink | None:
        with self._lock:
            return self._sinks.get(run.run_dir)

    @hookimpl
    def unirl_run_start(self, run: RunInfo) -> None:
        if not self.wanted(run):
            return
        with self._lock:
            if run.run_dir in self._sinks:
                return
            self._sinks[run.run_dir] = None  # a start that raises leaves the tracker off for this run
        sink = self.opener(run, self.options(run))
        with self._lock:
            self._sinks[run.run_dir] = sink

    @hookimpl
    def unirl_metrics(self, run: RunInfo, step: int, metrics: dict[str, float]) -> None:
        sink = self._sink(run)
        if sink is not None:
            sink.metrics(step, scalars(metrics))

    @hookimpl
    def unirl_eval_done(self, run: RunInfo, step: int, summary: dict[str, Any]) -> None:
        sink = self._sink(run)
        if sink is not None:
            sink.eval(step, {f"{EVAL_PREFIX}{k}": v for k, v in scalars(summary).items()})

    @hookimpl
    def unirl_run_end(self, run: RunInfo, summary: dict[str, Any]) -> None:
        with self._lock:
            sink = self._sinks.pop(run.run_dir, None)
        if sink is None:
            return
        try:
            sink.close(summary)
        except Exception:
            # The recorder asked the host for failures before this hook ran; the summary it writes next must still
            # count this one (trackers are called before the recorder, which registered first).
            errors = summary.setdefault("plugin_errors", {})
            key = f"{self.name}:unirl_run_end"
            errors[key] = errors.get(key, 0) + 1
            raise
