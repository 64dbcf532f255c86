"""The TRL reward adapter's cost per step of the embedded default: 128 completions scored by its three rewards
through unirl (TrlRewardAdapter -> RewardExecutor: result checks, components, error policy, trajectory records)
against the same three rewards as plain Python functions. Usage: python benchmarks/reward_adapter.py [STEPS]
"""

from __future__ import annotations

import json
import random
import re
import statistics
import subprocess
import sys
import time
from typing import Any

from _common import machine, save

from unirl.adapters.trl import TrlRewardAdapter
from unirl.host.manager import get_host
from unirl.host.planning import spec_from_recipe
from unirl.recipe.schema import recipe_from_dict
from unirl.rewards.executor import RewardExecutor

NUMBER = re.compile(r"-?\d+")


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    started = machine()
    plan = json.loads(subprocess.run(["unirl", "plan", "--json"], capture_output=True, text=True, check=True).stdout)
    executor = RewardExecutor(spec_from_recipe(recipe_from_dict(plan["recipe"]), get_host().rewards,
                                               can_exclude=True))
    rng = random.Random(0)
    prompts = [f"{rng.randrange(5)}+{rng.randrange(5)}=" for _ in range(128)]
    completions = [str(rng.randrange(10)) for _ in prompts]
    ids = [[5 + int(c), 2] for c in completions]
    references = [str(int(p[0]) + int(p[2])) for p in prompts]
    adapter = TrlRewardAdapter(executor, eos_ids={2}, mini_batches=1, on_scored=lambda step, records: None)
    funcs = adapter.reward_funcs()

    class State:
        global_step = 0

    def unirl_step(i: int) -> None:
        State.global_step = i
        batch = list(completions)  # TRL hands each step a new list
        for f in funcs:
            f(prompts, batch, ids, reference=references, trainer_state=State)

    def plain_step(i: int) -> Any:
        found = [NUMBER.findall(c) for c in completions]
        a = [1.0 if f and int(f[-1]) == int(r) else 0.0 for f, r in zip(found, references, strict=True)]
        b = [max(0.0, 1 - abs(int(f[-1]) - int(r)) / 10) if f else 0.0 for f, r in zip(found, references, strict=True)]
        c = [1.0 if re.fullmatch(r"\s*-?\d+\s*", x) and 2 in y else 0.0 for x, y in zip(completions, ids, strict=True)]
        return a, b, c

    timings: dict[str, list[float]] = {"unirl": [], "plain": []}
    for i in range(steps):  # interleaved, so machine load affects both alike
        for name, fn in (("unirl", unirl_step), ("plain", plain_step)):
            start = time.perf_counter()
            fn(i)
            timings[name].append(time.perf_counter() - start)
    result = {name: {"median_ms": round(statistics.median(t[20:]) * 1e3, 3)} for name, t in timings.items()}
    print(f"per step of 128 completions: unirl adapter {result['unirl']['median_ms']} ms, plain functions "
          f"{result['plain']['median_ms']} ms")
    save("reward_adapter", {"steps": steps, **result}, started=started)


if __name__ == "__main__":
    main()
