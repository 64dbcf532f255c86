"""What a scheduler plugin provides: launch a plan somewhere and report how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from unirl.plan import LaunchPlan


@dataclass
class JobResult:
    state: str  # completed, failed, interrupted, cancelled
    exit_code: int
    job_id: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""


@runtime_checkable
class Scheduler(Protocol):
    name: str
    description: str
    options: dict[str, Any]

    def submit(self, plan: LaunchPlan, run_dir: Path, options: dict[str, Any]) -> JobResult:
        """Launch the plan, follow it to the end, and return its final state."""
