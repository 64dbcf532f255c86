"""Built-in plugin: records every run's metrics, trajectories and evaluations in its directory.

It runs wherever a :class:`~unirl.record.run_recorder.RunRecorder` fires: in TRL's runner, and in each process of a
native backend that scores rewards, which appends its scored completions to the same trajectory log (line-atomic
appends keep several writers whole). ``summary.json`` and the curves belong to the process that reports the whole
run (``run.role == "run"``), never to one of several scorers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unirl.hookspecs import hookimpl
from unirl.record.layout import EVAL, METRICS, ROLE_RUN, SUMMARY, RunInfo, append_jsonl, write_json
from unirl.record.plot import CurvesPlotter
from unirl.record.trajectory_log import TrajectorySampling


@hookimpl
def unirl_rollouts_scored(run: RunInfo, step: int | None, records: list[dict[str, Any]]) -> None:
    logging = run.recipe.get("logging", {})
    if logging.get("trajectories", True):
        sampling = TrajectorySampling.from_logging(logging)
        append_jsonl(run.path(sampling.file_name()), sampling.select(records, step))


@hookimpl
def unirl_metrics(run: RunInfo, step: int, metrics: dict[str, float]) -> None:
    append_jsonl(run.path(METRICS), [{"step": step, **metrics}])


@hookimpl
def unirl_eval_done(run: RunInfo, step: int, summary: dict[str, Any], records: list[dict[str, Any]]) -> None:
    append_jsonl(run.path(EVAL), [{"step": step, "kind": "summary", **summary}])
    append_jsonl(run.path(EVAL), [{"step": step, "kind": "sample", **r} for r in records])


_PLOTTERS: dict[Path, CurvesPlotter] = {}
"""The curves' child process of each run this process reports, started with the run (unirl.record.plot)."""


def _plots(run: RunInfo) -> bool:
    return run.role == ROLE_RUN and bool(run.recipe.get("logging", {}).get("plot", True))


@hookimpl
def unirl_run_start(run: RunInfo) -> None:
    if _plots(run) and run.run_dir not in _PLOTTERS:
        _PLOTTERS[run.run_dir] = CurvesPlotter()


@hookimpl
def unirl_run_end(run: RunInfo, summary: dict[str, Any]) -> None:
    if run.role != ROLE_RUN:
        return
    write_json(run.path(SUMMARY), summary)
    plotter = _PLOTTERS.pop(run.run_dir, None)
    if summary.get("state") == "completed" and _plots(run):
        (plotter or CurvesPlotter()).draw(run.run_dir)
    elif plotter is not None:
        plotter.close()
