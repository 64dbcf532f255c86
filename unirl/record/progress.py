"""Built-in plugin: a progress bar (steps, reward, time left) on a terminal, plain lines elsewhere.

Only the process that reports the whole run shows it; a native backend's scoring processes (several, often without
a terminal or rich) load the plugin and stay quiet.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from unirl.hookspecs import hookimpl
from unirl.record.layout import ROLE_RUN, RunInfo


class _Display:
    def __init__(self, run: RunInfo) -> None:
        from rich.console import Console

        self.total = int(run.recipe["algorithm"]["steps"])
        self.console = Console(stderr=True, markup=False, highlight=False, emoji=False)  # user text is text
        self.errors = 0
        self.start = time.monotonic()
        self.last_plain = -1
        self.progress = None
        if self.console.is_terminal:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("{task.description}", style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                TextColumn("reward {task.fields[reward]}", markup=False),
                TextColumn("{task.fields[errors]}", style="yellow", markup=False), TimeElapsedColumn(),
                TextColumn("left", markup=False), TimeRemainingColumn(), console=self.console,
            )
            self.task = self.progress.add_task(run.framework, total=self.total, reward="-", errors="")
            self.progress.start()

    def step(self, step: int, reward: float | None, errors: float | None = None) -> None:
        shown = "-" if reward is None else f"{reward:.3f}"
        self.errors += int(errors or 0)
        failed = f"{self.errors} reward errors" if self.errors else ""
        if self.progress is not None:
            self.progress.update(self.task, completed=step, reward=shown, errors=failed)
            return
        tenth = step * 10 // max(self.total, 1)
        if tenth != self.last_plain:
            self.last_plain = tenth
            elapsed = time.monotonic() - self.start
            left = elapsed / step * (self.total - step) if step else float("nan")
            self.console.print(f"step {step}/{self.total}  reward {shown}  {elapsed:.0f}s elapsed, ~{left:.0f}s left"
                               + (f"  {failed}" if failed else ""))

    def note(self, text: str) -> None:
        self.console.print(text)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()


_DISPLAYS: dict[str, _Display] = {}


def _enabled(run: RunInfo) -> bool:
    return run.role == ROLE_RUN and bool(run.recipe.get("logging", {}).get("progress", True)) \
        and sys.stderr is not None


@hookimpl
def unirl_run_start(run: RunInfo) -> None:
    if _enabled(run):
        _DISPLAYS[str(run.run_dir)] = _Display(run)


@hookimpl
def unirl_metrics(run: RunInfo, step: int, metrics: dict[str, float]) -> None:
    display = _DISPLAYS.get(str(run.run_dir))
    if display:
        display.step(step, metrics.get("reward/total/mean"), metrics.get("reward/errors"))


@hookimpl
def unirl_eval_done(run: RunInfo, step: int, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    display = _DISPLAYS.get(str(run.run_dir))
    if display:
        counted = f" ({summary['solved']}/{summary['n']})" if summary.get("n") is not None else ""
        display.note(f"held-out eval at step {step}: accuracy {summary['accuracy']:.3f}{counted}, "
                     f"mean reward {summary['reward_mean']:.3f}")


@hookimpl
def unirl_run_end(run: RunInfo, summary: dict[str, Any]) -> None:
    display = _DISPLAYS.pop(str(run.run_dir), None)
    if display:
        display.stop()
