"""Validate a unirl plan inside OpenRLHF's own interpreter: ``python -m unirl_openrlhf.native_check < plan.json``.

1. OpenRLHF's real argument parser of the installed version parses the plan's argv (unknown, stale or
   mistyped flags fail as they would at launch);
2. the ``__main__`` block's own rewrites and asserts run (train_ppo_ray.py:627-771), with ``train``
   replaced by a capture;
3. the checks ``train()`` makes only after Ray starts, and the GPU demand of its placement groups against
   the recipe's GPUs (a mismatch there hangs the real run instead of failing).
Prints one JSON line: ``{"version", "problems", "checked", "warnings"}``.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from typing import Any

from unirl.plan import LaunchPlan
from unirl_openrlhf.parser_schema import train_time_problems, validate
from unirl_openrlhf.resources import demand_problems


def check(plan: LaunchPlan) -> dict[str, Any]:
    argv = [a.replace("{run_dir}", "/tmp/unirl-check") for a in plan.command[3:]]
    problems: list[str] = []
    checked = [f"argparse: {len(argv)} arguments through OpenRLHF's own parser"]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args, printed = validate(argv)
    except SystemExit:
        return {"problems": [f"OpenRLHF's parser: {stderr.getvalue().strip().splitlines()[-1]}"], "checked": checked}
    except AssertionError as exc:
        return {"problems": [f"OpenRLHF's own check (train_ppo_ray.py __main__): {exc}"], "checked": checked}
    checked.append("train_ppo_ray.py __main__ rewrites and asserts")
    problems += train_time_problems(args)
    problems += demand_problems(plan.native_config["flags"], plan.environment)
    checked.append("train() checks after ray.init, and Ray GPU demand")
    return {"problems": problems, "checked": checked, "warnings": printed}


def main() -> None:
    import importlib.metadata as md

    payload = json.loads(sys.stdin.read())
    plans = payload.get("plans") or [payload.get("plan", payload)]  # one interpreter for many plans (fuzz test)
    outcomes = []
    for one in plans:
        try:
            outcomes.append(check(LaunchPlan.from_dict(one)))
        except Exception:
            outcomes.append({"problems": [f"checker crashed: {traceback.format_exc()}"], "checked": []})
    print(json.dumps({"version": md.version("openrlhf"), **outcomes[0], "results": outcomes}))


if __name__ == "__main__":
    main()
