"""Run a plan here: in this process when the backend shares unirl's interpreter, else as a child.

A child's output is streamed as it comes and kept in ``backend.log``; Ctrl-C is forwarded as SIGINT so the backend
can stop cleanly, then escalated to SIGTERM and SIGKILL if it does not. A child killed by a signal is a failed run
with the signal named and its log tail recorded.

``job.json`` records the process with its start time (``pid_start``, from ``/proc/<pid>/stat``), and ``unirl stop``
signals it only while that same process runs: a pid that is not an integer above 1 (``-1`` would be every process,
``1`` init's group) is refused, and so is a pid the kernel has since given to another process.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend.environment import launch_command
from unirl.backend.plan import LaunchPlan
from unirl.errors import UnirlError
from unirl.host.registry import load_dotted
from unirl.launch.run_lock import boot_id, note_child, started_text
from unirl.launch.scheduler import (
    BACKEND_LOG,
    JobResult,
    SchedulerBase,
    finish,
    multi_node_refusal,
    read_summary,
    write_job_record,
)
from unirl.process_tree import alive, process_start

GRACE_S = 10.0
STOP_REQUESTED = ".stop_requested"  # written by `unirl stop`: the end that follows is a cancellation
NAME = "local"
PID = re.compile(r"[0-9]{1,10}")


class LocalScheduler(SchedulerBase):
    name = NAME
    description = "this machine: in-process for the embedded default, else a child process"
    options: ClassVar[dict[str, Any]] = {"name": NAME, "in_process": True}

    def check_plan(self, plan: LaunchPlan) -> None:
        """One node: a plan that needs torchrun on several is refused before anything is written."""
        refusal = multi_node_refusal(plan, NAME)
        if refusal is not None:
            raise refusal

    def submit(self, plan: LaunchPlan, run_dir: Path, options: dict[str, Any]) -> JobResult:
        self.check_plan(plan)
        run_dir.mkdir(parents=True, exist_ok=True)
        # A `unirl stop` of an earlier start of this directory (before a resume) is not a stop of this one.
        (run_dir / STOP_REQUESTED).unlink(missing_ok=True)
        if plan.in_process and options.get("in_process", True):
            job_id = str(os.getpid())
            write_job_record(run_dir, NAME, job_id, "running", {"entrypoint": plan.entrypoint, "in_process": True},
                             **_identity(os.getpid()))
            run = load_dotted(plan.entrypoint)
            try:
                summary = run(plan, run_dir)
            except KeyboardInterrupt:
                return finish(run_dir, NAME, JobResult("interrupted", 130, job_id=job_id))
            except BaseException as exc:
                # job.json must not say "running" after the run is over, however it ended. Something in the run
                # calling sys.exit (a library, a callback) ends it as a failure, never as exit 0 with nothing said.
                error = f"{type(exc).__name__}: {exc}" if isinstance(exc, Exception) else (
                    f"{type(exc).__name__}({', '.join(map(repr, exc.args))}) was raised inside the run")
                finish(run_dir, NAME, JobResult("failed", 1, job_id=job_id, error=error,
                                                log_tail="".join(traceback.format_exception(exc))))
                if isinstance(exc, Exception):
                    raise  # the command reports it, with its traceback in error.log
                return JobResult("failed", 1, job_id=job_id, error=error, summary=read_summary(run_dir))
            state = summary.get("state", "completed")
            # A run the backend itself judged not completed (e.g. zero optimizer updates) is a failure with its reason.
            return finish(run_dir, NAME, JobResult(state, 0 if state == "completed" else 1, job_id=job_id,
                                                   summary=summary, error=str(summary.get("error") or "")))
        return self._child(plan, run_dir)

    def _child(self, plan: LaunchPlan, run_dir: Path) -> JobResult:
        """The plan's command where its backend lives (its interpreter or container), output streamed."""
        command, extra_env = launch_command(plan, run_dir)
        env = {**os.environ, **extra_env}
        if "PYTHONPATH" in extra_env and os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.pathsep.join([extra_env["PYTHONPATH"], os.environ["PYTHONPATH"]])
        tail: collections.deque[str] = collections.deque(maxlen=50)
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        job_id = str(proc.pid)
        note_child(run_dir, proc.pid)  # the child writes the run directory too, and may outlive this process
        write_job_record(run_dir, NAME, job_id, "running", {"command": command}, pid=proc.pid, **_identity(proc.pid))
        try:
            assert proc.stdout is not None
            with (run_dir / BACKEND_LOG).open("a", encoding="utf-8") as log:
                for line in proc.stdout:
                    sys.stdout.write(line)
                    log.write(line)
                    log.flush()
                    tail.append(line)
            code = proc.wait()
        except KeyboardInterrupt:
            code = stop_group(proc.pid, proc)
            return finish(run_dir, NAME, JobResult("interrupted", code, job_id=job_id, log_tail="".join(tail),
                                                   error="interrupted (Ctrl-C): the backend was stopped"))
        summary = read_summary(run_dir)
        if code == 0:
            return finish(run_dir, NAME, JobResult("completed", 0, job_id=job_id, summary=summary))
        if (run_dir / STOP_REQUESTED).exists():
            return finish(run_dir, NAME, JobResult("cancelled", code, job_id=job_id, summary=summary,
                                                   log_tail="".join(tail), error="stopped by `unirl stop`"))
        error = (f"killed by signal {signal.Signals(-code).name}" if code < 0
                 else str(summary.get("error") or f"the backend exited with status {code}"))
        return finish(run_dir, NAME, JobResult("failed", code, job_id=job_id, summary=summary,
                                               log_tail="".join(tail), error=error))

    def stop(self, record: dict[str, Any]) -> str:
        """SIGINT, then SIGTERM, then SIGKILL: to unirl's own process for an in-process run, else to the child's
        process group (its own session). Only to the recorded process: see :func:`checked_pid`."""
        pid = checked_pid(record)
        if pid is None:
            return f"process {record.get('job_id')} is not running (state {record.get('state')})"
        submitted = record.get("submitted")
        in_process = isinstance(submitted, dict) and submitted.get("in_process") is True
        start = process_start(pid)

        def send(sig: signal.Signals) -> None:
            if process_start(pid) != start:  # it ended during the grace period: its pid may be someone else's soon
                raise ProcessLookupError(pid)
            if in_process:
                os.kill(pid, sig)
            else:
                os.killpg(pid, sig)

        worked = escalate(send, lambda timeout: _wait_gone(pid, timeout, start))
        return f"stopped process {pid} with {worked.name}" if worked else f"sent SIGKILL to process {pid}"


