"""The follower: a native backend's command run as a child, its logs bridged into the run record as it trains.

``python -m unirl.adapters.follow --run-dir RUN_DIR -- <the backend command>`` (the launch wraps every native
backend's command in it, in the backend's own interpreter or container, where the light core is on PYTHONPATH). It

- starts the command as its child, in a process group of its own that dies with the follower (``PR_SET_PDEATHSIG``),
  and forwards SIGINT, SIGTERM and SIGHUP to that group: ``unirl stop``, Ctrl-C, Ray's ``stop_job`` and Slurm's
  ``scancel`` reach the backend as before;
- reads the backend's own logs every ``interval`` seconds (:class:`~unirl.record.metrics_bridge.MetricsBridge`) and
  feeds a :class:`~unirl.record.run_recorder.RunRecorder` (``role=run``), so ``metrics.jsonl``, ``eval.jsonl``, the
  progress bar and the trackers behave as for TRL;
- when the child ends, however it ends, reads what is left, ends the record (``summary.json``: state completed,
  failed or cancelled, steps seen, exit code; ``curves.png`` for a completed run) and exits with the child's status
  (a child killed by a signal: the follower ends itself with the same signal).

Nothing here imports a backend or changes its code; it only reads files the backend writes into the run directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from unirl.record.layout import MANIFEST, PLAN, RunInfo, write_json
from unirl.record.metrics_bridge import ATTEMPT, NATIVE_DIR, MetricsBridge
from unirl.record.run_recorder import LifecycleHooks, RunRecorder

log = logging.getLogger(__name__)

INTERVAL_S = 0.5
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_REQUESTED = ".stop_requested"
"""Written by ``unirl stop`` before it signals (unirl/plugins/local/scheduler.py): the end is a cancellation."""
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def next_attempt(run_dir: Path) -> int:
    """1 + the attempts this run directory has seen: the manifest's, and the highest whose verl file log exists
    (``native/verl_metrics.<n>.jsonl``)."""
    found = [int(m.group(1)) for p in (run_dir / NATIVE_DIR).glob("verl_metrics.*.jsonl")
             if (m := re.fullmatch(r"verl_metrics\.(\d+)\.jsonl", p.name))]
    with contextlib.suppress(OSError, ValueError, AttributeError):
        found.append(len(json.loads((run_dir / MANIFEST).read_text(encoding="utf-8")).get("attempts") or []))
    return max(found, default=0) + 1


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the follower dies (a SIGKILL to the follower cannot be forwarded)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Follower:
    def __init__(self, run: RunInfo, command: list[str], hooks: LifecycleHooks, *, interval: float = INTERVAL_S,
                 use_tensorboard: bool | None = None, env: dict[str, str] | None = None) -> None:
        self.run = run
        self.attempt = next_attempt(run.run_dir)
        self.command = [arg.replace(ATTEMPT, str(self.attempt)) for arg in command]
        self.recorder = RunRecorder(run, hooks)
        self.bridge = MetricsBridge(run.run_dir, run.framework, run.recipe, self.recorder,
                                    use_tensorboard=use_tensorboard, attempt=self.attempt)
        self.interval = interval
        base = dict(os.environ if env is None else env)
        # A path naming {attempt} (verl's VERL_FILE_LOGGER_PATH, when it comes through the environment) gets the same
        # attempt number as the command's arguments.
        self.env = {key: value.replace(ATTEMPT, str(self.attempt)) for key, value in base.items()}
        self.signals: list[int] = []
        self._wake = threading.Event()
        self.child: subprocess.Popen[bytes] | None = None
        self.poll_cpu_s = 0.0
        self.polls = 0

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.signals.append(signum)
        child = self.child
        if child is not None and child.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signum)
        self._wake.set()

    def _poll(self) -> None:
        start = time.process_time()
        try:
            self.bridge.poll()
        except Exception:  # the record must never stop the training
            log.exception("unirl: reading the backend's logs failed; the run goes on")
        self.poll_cpu_s += time.process_time() - start
        self.polls += 1

    def run_child(self) -> int:
        """Start the child, follow it to its end, end the record; returns the child's exit status (negative: the
        signal that killed it)."""
        (self.run.run_dir / NATIVE_DIR).mkdir(parents=True, exist_ok=True)
        try:
            write_manifest(self.run, self.attempt)
        except Exception:
            log.exception("unirl: could not write %s", self.run.path(MANIFEST))
        started = time.monotonic()
        previous: dict[int, Any] = {}
        for forwarded in FORWARDED:
            previous[forwarded] = signal.signal(forwarded, self._forward)
        self.recorder.run_start()
        code: int | None = None
        error = ""
        try:
            try:
                self.child = subprocess.Popen(self.command, env=self.env, process_group=0,
                                              preexec_fn=_die_with_parent)
            except OSError as exc:
                error = f"could not start the backend: {exc}"
                code = 127
            while code is None:
                assert self.child is not None
                code = self.child.poll()
                if code is not None:
                    break
                self._poll()
                self._wake.wait(self.interval)
                self._wake.clear()
        finally:
            try:
                self.bridge.drain()
            except Exception:
                log.exception("unirl: the last read of the backend's logs failed")
            self.recorder.run_end(self.summary(code, error, time.monotonic() - started))
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return code

    def state(self, code: int | None) -> str:
        if self.signals or (self.run.run_dir / STOP_REQUESTED).exists():
            return "cancelled"
        return "completed" if code == 0 else "failed"

    def summary(self, code: int | None, error: str, wall: float) -> dict[str, Any]:
        state = self.state(code)
        steps = int((self.run.recipe.get("algorithm") or {}).get("steps") or 0)
        summary: dict[str, Any] = {
            "state": state, "framework": self.run.framework, "exit_code": code, "attempt": self.attempt,
            "steps_expected": steps, "rollout_batches": self.bridge.last_step or 0, "wall_time_s": wall,
            "follower": {"polls": self.polls, "cpu_s": self.poll_cpu_s, "interval_s": self.interval},
            **self.bridge.summary(),
        }
        if self.signals:
            summary["signals"] = [signal.Signals(s).name for s in self.signals]
        if state != "completed":
            ended = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0
                     else f"exited with status {code}")
            if error:
                summary["error"] = error
            elif state == "cancelled":
                summary["error"] = f"stopped: the signal was forwarded to the backend, which {ended}"
            elif code is not None and code < 0:
                summary["error"] = f"the backend was {ended}"
            else:
                summary["error"] = f"the backend exited with status {code}"
        return summary


def write_manifest(run: RunInfo, attempt: int) -> None:
    """manifest.json, by the same code as TRL's runner (:func:`unirl.record.manifest.build_manifest`), from what
    the host staged: the reward specification and the exported data files (with their sha256). A later attempt
    (a restart in the same directory) is added to the first one's manifest."""
    import hashlib

    from unirl.record.manifest import build_manifest

    path = run.path(MANIFEST)
    if path.exists():
        manifest = json.loads(path.read_text(encoding="utf-8"))
        manifest.setdefault("attempts", []).append({"attempt": attempt, "started": time.time()})
        write_json(path, manifest)
        return

    def sha256(file: Path) -> str:
        digest = hashlib.sha256()
        with file.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()

    spec: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        spec = json.loads(run.path("reward_spec.json").read_text(encoding="utf-8"))
    rewards = {}
    for entry in spec.get("rewards") or []:
        file = entry.get("file")
        ref = str(entry.get("ref", ""))
        known = bool(file) and Path(file).is_file()
        rewards[str(entry.get("name"))] = {"module": ref.partition(":")[0], "ref": ref, "file": file or "",
                                           "sha256": sha256(Path(file)) if known else ""}
    plan: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        plan = json.loads(run.path(PLAN).read_text(encoding="utf-8"))
    data: dict[str, Any] = {}
    for export in plan.get("data") or []:
        file = Path(str(export.get("path", "")))
        data[str(export.get("split"))] = {"source": export.get("source"), "file": str(file), "format": export.get(
            "format"), "sha256": sha256(file) if file.is_file() else ""}
    recipe = run.recipe
    manifest = build_manifest(framework=run.framework, seed=int(recipe.get("seed") or 0), reward_sources=rewards,
                              model={"path": (recipe.get("model") or {}).get("path")}, data=data,
                              project_dir=Path.cwd())
    manifest["backend_version"] = plan.get("framework_version") or plan.get("target_version")
    manifest["attempts"] = [{"attempt": attempt, "started": time.time()}]
    write_json(path, manifest)


def exit_like(code: int, kill: Callable[[int, int], None] = os.kill) -> int:
    """The follower's own exit: the child's status, or its death by a signal repeated on the follower itself."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        kill(os.getpid(), -code)
        return 128 - code
    return code
