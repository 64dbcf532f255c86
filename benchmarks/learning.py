"""Learning: the embedded default (`unirl recipe=grpo_math`) on several seeds, one after another.

Reports held-out greedy accuracy before/after and wall time per seed. Usage:
python benchmarks/learning.py [SEEDS...] [-- OVERRIDES...]   (default seeds 0 1 2; ~3 minutes per seed on 2 cores)
e.g. python benchmarks/learning.py 0 1 2 -- data.options.holdout=random   (writes learning_holdout-random.json)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _common import save, timed


def main() -> None:
    args = sys.argv[1:]
    overrides = args[args.index("--") + 1:] if "--" in args else []
    seeds = [int(s) for s in (args[:args.index("--")] if "--" in args else args)] or [0, 1, 2]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            wall, _ = timed(["unirl", "recipe=grpo_math", f"seed={seed}", "logging.progress=false", *overrides],
                            cwd=Path(tmp),
                            env={"UNIRL_RUNS_DIR": f"{tmp}/runs{seed}"})
            [summary_path] = Path(tmp, f"runs{seed}").rglob("summary.json")
            s = json.loads(summary_path.read_text())
            evals = [json.loads(line) for line in (summary_path.parent / "eval.jsonl").read_text().splitlines()]
            curve = [(e["step"], e["accuracy"]) for e in evals if e["kind"] == "summary"]
            row = {"seed": seed, "accuracy_before": s["accuracy_before"], "accuracy_after": s["accuracy_after"],
                   "distinct_answers": s["distinct_completions"], "process_wall_s": wall,
                   "run_wall_s": s["wall_time_s"], "train_s": s["train_time_s"], "accuracy_curve": curve}
            rows.append(row)
            print(json.dumps(row), flush=True)
    hits = sum(r["accuracy_after"] >= 0.8 and r["process_wall_s"] <= 180 for r in rows)
    print(f"{hits}/{len(rows)} seeds reached held-out accuracy >= 0.8 within 180 s (target: at least 2 of 3)")
    tag = "".join(f"_{o.split('.')[-1].replace('=', '-')}" for o in overrides)
    save(f"learning{tag}", {"overrides": overrides, "runs": rows, "seeds_meeting_target": hits})


if __name__ == "__main__":
    main()
