"""The same GRPO experiment in two frameworks on this CPU: the embedded default's recipe on TRL and on verl, same
recipe, same seeds, both generating with vLLM's CPU build (TRL colocated in .venvs/vllm, verl's CPU mode in
.venvs/verl-cpu: scripts/backend_venv.sh vllm / verl-cpu), then ``unirl compare`` over both sweeps and
``unirl parity --frameworks trl,verl`` on the same recipe (what the certificate predicts: the same advantages, loss
and gradient on a frozen batch).

The model is ``builtin:tiny-arith-h32`` (the embedded default's shape with 2 attention heads of 32: vLLM's CPU build
has no 16-wide heads). Each sweep runs its seeds one after the other.
Usage: python benchmarks/trl_vs_verl.py [STEPS] [SEEDS] (default 100 and 0,1,2; results/trl_vs_verl.json and .png)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import RESULTS, machine, save, unirl_command

REPO = Path(__file__).resolve().parent.parent
PYTHON = {"trl": REPO / ".venvs" / "vllm" / "bin" / "python", "verl": REPO / ".venvs" / "verl-cpu" / "bin" / "python"}
RECIPE = ["recipe=grpo_math", "model.path=builtin:tiny-arith-h32", "resources.device=cpu", "rollout.engine=vllm",
          "rollout.gpu_memory_fraction=0.05", "eval.every_steps=25", "logging.progress=false"]


def sweep(framework: str, steps: int, seeds: str, work: Path) -> dict[str, Any]:
    where = work / f"sweep-{framework}"  # not "trl": a trl/ folder in the working directory imports as a package
    start = time.perf_counter()
    out = subprocess.run([unirl_command(), "-m", f"+framework={framework}", f"+framework.python={PYTHON[framework]}",
                          *RECIPE, f"algorithm.steps={steps}", f"seed={seeds}", f"hydra.sweep.dir={where}"],
                         cwd=work, capture_output=True, text=True)
    wall = time.perf_counter() - start
    print(out.stdout[-3000:], out.stderr[-3000:])
    steps_s = []
    for native in sorted(where.glob("*/native/verl_metrics.*.jsonl")):
        for line in native.read_text().splitlines():
            data = json.loads(line).get("data", {})
            if "timing_s/step" in data:
                steps_s.append(data["timing_s/step"])
    return {"returncode": out.returncode, "wall_s": wall, "dir": where, "verl_step_s": steps_s}


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    seeds = sys.argv[2] if len(sys.argv) > 2 else "0,1,2"
    started = machine()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sweeps = {fw: sweep(fw, steps, seeds, work) for fw in ("trl", "verl")}
        dirs = [str(s["dir"]) for s in sweeps.values()]
        compared = subprocess.run([unirl_command(), "compare", *dirs, "--json"], capture_output=True, text=True)
        table = subprocess.run([unirl_command(), "compare", *dirs], capture_output=True, text=True)
        print(table.stdout, table.stderr)
        png = Path(dirs[0]) / "compare.png"
        if png.exists():
            shutil.copy(png, RESULTS / "trl_vs_verl.png")
        parity = subprocess.run([unirl_command(), "parity", "--frameworks", "trl,verl", "--python",
                                 f"verl={REPO / '.venvs' / 'verl' / 'bin' / 'python'}", "--json", *RECIPE[:2]],
                                capture_output=True, text=True)
        result = json.loads(compared.stdout) if compared.stdout.strip() else {"error": compared.stderr}
        result.pop("png", None)
        for member in result.get("members", []):
            member.pop("run_dir", None)
        save("trl_vs_verl", {
            "machine": started, "steps": steps, "seeds": seeds, "recipe": RECIPE,
            "sweeps": {fw: {k: v for k, v in s.items() if k != "dir"} for fw, s in sweeps.items()},
            "compare": result, "compare_table": table.stdout,
            "parity": json.loads(parity.stdout) if parity.returncode in (0, 1) and parity.stdout.strip()
            else {"returncode": parity.returncode, "stderr": parity.stderr[-2000:]},
        })


if __name__ == "__main__":
    main()