def _identity(pid: int) -> dict[str, Any]:
    """What job.json records so that `unirl stop` can tell the same process from a later one with its pid."""
    return {"pid_start": process_start(pid), "boot_id": boot_id()}


def checked_pid(record: dict[str, Any]) -> int | None:
    """The pid ``unirl stop`` may signal, None when that process no longer runs; a UnirlError when the record is
    not trustworthy: the job id is not an integer above 1, is this very process, records no start time, or the
    process now at that pid started at another time (the pid was reused)."""
    raw = record.get("job_id")
    text = str(raw).strip() if isinstance(raw, int | str) and not isinstance(raw, bool) else ""
    if not PID.fullmatch(text) or int(text) <= 1:
        raise UnirlError(f"job.json's job_id {raw!r} is not a process id above 1 (-1, 0 and 1 would signal every "
                         "process, this process group or init's): nothing was signalled")
    pid = int(text)
    if pid == os.getpid():
        raise UnirlError(f"job.json's job_id {pid} is this `unirl stop` process itself: nothing was signalled")
    recorded = record.get("pid_start")
    now = process_start(pid)
    if now is None:
        if Path("/proc/self/stat").exists() or not alive(pid):
            return None  # gone (or a zombie, which is as good as gone)
        raise UnirlError(f"process {pid} runs, but without /proc this system cannot tell whether it is the run's: "
                         "nothing was signalled")
    if not isinstance(recorded, int) or isinstance(recorded, bool):
        raise UnirlError(f"job.json records no start time for process {pid} (pid_start), so unirl cannot tell "
                         f"whether the process now at that pid is the run's: nothing was signalled; if you are sure, "
                         f"kill {pid} yourself")
    if record.get("boot_id") not in (None, boot_id()) or now != recorded:
        raise UnirlError(f"process {pid} is not the run's any more: it started "
                         f"{started_text(now) or 'at another time'}, the run's started "
                         f"{started_text(recorded) or 'earlier'} (the pid was reused, or the machine rebooted); "
                         "nothing was signalled")
    return pid


def escalate(send: Callable[[signal.Signals], None], gone: Callable[[float], bool]) -> signal.Signals | None:
    """SIGINT, then SIGTERM, then SIGKILL, each given GRACE_S to work; returns the signal that ended the process
    (None when it was already gone, or outlived SIGKILL's grace)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            send(sig)
        except ProcessLookupError:
            return None
        if gone(GRACE_S):
            return sig
    return None


def _wait_gone(pid: int, timeout: float, start: int | None = None) -> bool:
    """Has the process (``pid`` started at ``start``, when given) ended within ``timeout``?"""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not alive(pid) or (start is not None and process_start(pid) != start):
            return True
        time.sleep(0.1)
    return False


def stop_group(pgid: int, proc: subprocess.Popen[str]) -> int:
    """Stop our own child (its session's process group) and reap it; returns its exit status."""

    def reaped(timeout: float) -> bool:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    escalate(lambda sig: os.killpg(pgid, sig), reaped)
    return proc.wait()
