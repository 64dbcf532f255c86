"""Run a plan here: in this process when the backend shares unirl's interpreter, else as a child.

A child's output is streamed as it comes and kept in ``backend.log``; Ctrl-C is forwarded as SIGINT so the backend
can stop cleanly, then escalated to SIGTERM and SIGKILL if it does not. A child killed by a signal is a failed run
with the signal named and its log tail recorded.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend_env import launch_command
from unirl.plan import LaunchPlan
from unirl.registry import load_dotted
from unirl.scheduler import BACKEND_LOG, JobResult, finish, read_summary, write_job_record

GRACE_S = 10.0
STOP_REQUESTED = ".stop_requested"  # written by `unirl stop`: the end that follows is a cancellation
NAME = "local"


class LocalScheduler:
    name = NAME
    description = "this machine: in-process for the embedded default, else a child process"
    options: ClassVar[dict[str, Any]] = {"name": NAME, "in_process": True}

    def submit(self, plan: LaunchPlan, run_dir: Path, options: dict[str, Any]) -> JobResult:
        run_dir.mkdir(parents=True, exist_ok=True)
        if plan.in_process and options.get("in_process", True):
            job_id = str(os.getpid())
            write_job_record(run_dir, NAME, job_id, "running", {"entrypoint": plan.entrypoint, "in_process": True})
            run = load_dotted(plan.entrypoint)
            try:
                summary = run(plan, run_dir)
            except KeyboardInterrupt:
                return finish(run_dir, NAME, JobResult("interrupted", 130, job_id=job_id))
            return finish(run_dir, NAME, JobResult(summary.get("state", "completed"), 0, job_id=job_id,
                                                   summary=summary))
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
        write_job_record(run_dir, NAME, job_id, "running", {"command": command}, pid=proc.pid)
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
                 else f"the backend exited with status {code}")
        return finish(run_dir, NAME, JobResult("failed", code, job_id=job_id, summary=summary,
                                               log_tail="".join(tail), error=error))

    def stop(self, record: dict[str, Any]) -> str:
        """SIGINT, then SIGTERM, then SIGKILL: to unirl's own process for an in-process run, else to the child's
        process group (its own session)."""
        pid = int(record["job_id"])
        if not _alive(pid):
            return f"process {pid} is not running (state {record.get('state')})"
        in_process = record.get("submitted", {}).get("in_process")
        worked = escalate(lambda sig: os.kill(pid, sig) if in_process else os.killpg(pid, sig),
                          lambda timeout: _wait_gone(pid, timeout))
        return f"stopped process {pid} with {worked.name}" if worked else f"sent SIGKILL to process {pid}"


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _wait_gone(pid: int, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not _alive(pid):
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
