"""Validate a unirl plan inside verl's own interpreter: ``python -m unirl.plugins.verl.native_check < plan.json``.

What verl itself would do before training, without starting Ray or touching a GPU:
1. compose verl's shipped Hydra config (``verl/trainer/config/ppo_trainer.yaml``) with the plan's overrides
   (wrong or renamed keys fail here, as ``main_ppo`` would fail);
2. run verl's own ``validate_config`` (batch divisibility, micro-batch keys; main_ppo.py runs it before Ray);
3. load the custom reward function the way verl's reward loop does (``get_custom_reward_fn``);
4. with ``"load_data": true`` and data files present, build verl's RL dataset from the exported parquet.
Prints one JSON line: ``{"version", "problems", "checked"}``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import traceback
from importlib.resources import files
from typing import Any


def compose(overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(files("verl.trainer") / "config"), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


# vLLM's own list of adapter ranks it can serve (vllm/config/lora.py MaxLoRARanks); verl falls back to the same list
# when vLLM's module cannot be imported (verl/workers/rollout/vllm_rollout/utils.py:90-94).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def without_vllm_only_checks(cfg: Any) -> tuple[Any, list[str], list[str]]:
    """validate_config's LoRA-rank check imports vLLM's rollout module (verl/utils/config.py:205-215), which needs a
    vLLM install (a GPU wheel). Without one, the same rank rule is applied here and verl's other checks run on a copy
    with the rank zeroed, so a missing vLLM neither hides the rest nor passes a rank vLLM would refuse.
    Returns the config to validate, problems and what was checked."""
    import importlib.util

    from omegaconf import open_dict

    model = cfg.actor_rollout_ref.model
    rank = model.get("lora", {}).get("rank", 0) or model.get("lora_rank", 0)
    if rank <= 0 or cfg.actor_rollout_ref.rollout.name != "vllm" or importlib.util.find_spec("vllm") is not None:
        return cfg, [], []
    copy = cfg.copy()
    with open_dict(copy):
        copy.actor_rollout_ref.model.lora_rank = 0
        if "lora" in copy.actor_rollout_ref.model:
            copy.actor_rollout_ref.model.lora.rank = 0
    if rank > VLLM_LORA_RANKS[-1]:
        return copy, [f"model.lora.rank={rank}: vLLM serves adapters of rank at most {VLLM_LORA_RANKS[-1]}"], []
    return copy, [], [f"LoRA rank {rank} is within vLLM's ranks {list(VLLM_LORA_RANKS)} (checked here: vLLM is not "
                      "installed, so validate_config's own vLLM import cannot run)"]


def check(plan: dict[str, Any], run_dir: str, load_data: bool) -> tuple[list[str], list[str]]:
    import importlib.metadata as md

    problems: list[str] = []
    checked: list[str] = []
    overrides = [a.replace("{run_dir}", run_dir) for a in plan["command"][3:]]
    try:
        cfg = compose(overrides)
        checked.append(f"composed ppo_trainer with {len(overrides)} overrides")
    except Exception as exc:  # Hydra's ConfigCompositionException names the key
        cause = f" ({exc.__cause__})" if exc.__cause__ else ""
        return [f"composition: {exc}{cause}"], checked
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    checked_cfg, rank_problems, rank_checked = without_vllm_only_checks(cfg)
    problems.extend(rank_problems)
    checked.extend(rank_checked)
    try:
        validate_config(checked_cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        checked.append("verl.utils.config.validate_config")
    except Exception as exc:
        problems.append(f"validate_config: {type(exc).__name__}: {exc}")
    fn: Any = None
    try:
        from verl.trainer.ppo.reward import get_custom_reward_fn

        fn = get_custom_reward_fn(cfg)
        if fn is None:
            problems.append("reward: verl found no custom reward function in the composed config")
        else:
            # verl wraps the function with the config's reward_kwargs: partial(_call_with_kwargs, raw_fn, kwargs).
            raw = fn.args[0] if getattr(fn, "args", None) else fn
            kwargs = fn.args[1] if len(getattr(fn, "args", ())) > 1 else {}
            checked.append(f"reward function loaded by verl: {raw.__module__}.{raw.__name__} "
                           f"with reward_kwargs {sorted(kwargs)}")
    except Exception as exc:
        problems.append(f"reward: verl could not load the custom reward function: {type(exc).__name__}: {exc}")
    if load_data:
        try:
            from transformers import AutoTokenizer
            from verl.trainer.ppo.utils import create_rl_dataset

            tok = AutoTokenizer.from_pretrained(cfg.actor_rollout_ref.model.path)
            dataset = create_rl_dataset(cfg.data.train_files, cfg.data, tok, None, is_train=True)
            item = dataset[0]
            checked.append(f"verl RLHFDataset read {len(dataset)} rows; row 0 keys {sorted(item)}")
            # Score row 0's reference as its answer through the function verl loaded, as its reward loop calls it.
            scored = fn(data_source=item["data_source"], solution_str=str(item["reward_model"]["ground_truth"]),
                        ground_truth=item["reward_model"]["ground_truth"], extra_info=dict(item["extra_info"]))
            checked.append(f"reward of row 0's reference answer through verl's loaded function: {scored}")
        except Exception as exc:
            problems.append(f"data: verl could not read or score the exported parquet: {type(exc).__name__}: {exc}")
    return problems, [*checked, f"verl {md.version('verl')}"]


def key_list() -> tuple[list[str], dict[str, Any]]:
    """Every key of verl's composed ppo_trainer config, and each leaf's default as written (an interpolation stays
    ``${...}`` text): the snapshot in keys_<version>.json."""
    from omegaconf import OmegaConf

    keys: list[str] = []
    defaults: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        for k in node:
            key = f"{prefix}.{k}" if prefix else str(k)
            keys.append(key)
            child = node._get_node(k)
            if OmegaConf.is_dict(child):
                walk(child, key)
            elif OmegaConf.is_list(child):
                defaults[key] = OmegaConf.to_container(child, resolve=False)
            else:
                defaults[key] = child._value()

    walk(compose(["actor_rollout_ref.rollout.name=vllm"]), "")
    return sorted(set(keys)), dict(sorted(defaults.items()))


def main() -> None:
    if "--keys" in sys.argv:  # regenerate the snapshot: python -m unirl.plugins.verl.native_check --keys > keys_X.json
        import importlib.metadata as md

        keys, defaults = key_list()
        print(json.dumps({"verl": md.version("verl"), "keys": keys, "defaults": defaults}, indent=0, default=str))
        return
    payload = json.loads(sys.stdin.read())
    plan = payload.get("plan", payload)
    import importlib.metadata as md

    result: dict[str, Any] = {"version": md.version("verl")}
    plans = payload.get("plans") or [plan]  # many plans share one import of verl (the fuzz test sends dozens)
    outcomes = []
    for one in plans:
        try:
            with tempfile.TemporaryDirectory() as tmp:
                run_dir = payload.get("run_dir") or tmp
                problems, checked = check(one, run_dir, bool(payload.get("load_data")))
            outcomes.append({"problems": problems, "checked": checked})
        except Exception:
            outcomes.append({"problems": [f"checker crashed: {traceback.format_exc()}"], "checked": []})
    result.update(outcomes[0], results=outcomes)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
