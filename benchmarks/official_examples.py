"""The frameworks' official GRPO examples, key by key: what `unirl import` + `unirl plan` reproduce.

    python benchmarks/official_examples.py [--json]
    python benchmarks/official_examples.py --effective [--json]     the effective runs (below)

For each fixture under tests/fixtures/native/ (repository, commit and path in its header), every native key the
example sets is counted as one of:
  matched        the imported recipe plans back to the same value (a recipe field, or a key unirl sends the same)
  inexpressible  no recipe field says it: kept in framework.overrides (planned back unchanged)
  dropped        a path or unirl's own wiring (data files, the reward, checkpoint directories)
  different      planned to another value (the reason is printed)
  refused        kept in framework.overrides, but the plan refuses it (a name the installed version lacks)
plus `added`: keys the example leaves at the backend's default that unirl's plan sets otherwise.
NeMo RL and slime have no `unirl import`: the recipe a migrating user would write (below) is planned and its
native keys compared with the file's values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from unirl.backend.importing import (  # noqa: E402
    Imported,
    hydra_values,
    import_native,
    openrlhf_flags,
    same,
    script_commands,
    verl_command,
)
from unirl.host.manager import get_host  # noqa: E402
from unirl.recipe.schema import recipe_from_dict  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "native"
VERL = ["verl_run_qwen2-7b_math.sh", "verl_run_qwen2-7b.sh", "verl_run_qwen2_5-3b_gsm8k_grpo_lora.sh",
        "verl_test_gspo_3b_math.sh"]
OPENRLHF = ["openrlhf_train_dapo_ray_hybrid_engine.sh", "openrlhf_train_reinforce_baseline_hybrid_engine.sh",
            "openrlhf_v0.10.1_train_dapo_ray_hybrid_engine.sh",
            "openrlhf_v0.10.1_train_reinforce_baseline_hybrid_engine.sh"]
TRL = ["trl_grpo_quickstart.json", "trl_dapo_paper_index.json"]
ENV = {"verl_test_gspo_3b_math.sh": {"SLURM_JOB_NUM_NODES": "1"}}
"""What the example reads from its environment (a Slurm allocation), as `unirl import --env` gives it."""


def read(name: str) -> tuple[str, dict[str, Any], list[tuple[str, str]]]:
    text = (FIXTURES / name).read_text()
    if name.startswith("verl"):
        overrides, other = verl_command(text, ENV.get(name))
        return "verl", hydra_values(overrides), other
    if name.startswith("openrlhf"):
        flags, other = openrlhf_flags([text], ENV.get(name))
        return "openrlhf", flags, other
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return "trl", json.loads(body), []


def imported(name: str) -> tuple[str, dict[str, Any], Imported]:
    host = get_host()
    backend, native, _ = read(name)
    return backend, native, import_native(host.frameworks.get(backend), native, host.rewards.names())


def compare_import(name: str) -> dict[str, Any]:
    backend, native, result = imported(name)
    report = result.report
    framework = get_host().frameworks.get(backend)
    refused = {k for k, _, _ in report.refused}
    recipe = result.recipe
    if refused:  # plan what does plan: the refused keys out
        tree = recipe_from_dict({**result.document(), "framework": {
            "name": backend, "overrides": {k: v for k, v in report.native.items() if k not in refused}}})
        recipe = tree
    plan = framework.plan(recipe)
    planned = dict(plan.native_config[{"verl": "overrides", "openrlhf": "flags", "trl": "trainer_config"}[backend]])
    dropped = {k for k, _, _ in report.dropped}
    rows: dict[str, list[tuple[str, str]]] = {c: [] for c in
                                              ("matched", "inexpressible", "dropped", "different", "refused")}
    for key, value in native.items():
        if key in refused:
            rows["refused"].append((key, next(why for k, _, why in report.refused if k == key)))
        elif key in dropped:
            rows["dropped"].append((key, next(why for k, _, why in report.dropped if k == key)))
        elif isinstance(planned.get(key), str) and str(planned[key]).startswith("{run_dir}"):
            rows["dropped"].append((key, f"a path unirl sets itself ({planned[key]}): the recipe's data source"))
        elif key in report.native and same(planned.get(key), value):
            rows["inexpressible"].append((key, ""))
        elif key in planned and same(planned[key], value):
            rows["matched"].append((key, ""))
        else:
            rows["different"].append((key, f"{value!r} -> {planned.get(key, '(not sent)')!r}"))
    return {"example": name, "backend": backend, **{k: len(v) for k, v in rows.items()},
            "added": len(report.added), "rows": rows,
            "added_keys": [(k, v, d) for k, v, d in report.added]}


# --- the effective run: what the backend executes, the example's against the imported recipe's plan -------------

ORACLE = FIXTURES / "effective_runs.json"
"""Each example's effective run worked out by hand from its script, the backend's own defaults (file:line) and the
size of its dataset (cited), independently of unirl's readers: the yardstick both are held to."""
RUN_FIELDS = ("epochs", "steps", "prompts_per_step", "samples_per_prompt", "updates_per_step", "max_new_tokens",
              "max_total_tokens", "lr", "lr_schedule", "warmup_updates", "lr_horizon_updates")
