"""What each experiment tracker (``logging.trackers``) costs the process that reports the run, per 1,000 logged steps.

Each tracker alone, in a fresh interpreter (its imports counted once, as in a run), fed through the run recorder's
hooks exactly as TRL's runner feeds them: ``run_start``, STEPS steps of the 41 metrics the embedded default logs per
step (the names and magnitudes of a real run's ``metrics.jsonl``), a held-out evaluation every 100 steps, ``run_end``.
"none" is the run record alone (``metrics.jsonl``, ``eval.jsonl``, ``summary.json``): the baseline each tracker adds
to. W&B offline, MLflow in the run directory's sqlite store, trackio in a temporary ``TRACKIO_DIR``; nothing leaves
the machine. Reported: the start (import + open), the steps per 1,000 (the per-step cost a run pays), and the end
(flush + close), medians over REPS. Usage: python benchmarks/trackers.py [STEPS] [REPS]
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import save, summary

TRACKERS = ("none", "tensorboard", "wandb", "mlflow", "trackio")
METRIC_NAMES = (
    "loss", "grad_norm", "lr", "tokens/total", "completion_len/mean", "trl/completions/min_length",
    "trl/completions/max_length", "completion_truncated/frac", "trl/completions/mean_terminated_length",
    "trl/completions/min_terminated_length", "trl/completions/max_terminated_length", "trl/rewards/math_answer/mean",
    "trl/rewards/math_answer/std", "trl/rewards/numeric_closeness/mean", "trl/rewards/numeric_closeness/std",
    "trl/rewards/bare_number/mean", "trl/rewards/bare_number/std", "reward/total/mean", "reward/total/std",
    "group_zero_std/frac", "reward/errors", "reward/errors/crash", "reward/errors/exception",
    "reward/errors/infrastructure", "reward/errors/invalid", "reward/errors/memory", "reward/errors/timeout",
    "reward/math_answer/has_answer", "entropy", "trl/clip_ratio/low_mean", "trl/clip_ratio/high_mean", "clip_ratio",
    "trl/clip_ratio/low_min", "trl/clip_ratio/high_max", "step_time_s", "trl/epoch", "reward/math_answer/mean",
    "reward/numeric_closeness/mean", "reward/bare_number/mean", "wall_s",
)


def one(tracker: str, steps: int, root: Path) -> dict[str, float]:
    """In this (fresh) interpreter: one run fed through the recorder with ``tracker`` alone."""
    from dataclasses import asdict

    from unirl.host.manager import build_host
    from unirl.recipe.schema import Recipe
    from unirl.record.layout import RunInfo

    recipe = asdict(Recipe())
    recipe["logging"].update(trackers=[] if tracker == "none" else [tracker], plot=False, progress=False)
    run_dir = root / "runs" / tracker
    run_dir.mkdir(parents=True)
    recorder = build_host().run_recorder(RunInfo(run_dir, "trl", recipe))
    t0 = time.perf_counter()
    recorder.run_start()
    t1 = time.perf_counter()
    for step in range(1, steps + 1):
        recorder.metrics(step, {name: math.sin(step + i) + i for i, name in enumerate(METRIC_NAMES)})
        if step % 100 == 0:
            recorder.eval_done(step, {"n": 11, "solved": step % 11, "accuracy": (step % 11) / 11, "reward_mean": 0.5,
                                      "distinct_completions": 3, "accuracy_reward": "math_answer"}, [])
    t2 = time.perf_counter()
    summary = {"state": "completed", "steps": steps, "accuracy_after": 0.5}
    recorder.run_end(summary)
    t3 = time.perf_counter()
    if "plugin_errors" in summary:
        raise RuntimeError(f"{tracker} failed: {summary['plugin_errors']}")
    return {"start_s": t1 - t0, "steps_s": t2 - t1, "end_s": t3 - t2}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))))
        return
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    times: dict[str, dict[str, list[float]]] = {t: {"start_s": [], "steps_s": [], "end_s": []} for t in TRACKERS}
    for _ in range(reps):
        for tracker in TRACKERS:  # alternately, so a slow moment of the machine is shared
            with tempfile.TemporaryDirectory() as tmp:
                env = {"WANDB_MODE": "offline", "WANDB_DIR": tmp, "WANDB_CACHE_DIR": tmp, "WANDB_CONFIG_DIR": tmp,
                       "TRACKIO_DIR": str(Path(tmp) / "trackio"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                       "HOME": tmp}
                out = subprocess.run([sys.executable, __file__, "--one", tracker, str(steps), tmp], env=env,
                                     capture_output=True, text=True, timeout=600)
                if out.returncode != 0:
                    raise RuntimeError(f"{tracker}: {out.stderr[-3000:]}")
                for key, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
                    times[tracker][key].append(value)
    result: dict[str, dict[str, object]] = {}
    base = summary(times["none"]["steps_s"])["median"] * 1000 / steps
    for tracker in TRACKERS:
        medians = {key: summary(values) for key, values in times[tracker].items()}
        per_1000 = medians["steps_s"]["median"] * 1000 / steps
        result[tracker] = {**medians, "steps_per_1000_s": per_1000,
                           "added_per_1000_s": per_1000 - base if tracker != "none" else 0.0}
        print(f"{tracker:12s} start {medians['start_s']['median']:.2f} s   1,000 steps {per_1000:.3f} s "
              f"(+{per_1000 - base:.3f} s over the record alone)   end {medians['end_s']['median']:.2f} s")
    save("trackers", {"steps": steps, "reps": reps, "metrics_per_step": len(METRIC_NAMES), "results": result})


if __name__ == "__main__":
    main()
