"""One sweep over every backend, compared in one table and one picture: what runs on this machine trains, the rest
is refused before anything starts, and `unirl compare` reads the whole multirun back.

Usage: python benchmarks/framework_sweep.py [SEEDS...] [-- OVERRIDES...]   (default seeds 0 1 2)
Runs `unirl -m +framework=trl,verl,openrlhf,nemo_rl,slime,vime seed=...` (the embedded default recipe), then
`unirl compare MULTIRUN --json`; writes results/framework_sweep.json and copies the sweep's compare.png to
results/framework_sweep.png.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import RESULTS, machine, save

FRAMEWORKS = ("trl", "verl", "openrlhf", "nemo_rl", "slime", "vime")


def main() -> None:
    args = sys.argv[1:]
    overrides = args[args.index("--") + 1:] if "--" in args else []
    seeds = [int(s) for s in (args[:args.index("--")] if "--" in args else args)] or [0, 1, 2]
    started = machine()
    with tempfile.TemporaryDirectory() as tmp:
        command = ["unirl", "-m", f"+framework={','.join(FRAMEWORKS)}", f"seed={','.join(map(str, seeds))}",
                   "logging.progress=false", *overrides]
        start = time.perf_counter()
        sweep = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - start
        [multirun] = {p.parent for p in Path(tmp).rglob("multirun.yaml")}
        # compare exits 1 when a member did not complete (the backends refused here): its output is still whole
        compared = subprocess.run(["unirl", "compare", str(multirun), "--json"], capture_output=True, text=True)
        table = subprocess.run(["unirl", "compare", str(multirun)], capture_output=True, text=True)
        print(table.stdout, table.stderr)
        RESULTS.mkdir(exist_ok=True)
        shutil.copyfile(multirun / "compare.png", RESULTS / "framework_sweep.png")
    save("framework_sweep", {"command": command, "exit_code": sweep.returncode, "sweep_wall_s": round(wall, 2),
                             "compare_exit_code": compared.returncode,
                             "compare": json.loads(compared.stdout), "table": table.stdout}, started=started)


if __name__ == "__main__":
    main()
