"""The entry point: unirl loads this module in every process that reports a run and calls its lifecycle hooks.

A real tracker would send these to W&B, MLflow or TensorBoard; this one appends JSON lines to the run directory, one
``os.write`` per line on an O_APPEND descriptor, so several scoring processes of one run never interleave a line.
"""

import importlib.metadata
import json
import os

import unirl

LOG = "tracker_example.jsonl"


def _append(run, event, **fields):
    line = json.dumps({"event": event, "role": run.role, "pid": os.getpid(), "framework": run.framework, **fields},
                      default=repr) + "\n"
    fd = os.open(run.path(LOG), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@unirl.hookimpl
def unirl_run_start(run):
    _append(run, "run_start", version=importlib.metadata.version("unirl-tracker-example"))


@unirl.hookimpl
def unirl_rollouts_scored(run, step, records):
    _append(run, "rollouts_scored", step=step,
            records=[{"completion": r["completion"], "total": r["total"], "scores": r["scores"]} for r in records])


@unirl.hookimpl
def unirl_run_end(run, summary):
    _append(run, "run_end", state=summary.get("state"), reward_calls=summary.get("reward_calls"))
