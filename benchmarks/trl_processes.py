"""TRL beyond one process: the embedded default with 1 training process and with N gloo processes (torchrun).

Reports seconds per training step (train time / steps, and the median of TRL's own per-update ``step_time``),
held-out accuracy before/after, and the reward curve's tenths, per process count and seed. Usage:
python benchmarks/trl_processes.py [SEEDS...] [-- OVERRIDES...]   (default seed 0; processes 1 and 2;
UNIRL_BENCH_PROCESSES=1,2,4 to change; ~3 minutes per run of the full default on 2 cores)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _common import save, timed


def one(processes: int, seed: int, overrides: list[str], tmp: str) -> dict[str, object]:
    runs = f"{tmp}/runs_p{processes}_s{seed}"
    wall, _ = timed(["unirl", "recipe=grpo_math", f"seed={seed}", f"resources.cpu_processes={processes}",
                     "logging.progress=false", *overrides], cwd=Path(tmp), env={"UNIRL_RUNS_DIR": runs})
    [summary_path] = Path(runs).rglob("summary.json")
    s = json.loads(summary_path.read_text())
    metrics = [json.loads(line) for line in (summary_path.parent / "metrics.jsonl").read_text().splitlines()]
    rewards = [m["reward/total/mean"] for m in metrics]
    tenth = max(1, len(rewards) // 10)
    evals = [json.loads(line) for line in (summary_path.parent / "eval.jsonl").read_text().splitlines()]
    return {"processes": processes, "seed": seed, "state": s["state"], "steps": s["steps"],
            "rollout_batches": s["rollout_batches"], "completions": s.get("completions"),
            "reward_calls": s["reward_calls"], "accuracy_before": s.get("accuracy_before"),
            "accuracy_after": s.get("accuracy_after"), "distinct_answers": s.get("distinct_completions"),
            "process_wall_s": wall, "run_wall_s": s["wall_time_s"], "train_s": s["train_time_s"],
            "s_per_step": s["train_time_s"] / s["steps"],
            "trl_step_time_median_s": statistics.median(m["step_time_s"] for m in metrics if "step_time_s" in m),
            "reward_by_tenth": [round(sum(rewards[i:i + tenth]) / len(rewards[i:i + tenth]), 3)
                                for i in range(0, tenth * 10, tenth)],
            "accuracy_curve": [(e["step"], e["accuracy"]) for e in evals if e["kind"] == "summary"]}


def main() -> None:
    args = sys.argv[1:]
    overrides = args[args.index("--") + 1:] if "--" in args else []
    seeds = [int(s) for s in (args[:args.index("--")] if "--" in args else args)] or [0]
    counts = [int(p) for p in os.environ.get("UNIRL_BENCH_PROCESSES", "1,2").split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            for processes in counts:
                row = one(processes, seed, overrides, tmp)
                rows.append(row)
                print(json.dumps(row), flush=True)
    save("trl_processes", {"overrides": overrides, "processes": counts, "runs": rows})


if __name__ == "__main__":
    main()
