"""Scheduler overhead and sweep parallelism, measured.

1. Submission overhead per scheduler: from ``submit()`` to the backend's first output (a command that writes its
   start time and exits), and to the job's recorded end; local child, Ray job (a private head on loopback), Slurm job
   (the single-node cluster of scripts/slurm_local.sh, when sinfo answers).
2. A sweep of 8 short embedded-default runs (``unirl -m seed=0..7``): total wall time through Hydra's basic launcher
   (one after another, in one process), joblib with 1 and with 2 workers, against the sum of the runs' own wall
   times.

    python benchmarks/schedulers.py [--repeats 5] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import machine, save, summary
from unirl.backend.plan import BackendEnvironment, LaunchPlan

STAMP = "import sys, time; open(sys.argv[1], 'w').write(repr(time.time())); print('first output', flush=True)"


def probe_plan(run_dir: Path) -> LaunchPlan:
    return LaunchPlan("probe", None, "probe:probe", {}, command=["python", "-c", STAMP, str(run_dir / "started")],
                      environment=BackendEnvironment(kind="interpreter", python=sys.executable))


def overhead(scheduler: object, options: dict, repeats: int) -> dict[str, object]:
    to_output, to_end = [], []
    for _ in range(repeats):
        run_dir = Path(tempfile.mkdtemp(prefix="unirl-bench-", dir="/tmp"))
        start = time.time()
        result = scheduler.submit(probe_plan(run_dir), run_dir, options)  # type: ignore[attr-defined]
        end = time.time()
        assert result.state == "completed", result
        to_output.append(float((run_dir / "started").read_text()) - start)
        to_end.append(end - start)
        shutil.rmtree(run_dir, ignore_errors=True)
    return {"submit_to_first_output_s": summary(to_output), "submit_to_recorded_end_s": summary(to_end)}


def sweep_wall(args: list[str], runs_dir: Path) -> tuple[float, list[float]]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "unirl.cli.main", "-m", *args], capture_output=True, text=True,
                         env={**os.environ, "UNIRL_RUNS_DIR": str(runs_dir)})
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    walls = [json.loads(p.read_text())["wall_time_s"] for p in runs_dir.rglob("summary.json")]
    return wall, walls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, object] = {"machine": machine()}

    from unirl.plugins.local.scheduler import LocalScheduler

    results["local"] = overhead(LocalScheduler(), {"in_process": False}, args.repeats)
    print("local", results["local"])

    from tests.support.ray_head import RAY_ENV, RayHead

    os.environ.update(RAY_ENV)
    head = RayHead().start()
    try:
        from unirl.plugins.ray.scheduler import RayScheduler

        results["ray"] = overhead(RayScheduler(), {"address": head.address, "poll_s": 0.2}, args.repeats)
        print("ray", results["ray"])
    finally:
        head.stop()

    if shutil.which("sinfo") and subprocess.run(["sinfo"], capture_output=True).returncode == 0:
        from unirl.plugins.slurm.scheduler import SlurmScheduler

        options = {**SlurmScheduler.options, "poll_s": 0.2}
        results["slurm"] = overhead(SlurmScheduler(), options, args.repeats)
        print("slurm", results["slurm"])
    else:
        results["slurm"] = "not measured: no Slurm answers here (scripts/slurm_local.sh start)"

    common = [f"algorithm.steps={args.steps}", "algorithm.prompts_per_step=4", "algorithm.samples_per_prompt=8",
              "eval.before_training=false", "logging.progress=false", "seed=0,1,2,3,4,5,6,7"]
    sweeps: dict[str, object] = {}
    for name, launcher in (("basic", []), ("joblib_1", ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"]),
                           ("joblib_2", ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])):
        runs = Path(tempfile.mkdtemp(prefix="unirl-sweep-", dir="/tmp"))
        wall, walls = sweep_wall([*launcher, *common], runs)
        sweeps[name] = {"total_wall_s": wall, "sum_of_run_walls_s": sum(walls), "runs": len(walls)}
        print(name, sweeps[name])
        shutil.rmtree(runs, ignore_errors=True)
    # "Alone": each run's own wall time when the basic launcher runs them one after another in one process.
    alone = sweeps["basic"]["sum_of_run_walls_s"]  # type: ignore[index]
    for entry in sweeps.values():
        entry["total_over_runs_alone"] = entry["total_wall_s"] / alone  # type: ignore[index]
    results["sweep_8_runs"] = {"sum_of_runs_alone_s": alone, **sweeps}
    save("schedulers", results)


if __name__ == "__main__":
    main()