ALGORITHM_FIELDS = ("advantage_estimator", "kl_coef", "kl_placement", "clip_low", "clip_high", "dual_clip",
                    "loss_aggregation", "weight_decay", "critic")
TRL_DATA = "hf:example/prompts@train"
"""A TRL config names no data: the import is given a hub dataset (not on this machine, so the plan does not count
it), as `unirl import trl CONFIG --set data.train=...` does."""


def import_fixture(name: str, trl_data: str) -> tuple[Any, dict[str, Any], str | None, Imported | Exception]:
    """(framework, the example's native configuration, TRL's config class, the import or why the plan refuses it),
    as `unirl import` reads the file (a TRL RLOOConfig starts from the rloo preset)."""
    from unirl.backend.importing import CONFIG_CLASS_KEY
    from unirl.errors import UnirlError
    from unirl.recipe.algorithm_presets import preset_fields

    host = get_host()
    backend, native, _ = read(name)
    config_class = str(native.pop(CONFIG_CLASS_KEY, "GRPOConfig")) if backend == "trl" else None
    given: dict[str, Any] = {}
    if backend == "trl":
        given["data.train"] = trl_data
        if config_class == "RLOOConfig":
            given.update({f"algorithm.{k}": v for k, v in preset_fields("rloo").items()})
    framework = host.frameworks.get(backend)
    try:
        result: Imported | Exception = import_native(framework, native, host.rewards.names(), None, given)
    except UnirlError as exc:
        result = exc
    return framework, native, config_class, result


def _word(value: Any) -> Any:
    """The oracle's strings carry a gloss after the value ("cosine_with_min_lr (min_lr_rate 0.1)")."""
    return value.split(" ")[0] if isinstance(value, str) else value


def compare_effective(name: str) -> dict[str, Any]:
    """The example's effective run against the hand-worked one (unirl's reader checked), and the imported recipe's
    plan's against the example's (the import checked). A recipe the plan refuses is reported as such."""
    oracle = json.loads(ORACLE.read_text())[name]
    rows = oracle["data"]["train_rows"]
    framework, native, config_class, result = import_fixture(name, TRL_DATA)
    command = framework.effective_run(native, rows, config_class)
    expected = oracle["effective"]
    wrong = []
    for field in RUN_FIELDS:
        if expected.get(field) is None or (rows is None and field in ("steps", "lr_horizon_updates")):
            continue
        if not same(_word(getattr(command, field)), _word(expected[field])):
            wrong.append((field, getattr(command, field), expected[field]))
    for field in ALGORITHM_FIELDS:
        if field in expected["algorithm"] and not same(_word(command.algorithm.get(field)),
                                                       _word(expected["algorithm"][field])):
            wrong.append((f"algorithm.{field}", command.algorithm.get(field), expected["algorithm"][field]))
    out: dict[str, Any] = {"example": name, "backend": framework.name, "source": oracle["source"],
                           "reader_vs_hand": wrong, "command": command.to_dict()}
    if isinstance(result, Exception):
        return {**out, "refused": " ".join(str(result).split()), "plan_vs_command": None}
    from unirl.backend.importing import planned_run

    plan = planned_run(framework, result.recipe, rows)
    return {**out, "refused": None, "plan": plan.to_dict(), "plan_vs_command": command.differences(plan)}


# --- NeMo RL and slime: the hand-written recipe a migrating user would write ----------------------------------

