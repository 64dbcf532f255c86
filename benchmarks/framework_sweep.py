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
import sys

from _common import RESULTS, machine, save, sweep_and_compare

FRAMEWORKS = ("trl", "verl", "openrlhf", "nemo_rl", "slime", "vime")


def main() -> None:
    args = sys.argv[1:]
    overrides = args[args.index("--") + 1:] if "--" in args else []
    seeds = [int(s) for s in (args[:args.index("--")] if "--" in args else args)] or [0, 1, 2]
    started = machine()
    command = ["unirl", "-m", f"+framework={','.join(FRAMEWORKS)}", f"seed={','.join(map(str, seeds))}",
               "logging.progress=false", *overrides]
    with sweep_and_compare(command) as sweep:  # compare exits 1 here: the backends refused on this machine
        RESULTS.mkdir(exist_ok=True)
        shutil.copyfile(sweep.multirun / "compare.png", RESULTS / "framework_sweep.png")
    save("framework_sweep", {"command": command, "exit_code": sweep.process.returncode,
                             "sweep_wall_s": round(sweep.wall_s, 2), "compare_exit_code": sweep.compared.returncode,
                             "compare": json.loads(sweep.compared.stdout), "table": sweep.table}, started=started)


if __name__ == "__main__":
    main()
