"""Helpers for the benchmark scripts: timing a command, a process tree's peak memory, a sweep read back by compare,
machine description, result files."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


# The reference timing every result carries, so that numbers from two machines compare as ratios: a fixed float32
# matmul loop on one torch thread (what a step's arithmetic costs) and a fixed pure-Python loop (what its overhead
# costs: the embedded default's steps are mostly Python), each the median of 5 repeats, in a fresh interpreter.
REFERENCE_SCRIPT = """
import json, statistics, time
def median(fn):
    times = []
    for _ in range(5):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    return statistics.median(times)
def python_loop():
    total = 0
    for i in range(500_000):
        total += i % 7
out = {"python_loop_5e5_s": median(python_loop)}
try:
    import torch
except ImportError:
    out["matmul_256x100_s"] = None
else:
    torch.set_num_threads(1)
    a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    def matmul():
        x = a
        for _ in range(100):
            x = torch.tanh(x @ a)
    matmul()
    out["matmul_256x100_s"] = median(matmul)
print(json.dumps(out))
"""


def versions() -> dict[str, str | None]:
    """The installed versions of what the measured runs use (read from package metadata: nothing is imported)."""
    from importlib import metadata

    found: dict[str, str | None] = {}
    for name in ("torch", "transformers", "trl", "unirl"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def reference_timing() -> dict[str, Any]:
    """Seconds for the fixed loops of :data:`REFERENCE_SCRIPT` (run in this interpreter's Python, one thread)."""
    out = subprocess.run([sys.executable, "-c", REFERENCE_SCRIPT], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode != 0:
        return {"error": out.stderr[-500:]}
    result: dict[str, Any] = json.loads(out.stdout)
    result["loadavg"] = os.getloadavg()
    return result


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {"cpu": platform.processor() or platform.machine(), "cpu_model": cpu_model(), "cores": os.cpu_count(),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": sys.version.split()[0], "platform": platform.platform(), "versions": versions(),
            "loadavg_at_start": load}


def timed(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return elapsed, out.stdout


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "median": statistics.median(values), "mean": statistics.fmean(values),
            "min": min(values), "max": max(values)}


def save(name: str, data: dict[str, Any], started: dict[str, Any] | None = None) -> Path:
    """Write ``results/<name>.json``: the machine (``started``: :func:`machine` taken when the benchmark began, so
    its load average is the one at the start; else taken now), the reference timing measured now, and ``data``."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    taken = started or data.get("machine") or machine()  # a benchmark may have put its own machine() in data
    rest = {k: v for k, v in data.items() if k != "machine"}
    record = {"machine": {**taken, "reference": reference_timing()}, **rest}
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"wrote {path}")
    return path


@dataclass(frozen=True)
class Sweep:
    """A ``unirl -m`` sweep run in a scratch directory and read back with ``unirl compare``."""

    process: subprocess.CompletedProcess[str]
    wall_s: float
    multirun: Path
    """The multirun directory (gone once :func:`sweep_and_compare`'s block ends)."""
    compared: subprocess.CompletedProcess[str]
    """``unirl compare --json``: it exits 1 when a member did not complete, its output still whole."""
    table: str


def unirl_command() -> str:
    """The ``unirl`` beside this interpreter (a venv's, run without activating it), else the one on PATH."""
    beside = Path(sys.executable).parent / "unirl"
    return str(beside) if beside.exists() else "unirl"


@contextmanager
def sweep_and_compare(command: list[str]) -> Iterator[Sweep]:
    """Run ``command`` (a ``unirl -m`` sweep) in a temporary directory, print compare's table, yield the result."""
    if command and command[0] == "unirl":
        command = [unirl_command(), *command[1:]]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        process = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - start
        [multirun] = {p.parent for p in Path(tmp).rglob("multirun.yaml")}
        compared = subprocess.run([unirl_command(), "compare", str(multirun), "--json"], capture_output=True,
                                  text=True)
        table = subprocess.run([unirl_command(), "compare", str(multirun)], capture_output=True, text=True)
        print(table.stdout, table.stderr)
        yield Sweep(process, wall, multirun, compared, table.stdout)


def peak_rss(cmd: list[str], cwd: str, env: dict[str, str] | None = None) -> tuple[float, float]:
    """(peak resident MiB of the whole process tree, wall seconds) of ``cmd``, sampled every 0.1 s with psutil;
    runs go under ``cwd``/runs."""
    import psutil

    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as stderr:  # a file, not a pipe: a chatty run would fill a pipe and block
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=stderr,
                                env={**os.environ, "UNIRL_RUNS_DIR": f"{cwd}/runs", **(env or {})})
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
            stderr.seek(0)
            raise RuntimeError(f"{cmd} exited {proc.returncode}:\n{stderr.read()[-3000:]}")
    return peak / 2**20, time.perf_counter() - start


TARGET_ACCURACY = 0.8
"""The held-out accuracy the sweeps count steps to."""


def sweep_member(summary_path: Path) -> dict[str, Any]:
    """One run of a sweep: the overrides Hydra chose for it, held-out accuracy before and after, the first evaluated
    step at :data:`TARGET_ACCURACY`, steps, wall time and the evaluation curve."""
    import yaml

    run_dir = summary_path.parent
    overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    s = json.loads(summary_path.read_text())
    evals = [json.loads(line) for line in (run_dir / "eval.jsonl").read_text().splitlines()]
    curve = [(e["step"], round(e["accuracy"], 4)) for e in evals if e["kind"] == "summary"]
    return {"overrides": dict(o.split("=", 1) for o in overrides if "=" in o), "state": s.get("state"),
            "accuracy_before": s.get("accuracy_before"), "accuracy_after": s.get("accuracy_after"),
            f"first_step_at_{TARGET_ACCURACY}": next((step for step, acc in curve if acc >= TARGET_ACCURACY), None),
            "steps": s.get("steps"), "wall_s": round(s.get("wall_time_s", 0.0), 1), "kept_best": s.get("kept_best"),
            "trainable_parameters": s.get("trainable_parameters"), "parameters": s.get("parameters"),
            "curve": curve}
