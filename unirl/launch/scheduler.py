"""What a scheduler plugin provides: launch a plan somewhere, follow it, stop it, and record the job.

Every scheduler writes ``job.json`` in the run directory (:func:`write_job_record`): which scheduler, the job id,
what was submitted (command, script or entrypoint), the state as it changes, and how it ended. ``unirl stop
<run_dir>`` reads it and asks the same scheduler to stop that job: never for a job in a terminal state (its pid or
job id may belong to someone else by then, :func:`stoppable_record`), and each scheduler checks that the id it is
given is its own kind and the run's (a local pid with the recorded start time, a Ray job with this run directory in
its metadata, a Slurm job running in this run directory).

Optional, with no-op defaults in :class:`SchedulerBase`: ``check(options)`` (before anything is written: e.g. the
cluster answers) and ``active(record) -> bool | None`` (is a job submitted with ``wait=false`` still queued or
running; None when the scheduler cannot tell), which keeps other writers out of a directory such a job writes.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from unirl.backend.plan import LaunchPlan
from unirl.errors import UnirlError
from unirl.record.layout import CURVES, METRICS, PLAN, SUMMARY, read_jsonl, write_json

log = logging.getLogger(__name__)

JOB_RECORD = "job.json"
BACKEND_LOG = "backend.log"
"""The backend's output as the scheduler saw it (what a failure's log tail comes from)."""
# completed: exit 0; failed: non-zero exit or killed by a signal; cancelled: stopped by the scheduler (scancel,
# ray job stop, unirl stop); interrupted: Ctrl-C in unirl; submitted: handed over without waiting (wait=false).
TERMINAL = ("completed", "failed", "cancelled", "interrupted")
"""States after which the job's process or cluster job is gone: ``unirl stop`` refuses them."""

RDZV_ENDPOINT = "{rdzv_endpoint}"
"""In a plan's command: torchrun's ``--rdzv_endpoint`` across nodes (``HOST:PORT`` of the first node), which only the
scheduler that holds the allocation knows; :func:`with_rendezvous` fills it in."""
RDZV_ID = "{rdzv_id}"
"""In a plan's command: torchrun's ``--rdzv_id``, one per job (the Slurm job id, the Ray submission id)."""
RDZV_PORT = 29500  # torchrun's own default port for the c10d rendezvous (torch/distributed/run.py --master_port)


def needs_rendezvous(command: list[str]) -> bool:
    """Does the command start processes on several nodes that must meet (a torchrun with a c10d rendezvous)?"""
    return RDZV_ENDPOINT in command


def with_rendezvous(command: list[str], endpoint: str, run_id: str) -> list[str]:
    """The command with the rendezvous endpoint and id of this job filled in."""
    return [endpoint if c == RDZV_ENDPOINT else run_id if c == RDZV_ID else c for c in command]


def multi_node_refusal(plan: LaunchPlan, scheduler: str) -> UnirlError | None:
    """The error for a multi-node torchrun plan on a scheduler that holds one node (the local one)."""
    if not needs_rendezvous(plan.command):
        return None
    return UnirlError(f"resources.nodes={plan.environment.nodes}: the {scheduler} scheduler starts the run's command "
                      f"once, on one node, and this {plan.framework} run needs torchrun on every node of an "
                      "allocation; "
                      "use scheduler=slurm (one torchrun per node, meeting at a rendezvous on the first), or "
                      "resources.nodes=1 with more processes per node")


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

    def check(self, options: dict[str, Any]) -> None:
        """Fail before anything is written when the scheduler cannot take the job (see :class:`SchedulerBase`)."""

    def check_plan(self, plan: LaunchPlan) -> None:
        """Fail before anything is written when the scheduler cannot run this plan (optional: see
        :func:`check_before_launch`)."""

    def active(self, record: dict[str, Any]) -> bool | None:
        """Whether a job submitted without waiting still runs; None when it cannot tell."""


class SchedulerBase:
    """The optional part of the :class:`Scheduler` protocol, as no-ops: a scheduler subclasses this and writes
    ``submit`` and ``stop`` (the host refuses a scheduler that has neither the base nor its own ``check`` and
    ``active``)."""

    def check(self, options: dict[str, Any]) -> None:
        """Nothing to check: the scheduler can always take a job."""

    def check_plan(self, plan: LaunchPlan) -> None:
        """Nothing to check: the scheduler can run every plan."""

    def active(self, record: dict[str, Any]) -> bool | None:
        """Cannot tell whether a detached job still runs."""
        return None


