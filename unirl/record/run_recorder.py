"""The run record's one entrance: every backend's side of a run reports through a :class:`RunRecorder`.

The TRL runner feeds one in its process; each native backend's scoring processes feed one through
:mod:`unirl.adapters.common` (and, later, a metrics bridge that reads the backends' own logs). The recorder fires
the lifecycle hooks into every plugin, unirl's own run-directory writer (:mod:`unirl.record.recorder`) and the
progress bar included, so a tracker sees every backend the same way. How plugins are called, and why a failing one
is logged and skipped, is the host's (:class:`unirl.host.calls.LifecycleCalls`).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from unirl.record.layout import RunInfo


class LifecycleHooks(Protocol):
    """What the recorder fires into: each plugin's implementation of a lifecycle hook, failures kept apart."""

    def fire(self, hook: str, **kwargs: object) -> None: ...

    def failures(self) -> dict[str, int]: ...


class RunRecorder:
    """One process's part of a run, reported in order: start once, scored rollouts, metrics, evals, end once."""

    def __init__(self, run: RunInfo, hooks: LifecycleHooks) -> None:
        self.run = run
        self.hooks = hooks
        self._lock = threading.Lock()
        self.started = False
        self.ended = False

    def run_start(self) -> None:
        """The run (or this process's part of it) starts; later calls do nothing."""
        with self._lock:
            if self.started:
                return
            self.started = True
        self.hooks.fire("unirl_run_start", run=self.run)

    def rollouts_scored(self, step: int | None, records: list[dict[str, Any]]) -> None:
        """Scored completions, one record each; ``step`` None where the backend does not say which step."""
        self.hooks.fire("unirl_rollouts_scored", run=self.run, step=step, records=records)

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.hooks.fire("unirl_metrics", run=self.run, step=step, metrics=metrics)

    def eval_done(self, step: int, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
        self.hooks.fire("unirl_eval_done", run=self.run, step=step, summary=summary, records=records)

    def run_end(self, summary: dict[str, Any]) -> None:
        """The end, once (a later call does nothing): ``summary`` gains ``plugin_errors`` when a plugin failed."""
        with self._lock:
            if self.ended:
                return
            self.ended = True
        failures = self.hooks.failures()
        if failures:
            summary["plugin_errors"] = failures
        self.hooks.fire("unirl_run_end", run=self.run, summary=summary)
