"""The metrics bridge's cost and latency while a backend's own logger writes: ``python benchmarks/bridge.py``.

Two writers, each run as the follower's child exactly as a launch runs a backend (unirl.record.follow.Follower with
the host's plugins, so metrics.jsonl, eval.jsonl and the progress plugin are written as in a real run):

- verl 0.9.1's ``Tracking`` with its ``file`` logger in the verl venv (tests/backends/verl_tracking_harness.py,
  verl's own metric functions, ~40 metrics a step);
- OpenRLHF 0.11.2's ``TensorboardLogger`` in its venv (tests/backends/openrlhf_tb_harness.py, 16 scalars a step).

Measured per writer, for ``--steps`` logged steps at ``--sleep`` seconds apart:
- the follower's CPU time (this process's user + system time while it follows: polling, decoding, writing rows,
  the plugins), reported per 1,000 logged steps;
- latency, metric written -> its row handed to the run record: verl from a ``bench/written_at`` stamp inside the
  logged dict (float64 in verl's JSON), OpenRLHF from the event's own wall time. For TensorBoard writers this
  includes the writer's own buffering (torch's SummaryWriter queues 10 events or 120 s before it writes);
  ``--flush`` makes the OpenRLHF harness flush each step, which isolates the bridge's part.

Results: benchmarks/results/bridge.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import save
from unirl.host.manager import get_host
from unirl.record.follow import Follower
from unirl.record.layout import METRICS, RunInfo

REPO = Path(__file__).resolve().parents[1]
HARNESSES = REPO / "tests" / "backends"


class Timed:
    """The host's lifecycle calls, with the time each metrics row reached the run record."""

    def __init__(self) -> None:
        self.inner = get_host().lifecycle
        self.rows: list[tuple[float, dict[str, float]]] = []

    def fire(self, hook: str, **kwargs: object) -> None:
        self.inner.fire(hook, **kwargs)
        if hook == "unirl_metrics":
            self.rows.append((time.time(), dict(kwargs["metrics"])))  # type: ignore[call-overload]

    def failures(self) -> dict[str, int]:
        return self.inner.failures()


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def follow(name: str, command: list[str], env: dict[str, str], steps: int, interval: float,
           use_tensorboard: bool | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"unirl-bridge-{name}-") as tmp:
        run_dir = Path(tmp)
        recipe = {"algorithm": {"steps": steps}, "logging": {"progress": False, "plot": False},
                  "rewards": [{"name": "math_answer"}]}
        hooks = Timed()
        follower = Follower(RunInfo(run_dir, name, recipe), [c.replace("{run}", tmp) for c in command], hooks,
                            interval=interval, use_tensorboard=use_tensorboard,
                            env={**os.environ, **{k: v.replace("{run}", tmp) for k, v in env.items()}})
        start_cpu, start = cpu(), time.monotonic()
        code = follower.run_child()
        spent, wall = cpu() - start_cpu, time.monotonic() - start
        rows = sum(1 for _ in (run_dir / METRICS).open())
        if code != 0 or rows != steps:
            raise SystemExit(f"{name}: exit {code}, {rows} rows of {steps}")
        if name == "verl":
            latencies = [at - row["native/bench/written_at"] for at, row in hooks.rows]
        else:
            latencies = follower.bridge.latencies
        return {"steps": steps, "rows": rows, "wall_s": round(wall, 2), "polls": follower.polls,
                "follower_cpu_s": round(spent, 3), "follower_cpu_s_per_1000_steps": round(spent / steps * 1000, 3),
                "poll_cpu_s": round(follower.poll_cpu_s, 3),
                "latency_s": {"median": round(statistics.median(latencies), 3),
                              "p90": round(sorted(latencies)[int(0.9 * len(latencies))], 3),
                              "max": round(max(latencies), 3)}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--sleep", type=float, default=0.01, help="seconds between the writer's steps")
    p.add_argument("--interval", type=float, default=0.5, help="the follower's poll interval")
    p.add_argument("--flush", action="store_true", help="the OpenRLHF writer flushes after every step")
    ns = p.parse_args()
    venvs = Path(os.environ.get("UNIRL_VENVS_DIR", REPO / ".venvs"))
    results: dict[str, Any] = {"interval_s": ns.interval, "writer_sleep_s": ns.sleep}
    steps, sleep = str(ns.steps), str(ns.sleep)
    verl = venvs / "verl" / "bin" / "python"
    if verl.exists():
        results["verl_file_logger"] = follow(
            "verl", [str(verl), str(HARNESSES / "verl_tracking_harness.py"), "--steps", steps, "--sleep", sleep,
                     "--stamp", "--batch", "8"],
            {"VERL_FILE_LOGGER_PATH": "{run}/native/verl_metrics.1.jsonl"}, ns.steps, ns.interval)
        print("verl:", results["verl_file_logger"], flush=True)
    openrlhf = venvs / "openrlhf" / "bin" / "python"
    if openrlhf.exists():
        command = [str(openrlhf), str(HARNESSES / "openrlhf_tb_harness.py"), "--dir", "{run}/native/tb",
                   "--steps", steps, "--sleep", sleep, *(["--flush"] if ns.flush else [])]
        # TensorBoard's own loader (where tensorboard is importable), then unirl's wire decoder (where it is not)
        for key, loader in (("openrlhf_tensorboard", True), ("openrlhf_tensorboard_wire_decoder", False)):
            results[key] = follow("openrlhf", command, {}, ns.steps, ns.interval, use_tensorboard=loader)
            print(f"{key}:", results[key], flush=True)
    save("bridge" + ("_flush" if ns.flush else ""), results)


if __name__ == "__main__":
    main()
