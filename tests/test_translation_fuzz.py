"""Fuzzing the translation: every recipe unirl accepts yields a plan the backend accepts, and every recipe a
backend cannot run is refused by unirl, with a field-naming error, before anything launches.

Hypothesis draws recipes across the batch, placement, algorithm and data fields. A draw either fails unirl's
validation or the plugin's ``plan`` with a :class:`FieldError` (refused before launch), or produces a plan, which
must then pass the plugin's key schema here and, for verl and OpenRLHF, the backend's own composition, parser
and checks in its own venv (one interpreter for the whole batch). A plugin crash is a failure too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.backend_recipes import gpu_recipe
from tests.support.helpers import point_at_backend
from unirl.backend.plan import LaunchPlan
from unirl.errors import FieldError, RecipeInvalid, UnirlError
from unirl.host.manager import get_host
from unirl.recipe.algorithm_presets import preset_fields
from unirl.recipe.schema import ALGORITHMS, LoraConfig, Recipe, recipe_from_dict, validate

BACKENDS = ("verl", "openrlhf", "nemo_rl", "slime", "vime")
# Options a backend needs that are not about the recipe (slime/vime need Megatron's architecture flags).
MEGATRON_TINY = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "128",
                 "--swiglu", "--normalization", "RMSNorm", "--use-rotary-position-embeddings", "--vocab-size", "32"]
OPTIONS: dict[str, dict[str, Any]] = {"slime": {"model_args": MEGATRON_TINY}, "vime": {"model_args": MEGATRON_TINY}}


def mostly(common: Any, *others: Any) -> st.SearchStrategy[Any]:
    """The common value three times in four: each backend refuses some rare values, and a draw must often pass
    every field at once to reach the backend's own checks."""
    return st.sampled_from([common, common, common, *others]) if len(others) <= 1 else st.one_of(
        st.just(common), st.just(common), st.just(common), st.sampled_from(list(others)))


# The values of the fields that define an algorithm (conf/algorithm/*.yaml), drawn as variations on a preset.
VARIATIONS: dict[str, tuple[Any, ...]] = {
    "advantage_baseline": ("group_mean", "leave_one_out", "none"),
    "advantage_norm": ("group", "batch", "batch_whiten", "none"),
    "loss_aggregation": ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"),
    "kl_estimator": ("k1", "k2", "k3", "low_var_kl"),
    "kl_placement": ("loss", "reward"),
    "importance_sampling_level": ("token", "sequence"),
    "clip_high": (None, 0.28),
    "dual_clip": (None, 3.0),
    "reward_clip": (None, 10.0),
    "dynamic_sampling": (False, True),
    "overlong_filter": (False, True),
    "overlong_buffer": (None, 4),
    "loss_normalizer": (None, 128),
}


@st.composite
def recipes(draw: st.DrawFn, framework: str, preset: str | None = None) -> Recipe:
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    colocated = draw(st.booleans())
    native_engine = get_host().frameworks.get(framework).capabilities.rollout_engines[0]
    preset_name = preset or draw(mostly("grpo", *(name for name in ALGORITHMS if name != "grpo")))
    defining = {field: value for field, value in preset_fields(preset_name).items() if field != "name"}
    # a named algorithm with at most two variations: each backend refuses some rarer values, and a draw must often
    # pass every field at once to reach the backend's own checks
    for field in draw(st.lists(st.sampled_from(sorted(VARIATIONS)), max_size=2, unique=True)):
        defining[field] = draw(st.sampled_from([v for v in VARIATIONS[field] if v != defining[field]]))
    recipe = gpu_recipe(
        framework, engine=draw(mostly(native_engine, *sorted({"vllm", "sglang", "hf"} - {native_engine}))),
        nodes=draw(st.sampled_from([1, 2])),
        gpus=gpus,
        algorithm={
            "name": preset_name,
            **defining,
            "steps": draw(st.integers(1, 50)),
            "prompts_per_step": draw(st.sampled_from([1, 2, 4, 8, 16, 32])),
            "samples_per_prompt": draw(st.sampled_from([2, 4, 8, 16])),
            "mini_batches_per_step": draw(st.sampled_from([1, 2, 4])),
            "micro_batch_size": draw(st.sampled_from([None, 1, 2, 4, 8])),
            "epochs_per_batch": draw(mostly(1, 2)),
            "kl_coef": draw(st.sampled_from([0.0, 0.001, 0.05])),
            "lr_schedule": draw(mostly("constant", "linear", "cosine")),
            "warmup_steps": draw(mostly(0, 2, 5)),
            "entropy_coef": draw(mostly(0.0, 0.001)),
            "max_new_tokens": draw(st.sampled_from([16, 256])),
            "rollout_correction": draw(mostly("none", "token", "sequence")),
            "min_lr_ratio": draw(mostly(0.0, 0.1)),
        },
        rollout={"colocated": colocated, "tensor_parallel": draw(st.sampled_from([1, 2])),
                 "gpus": None if colocated else draw(st.sampled_from([None, 1, 2, 4]))},
        data={"chat_template": draw(mostly(True, False)), "max_prompt_tokens": draw(mostly(None, 512))},
        options=OPTIONS.get(framework),
    )
    lora = draw(st.sampled_from([None, None, None, None, None, (8, ["all-linear"], []),
                                 (16, ["q_proj", "v_proj"], []), (32, ["all-linear"], ["embed_tokens", "norm"])]))
    if lora:
        rank, targets, saved = lora
        recipe = replace(recipe, model=replace(recipe.model, lora=LoraConfig(
            rank=rank, alpha=2 * rank, target_modules=targets, modules_to_save=saved)))
    return replace(recipe, eval=replace(recipe.eval, greedy=draw(mostly(False, True))))


