"""TRL's rollouts on this CPU: transformers' generate (rollout.engine=hf) against vLLM's CPU build (engine=vllm).

Both run the embedded default's recipe in the vLLM venv (scripts/backend_venv.sh vllm) on the same model: the
builtin tiny model's weights with its attention in 2 heads of 32 (vLLM's CPU attention has no 16-wide heads). A and B
alternate, one thread each (OMP_NUM_THREADS=1), and each side is measured as CPU seconds of its whole process tree
(the run's process and every child it waited for) as well as wall time, per pair.
Usage: python benchmarks/vllm_cpu.py [PAIRS] [STEPS] [OVERRIDES...] (e.g. algorithm.max_new_tokens=64: longer
completions, where a serving engine's batching pays; results/vllm_cpu.json, or vllm_cpu-<tokens>.json for another
completion budget)
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import machine, save, summary

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = REPO / ".venvs" / "vllm" / "bin" / "python"


def model_dir(out: Path) -> Path:
    """The builtin tiny model (seed 0) with 2 attention heads of 32 and 1 key-value head: the same tensors."""
    code = ("import json, sys; from pathlib import Path; from unirl.data.builtin import tiny_model; "
            "p = tiny_model.save('tiny-arith', seed=0, out_dir=Path(sys.argv[1])); c = json.loads((p / "
            "'config.json').read_text()); c.update(num_attention_heads=2, num_key_value_heads=1); "
            "(p / 'config.json').write_text(json.dumps(c))")
    subprocess.run([str(VLLM_PYTHON), "-c", code, str(out)], check=True)
    return out


def run(engine: str, model: Path, steps: int, work: Path, overrides: list[str]) -> dict[str, Any]:
    """One run; its process tree's CPU seconds (children's rusage, taken around the run), wall time and step times."""
    runs = work / f"runs-{engine}-{time.monotonic_ns()}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(
        [str(VLLM_PYTHON), "-m", "unirl.cli", "recipe=grpo_math", f"model.path={model}", f"rollout.engine={engine}",
         "rollout.gpu_memory_fraction=0.05", f"algorithm.steps={steps}", "eval.every_steps=0",
         "eval.before_training=false", "logging.progress=false", "logging.plot=false", *overrides],
        cwd=work, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                      "UNIRL_RUNS_DIR": str(runs)})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{engine} failed:\n{out.stderr[-3000:]}")
    [metrics] = runs.rglob("metrics.jsonl")
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    later = [r["step_time_s"] for r in rows[1:]]  # the first step carries the engine's warm-up
    tokens = sum(r.get("tokens/total", 0) for r in rows[1:])
    return {"engine": engine, "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
            "wall_s": wall, "step_s_median": sorted(later)[len(later) // 2], "first_step_s": rows[0]["step_time_s"],
            "train_tokens_per_s": tokens / sum(later)}


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    overrides = sys.argv[3:]
    tokens = next((o.split("=", 1)[1] for o in overrides if o.startswith("algorithm.max_new_tokens=")), None)
    started = machine()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = model_dir(work / "model")
        for i in range(pairs):
            a, b = run("hf", model, steps, work, overrides), run("vllm", model, steps, work, overrides)
            results.append({"pair": i, "hf": a, "vllm": b})
            print(f"pair {i}: hf {a['cpu_s']:.1f} CPU s ({a['step_s_median']:.3f} s/step), vllm {b['cpu_s']:.1f} CPU s "
                  f"({b['step_s_median']:.3f} s/step, first step {b['first_step_s']:.1f} s); "
                  f"CPU ratio vllm/hf {b['cpu_s'] / a['cpu_s']:.2f}")
    save("vllm_cpu" + (f"-{tokens}" if tokens else ""), {"steps": steps, "overrides": overrides, "pairs": results,
                      "cpu_ratio_vllm_over_hf": summary([p["vllm"]["cpu_s"] / p["hf"]["cpu_s"] for p in results]),
                      "step_s": {e: summary([p[e]["step_s_median"] for p in results]) for e in ("hf", "vllm")}},
         started)


if __name__ == "__main__":
    main()
