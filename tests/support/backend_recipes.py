"""Recipes for GPU backends, built as dataclasses (no CLI): the shipped defaults with GPUs and a rollout engine."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from unirl.recipe.schema import AlgorithmConfig, DataConfig, EvalConfig, Recipe, ResourcesConfig, RolloutConfig
from unirl.rewards.spec import RewardPolicy


def gpu_recipe(framework: str, *, engine: str = "vllm", nodes: int = 1, gpus: int = 8,
               algorithm: dict[str, Any] | None = None, rollout: dict[str, Any] | None = None,
               data: dict[str, Any] | None = None, options: dict[str, Any] | None = None, **top: Any) -> Recipe:
    """A recipe a GPU backend accepts unless a change says otherwise."""
    if framework == "openrlhf" and "eval" not in top:
        top["eval"] = EvalConfig(before_training=False)  # OpenRLHF 0.11 cannot evaluate before training
    return Recipe(
        algorithm=replace(AlgorithmConfig(steps=10, prompts_per_step=8, samples_per_prompt=8), **(algorithm or {})),
        rollout=replace(RolloutConfig(engine=engine), **(rollout or {})),
        resources=ResourcesConfig(device="cuda", nodes=nodes, gpus_per_node=gpus),
        data=replace(DataConfig(chat_template=True), **(data or {})),
        reward_policy=RewardPolicy(on_error="fallback"),
        framework={"name": framework, **(options or {})},
        **top,
    )


def preset(name: str, **changes: Any) -> dict[str, Any]:
    """The ``algorithm`` changes that preset ``name`` (conf/algorithm/NAME.yaml) makes, plus ``changes``."""
    from unirl.recipe.algorithm_presets import preset_fields

    return {**preset_fields(name), **changes}
