"""Memory: peak resident memory of the whole process tree for the embedded default and for `unirl plan`.

The tree is sampled every 0.1 s with psutil (children included). Usage: python benchmarks/memory.py [overrides...]
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time

import psutil
from _common import save


def peak_rss(cmd: list[str], cwd: str) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**__import__("os").environ, "UNIRL_RUNS_DIR": f"{cwd}/runs"})
    root = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree if p.is_running()))
        except psutil.Error:
            pass
        time.sleep(0.1)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}")
    return peak / 2**20, time.perf_counter() - start


def main() -> None:
    overrides = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        plan_mib, _ = peak_rss(["unirl", "plan", "--json", *overrides], tmp)
        run_mib, wall = peak_rss(["unirl", "recipe=grpo_math", "logging.progress=false", *overrides], tmp)
    print(f"unirl plan: peak {plan_mib:.0f} MiB (target <= 150 MB)")
    print(f"embedded default: peak {run_mib:.0f} MiB over {wall:.0f} s (target <= 2 GiB)")
    save("memory", {"overrides": overrides, "plan_peak_mib": plan_mib, "run_peak_mib": run_mib, "run_wall_s": wall})


if __name__ == "__main__":
    main()
