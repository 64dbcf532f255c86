"""The parity certificate of every algorithm preset on every installed backend: the table the README shows, and
what it costs.

Each preset runs as ``unirl parity --json algorithm=PRESET`` in a fresh process (what a user runs), with verl and
OpenRLHF in their own venvs (scripts/backend_venv.sh). The table keeps every row's verdict, differences and reason;
the timing is the wall time of the whole command and the per-backend seconds the certificate reports.

    python benchmarks/parity.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import machine, save

REPO = Path(__file__).resolve().parents[1]
PRESETS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo")
VARIANTS = {
    "preset": [],
    # the terms the embedded default leaves at 0, and completions long enough for the aggregations to differ
    "kl+entropy, 8 tokens": ["algorithm.kl_coef=0.05", "algorithm.entropy_coef=0.01", "algorithm.max_new_tokens=8"],
    "dual clip 3": ["algorithm.dual_clip=3.0", "algorithm.max_new_tokens=8"],
    # completions of 5 to 8 tokens lose up to the whole penalty (DAPO's soft overlong punishment)
    "overlong buffer 4 of 8": ["algorithm.overlong_buffer=4", "algorithm.max_new_tokens=8"],
}


def main() -> None:
    started = machine()
    env_pythons = [f"--python={b}={REPO / '.venvs' / b / 'bin' / 'python'}" for b in ("verl", "openrlhf")]
    table: dict[str, object] = {}
    for variant, extra in VARIANTS.items():
        for preset in PRESETS:
            start = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "unirl.cli.main", "parity", "--json", *env_pythons,
                                  f"algorithm={preset}", *extra], capture_output=True, text=True, cwd=REPO)
            wall = time.perf_counter() - start
            if out.returncode not in (0, 1):
                raise RuntimeError(f"unirl parity algorithm={preset} {extra} failed ({out.returncode}):\n"
                                   f"{out.stderr[-3000:]}")
            result = json.loads(out.stdout)
            verdicts = Counter(f"{r['framework']} {r['verdict']}" for r in result["rows"])
            print(f"{variant:22s} {preset:22s} {wall:5.1f} s  " +
                  ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())) +
                  "  (" + ", ".join(f"{k} {v:.1f} s" for k, v in result["seconds"].items()) + ")")
            table[f"{variant} | {preset}"] = {"variant": variant, "preset": preset, "overrides": extra,
                                              "exit": out.returncode, "wall_s": round(wall, 2), **result}
    save("parity", {"certificates": table}, started)


if __name__ == "__main__":
    main()