def check_before_launch(scheduler: Scheduler, options: dict[str, Any], plan: LaunchPlan) -> None:
    """The scheduler's own checks of the options and the plan, before anything is written. ``check_plan`` is looked
    up rather than required: a scheduler written before it existed still works."""
    scheduler.check(options)
    check_plan_fits(scheduler, plan)


def check_plan_fits(scheduler: Scheduler, plan: LaunchPlan) -> None:
    """The scheduler's ``check_plan``, where it has one (a third-party scheduler may predate it)."""
    check_plan = getattr(scheduler, "check_plan", None)
    if callable(check_plan):
        check_plan(plan)


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


def stoppable_record(run_dir: Path) -> dict[str, Any]:
    """The job record ``unirl stop`` acts on, or a UnirlError saying why there is nothing to stop.

    A record that does not parse, names no scheduler or job, or is in a terminal state is refused here, before any
    scheduler is asked to signal anything: a pid or job id from a run that ended may belong to someone else now."""
    path = run_dir / JOB_RECORD
    if not path.exists():
        raise UnirlError(f"{run_dir} has no job.json: it is not a unirl run directory, or nothing was submitted")
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UnirlError(f"{path} does not parse ({exc}): nothing was stopped") from None
    if not isinstance(record, dict) or not isinstance(record.get("scheduler"), str) or "job_id" not in record:
        raise UnirlError(f"{path} names no scheduler and job id: nothing was stopped")
    state = record.get("state")
    if state in TERMINAL:
        ended = next((h.get("time") for h in reversed(record.get("history") or [])
                      if isinstance(h, dict) and h.get("state") == state), None)
        when = f" at {datetime.fromtimestamp(ended).isoformat(timespec='seconds')}" if isinstance(ended, int | float) \
            else ""
        raise UnirlError(f"the run in {run_dir} already ended ({state}{when}): there is nothing to stop, and its "
                         f"{record['scheduler']} job id {record.get('job_id')!r} may belong to another job by now, so "
                         "nothing was signalled")
    return record


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The backend's ``summary.json`` when it wrote one (unirl's TRL runner does; native backends do not)."""
    path = run_dir / SUMMARY
    try:
        return json.loads(path.read_text()) if path.exists() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def finish(run_dir: Path, scheduler: str, result: JobResult) -> JobResult:
    """Record how the job ended (state, exit code, error, the log tail of a failure) and return it."""
    draw_missing_curves(run_dir, result)
    write_missing_summary(run_dir, result)
    write_job_record(run_dir, scheduler, result.job_id, result.state, {}, exit_code=result.exit_code,
                     error=result.error, log_tail=result.log_tail[-4000:] if result.state != "completed" else "")
    return result


def write_missing_summary(run_dir: Path, result: JobResult) -> None:
    """summary.json for a run whose own process died before writing one (a SIGKILL, the OOM killer, a node lost):
    how the job ended and what ``metrics.jsonl`` kept, so a reader never finds a run without an outcome."""
    if result.state == "completed" or (run_dir / SUMMARY).exists() or not (run_dir / PLAN).exists():
        return
    steps = [r["step"] for r in read_jsonl(run_dir / METRICS) if isinstance(r.get("step"), int)]
    write_json(run_dir / SUMMARY, {
        "state": result.state, "exit_code": result.exit_code, "error": result.error or None,
        "steps_logged": len(steps), "last_step": max(steps, default=None),
        "written_by": "the scheduler, after the run's own process ended without a summary"})


def draw_missing_curves(run_dir: Path, result: JobResult) -> None:
    """curves.png for a completed native run whose follower could not draw it (the backend's environment has no
    matplotlib): drawn here from the same metrics.jsonl and eval.jsonl, by the same code (unirl.record.plot)."""
    if result.state != "completed" or "follower" not in result.summary or (run_dir / CURVES).exists():
        return
    try:
        plan = json.loads((run_dir / PLAN).read_text())
    except (OSError, ValueError):
        plan = {}
    if not ((plan.get("recipe") or {}).get("logging") or {}).get("plot", True):
        return
    from unirl.record.plot import plot_run

    try:
        plot_run(run_dir)
    except Exception as exc:  # a picture is never worth failing a finished run over
        log.warning("unirl: could not draw %s: %s", run_dir / CURVES, exc)