NEMO_RECIPE: dict[str, Any] = {
    # grpo_math_1B.yaml @ v0.7.0: grpo.num_prompts_per_step 32, num_generations_per_prompt 16,
    # policy.train_global_batch_size 512 (= 32 x 16: one update a step), train_micro_batch_size 4,
    # max_total_sequence_length 512, AdamW lr 5e-6 weight_decay 0.01, loss_fn kl 0.01 k3, clip 0.2/0.2,
    # val_period 10, checkpointing.save_period 10, vllm gpu_memory_utilization 0.6, seed 42, cluster 1 x 1 GPU
    "model": {"path": "Qwen/Qwen2.5-1.5B"},
    "algorithm": {"prompts_per_step": 32, "samples_per_prompt": 16, "mini_batches_per_step": 1, "micro_batch_size": 4,
                  "lr": 5e-6, "weight_decay": 0.01, "kl_coef": 0.01, "kl_estimator": "k3", "clip_low": 0.2,
                  "clip_high": 0.2, "max_grad_norm": 1.0, "temperature": 1.0, "top_p": 1.0,
                  "max_new_tokens": 256, "lr_schedule": "constant", "warmup_steps": 50},
    "eval": {"every_steps": 10, "before_training": False},
    "rollout": {"gpu_memory_fraction": 0.6, "tensor_parallel": 1},
    "resources": {"gpus_per_node": 1, "nodes": 1, "gradient_checkpointing": False},
    "run": {"checkpoint_every": 10}, "seed": 42,
    "framework": {"name": "nemo_rl", "max_total_sequence_length": 512},
}


