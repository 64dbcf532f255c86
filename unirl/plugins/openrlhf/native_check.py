"""Validate a unirl plan inside OpenRLHF's own interpreter.

    python -m unirl.plugins.openrlhf.native_check < plan.json


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

from unirl.backend.plan import LaunchPlan
from unirl.plugins.openrlhf.parser_schema import train_time_problems, validate
from unirl.plugins.openrlhf.resources import demand_problems
from unirl.rewards.row_origin import untag_reference


def read_and_score(args: Any, run_dir: str) -> list[str]:
    """The exported prompts through OpenRLHF's own dataset code, and row 0's reference scored by the reward file
    unirl generated for ``--reward.remote_url`` (loaded by path, as OpenRLHF's engine actors load it)."""
    import importlib.util
    from types import SimpleNamespace

    from openrlhf.datasets import PromptDataset
    from openrlhf.datasets.utils import blending_datasets
    from transformers import AutoTokenizer

    strategy = SimpleNamespace(args=args, print=lambda *a, **k: None, is_rank_0=lambda: True)
    data = blending_datasets(args.data.prompt_dataset, None, strategy, args.train.seed,
                             max_count=args.data.max_samples, dataset_split=args.data.prompt_split)
    tokenizer = AutoTokenizer.from_pretrained(args.actor.model_name_or_path)
    dataset = PromptDataset(data, tokenizer, strategy, input_template=args.data.input_template)
    item = dataset[0]
    seen = [f"OpenRLHF PromptDataset read {len(dataset)} rows; row 0 = {item!r}"]
    [reward_file] = args.reward.remote_url
    spec = importlib.util.spec_from_file_location("unirl_openrlhf_reward_check", reward_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    datasource, prompt, label = item[0], item[1], item[2]
    reference, _ = untag_reference(label)  # the reference unirl's label wraps (unirl/rewards/row_origin.py)
    out = module.reward_func([prompt + str(reference) + tokenizer.eos_token], [prompt], [label])
    seen.append(f"reward of row 0's reference answer ({datasource}): {float(out['rewards'])}")  # one sample: a number
    return seen


def check(plan: LaunchPlan, run_dir: str | None = None) -> dict[str, Any]:
    argv = [a.replace("{run_dir}", run_dir or "/tmp/unirl-check") for a in plan.command[3:]]
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
    if run_dir:
        try:
            checked += read_and_score(args, run_dir)
        except Exception as exc:
            problems.append(f"data: OpenRLHF could not read or score the exported prompts: {type(exc).__name__}: {exc}")
    return {"problems": problems, "checked": checked, "warnings": printed}


def main() -> None:
    import importlib.metadata as md

    payload = json.loads(sys.stdin.read())
    plans = payload.get("plans") or [payload.get("plan", payload)]  # one interpreter for many plans (fuzz test)
    outcomes = []
    for one in plans:
        try:
            outcomes.append(check(LaunchPlan.from_dict(one), payload.get("run_dir")))
        except Exception:
            outcomes.append({"problems": [f"checker crashed: {traceback.format_exc()}"], "checked": []})
    print(json.dumps({"version": md.version("openrlhf"), **outcomes[0], "results": outcomes}))


if __name__ == "__main__":
    main()
