"""Recipe fields that document themselves: one declaration (help, unit, range, choices) drives the generic
validation pass, ``unirl explain FIELD`` and the field list of ``unirl plan --help``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from tests.support.cli import run_cli
from unirl.errors import RecipeInvalid
from unirl.recipe.fields import schema_fields
from unirl.recipe.schema import (
    BUILTIN_ROLLOUT_ENGINES,
    AlgorithmConfig,
    LoggingConfig,
    Recipe,
    RolloutConfig,
    validate,
)

REWARDS = ["math_answer"]


def problems(recipe: Recipe, known_engines: Sequence[str] = BUILTIN_ROLLOUT_ENGINES) -> list[str]:
    try:
        validate(recipe, known_rewards=REWARDS, known_engines=known_engines)
    except RecipeInvalid as exc:
        return [str(p) for p in exc.problems]
    return []


def with_algorithm(**changes: Any) -> Recipe:
    return Recipe(algorithm=replace(AlgorithmConfig(), **changes))


def test_every_recipe_field_says_what_it_means() -> None:
    undocumented = [f.name for f in schema_fields(Recipe) if f.doc is None or not f.doc.help]
    assert undocumented == []


@pytest.mark.parametrize(("recipe", "message"), [
    (with_algorithm(clip_low=1.0), "algorithm.clip_low=1.0: must be in (0, 1)"),
    (with_algorithm(top_p=0.0), "algorithm.top_p=0.0: must be in (0, 1]"),
    (with_algorithm(samples_per_prompt=0), "algorithm.samples_per_prompt=0: must be >= 1"),
    (with_algorithm(micro_batch_size=0), "algorithm.micro_batch_size=0: must be >= 1, or null"),
    (with_algorithm(steps=10**10), "algorithm.steps=10000000000: must be at most 10000000; is this a typo?"),
    (with_algorithm(kl_estimator="k4"), "algorithm.kl_estimator='k4': one of ['k1', 'k2', 'k3', 'low_var_kl']"),
    (Recipe(logging=LoggingConfig(trajectories_every=0)), "logging.trajectories_every=0: must be >= 1"),
])
def test_a_refusal_names_the_field_the_value_and_what_is_allowed(recipe: Recipe, message: str) -> None:
    assert message in problems(recipe)


def test_a_value_is_refused_once_for_its_first_problem() -> None:
    # NaN fails "> 0" too, but the finite check says what is wrong.
    assert problems(with_algorithm(lr=float("nan"))) == [
        "algorithm.lr=nan: must be a finite number (NaN and infinity are not allowed)"]


def test_every_problem_of_every_field_is_reported_together() -> None:
    found = problems(replace(with_algorithm(lr=0.0, temperature=float("inf"), lr_schedule="step"),
                             rollout=RolloutConfig(gpu_memory_fraction=1.5)))
    assert [p.split("=")[0] for p in found] == ["algorithm.lr", "algorithm.lr_schedule", "algorithm.temperature",
                                                "rollout.gpu_memory_fraction"]


def test_rollout_engines_are_the_ones_plugins_registered() -> None:
    mine = Recipe(rollout=RolloutConfig(engine="my_engine"))
    assert problems(mine) == ["rollout.engine='my_engine': one of ['hf', 'vllm', 'sglang', 'auto']"]
    assert problems(mine, known_engines=["hf", "my_engine"]) == []
    hf = Recipe(rollout=RolloutConfig(engine="hf"))
    assert problems(hf, known_engines=["my_engine"]) == ["rollout.engine='hf': one of ['my_engine', 'auto']"]
    assert problems(Recipe(), known_engines=["my_engine"]) == []  # auto: each backend picks its own engine


def test_explain_says_what_a_field_means_and_what_each_backend_receives() -> None:
    out = run_cli("explain", "algorithm.lr")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert text.startswith("algorithm.lr: float, default 1e-06\n")
    assert "Learning rate, per optimizer update." in text
    assert "allowed: > 0; above 1 is refused as a likely typo" in text
    for backend, key, default in [("trl", "learning_rate", "1e-06"), ("verl", "actor_rollout_ref.actor.optim.lr",
                                                                       "1e-06"),
                                  ("openrlhf", "actor.adam.lr", "1e-06"),
                                  ("nemo_rl", "policy.optimizer.kwargs.lr", "5e-06"), ("slime", "--lr", "1e-06")]:
        line = next(line for line in text.splitlines() if line.strip().startswith(backend))
        assert f"{key}  (default {default})" in line, line


def test_explain_shows_what_each_backend_accepts_and_which_backends_get_no_key() -> None:
    result = json.loads(run_cli("explain", "algorithm.loss_aggregation", "--json").stdout)
    assert result["field"]["choices"] == ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
    assert result["backends"]["openrlhf"][0]["accepts"] == "token_mean, seq_mean_token_mean"
    assert result["backends"]["trl"][0]["key"] == "loss_type"
    untranslated = json.loads(run_cli("explain", "reward_policy.timeout_s", "--json").stdout)
    assert untranslated["field"]["help"].startswith("Per reward call, in seconds")
    assert all(rows == [] for rows in untranslated["backends"].values())  # unirl's own reward runtime uses it


def test_explain_a_group_lists_its_fields_and_a_typo_names_the_closest_field() -> None:
    out = run_cli("explain", "rollout")
    assert out.returncode == 0 and "rollout.tensor_parallel = 1" in out.stdout
    out = run_cli("explain", "algorithm.lrr")
    assert out.returncode == 2
    assert "algorithm.lrr: no such recipe field; did you mean algorithm.lr?" in out.stderr


def test_plan_help_lists_every_field_with_its_default_and_allowed_values() -> None:
    out = run_cli("plan", "--help")
    assert out.returncode == 0
    assert "algorithm.lr = 1e-06  [> 0; above 1 is refused as a likely typo; finite]  Learning rate" in out.stdout
    assert "rollout.engine = 'auto'  [one of the registered rollout engines" in out.stdout
    assert "resources.gpus_per_node = 'auto'  [>= 0; above 1024 is refused as a likely typo; or auto: the GPUs" \
        in out.stdout
    assert all(f"  {f.name} = " in out.stdout for f in schema_fields(Recipe))
