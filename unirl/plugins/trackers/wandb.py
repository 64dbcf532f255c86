"""Weights & Biases: one W&B run per unirl run, offline by default (``logging.tracker_options.wandb.mode``).

Offline, W&B writes ``<run dir>/wandb/offline-run-<time>-<id>/`` (``run-<id>.wandb``, its transaction log) and needs
no account or network; ``wandb sync <that folder>`` uploads it later, ``wandb leet <run dir>/wandb`` shows it in the
terminal. The recipe is the run's config (nested, as the recipe is), each metric is logged at unirl's step, held-out
evaluations as ``eval/<key>`` at their step, and the summary becomes the W&B run's summary; the run finishes with
exit code 0 when it completed, 1 otherwise. W&B's console capture is off (``console="off"``): unirl keeps its own
logs in the run directory and its progress bar on the terminal. ``pip install 'unirl[wandb]'``.
"""

from __future__ import annotations

import json
from typing import Any

from unirl.plugins.trackers.plugin import Sink, TrackerPlugin, default_name, directory
from unirl.record.layout import RunInfo

NAME = "wandb"


class WandbSink:
    def __init__(self, run: Any) -> None:
        self.run = run

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)

    def eval(self, step: int, summary: dict[str, float]) -> None:
        self.run.log(summary, step=step)

    def close(self, summary: dict[str, Any]) -> None:
        try:
            self.run.summary.update(json.loads(json.dumps(summary, default=str)))
        finally:
            self.run.finish(exit_code=0 if summary.get("state") == "completed" else 1)


def open_sink(run: RunInfo, options: dict[str, Any]) -> Sink:
    import wandb

    where = directory(run, options.get("dir"), ".")
    where.mkdir(parents=True, exist_ok=True)
    # reinit="create_new": several unirl runs in one process (a sweep's in-process members, tests) are separate W&B
    # runs, none finishing another (wandb 0.31 wandb_init.py init(reinit=...)).
    handle = wandb.init(project=options.get("project") or "unirl", entity=options.get("entity"),
                        mode=options.get("mode") or "offline", name=options.get("name") or default_name(run),
                        group=options.get("group"), tags=list(options.get("tags") or []) or None, dir=str(where),
                        config=run.recipe, reinit="create_new", settings=wandb.Settings(console="off"))
    return WandbSink(handle)


PLUGIN = TrackerPlugin(NAME, open_sink)
unirl_run_start = PLUGIN.unirl_run_start
unirl_metrics = PLUGIN.unirl_metrics
unirl_eval_done = PLUGIN.unirl_eval_done
unirl_run_end = PLUGIN.unirl_run_end
