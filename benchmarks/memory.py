"""Memory: peak resident memory of the whole process tree for the embedded default and for `unirl plan`.

The tree is sampled every 0.1 s with psutil (children included). Usage: python benchmarks/memory.py [overrides...]
"""

from __future__ import annotations

import sys
import tempfile

from _common import peak_rss, save


def main() -> None:
    overrides = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        plan_mib, _ = peak_rss(["unirl", "plan", "--json", *overrides], tmp)
        run_mib, wall = peak_rss(["unirl", "recipe=grpo_math", "logging.progress=false", *overrides], tmp)
    print(f"unirl plan: peak {plan_mib:.0f} MiB (target <= 150 MB)")
    print(f"embedded default: peak {run_mib:.0f} MiB over {wall:.0f} s (target <= 2 GiB)")
    save("memory", {"overrides": overrides, "plan_peak_mib": plan_mib, "run_peak_mib": run_mib, "run_wall_s": wall})


if __name__ == "__main__":
    main()
