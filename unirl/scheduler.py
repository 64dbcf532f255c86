"""What a scheduler plugin provides: launch a plan somewhere, follow it, stop it, and record the job.

Every scheduler writes ``job.json`` in the run directory (:func:`write_job_record`): which scheduler, the job id,
what was submitted (command, script or entrypoint), the state as it changes, and how it ended. ``unirl stop
<run_dir>`` reads it and asks the same scheduler to stop that job.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from unirl.plan import LaunchPlan
from unirl.run import SUMMARY, write_json

JOB_RECORD = "job.json"
BACKEND_LOG = "backend.log"
"""The backend's output as the scheduler saw it (what a failure's log tail comes from)."""
# completed: exit 0; failed: non-zero exit or killed by a signal; cancelled: stopped by the scheduler (scancel,
# ray job stop, unirl stop); interrupted: Ctrl-C in unirl; submitted: handed over without waiting (wait=false).
STATES = ("submitted", "running", "completed", "failed", "cancelled", "interrupted")


@dataclass
class JobResult:
    state: str
    exit_code: int
    job_id: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""
    error: str = ""
    """Why the job did not complete, in words (signal, scheduler message); empty when it completed."""


@runtime_checkable
class Scheduler(Protocol):
    name: str
    description: str
    options: dict[str, Any]

    def submit(self, plan: LaunchPlan, run_dir: Path, options: dict[str, Any]) -> JobResult:
        """Launch the plan, follow it to the end (unless ``options["wait"]`` is false), return its state."""

    def stop(self, record: dict[str, Any]) -> str:
        """Stop the job a ``job.json`` record describes; returns what happened, in words."""


def write_job_record(run_dir: Path, scheduler: str, job_id: str, state: str, submitted: dict[str, Any],
                     **extra: Any) -> dict[str, Any]:
    """Create or update ``job.json`` (atomically); earlier fields are kept, ``history`` gains the new state."""
    path = run_dir / JOB_RECORD
    record = read_job_record(run_dir) or {"scheduler": scheduler, "job_id": job_id, "submitted": submitted,
                                          "history": []}
    record.update({"scheduler": scheduler, "job_id": job_id, "state": state, **extra})
    if submitted:
        record["submitted"] = submitted
    if not record["history"] or record["history"][-1]["state"] != state:
        record["history"].append({"state": state, "time": time.time()})
    write_json(path, record)
    return record


def read_job_record(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / JOB_RECORD
    return json.loads(path.read_text()) if path.exists() else None


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The backend's ``summary.json`` when it wrote one (unirl's TRL runner does; native backends do not)."""
    path = run_dir / SUMMARY
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def finish(run_dir: Path, scheduler: str, result: JobResult) -> JobResult:
    """Record how the job ended (state, exit code, error, the log tail of a failure) and return it."""
    write_job_record(run_dir, scheduler, result.job_id, result.state, {}, exit_code=result.exit_code,
                     error=result.error, log_tail=result.log_tail[-4000:] if result.state != "completed" else "")
    return result
