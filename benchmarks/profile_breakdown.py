"""Where the embedded default's time goes, under unirl and under plain TRL, profiled in the same sitting.

Runs `unirl recipe=grpo_math` and `benchmarks/plain_trl.py` (the identical GRPOConfig) under cProfile, one after the
other, and reports each phase's cumulative seconds (the profiler slows Python code more than torch's kernels, so
read the shares, not the absolute numbers). Usage: python benchmarks/profile_breakdown.py [OVERRIDES...]
e.g. python benchmarks/profile_breakdown.py algorithm.steps=200
"""

from __future__ import annotations

import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import machine, save

HERE = Path(__file__).parent

# phase -> (file suffix, function name): the cumulative time of the outermost call of each
UNIRL_PHASES = {
    "whole process": [("unirl/cli/main.py", "main")],
    "plugin host (pluggy, entry points)": [("unirl/host/manager.py", "build_host")],
    "Hydra composition for the preflight": [("unirl/host/planning.py", "compose")],
    "preflight: TRL's GRPOConfig (import and checks)": [("unirl/plugins/trl/framework.py", "validate")],
    "run directory lock and Hydra's own run set-up": [("unirl/launch/run_lock.py", "claim_run_directory")],
    "data and model preparation": [("unirl/plugins/trl/runner.py", "prepare_rows"),
                                   ("unirl/plugins/trl/runner.py", "load_model")],
    "manifest": [("unirl/record/manifest.py", "build_manifest")],
    "TRL trainer.train (the training loop)": [("transformers/trainer.py", "train")],
    "  of which unirl's reward adapter (scoring, checks, records)": [("unirl/adapters/trl.py", "reward_column")],
    "  of which trajectory writing": [("unirl/record/recorder.py", "unirl_rollouts_scored")],
    "  of which metrics callbacks (metrics.jsonl, progress)": [("unirl/plugins/trl/runner.py", "on_log")],
    "  of which held-out evaluation": [("unirl/plugins/trl/runner.py", "run_eval")],
    "curves.png (waiting for the drawing)": [("unirl/record/plot.py", "draw")],
}
PLAIN_PHASES = {
    "whole process": [("plain_trl.py", "<module>")],
    "TRL trainer.train (the training loop)": [("transformers/trainer.py", "train")],
    "  of which held-out evaluation": [("plain_trl.py", "greedy_accuracy")],
}


def phases(profile: Path, table: dict[str, list[tuple[str, str]]]) -> dict[str, float]:
    stats = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    out = {}
    for phase, functions in table.items():
        total = 0.0
        for suffix, name in functions:
            # the largest cumulative time of a matching entry: recursion counts once, in its outermost call
            total += max((ct for (file, _, func), (_, _, _, ct, _) in stats.items()
                          if file.endswith(suffix) and func == name), default=0.0)
        out[phase] = round(total, 3)
    return out


def main() -> None:
    overrides = sys.argv[1:]
    started = machine()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        plan = subprocess.run(["unirl", "plan", "--json", *overrides], capture_output=True, text=True, check=True)
        (work / "plan.json").write_text(plan.stdout)
        unirl_bin = subprocess.run([sys.executable, "-c", "import shutil; print(shutil.which('unirl'))"],
                                   capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(work / "unirl.prof"), unirl_bin,
                        *overrides, "logging.progress=false"], cwd=work, check=True, capture_output=True,
                       env={**os.environ, "UNIRL_RUNS_DIR": str(work / "runs")})
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(work / "plain.prof"), str(HERE / "plain_trl.py"),
                        str(work / "plan.json"), str(work / "plain")], check=True, capture_output=True)
        ours, plain = phases(work / "unirl.prof", UNIRL_PHASES), phases(work / "plain.prof", PLAIN_PHASES)
    width = max(map(len, UNIRL_PHASES))
    print(f"{'phase':<{width}}  unirl s  plain TRL s")
    for phase in UNIRL_PHASES:
        other = plain.get(phase)
        print(f"{phase:<{width}}  {ours[phase]:7.2f}  {'' if other is None else f'{other:11.2f}'}")
    save("profile_breakdown", {"overrides": overrides, "unirl": ours, "plain_trl": plain,
                               "note": "cProfile cumulative seconds; the profiler inflates Python-heavy phases"},
         started=started)


if __name__ == "__main__":
    main()