def outcome(framework: str, recipe: Recipe) -> LaunchPlan | None:
    """The plan, or None when unirl refused the recipe with a field-naming error (before any launch)."""
    host = get_host()
    try:
        validate(recipe, known_rewards=host.rewards.names())
        return host.frameworks.get(framework).plan(recipe)
    except RecipeInvalid as exc:
        assert exc.problems and all(p.field for p in exc.problems)
        return None
    except FieldError as exc:
        assert exc.field
        return None


def accepted_plans(framework: str, examples: int, preset: str | None = None) -> list[LaunchPlan]:
    """Plans for every drawn recipe unirl accepts (around ``preset`` when given); each must already fit the plugin's
    key schema."""
    plans: list[LaunchPlan] = []

    @settings(max_examples=examples, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(recipes(framework, preset))
    def draw(recipe: Recipe) -> None:
        plan = outcome(framework, recipe)
        if plan is not None:
            backend = get_host().frameworks.get(framework)
            problems = backend.schema_problems(plan) if hasattr(backend, "schema_problems") else []
            assert problems == [], (recipe, problems)
            plans.append(plan)

    draw()
    return plans


@pytest.mark.parametrize("framework", BACKENDS)
def test_every_accepted_recipe_fits_the_backends_key_schema(framework: str) -> None:
    plans = accepted_plans(framework, 500)
    assert len(plans) >= 5, f"the strategy should reach accepted recipes for {framework}, got {len(plans)}"


# Marked at collection (a marker applied while the test runs is too late for -m to deselect it).
@pytest.mark.parametrize("framework", [pytest.param(name, marks=[getattr(pytest.mark, name), pytest.mark.slow])
                                       for name in ("verl", "openrlhf")])
def test_every_accepted_recipe_passes_the_backends_own_checks(framework: str, monkeypatch: pytest.MonkeyPatch) -> None:
    point_at_backend(monkeypatch, framework)
    plans = accepted_plans(framework, 500)
    assert len(plans) >= 20
    results = get_host().frameworks.get(framework).check_in_backend(plans)
    rejected = [(plan.recipe["algorithm"], plan.recipe["rollout"], plan.recipe["resources"], r["problems"])
                for plan, r in zip(plans, results, strict=True) if r["problems"]]
    assert rejected == [], f"{len(rejected)} of {len(plans)} plans unirl accepted were rejected by {framework}"


def test_every_accepted_trl_recipe_is_taken_by_trls_own_config_class(tmp_path: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL runs here: each accepted plan's arguments construct TRL 1.16's own GRPOConfig or RLOOConfig (the one the
    plan names), with the device decided for this CPU as a launch would (bf16 off, use_cpu on) and the plan's world
    size as the process count (the configs derive the generation batch from it: grpo_config.py:1096)."""
    from transformers import TrainingArguments

    from unirl.plugins.trl.framework import trainer_classes

    plans = accepted_plans("trl", 150) + accepted_plans("trl", 60, preset="rloo")
    assert len(plans) >= 20 and {p.native_config["trainer"] for p in plans} == {"GRPOTrainer", "RLOOTrainer"}
    for plan in plans:
        args = {**plan.native_config["trainer_config"], "use_cpu": True, "bf16": False, "fp16": False}
        args.pop("fsdp", None), args.pop("fsdp_config", None), args.pop("deepspeed", None)  # multi-GPU only
        world = recipe_from_dict(plan.recipe).world_size
        monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self, n=world: n))
        trainer_classes(plan)[1](output_dir=str(tmp_path), **args)


def test_a_plugin_error_is_a_unirl_error_never_a_crash() -> None:
    """A sanity check of the property above: an impossible recipe is refused with field names, not a traceback."""
    recipe = gpu_recipe("verl", gpus=3, algorithm={"prompts_per_step": 1, "samples_per_prompt": 2})
    with pytest.raises(UnirlError, match="do not split evenly over 3 devices"):
        validate(recipe, known_rewards=["math_answer"])
