"""Overhead: the embedded default through `unirl` vs a plain TRL script with the identical GRPOConfig.

Runs A (unirl) and B (plain TRL) alternately, A B A B ..., so machine load affects both alike, and
reports the wall-time ratio. Usage: python benchmarks/overhead.py [PAIRS] [extra overrides...]
Each pair takes about 5 minutes on 2 cores with the full default recipe.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _common import save, summary, timed

HERE = Path(__file__).parent


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    overrides = sys.argv[2:]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _, plan_json = timed(["unirl", "plan", "--json", *overrides])
        (work / "plan.json").write_text(plan_json)
        unirl_s, plain_s, accuracy = [], [], []
        for i in range(pairs):
            a, _ = timed(["unirl", *overrides, "logging.progress=false"], cwd=work,
                         env={"UNIRL_RUNS_DIR": str(work / "runs")})
            b, out = timed([sys.executable, str(HERE / "plain_trl.py"), str(work / "plan.json"), str(work / f"b{i}")])
            unirl_s.append(a)
            plain_s.append(b)
            accuracy.append(json.loads(out.strip().splitlines()[-1]))
            print(f"pair {i}: unirl {a:.1f} s, plain TRL {b:.1f} s, ratio {a / b:.3f}", flush=True)
    ratios = [a / b for a, b in zip(unirl_s, plain_s, strict=True)]
    result = {"overrides": overrides, "unirl_s": summary(unirl_s), "plain_trl_s": summary(plain_s),
              "ratio_per_pair": ratios, "ratio_of_means": summary(unirl_s)["mean"] / summary(plain_s)["mean"],
              "plain_trl_accuracy": accuracy}
    print(f"wall-time ratio unirl / plain TRL: {result['ratio_of_means']:.3f} (target <= 1.05)")
    save("overhead", result)


if __name__ == "__main__":
    main()
