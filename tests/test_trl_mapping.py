"""The TRL mapping table: honest batch semantics, TRL's defaults overridden, unsupported fields refused,
and every generated config accepted by TRL's own GRPOConfig."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from unirl.backend.plan import LaunchPlan
from unirl.errors import RecipeInvalid, UnirlError
from unirl.host.manager import get_host
from unirl.host.planning import prepare_run
from unirl.plugins.trl.framework import TrlFramework, launch_args
from unirl.recipe.schema import AlgorithmConfig, Recipe, ResourcesConfig, RolloutConfig, RunSection


def plan_for(**algorithm: object) -> LaunchPlan:
    recipe = Recipe(algorithm=replace(AlgorithmConfig(), **algorithm))
    return TrlFramework().plan(recipe)


def test_completions_not_prompts_fill_trl_batches() -> None:
    args = plan_for(prompts_per_step=8, samples_per_prompt=16).native_config["grpo_config"]
    assert args["num_generations"] == 16
    assert args["per_device_train_batch_size"] == 128  # 8 prompts x 16 completions
    assert args["gradient_accumulation_steps"] == 1
    assert args["steps_per_generation"] == 1


def test_mini_and_micro_batches_become_accumulation_and_generation_spread() -> None:
    args = plan_for(prompts_per_step=8, samples_per_prompt=16, mini_batches_per_step=2, micro_batch_size=16,
                    steps=10).native_config["grpo_config"]
    # 128 completions per step, 2 updates of 64, each as 4 micro-batches of 16.
    assert args["per_device_train_batch_size"] == 16
    assert args["gradient_accumulation_steps"] == 4
    assert args["steps_per_generation"] == 8
    assert args["max_steps"] == 20  # TRL counts optimizer updates
    generation = args["per_device_train_batch_size"] * args["steps_per_generation"]
    assert generation == 8 * 16


def test_trl_defaults_that_are_wrong_for_unirl_are_set_explicitly() -> None:
    args = plan_for(lr=3e-4).native_config["grpo_config"]
    assert args["learning_rate"] == 3e-4
    assert args["bf16"] is False  # TRL turns bf16 on even on CPU
    assert args["gradient_checkpointing"] is False
    assert args["logging_steps"] == 1
    assert args["report_to"] == "none"


@pytest.mark.parametrize(("aggregation", "loss_type"), [("token_mean", "dapo"), ("seq_mean_token_mean", "grpo"),
                                                         ("seq_mean_token_sum_norm", "dr_grpo")])
def test_loss_aggregation_names_map_to_trl_loss_types(aggregation: str, loss_type: str) -> None:
    assert plan_for(loss_aggregation=aggregation).native_config["grpo_config"]["loss_type"] == loss_type


def test_kl_estimator_trl_cannot_honour_is_refused_not_dropped() -> None:
    refused = r"algorithm\.kl_estimator='k1': not supported by trl; trl supports only k3"
    with pytest.raises(RecipeInvalid, match=refused):
        plan_for(kl_coef=0.04, kl_estimator="k1")
    plan_for(kl_coef=0.0, kl_estimator="k1")  # no KL term: the estimator is irrelevant
    assert plan_for(kl_coef=0.04, kl_estimator="k3").native_config["grpo_config"]["beta"] == 0.04


def test_sglang_rollouts_are_refused_with_what_trl_supports() -> None:
    with pytest.raises(RecipeInvalid, match=r"rollout\.engine='sglang': not supported by trl; trl supports hf"):
        TrlFramework().plan(Recipe(rollout=RolloutConfig(engine="sglang")))


def test_vllm_server_mode_maps_from_colocation() -> None:
    args = TrlFramework().plan(Recipe(rollout=RolloutConfig(engine="vllm", colocated=False, tensor_parallel=2))
                               ).native_config["grpo_config"]
    assert args["use_vllm"] is True and args["vllm_mode"] == "server" and args["vllm_tensor_parallel_size"] == 2


def test_raw_overrides_are_applied_last_and_shown_in_the_mapping() -> None:
    recipe = Recipe(framework={"name": "trl", "overrides": {"top_k": 5, "learning_rate": 1e-5}})
    plan = TrlFramework().plan(recipe)
    assert plan.native_config["grpo_config"]["top_k"] == 5
    assert plan.native_config["grpo_config"]["learning_rate"] == 1e-5
    assert any(row.recipe_field == "framework.overrides.top_k" for row in plan.mapping)


def test_every_mapped_field_is_a_real_grpoconfig_argument() -> None:
    from trl import GRPOConfig

    fields = set(GRPOConfig.__dataclass_fields__)
    args = plan_for().native_config["grpo_config"]
    assert set(args) - {"gradient_checkpointing"} <= fields


@pytest.mark.parametrize(
    "algorithm",
    [
        {},
        {"mini_batches_per_step": 4, "micro_batch_size": 8, "epochs_per_batch": 2},
        {"loss_aggregation": "seq_mean_token_sum_norm", "advantage_norm": "none", "clip_high": 0.28},
        {"kl_coef": 0.01, "lr_schedule": "cosine", "warmup_steps": 5, "entropy_coef": 0.01},
    ],
)
def test_trl_accepts_every_generated_config(algorithm: dict) -> None:
    plan = plan_for(**algorithm)
    TrlFramework().validate(plan)  # constructs trl.GRPOConfig: TRL's own checks


def test_cuda_request_without_a_gpu_fails_before_launch() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    plan = TrlFramework().plan(Recipe(resources=ResourcesConfig(device="cuda", gpus_per_node=1)))
    with pytest.raises(Exception, match="expects a CUDA GPU and torch sees none"):
        launch_args(plan)


def test_launches_this_plugin_cannot_make_yet_are_refused_not_ignored() -> None:
    with pytest.raises(RecipeInvalid, match=r"resources\.nodes=2"):
        TrlFramework().plan(Recipe(resources=ResourcesConfig(nodes=2, gpus_per_node=1)))
    with pytest.raises(RecipeInvalid, match=r"resources\.gpus_per_node=4: not supported by trl"):
        TrlFramework().plan(Recipe(resources=ResourcesConfig(gpus_per_node=4)))


def test_resume_plans_and_is_refused_before_launch_when_the_run_directory_has_no_checkpoint(tmp_path: Path) -> None:
    plan = TrlFramework().plan(Recipe(run=RunSection(resume=True, checkpoint_every=5)))
    with pytest.raises(UnirlError, match=r"run\.resume=true: no complete checkpoint in .*trl \(run directory "):
        prepare_run(get_host(), plan, tmp_path)
