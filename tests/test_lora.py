"""model.lora: one field set meaning PEFT's LoRA on every backend that has it (TRL's peft_config, verl's lora_* keys,
NeMo RL's lora_cfg), refused by field where a backend lacks a part of it, and a LoRA run of the embedded task that
learns on a CPU while training a fraction of the weights."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.backend_recipes import gpu_recipe
from tests.support.cli import run_cli
from tests.support.helpers import run_dirs
from unirl.errors import RecipeInvalid
from unirl.host.manager import get_host
from unirl.launch.resume import latest_trainer_checkpoint
from unirl.recipe.schema import LoraConfig, ModelConfig, Recipe

# The setting the README gives for the embedded task: adapters on every linear layer, plus the (tied) embedding and the
# RMSNorm scales trained in full ("norm" is a suffix of every norm's name, as PEFT matches them). A randomly initialised
# model's 20-token embedding stays random under adapters alone, and those learn on one seed of three
# (benchmarks/lora.py).
LEARNS = ("model.lora.rank=32", "model.lora.alpha=64", "model.lora.modules_to_save=[embed_tokens,norm]")


def with_lora(framework: str, **lora: Any) -> Recipe:
    # two new tokens fit NeMo RL's default sequence budget for the builtin model's 128 positions
    recipe = gpu_recipe(framework, algorithm={"max_new_tokens": 2})
    return replace(recipe, model=ModelConfig(lora=LoraConfig(**lora)))


def plan_native(framework: str, **lora: Any) -> dict[str, Any]:
    native: dict[str, Any] = get_host().frameworks.get(framework).plan(with_lora(framework, **lora)).native_config
    return native


def refusal(framework: str, **lora: Any) -> str:
    with pytest.raises(RecipeInvalid) as info:
        get_host().frameworks.get(framework).plan(with_lora(framework, **lora))
    return str(info.value)


# --- the same adapters on every backend that has LoRA ---------------------------------------------------------------

def test_trl_gets_a_peft_lora_config_with_the_recipes_semantics() -> None:
    assert plan_native("trl")["peft_config"] is None  # rank 0: full fine-tuning
    spec = plan_native("trl", rank=16, alpha=32, dropout=0.05, target_modules=["q_proj", "v_proj"],
                       modules_to_save=["embed_tokens"])["peft_config"]
    assert spec == {"task_type": "CAUSAL_LM", "r": 16, "lora_alpha": 32, "lora_dropout": 0.05,
                    "target_modules": ["q_proj", "v_proj"], "bias": "none", "modules_to_save": ["embed_tokens"],
                    "ensure_weight_tying": True}
    # the shorthand stays a string: a list holding it would name a module called all-linear
    assert plan_native("trl", rank=8)["peft_config"]["target_modules"] == "all-linear"


def test_verl_and_nemo_rl_get_their_own_keys_for_the_same_adapters() -> None:
    verl = plan_native("verl", rank=16, alpha=32, target_modules=["q_proj", "v_proj"])["overrides"]
    assert (verl["actor_rollout_ref.model.lora_rank"], verl["actor_rollout_ref.model.lora_alpha"]) == (16, 32)
    assert verl["actor_rollout_ref.model.target_modules"] == ["q_proj", "v_proj"]
    assert verl["actor_rollout_ref.rollout.load_format"] == "safetensors"  # the base weights load once; adapters sync
    nemo = plan_native("nemo_rl", rank=16, alpha=32, dropout=0.1)["overrides"]
    lora_cfg = {k.removeprefix("policy.dtensor_cfg.lora_cfg."): v for k, v in nemo.items() if ".lora_cfg." in k}
    assert lora_cfg["enabled"] is True and (lora_cfg["dim"], lora_cfg["alpha"], lora_cfg["dropout"]) == (16, 32, 0.1)
    # PEFT's all-linear leaves the output layer alone; Automodel's match_all_linear would adapt it
    assert lora_cfg["match_all_linear"] is False and lora_cfg["exclude_modules"] == ["lm_head"]
    assert lora_cfg["dropout_position"] == "pre"  # PEFT's dropout is on the adapter's input


@pytest.mark.parametrize(("framework", "lora", "says"), [
    ("openrlhf", {"rank": 8}, "model.lora.rank=8"),
    ("slime", {"rank": 8}, "model.lora.rank=8"),
    ("vime", {"rank": 8}, "model.lora.rank=8"),
    ("verl", {"rank": 8, "dropout": 0.1}, "model.lora.dropout=0.1"),
    ("verl", {"rank": 8, "modules_to_save": ["embed_tokens"]}, "model.lora.modules_to_save=['embed_tokens']"),
    ("nemo_rl", {"rank": 8, "modules_to_save": ["embed_tokens"]}, "model.lora.modules_to_save=['embed_tokens']"),
    ("trl", {"rank": 8, "target_modules": ["q_proj", "lm_head"]}, "model.lora.target_modules=['q_proj', 'lm_head']"),
])
def test_what_a_backend_cannot_do_with_lora_is_refused_by_field(framework: str, lora: dict[str, Any],
                                                                  says: str) -> None:
    assert says in refusal(framework, **lora)


@pytest.mark.parametrize(("lora", "says"), [
    ({"rank": 0, "modules_to_save": ["embed_tokens"]}, "only with LoRA on"),
    ({"rank": 8, "modules_to_save": ["q_proj"], "target_modules": ["q_proj", "v_proj"]}, "do not also get adapters"),
    ({"rank": 8, "modules_to_save": ["all-linear"]}, "module names"),
    ({"rank": 8, "modules_to_save": [" embed_tokens"]}, "module names"),
    ({"rank": 8, "target_modules": ["all-linear", "q_proj"]}, "[all-linear] alone"),
    ({"rank": 8, "target_modules": []}, "[all-linear] alone"),
])
def test_a_malformed_lora_setting_is_refused_before_anything_runs(lora: dict[str, Any], says: str,
                                                                    isolated: Path) -> None:
    args = [f"model.lora.{key}={json.dumps(value)}" for key, value in lora.items()]
    out = run_cli("plan", *args, cwd=isolated)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "model.lora." in out.stderr and says in out.stderr


# --- a LoRA run of the embedded task learns on a CPU -----------------------------------------------------------------

@pytest.mark.train
def test_a_lora_run_of_the_embedded_task_learns_training_a_fraction_of_the_weights(tmp_path: Path) -> None:
    # every step runs (no plateau stop): what is measured is learning over the whole run, not when it stalls
    out = run_cli("recipe=grpo_math", *LEARNS, "seed=0", "run.checkpoint_every=100", "logging.progress=false",
                  "logging.plot=false", "eval.stop_after_plateau=null", env={"UNIRL_RUNS_DIR": str(tmp_path / "runs")},
                  cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    [run_dir] = run_dirs(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["accuracy_before"] <= 0.1
    # Learning, judged on the 51,200 training completions rather than the 11 held-out prompts, whose accuracy after
    # 400 steps ranges 1/11 to 7/11 over seeds 0-6 on this CPU (and reached 2/11 for seed 0 on another CPU): the
    # mean total reward of the last fifth of the steps was 1.8x to 3.0x the first fifth's over those seeds.
    rewards = [row["reward/total/mean"] for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
               if "reward/total/mean" in row]
    fifth = len(rewards) // 5
    first, last = sum(rewards[:fifth]) / fifth, sum(rewards[-fifth:]) / fifth
    assert len(rewards) == 400 and last >= 1.5 * first and last >= first + 0.25, (first, last)
    assert summary["accuracy_after"] > summary["accuracy_before"], summary
    # 2 layers x 45,056 adapter weights at rank 32, the 20 x 64 embedding and five 64-wide norms; the base's 124,736
    # weights stay frozen
    assert summary["trainable_parameters"] == 2 * 45_056 + 20 * 64 + 5 * 64
    assert summary["parameters"] - summary["trainable_parameters"] == 124_736
    # a checkpoint holds the adapter and the saved embedding alone, which a resume accepts as complete
    checkpoint = latest_trainer_checkpoint(run_dir / "trl")
    assert checkpoint is not None and checkpoint.global_step >= 100, sorted((run_dir / "trl").iterdir())
    assert (checkpoint.path / "adapter_model.safetensors").is_file()
    assert not (checkpoint.path / "model.safetensors").exists()
    adapter = json.loads((checkpoint.path / "adapter_config.json").read_text())
    assert adapter["r"] == 32 and "embed_tokens" in adapter["modules_to_save"]


def test_modules_to_save_matches_path_ends_whatever_peft_version_is_installed() -> None:
    """The recipe's rule (a name matches every module whose path ends with it) is resolved by unirl: PEFT 0.22 matches
    whole path components only, which would train the final norm alone of the builtin model's five."""
    from peft import LoraConfig, get_peft_model

    from unirl.data.builtin import tiny_model
    from unirl.plugins.trl.runner import modules_matching

    model, _ = tiny_model.build("tiny-arith", 0)
    names = modules_matching(model, ["embed_tokens", "norm"])
    assert names == ["embed_tokens", "input_layernorm", "post_attention_layernorm", "norm"]
    peft_model = get_peft_model(model, LoraConfig(r=32, lora_alpha=64, target_modules="all-linear",
                                                  modules_to_save=names))
    assert sum(p.numel() for p in peft_model.parameters() if p.requires_grad) == 2 * 45_056 + 20 * 64 + 5 * 64
