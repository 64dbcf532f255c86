"""LoRA against full fine-tuning, through TRL and PEFT on this machine.

Usage: python benchmarks/lora.py [learning|size|all] [SEEDS...]   (default: all, seeds 0 1 2)

learning: the embedded task (recipe grpo_math, builtin:tiny-arith, 124,736 weights) as three `unirl -m seed=...`
  sweeps, each read back with `unirl compare`: full fine-tuning; LoRA rank 32 on every linear layer with the tied
  embedding and the RMSNorm scales trained in full (model.lora.modules_to_save=[embed_tokens,norm]); the same
  adapters alone. Held-out accuracy
  before and after, the first evaluated step at 0.8, trainable weights, wall time.
size: a larger random shape (builtin:qwen2.5-0.5b-shape, Qwen2.5-0.5B's 494M weights), a few GRPO steps each of
  full fine-tuning and LoRA rank 16 on every linear layer: trainable weights, the median step time after the first
  step, and the peak resident memory of the whole process tree (psutil, every 0.1 s). Full fine-tuning holds fp32
  weights, gradients and two AdamW moments for every weight; LoRA holds them for the adapters only.
Writes results/lora.json.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import machine, peak_rss, save, sweep_and_compare, sweep_member

TASK = ("recipe=grpo_math", "logging.progress=false")
ARMS: dict[str, tuple[str, ...]] = {
    "full fine-tuning": (),
    "LoRA r32 + embedding and norms": ("model.lora.rank=32", "model.lora.alpha=64",
                                       "model.lora.modules_to_save=[embed_tokens,norm]"),
    "LoRA r32 adapters only": ("model.lora.rank=32", "model.lora.alpha=64"),
}
# A few steps of the 494M-weight shape: two prompts x four samples, two new tokens, no held-out evaluation, both cores.
SIZE_RUN = ("recipe=grpo_math", "model.path=builtin:qwen2.5-0.5b-shape", "algorithm.steps=4",
            "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=4", "data.eval=null",
            "resources.cpu_threads=2", "logging.progress=false", "logging.plot=false",
            "run.name=lora_size")
SIZE_ARMS: dict[str, tuple[str, ...]] = {"full fine-tuning": (), "LoRA r16 all-linear": ("model.lora.rank=16",
                                                                                         "model.lora.alpha=32")}


def learning(seeds: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm, overrides in ARMS.items():
        command = ["unirl", "-m", *TASK, *overrides, f"seed={','.join(map(str, seeds))}"]
        with sweep_and_compare(command) as sweep:
            members = sorted((sweep_member(p) for p in sweep.multirun.rglob("summary.json")),
                             key=lambda m: int(m["overrides"]["seed"]))
        after = [m["accuracy_after"] for m in members if m["accuracy_after"] is not None]
        out[arm] = {"command": command, "exit_code": sweep.process.returncode, "members": members,
                    "accuracy_after_mean": round(statistics.mean(after), 3) if after else None,
                    "accuracy_after_sd": round(statistics.stdev(after), 3) if len(after) > 1 else None,
                    "trainable_parameters": members[0]["trainable_parameters"] if members else None,
                    "wall_s": [m["wall_s"] for m in members]}
        print(arm, json.dumps({k: v for k, v in out[arm].items() if k not in ("members", "command")}))
    return out


def size() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm, overrides in SIZE_ARMS.items():
        with tempfile.TemporaryDirectory() as tmp:
            peak_mib, wall = peak_rss(["unirl", *SIZE_RUN, *overrides], tmp)
            [summary_path] = Path(tmp).rglob("summary.json")
            summary = json.loads(summary_path.read_text())
            steps = [json.loads(line) for line in (summary_path.parent / "metrics.jsonl").read_text().splitlines()]
        times = [s["step_time_s"] for s in steps if "step_time_s" in s][1:]  # the first step pays warm-up
        out[arm] = {"overrides": list(overrides), "parameters": summary.get("parameters"),
                    "trainable_parameters": summary.get("trainable_parameters"),
                    "step_time_s_median": round(statistics.median(times), 2) if times else None,
                    "peak_rss_mib": round(peak_mib), "wall_s": round(wall, 1), "state": summary.get("state")}
        print(arm, json.dumps(out[arm]))
    return out


def main() -> None:
    args = sys.argv[1:]
    which = args[0] if args and not args[0].isdigit() else "all"
    seeds = [int(a) for a in args if a.isdigit()] or [0, 1, 2]
    started = machine()
    result: dict[str, Any] = {"size_run": list(SIZE_RUN)}
    if which in ("learning", "all"):
        result["learning"] = learning(seeds)
    if which in ("size", "all"):
        result["size"] = size()
    save("lora" if which == "all" else f"lora_{which}", result, started=started)


if __name__ == "__main__":
    main()
