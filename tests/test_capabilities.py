"""Capabilities and plans as data: unirl decides by a backend's typed capabilities (never by parsing its prose), and a
native backend is its declarations plus the few plan steps that differ (here: only a command)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import unirl
from tests.support.backend_recipes import gpu_recipe
from unirl.backend.advise import Situation, advise
from unirl.backend.contract import Capabilities, Mapping
from unirl.backend.native import NativeFramework
from unirl.errors import FieldError, RecipeInvalid
from unirl.host.manager import build_host
from unirl.host.registry import Registry
from unirl.plugins.slurm.scheduler import ray_based
from unirl.plugins.verl.framework import VerlFramework
from unirl.recipe.schema import AlgorithmConfig, Recipe
from unirl.rewards.spec import RewardEntry, RewardPolicy, RewardRuntimeSpec


class ToyBackend(NativeFramework):
    """A third party's native backend. Its prose would mislead a substring test: the modes never say "async", the
    multi-node text mentions Ray although it uses none."""

    name = "toy"
    description = "a third-party native backend"
    capabilities = Capabilities(
        algorithms=("grpo",), rollout_engines=("hf", "vllm", "sglang"), placement=("shares the GPUs in turn",),
        modes=("overlapping rollouts",), training_backends=("its own",), multi_node="no Ray: its own launcher",
        custom_reward="a module path", runs_on_cpu=True, async_rollouts=True, colocated_rollouts=True,
        can_exclude_rewards=True, tested_version="1.0")
    mapping = (
        Mapping("algorithm.lr", "lr", lambda r: r.algorithm.lr),
        Mapping("algorithm.loss_aggregation", "agg", lambda r: r.algorithm.loss_aggregation,
                allowed=("seq_mean_token_mean",)),
    )
    plugin_package = "toy_plugin"
    export_format = "openrlhf_jsonl"

    def command(self, recipe: Recipe, native: dict[str, Any], version: str) -> list[str]:
        return ["toy-train", *(f"--{key}={value}" for key, value in native.items())]


class ToyPlugin:
    @unirl.hookimpl
    def unirl_add_frameworks(self, registry: Registry) -> None:
        registry.add(ToyBackend())


def test_a_native_backend_needs_only_its_declarations_and_a_command() -> None:
    plan = ToyBackend().plan(Recipe(framework={"name": "toy", "overrides": {"lr": 0.5}}))
    assert plan.command == ["toy-train", "--lr=0.5", "--agg=seq_mean_token_mean"]  # the override applied last
    assert plan.env["UNIRL_REWARD_SPEC"] == "{run_dir}/reward_spec.json"
    assert [(d.split, d.format, d.path, d.rows) for d in plan.data] == [
        ("train", "openrlhf_jsonl", "{run_dir}/data/train.jsonl", 200 * 8),  # steps x prompts_per_step
        ("eval", "openrlhf_jsonl", "{run_dir}/data/eval.jsonl", None)]
    assert "the builtin model is written to {run_dir}/model at launch" in plan.notes and "model/" in plan.files
    assert [(row.recipe_field, row.value) for row in plan.mapping[-2:]] == [
        ("framework.overrides.lr", 0.5), ("reward_policy.on_error", "exclude")]  # auto: this backend can exclude


def test_what_a_mapping_row_allows_is_refused_otherwise_naming_the_allowed_values() -> None:
    recipe = Recipe(algorithm=replace(AlgorithmConfig(), loss_aggregation="token_mean"))
    with pytest.raises(RecipeInvalid, match=r"algorithm\.loss_aggregation='token_mean': not supported by "
                                            r"toy; toy supports seq_mean_token_mean"):
        ToyBackend().plan(recipe)


def test_exclude_follows_the_backends_declared_capability_not_its_name() -> None:
    excluding = replace(gpu_recipe("verl"), reward_policy=RewardPolicy(on_error="exclude"))
    with pytest.raises(RecipeInvalid, match=r"reward_policy\.on_error='exclude': not supported by verl"):
        VerlFramework().plan(excluding)
    ToyBackend().plan(replace(excluding, framework={"name": "toy"}))  # another native backend that can
    auto = VerlFramework().plan(replace(gpu_recipe("verl"), reward_policy=RewardPolicy(on_error="auto")))
    assert auto.mapping[-1].value == "fallback"
    assert RewardPolicy(on_error="auto").resolved(True).on_error == "exclude"
    spec = RewardRuntimeSpec((RewardEntry("r", "m:f"),), RewardPolicy(on_error="exclude"))
    spec.check(can_exclude=True)
    with pytest.raises(FieldError, match=r"reward_policy\.on_error='exclude': fallback or abort on verl"):
        spec.check(can_exclude=False, backend="verl")


def test_advise_weighs_typed_capabilities_never_their_prose() -> None:
    host = build_host(extra_plugins=[ToyPlugin()])
    result = advise(host, Situation(gpus_per_node=8, nodes=2, model_size_b=7, need_async=True))
    toy = next(v for v in result["ranking"] if v["framework"] == "toy")
    assert "asynchronous rollouts (overlapping rollouts)" in toy["reasons"]
    assert "colocated rollout and training on the same GPUs (shares the GPUs in turn)" in toy["reasons"]
    assert not any(r.startswith("multi-node") for r in toy["reasons"])  # "Ray" in its prose is not a Ray cluster
    verl = next(v for v in result["ranking"] if v["framework"] == "verl")
    assert any(r.startswith("multi-node: Ray cluster") for r in verl["reasons"])


def test_slurm_starts_a_ray_cluster_only_for_backends_that_declare_one() -> None:
    assert ray_based("verl") and ray_based("openrlhf") and ray_based("nemo_rl") and ray_based("slime")
    assert not ray_based("trl")
