"""Faults a user meets with the local scheduler: a backend killed with SIGKILL mid-run is a failed run with the
signal and its log tail; `unirl stop` on a running child ends it as cancelled; every line written so far parses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import read_jsonl

pytestmark = [pytest.mark.train, pytest.mark.slow]
LONG = ["algorithm.steps=100000", "eval.before_training=false", f"framework.python={sys.executable}"]


def start_run(cwd: Path) -> subprocess.Popen[str]:
    """The run as its own process: the test kills its backend with SIGKILL, or stops it, from outside."""
    return subprocess.Popen([sys.executable, "-m", "unirl.cli.main", *LONG], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ})


def wait_for_steps(root: Path, steps: int, timeout: float = 240.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for metrics in root.rglob("metrics.jsonl"):
            if len(metrics.read_text().splitlines()) >= steps:
                return metrics.parent
        time.sleep(0.2)
    raise AssertionError(f"no run reached {steps} steps in {timeout} s")


def test_a_backend_killed_with_sigkill_is_a_failed_run_with_its_log_tail(isolated: Path) -> None:
    unirl = start_run(isolated)
    run_dir = wait_for_steps(isolated / "runs", 3)
    deadline = time.monotonic() + 60
    while not (run_dir / "backend.log").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.2)  # the progress line the backend prints (what the log tail will show)
    job = json.loads((run_dir / "job.json").read_text())
    os.kill(int(job["job_id"]), signal.SIGKILL)  # the backend's process, not unirl
    _, stderr = unirl.communicate(timeout=120)
    assert unirl.returncode == 1
    assert "the run failed: killed by signal SIGKILL" in stderr
    assert "last lines of the backend's output" in stderr and "step" in stderr
    job = json.loads((run_dir / "job.json").read_text())
    assert job["state"] == "failed" and job["error"] == "killed by signal SIGKILL" and job["exit_code"] == -9
    assert json.loads((run_dir / "outcome.json").read_text())["state"] == "failed"
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]  # every line parses: nothing torn
    assert steps == list(range(1, len(steps) + 1))


def test_unirl_stop_cancels_a_running_local_child(isolated: Path) -> None:
    unirl = start_run(isolated)
    run_dir = wait_for_steps(isolated / "runs", 2)
    stopped = run_cli("stop", str(run_dir))  # a second command, as from another terminal
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped process" in stopped.stdout
    unirl.communicate(timeout=120)
    job = json.loads((run_dir / "job.json").read_text())
    assert job["state"] == "cancelled" and unirl.returncode == 1
