"""Learning: the embedded default (`unirl recipe=grpo_math`) on several seeds, one after another.

Reports per seed the held-out greedy accuracy curve (every evaluation), the first step at >= 0.9, where and why the
run stopped (the default stops once held-out accuracy has plateaued), the seconds per training step and the whole
process's wall time (start-up to printed summary). Usage:
python benchmarks/learning.py [SEEDS...] [-- OVERRIDES...]   (default seeds 0 1 2)
e.g. python benchmarks/learning.py 0 1 2 -- data.options.holdout=random   (writes learning_holdout-random.json)
Target (issue 14): held-out accuracy >= 0.9 on 3 of 3 seeds, each whole run <= 60 s on 2 cores.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _common import machine, save, timed

TARGET_ACCURACY = 0.9
TARGET_WALL_S = 60.0


def main() -> None:
    args = sys.argv[1:]
    overrides = args[args.index("--") + 1:] if "--" in args else []
    seeds = [int(s) for s in (args[:args.index("--")] if "--" in args else args)] or [0, 1, 2]
    started = machine()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            wall, _ = timed(["unirl", "recipe=grpo_math", f"seed={seed}", "logging.progress=false", *overrides],
                            cwd=Path(tmp),
                            env={"UNIRL_RUNS_DIR": f"{tmp}/runs{seed}"})
            [summary_path] = Path(tmp, f"runs{seed}").rglob("summary.json")
            s = json.loads(summary_path.read_text())
            evals = [json.loads(line) for line in (summary_path.parent / "eval.jsonl").read_text().splitlines()]
            curve = [(e["step"], round(e["accuracy"], 4)) for e in evals if e["kind"] == "summary"]
            first = next((step for step, accuracy in curve if accuracy >= TARGET_ACCURACY), None)
            row = {"seed": seed, "accuracy_before": s["accuracy_before"], "accuracy_after": s["accuracy_after"],
                   "first_step_at_target": first, "steps": s["steps"], "steps_expected": s["steps_expected"],
                   "stopped_early": s.get("stopped_early"), "distinct_answers": s["distinct_completions"],
                   "process_wall_s": round(wall, 2), "run_wall_s": round(s["wall_time_s"], 2),
                   "train_s": round(s["train_time_s"], 2),
                   "s_per_step": round(s["train_time_s"] / max(1, s["steps"]), 4),
                   "start_up_and_end_s": round(wall - s["train_time_s"], 2), "accuracy_curve": curve}
            rows.append(row)
            print(json.dumps(row), flush=True)
    accurate = sum(r["accuracy_after"] >= TARGET_ACCURACY for r in rows)
    hits = sum(r["accuracy_after"] >= TARGET_ACCURACY and r["process_wall_s"] <= TARGET_WALL_S for r in rows)
    print(f"{accurate}/{len(rows)} seeds reached held-out accuracy >= {TARGET_ACCURACY}; {hits}/{len(rows)} also "
          f"within {TARGET_WALL_S:.0f} s (target: all)")
    tag = "".join(f"_{o.split('.')[-1].replace('=', '-')}" for o in overrides)
    save(f"learning{tag}", {"overrides": overrides, "runs": rows, "seeds_at_accuracy": accurate,
                            "seeds_meeting_target": hits,
                            "target": {"accuracy": TARGET_ACCURACY, "process_wall_s": TARGET_WALL_S}},
         started=started)


if __name__ == "__main__":
    main()