def leaves(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for k, v in tree.items():
            out.update(leaves(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: tree}


def compare_nemo() -> dict[str, Any]:
    from omegaconf import OmegaConf

    # NeMo RL's own resolvers (nemo_rl/utils/config.py registers "mul", "max", ... before loading a config)
    for name, fn in {"mul": lambda a, b: a * b, "max": lambda a, b: max(a, b), "div": lambda a, b: a / b}.items():
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
    base = OmegaConf.to_container(OmegaConf.load(FIXTURES / "nemo_rl_grpo_math_1B.yaml"), resolve=True)
    values = leaves(base)
    plan = get_host().frameworks.get("nemo_rl").plan(recipe_from_dict(NEMO_RECIPE))
    overrides = leaves({k.lstrip("+"): v for k, v in plan.native_config["overrides"].items()})
    rows: dict[str, list[tuple[str, str]]] = {c: [] for c in
                                              ("matched", "inexpressible", "dropped", "different", "refused")}
    for key, value in overrides.items():
        if key not in values:
            continue  # a key the file does not have (unirl's environment, data wiring): counted as added
        mine = value
        if isinstance(mine, str) and "{run_dir}" in mine:
            rows["dropped"].append((key, "a path unirl sets itself"))
        elif same(mine, values[key]):
            rows["matched"].append((key, ""))
        else:
            rows["different"].append((key, f"{values[key]!r} -> {mine!r}"))
    added = [k for k in overrides if k not in values]
    untouched = len([k for k in values if k not in overrides])
    return {"example": "nemo_rl_grpo_math_1B.yaml (hand-written recipe)", "backend": "nemo_rl",
            **{k: len(v) for k, v in rows.items()}, "added": len(added), "rows": rows,
            "added_keys": added, "base_config_untouched": untouched}


SLIME_RECIPE: dict[str, Any] = {
    # scripts/run-qwen3-4B.sh: 32 prompts x 8 samples a rollout, --global-batch-size 256 (one update), 3000 rollouts,
    # lr 1e-6 constant, weight decay 0.1, KL loss 0.0 low_var_kl, clip 0.2/0.28, 8192 new tokens, temperature 1,
    # eval every 20, save every 20, TP 2, sglang mem 0.7, 2 GPUs per engine, colocated, 8 GPUs
    "model": {"path": "/root/Qwen3-4B"},
    "algorithm": {"steps": 3000, "prompts_per_step": 32, "samples_per_prompt": 8, "mini_batches_per_step": 1,
                  "lr": 1e-6, "lr_schedule": "constant", "weight_decay": 0.1, "kl_coef": 0.0,
                  "kl_estimator": "low_var_kl", "clip_low": 0.2, "clip_high": 0.28, "max_new_tokens": 8192,
                  "temperature": 1.0, "entropy_coef": 0.0},
    "eval": {"every_steps": 20},
    "rollout": {"engine": "sglang", "colocated": True, "tensor_parallel": 2, "gpu_memory_fraction": 0.7},
    "resources": {"gpus_per_node": 8, "nodes": 1},
    "run": {"checkpoint_every": 20},
    "framework": {"name": "slime", "model_args_script": str(FIXTURES / "slime_models_qwen3-4B.sh")},
}


def compare_slime() -> dict[str, Any]:
    text = (FIXTURES / "slime_models_qwen3-4B.sh").read_text() + "\n" + (FIXTURES / "slime_run-qwen3-4B.sh").read_text()
    [command] = script_commands(text, "train.py", {"NUM_GPUS": "8"})
    script, _ = openrlhf_flags(command.words[1:])  # the same --flag value reading (no OpenRLHF renames apply)
    plan = get_host().frameworks.get("slime").plan(recipe_from_dict(SLIME_RECIPE))
    # the plan's train.py arguments, read the same way; the model architecture comes from the sourced
    # scripts/models/qwen3-4B.sh itself (framework.model_args_script), so its flags are the script's by construction
    flags, _ = openrlhf_flags([str(a) for a in plan.native_config["args"]])
    model, _ = openrlhf_flags([w for c in script_commands(
        (FIXTURES / "slime_models_qwen3-4B.sh").read_text() + "\necho train.py ${MODEL_ARGS[@]}", "train.py")
        for w in c.words[1:]])
    flags = {**model, **flags}
    rows: dict[str, list[tuple[str, str]]] = {c: [] for c in
                                              ("matched", "inexpressible", "dropped", "different", "refused")}
    for key, value in script.items():
        mine = flags.get(key, "(not sent)")
        if isinstance(mine, str) and "{run_dir}" in mine:
            rows["dropped"].append((key, "a path unirl sets itself"))
        elif key in ("rm-type", "hf-checkpoint", "ref-load", "load", "save", "prompt-data", "eval-prompt-data"):
            rows["dropped"].append((key, "paths / unirl's reward wiring (--custom-rm-path)"))
        elif same(mine, value) or (value is True and mine in (True, "")):
            rows["matched"].append((key, ""))
        else:
            rows["different"].append((key, f"{value!r} -> {mine!r}"))
    return {"example": "slime_run-qwen3-4B.sh (hand-written recipe)", "backend": "slime",
            **{k: len(v) for k, v in rows.items()}, "added": len([k for k in flags if k not in script]),
            "rows": rows, "added_keys": [k for k in flags if k not in script]}


def table(results: list[dict[str, Any]]) -> str:
    head = "| example | backend | keys | matched | inexpressible (overrides) | dropped | different | refused | added |"
    lines = [head, "|" + "---|" * 9]
    for r in results:
        total = sum(r[c] for c in ("matched", "inexpressible", "dropped", "different", "refused"))
        lines.append(f"| {r['example']} | {r['backend']} | {total} | {r['matched']} | {r['inexpressible']} | "
                     f"{r['dropped']} | {r['different']} | {r['refused']} | {r['added']} |")
    return "\n".join(lines)


def effective_table(results: list[dict[str, Any]]) -> str:
    lines = ["| example | backend | the run it executes | unirl's reader vs by hand | the imported plan vs the "
             "example |", "|---|---|---|---|---|"]
    for r in results:
        c = r["command"]
        length = f"{c['steps']} steps" if c["steps"] is not None else f"{c['epochs']} passes"
        run = (f"{length}, {c['prompts_per_step']} x {c['samples_per_prompt']}, {c['updates_per_step']} updates a "
               f"step, {c['algorithm']['advantage_estimator']}")
        reader = "same" if not r["reader_vs_hand"] else "; ".join(f"{f}: {a!r} vs {b!r}" for f, a, b in
                                                                 r["reader_vs_hand"])
        plan = (f"refused: {r['refused'][:140]}" if r["refused"] else "same" if not r["plan_vs_command"] else
                "; ".join(f"{f}: {a!r} -> {b!r}" for f, a, b in r["plan_vs_command"]))
        lines.append(f"| {r['example']} | {r['backend']} | {run} | {reader} | {plan} |")
    return "\n".join(lines)


def main() -> None:
    if "--effective" in sys.argv:
        effective = [compare_effective(name) for name in json.loads(ORACLE.read_text())]
        print(json.dumps(effective, indent=1, default=str) if "--json" in sys.argv else effective_table(effective))
        return
    results = [compare_import(name) for name in VERL + OPENRLHF + TRL]
    for extra in (compare_nemo, compare_slime):
        try:
            results.append(extra())
        except Exception as exc:  # report, do not hide: the hand-written recipe does not plan
            results.append({"example": extra.__name__, "backend": "?", "matched": 0, "inexpressible": 0,
                            "dropped": 0, "different": 0, "refused": 1, "added": 0,
                            "rows": {"refused": [("(recipe)", " ".join(str(exc).split()))]}, "added_keys": []})
    if "--json" in sys.argv:
        print(json.dumps(results, indent=1, default=str))
        return
    for r in results:
        print(f"== {r['example']} ({r['backend']})")
        for category in ("different", "refused", "dropped"):
            for key, why in r["rows"].get(category, []):
                print(f"  {category}: {key}: {why}")
    print()
    print(table(results))


if __name__ == "__main__":
    main()
