"""The local scheduler's in-process run ends with a consistent record however the run ends: a run that raises, or in
which something calls ``sys.exit`` (a library, a callback), is a failed job with its reason, never a job.json left
"running" or an exit status 0 with nothing said."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from unirl.backend.plan import LaunchPlan
from unirl.plugins.local.scheduler import LocalScheduler

MODULE = __name__


def exits_quietly(plan: LaunchPlan, run_dir: Path) -> dict[str, Any]:
    sys.exit(0)


def raises(plan: LaunchPlan, run_dir: Path) -> dict[str, Any]:
    raise RuntimeError("the trainer broke")


def completes(plan: LaunchPlan, run_dir: Path) -> dict[str, Any]:
    return {"state": "completed"}


def submit(entry: str, run_dir: Path) -> Any:
    plan = LaunchPlan("trl", None, f"{MODULE}:{entry}", {}, in_process=True)
    return LocalScheduler().submit(plan, run_dir, {"in_process": True})


def job(run_dir: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((run_dir / "job.json").read_text())
    return record


def test_sys_exit_inside_an_in_process_run_is_a_failed_job(tmp_path: Path) -> None:
    result = submit("exits_quietly", tmp_path)
    assert result.state == "failed" and result.exit_code == 1
    assert "SystemExit(0) was raised inside the run" in result.error
    assert job(tmp_path)["state"] == "failed" and "exits_quietly" in job(tmp_path)["log_tail"]


def test_an_exception_inside_an_in_process_run_is_recorded_before_it_is_reported(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="the trainer broke"):
        submit("raises", tmp_path)
    assert job(tmp_path)["state"] == "failed" and "RuntimeError: the trainer broke" in job(tmp_path)["error"]


def test_a_completed_in_process_run_is_completed(tmp_path: Path) -> None:
    assert submit("completes", tmp_path).state == "completed"
    assert job(tmp_path)["state"] == "completed"
