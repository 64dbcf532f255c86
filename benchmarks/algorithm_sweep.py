"""Every algorithm preset TRL runs, on the embedded task, one sweep read back with `unirl compare`.

Usage: python benchmarks/algorithm_sweep.py [SEEDS...] [-- OVERRIDES...]   (default seeds 0 1 2)
Runs `unirl -m algorithm=grpo,dr_grpo,dapo,gspo,rloo algorithm.dynamic_sampling=false seed=...` (TRL 1.16 has no dynamic
sampling, so DAPO runs without it; the other presets have it off already), then `unirl compare MULTIRUN --json`.
Reports per algorithm and seed: held-out greedy accuracy before and after, the first evaluated step at >= 0.8, the
steps trained and the run's wall time; writes results/algorithm_sweep.json and results/algorithm_sweep.png (compare's
picture).
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

from _common import RESULTS, machine, save, sweep_and_compare, sweep_member

ALGORITHMS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo")


def member(summary_path: Path) -> dict[str, Any]:
    found = sweep_member(summary_path)
    chosen = found.pop("overrides")
    return {"algorithm": chosen["algorithm"], "seed": int(chosen["seed"]), **found}


def main() -> None:
    args = sys.argv[1:]
    overrides = args[args.index("--") + 1:] if "--" in args else []
    seeds = [int(s) for s in (args[:args.index("--")] if "--" in args else args)] or [0, 1, 2]
    started = machine()
    command = ["unirl", "-m", f"algorithm={','.join(ALGORITHMS)}", "algorithm.dynamic_sampling=false",
               f"seed={','.join(map(str, seeds))}", "logging.progress=false", *overrides]
    with sweep_and_compare(command) as sweep:
        members = sorted((member(p) for p in sweep.multirun.rglob("summary.json")),
                         key=lambda m: (ALGORITHMS.index(m["algorithm"]), m["seed"]))
        RESULTS.mkdir(exist_ok=True)
        if (sweep.multirun / "compare.png").exists():
            shutil.copyfile(sweep.multirun / "compare.png", RESULTS / "algorithm_sweep.png")
    per_algorithm = {}
    for name in ALGORITHMS:
        rows = [m for m in members if m["algorithm"] == name]
        after = [m["accuracy_after"] for m in rows if m["accuracy_after"] is not None]
        per_algorithm[name] = {
            "accuracy_after_mean": round(statistics.mean(after), 3) if after else None,
            "accuracy_after_sd": round(statistics.stdev(after), 3) if len(after) > 1 else None,
            "first_step_at_0.8": [m["first_step_at_0.8"] for m in rows],
            "wall_s": [m["wall_s"] for m in rows]}
        print(name, json.dumps(per_algorithm[name]))
    save("algorithm_sweep", {"command": command, "exit_code": sweep.process.returncode,
                             "sweep_wall_s": round(sweep.wall_s, 2), "compare_exit_code": sweep.compared.returncode,
                             "members": members, "per_algorithm": per_algorithm, "table": sweep.table,
                             "compare": json.loads(sweep.compared.stdout) if sweep.compared.stdout.strip() else None},
         started=started)


if __name__ == "__main__":
    main()
