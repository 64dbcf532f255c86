"""Start-up: `unirl plan +framework=X recipe=grpo_math` for each of the six backends, and `unirl --help`, against a
bare Hydra app composing a config of the same size (the default recipe as TRL plans it).

Commands run alternately, REPS times each; medians are compared. Usage: python benchmarks/startup.py [REPS]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from _common import save, summary, timed

HERE = Path(__file__).parent
FRAMEWORKS = ("trl", "verl", "openrlhf", "nemo_rl", "slime", "vime")


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    unirl = shutil.which("unirl") or "unirl"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        # The baseline composes a YAML holding exactly unirl's composed recipe (same keys, same values).
        _, plan = timed([unirl, "plan", "--json"])
        recipe = json.loads(plan)["recipe"]
        import yaml

        quiet = "hydra:\n  output_subdir: null\n  run:\n    dir: .\n"  # like unirl plan: write nothing
        (work / "config.yaml").write_text(yaml.safe_dump(recipe) + quiet)
        shutil.copy(HERE / "bare_hydra" / "app.py", work / "app.py")
        commands = {
            **{f"unirl plan +framework={name}": [unirl, "plan", "--json", f"+framework={name}", "recipe=grpo_math"]
               for name in FRAMEWORKS},
            "unirl --help": [unirl, "--help"],
            "bare hydra app": [sys.executable, str(work / "app.py"), "hydra/job_logging=disabled"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(reps):
            for name, cmd in commands.items():
                times[name].append(timed(cmd, cwd=work)[0])
    result = {name: summary(values) for name, values in times.items()}
    base = result["bare hydra app"]["median"]
    for name in [n for n in commands if n != "bare hydra app"]:
        result[name]["ratio_to_bare_hydra"] = result[name]["median"] / base
        print(f"{name}: median {result[name]['median']:.3f} s, {result[name]['ratio_to_bare_hydra']:.2f}x bare Hydra "
              f"({base:.3f} s); targets < 0.6 s and <= 1.5x")
    save("startup", result)


if __name__ == "__main__":
    main()
