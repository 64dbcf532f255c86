"""Sandbox throughput and time to kill.

* executions per second of ``print(1)``: serially, and with one thread per core; next to a bare
  ``python -I -c 'print(1)'`` subprocess, the floor any per-run interpreter start pays;
* time to kill: from the wall-clock limit firing to every process of the run being gone (bwrap has reaped the
  program, PID 1 of its namespace, which the kernel lets happen only after the rest of the namespace died), for
  a busy loop, a fork bomb and a loop that left a setsid double-forked daemon behind.

A runaway whose timeout the sandbox reports as starvation (``SandboxOverloaded``: the machine was too busy to
judge it) is counted, not timed, and tried again.

Usage: python benchmarks/sandbox.py [RUNS]   (default 200; writes benchmarks/results/sandbox.json)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from _common import save, summary

from unirl.rewards.sandbox import core as sandbox

RUNAWAYS = {
    "busy_loop": "while True:\n    pass\n",
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "setsid_daemon": ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                      "        time.sleep(300)\n    os._exit(0)\nwhile True:\n    pass\n"),
}


def executions_per_second(module: Any, runs: int, workers: int) -> dict[str, float]:
    def one(_: int) -> float:
        result = module.run_sandboxed("print(1)")
        if (result.status, result.stdout) != ("ok", "1\n"):
            raise RuntimeError(f"trivial run failed: {result}")
        return float(result.wall_seconds)

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        latencies = sorted(pool.map(one, range(runs)))
    elapsed = time.perf_counter() - start
    return {"workers": workers, "runs": runs, "per_second": runs / elapsed,
            "latency_ms_median": 1000 * latencies[len(latencies) // 2],
            "latency_ms_p95": 1000 * latencies[int(len(latencies) * 0.95) - 1]}


def bare_python_per_second(runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        subprocess.run([sys.executable, "-I", "-c", "print(1)"], capture_output=True, check=True)
    return runs / (time.perf_counter() - start)


def time_to_kill(module: Any, program: str, runs: int) -> dict[str, float]:
    limits = module.SandboxLimits(wall_seconds=0.3, cpu_seconds=5, max_processes=32)
    overloaded = getattr(module, "SandboxOverloaded", ())
    kills: list[float] = []
    starved = 0
    while len(kills) < runs and starved < 10 * runs:
        try:
            result = module.run_sandboxed(program, limits=limits)
        except overloaded:
            starved += 1
            continue
        if result.status != "timeout" or result.kill_seconds is None:
            raise RuntimeError(f"runaway was not timed out: {result}")
        kills.append(1000 * result.kill_seconds)
    data: dict[str, float] = {f"{key}_ms" if key != "n" else key: value for key, value in summary(kills).items()}
    data["reported_overloaded"] = starved
    return data


def measure(module: Any, runs: int) -> dict[str, Any]:
    module.run_sandboxed("print(1)")  # warm the page cache
    return {
        "trivial_program": {
            "serial": executions_per_second(module, runs, 1),
            "parallel": executions_per_second(module, runs, os.cpu_count() or 1),
        },
        "time_to_kill": {name: time_to_kill(module, program, max(10, runs // 10))
                         for name, program in RUNAWAYS.items()},
    }


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    report = sandbox.check_isolation()
    data = {
        "isolation": {"mode": report.mode, "readonly_root": report.readonly_root, "proc": report.proc,
                      "network_interfaces": report.network_interfaces, "visible_root": report.visible_root,
                      "seccomp": report.seccomp, "cgroup": report.cgroup},
        **measure(sandbox, runs),
        "bare_python_subprocess_per_second": bare_python_per_second(runs // 2),
    }
    print(json.dumps(data, indent=2))
    save("sandbox", data)


if __name__ == "__main__":
    main()
