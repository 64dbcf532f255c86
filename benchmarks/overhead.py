"""Overhead: the embedded default through `unirl` vs a plain TRL script with the identical GRPOConfig.

Runs A (unirl) and B (plain TRL) alternately, A B A B ..., so machine load affects both alike, and
reports the wall-time ratio. Usage: python benchmarks/overhead.py [PAIRS] [extra overrides...]
Each pair takes about a minute on 2 cores with the full default recipe. Both sides stop by the recipe's
early-stop rule, so they train the same steps (reported per pair).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from _common import machine, save, summary, timed

HERE = Path(__file__).parent


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    overrides = sys.argv[2:]
    started = machine()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        _, plan_json = timed(["unirl", "plan", "--json", *overrides])
        (work / "plan.json").write_text(plan_json)
        unirl_s, plain_s, plain, ours = [], [], [], []
        for i in range(pairs):
            runs = work / f"runs{i}"
            a, _ = timed(["unirl", *overrides, "logging.progress=false"], cwd=work, env={"UNIRL_RUNS_DIR": str(runs)})
            b, out = timed([sys.executable, str(HERE / "plain_trl.py"), str(work / "plan.json"), str(work / f"b{i}")])
            unirl_s.append(a)
            plain_s.append(b)
            plain.append(json.loads(out.strip().splitlines()[-1]))
            [found] = runs.rglob("summary.json")
            s = json.loads(found.read_text())
            ours.append({"accuracy_after": s.get("accuracy_after"), "steps": s.get("steps")})
            print(f"pair {i}: unirl {a:.1f} s ({ours[-1]['steps']} steps), plain TRL {b:.1f} s "
                  f"({plain[-1]['steps']} steps), ratio {a / b:.3f}", flush=True)
    ratios = [a / b for a, b in zip(unirl_s, plain_s, strict=True)]
    result = {"overrides": overrides, "unirl_s": summary(unirl_s), "plain_trl_s": summary(plain_s),
              "ratio_per_pair": ratios, "ratio_of_means": summary(unirl_s)["mean"] / summary(plain_s)["mean"],
              "unirl_runs": ours, "plain_trl_runs": plain,
              "same_steps": all(u["steps"] == p["steps"] for u, p in zip(ours, plain, strict=True))}
    print(f"wall-time ratio unirl / plain TRL: {result['ratio_of_means']:.3f} (target <= 1.02); per pair "
          f"{', '.join(f'{r:.3f}' for r in ratios)}; same steps on both sides: {result['same_steps']}")
    save("overhead", result, started=started)


if __name__ == "__main__":
    main()
