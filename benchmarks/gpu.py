"""GPU: the embedded default and a random Qwen2.5-0.5B-shaped model through unirl on CUDA in bf16.

Reports s/step (median of TRL's step_time), generated tokens/s and peak GPU memory from metrics.jsonl.
Usage (on a machine with a CUDA GPU): python benchmarks/gpu.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from _common import save, timed

CASES = {
    "tiny-arith (embedded default)": ["recipe=grpo_math", "algorithm.steps=1000"],
    "qwen2.5-0.5b-shape (random init)": ["recipe=grpo_math", "model.path=builtin:qwen2.5-0.5b-shape",
                                         "algorithm.steps=30", "algorithm.max_new_tokens=128",
                                         "algorithm.prompts_per_step=8", "algorithm.samples_per_prompt=8",
                                         "algorithm.lr=1e-6", "eval.before_training=false", "data.eval_rows=8"],
}


def main() -> None:
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, overrides) in enumerate(CASES.items()):
            runs = Path(tmp, f"runs{i}")
            wall, _ = timed(["unirl", *overrides, "resources.device=cuda", "resources.gpus_per_node=1",
                             "resources.cpu_threads=null", "logging.progress=false"], env={"UNIRL_RUNS_DIR": str(runs)})
            [metrics_path] = runs.rglob("metrics.jsonl")
            metrics = [json.loads(line) for line in metrics_path.read_text().splitlines()][2:]  # skip warm-up
            plan = json.loads((metrics_path.parent / "plan.json").read_text())
            algorithm = plan["recipe"]["algorithm"]
            per_step = algorithm["prompts_per_step"] * algorithm["samples_per_prompt"]
            step_s = statistics.median(m["step_time_s"] for m in metrics)
            tokens = statistics.median(m["completion_len/mean"] * per_step / m["step_time_s"] for m in metrics)
            results[name] = {"s_per_step": step_s, "generated_tokens_per_s": tokens,
                             "peak_gpu_mem_gib": max(m["gpu/peak_mem_gib"] for m in metrics), "process_wall_s": wall}
            print(name, json.dumps(results[name]), flush=True)
    save("gpu", results)


if __name__ == "__main__":
    main()
