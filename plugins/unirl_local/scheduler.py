"""Run a plan here: in this process when the backend shares unirl's interpreter, else as a child.

A child's output is streamed as it comes; Ctrl-C is forwarded as SIGINT so the backend can stop
cleanly, then escalated to SIGTERM and SIGKILL if it does not.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend_env import launch_command
from unirl.plan import LaunchPlan
from unirl.registry import load_dotted
from unirl.run import SUMMARY
from unirl.scheduler import JobResult

GRACE_S = 10.0


class LocalScheduler:
    name = "local"
    description = "this machine: in-process for the embedded default, else a child process"
    options: ClassVar[dict[str, Any]] = {"name": "local", "in_process": True}

    def submit(self, plan: LaunchPlan, run_dir: Path, options: dict[str, Any]) -> JobResult:
        run_dir.mkdir(parents=True, exist_ok=True)
        if plan.in_process and options.get("in_process", True):
            run = load_dotted(plan.entrypoint)
            try:
                summary = run(plan, run_dir)
            except KeyboardInterrupt:
                return JobResult("interrupted", 130, job_id=str(os.getpid()))
            return JobResult(summary.get("state", "completed"), 0, job_id=str(os.getpid()), summary=summary)
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
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                sys.stdout.write(line)
                tail.append(line)
            code = proc.wait()
        except KeyboardInterrupt:
            code = _stop(proc)
            return JobResult("interrupted", code, job_id=str(proc.pid), log_tail="".join(tail))
        summary_path = run_dir / SUMMARY
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
        state = "completed" if code == 0 else ("killed" if code < 0 else "failed")
        return JobResult(state, code, job_id=str(proc.pid), summary=summary, log_tail="".join(tail))


def _stop(proc: subprocess.Popen[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            return proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()
