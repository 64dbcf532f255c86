"""Sandbox throughput and time to kill.

* executions per second of ``print(1)``: serially, and with one thread per core; next to a bare
  ``python -I -c 'print(1)'`` subprocess, the floor any per-run interpreter start pays;
* time to kill: from the wall-clock limit firing to every process of the run being gone (the
  supervisor has reaped the namespace's init, which the kernel lets happen only after the rest died),
  for a busy loop, a fork bomb and a loop that left a setsid double-forked daemon behind.

Usage: python benchmarks/sandbox.py [RUNS]   (default 200; writes benchmarks/results/sandbox.json)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from _common import save, summary

from unirl.sandbox import SandboxLimits, check_isolation, run_sandboxed

RUNAWAYS = {
    "busy_loop": "while True:\n    pass\n",
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "setsid_daemon": ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                      "        time.sleep(300)\n    os._exit(0)\nwhile True:\n    pass\n"),
}


def executions_per_second(runs: int, workers: int) -> dict[str, float]:
    def one(_: int) -> float:
        result = run_sandboxed("print(1)")
        if (result.status, result.stdout) != ("ok", "1\n"):
            raise RuntimeError(f"trivial run failed: {result}")
        return result.wall_seconds

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


def time_to_kill(program: str, runs: int) -> dict[str, float]:
    limits = SandboxLimits(wall_seconds=0.3, cpu_seconds=5, max_processes=32)
    kills = []
    for _ in range(runs):
        result = run_sandboxed(program, limits=limits)
        if result.status != "timeout" or result.kill_seconds is None:
            raise RuntimeError(f"runaway was not timed out: {result}")
        kills.append(1000 * result.kill_seconds)
    return {f"{key}_ms" if key != "n" else key: value for key, value in summary(kills).items()}


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    report = check_isolation()
    run_sandboxed("print(1)")  # warm the page cache and the supervisor script
    data = {
        "isolation": {"mode": report.mode, "readonly_root": report.readonly_root, "proc": report.proc,
                      "network_interfaces": report.network_interfaces},
        "trivial_program": {
            "serial": executions_per_second(runs, 1),
            "parallel": executions_per_second(runs, os.cpu_count() or 1),
            "bare_python_subprocess_per_second": bare_python_per_second(runs // 2),
        },
        "time_to_kill": {name: time_to_kill(program, max(10, runs // 10)) for name, program in RUNAWAYS.items()},
    }
    print(json.dumps(data, indent=2))
    save("sandbox", data)


if __name__ == "__main__":
    main()
