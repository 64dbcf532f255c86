"""The slime and vime plugins: golden plans, refusals naming the field, the key schema, and the reward path.

Goldens live in tests/golden/<backend>/<variant>.json; ``UNIRL_UPDATE_GOLDEN=1`` rewrites them.
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.support.golden import assert_golden
from unirl.backend.plan import LaunchPlan
from unirl.errors import RecipeInvalid, UnirlError
from unirl.plugins.slime.framework import SlimeFamily, SlimeFramework, VimeFramework
from unirl.plugins.slime.schema import flags_for, schema_problems
from unirl.recipe.schema import Recipe, recipe_from_dict

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden"
QWEN25_05B = ["--swiglu", "--num-layers", "24", "--hidden-size", "896", "--ffn-hidden-size", "4864",
              "--num-attention-heads", "14", "--use-rotary-position-embeddings", "--disable-bias-linear",
              "--add-qkv-bias", "--normalization", "RMSNorm", "--norm-epsilon", "1e-6", "--rotary-base", "1000000",
              "--group-query-attention", "--num-query-groups", "2", "--vocab-size", "151936"]
BACKENDS: dict[str, tuple[SlimeFamily, str]] = {"slime": (SlimeFramework(), "sglang"),
                                                "vime": (VimeFramework(), "vllm")}


def shipped(backend: str, **framework: object) -> Recipe:
    """recipes/grpo_math.yaml on 8 GPUs, chat template on, the backend's engine, Qwen2.5-0.5B's model args."""
    shipped = REPO / "unirl" / "recipe" / "recipes" / "grpo_math.yaml"
    recipe = recipe_from_dict(OmegaConf.to_container(OmegaConf.load(shipped)))
    engine = BACKENDS[backend][1]
    return replace(recipe, resources=replace(recipe.resources, gpus_per_node=8),
                   data=replace(recipe.data, chat_template=True), rollout=replace(recipe.rollout, engine=engine),
                   framework={"name": backend, "model_args": QWEN25_05B, **framework})


def variant(backend: str, name: str) -> Recipe:
    recipe = shipped(backend)
    if name == "kl_minibatches":
        return replace(recipe, algorithm=replace(recipe.algorithm, kl_coef=0.01, kl_estimator="low_var_kl",
                                                 mini_batches_per_step=4, micro_batch_size=4, clip_high=0.28,
                                                 loss_aggregation="seq_mean_token_mean", advantage_norm="none"))
    if name == "disaggregated":
        return replace(recipe, rollout=replace(recipe.rollout, colocated=False, tensor_parallel=2,
                                               gpu_memory_fraction=0.8), run=replace(recipe.run, checkpoint_every=100))
    return recipe


def plan_of(backend: str, recipe: Recipe) -> LaunchPlan:
    return BACKENDS[backend][0].plan(recipe)


def args_of(plan: LaunchPlan) -> list[str]:
    return plan.native_config["args"]


def value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("name", ["shipped", "kl_minibatches", "disaggregated"])
def test_plan_matches_golden(backend: str, name: str) -> None:
    plan = plan_of(backend, variant(backend, name))
    BACKENDS[backend][0].validate(plan)  # the key schema accepts every generated plan
    assert_golden(GOLDEN / backend / f"{name}.json", plan.to_json() + "\n")


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_plan_is_pure(backend: str) -> None:
    assert plan_of(backend, shipped(backend)).to_json() == plan_of(backend, shipped(backend)).to_json()


def test_batch_semantics_count_prompts_then_completions() -> None:
    args = args_of(plan_of("slime", variant("slime", "kl_minibatches")))
    assert value(args, "--rollout-batch-size") == "16"  # prompts
    assert value(args, "--n-samples-per-prompt") == "8"
    assert value(args, "--global-batch-size") == "32"  # 16 x 8 completions / 4 updates
    assert value(args, "--num-steps-per-rollout") == "4"
    assert value(args, "--micro-batch-size") == "4"
    assert "--use-kl-loss" in args and value(args, "--kl-loss-coef") == "0.01"
    assert value(args, "--kl-loss-type") == "low_var_kl"
    assert value(args, "--eps-clip-high") == "0.28"
    assert "--calculate-per-token-loss" not in args  # seq_mean_token_mean is slime's default
    assert "--disable-grpo-std-normalization" in args


def test_shipped_recipe_flags() -> None:
    plan = plan_of("slime", shipped("slime"))
    args = args_of(plan)
    assert args[:len(QWEN25_05B)] == QWEN25_05B
    assert "--colocate" in args and "--rollout-num-gpus" not in args
    assert "--apply-chat-template" in args and "--calculate-per-token-loss" in args
    assert "--use-kl-loss" not in args  # kl_coef 0: no reference model term
    assert value(args, "--prompt-data") == "{run_dir}/data/train.jsonl"
    assert value(args, "--hf-checkpoint") == "{run_dir}/model"  # builtin model, written at launch
    assert value(args, "--sglang-mem-fraction-static") == "0.5"
    assert value(args, "--save-interval") == "400"  # checkpoint_every 0: at the end
    assert args[args.index("--eval-prompt-data") + 1:args.index("--eval-prompt-data") + 3] == [
        "eval", "{run_dir}/data/eval.jsonl"]
    assert plan.command[:2] == ["bash", "-c"] and "exec python3 train.py --swiglu" in plan.command[2]
    assert plan.command[2].startswith("cd /root/slime && export PYTHONPATH=")
    assert [(d.split, d.format, d.rows) for d in plan.data] == [("train", "slime_jsonl", 400 * 16),
                                                              ("eval", "slime_jsonl", None)]
    assert plan.env["UNIRL_REWARD_SPEC"] == "{run_dir}/reward_spec.json"


def test_vime_swaps_only_the_engine_rows() -> None:
    slime, vime = args_of(plan_of("slime", shipped("slime"))), args_of(plan_of("vime", shipped("vime")))
    assert value(vime, "--vllm-gpu-memory-utilization") == "0.5" and "--sglang-mem-fraction-static" not in vime
    assert value(vime, "--custom-rm-path") == "unirl.adapters.vime.reward"
    strip = {"--sglang-mem-fraction-static", "--vllm-gpu-memory-utilization", "--custom-rm-path"}

    def common(args: list[str]) -> list[str]:
        out, skip = [], False
        for token in args:
            if skip:
                skip = False
            elif token in strip:
                skip = True
            else:
                out.append(token)
        return out

    assert common(slime) == common(vime)
    assert plan_of("vime", shipped("vime")).command[2].startswith("cd /root/vime && ")


def test_disaggregated_splits_gpus_between_training_and_rollout() -> None:
    args = args_of(plan_of("slime", variant("slime", "disaggregated")))
    assert "--colocate" not in args
    assert value(args, "--rollout-num-gpus") == "4" and value(args, "--actor-num-gpus-per-node") == "4"
    assert value(args, "--rollout-num-gpus-per-engine") == "2"
    assert value(args, "--save-interval") == "100"

    def with_rollout_gpus(count: int) -> Recipe:
        recipe = variant("slime", "disaggregated")
        return replace(recipe, rollout=replace(recipe.rollout, gpus=count))

    args = args_of(plan_of("slime", with_rollout_gpus(6)))
    assert value(args, "--rollout-num-gpus") == "6" and value(args, "--actor-num-gpus-per-node") == "2"
    # 128 completions per update do not split over the 6 training GPUs that 2 rollout GPUs would leave
    with pytest.raises(RecipeInvalid, match=r"algorithm\.micro_batch_size=None: 128 completions per update"):
        plan_of("slime", with_rollout_gpus(2))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(("change", "field", "supported"), [
    (lambda r: replace(r, algorithm=replace(r.algorithm, loss_aggregation="seq_mean_token_sum_norm")),
     "algorithm.loss_aggregation", "token_mean"),
    (lambda r: replace(r, algorithm=replace(r.algorithm, advantage_norm="batch")), "algorithm.advantage_norm",
     "group_mean+group, group_mean+none"),
    (lambda r: replace(r, algorithm=replace(r.algorithm, epochs_per_batch=2)), "algorithm.epochs_per_batch", "1"),
    (lambda r: replace(r, data=replace(r.data, max_prompt_tokens=256)), "data.max_prompt_tokens", "null only"),
    (lambda r: replace(r, model=replace(r.model, dtype="float32")), "model.dtype", "bfloat16"),
    (lambda r: replace(r, model=replace(r.model, path="Qwen/Qwen2.5-0.5B")), "model.path", "local Hugging Face"),
    (lambda r: replace(r, rollout=replace(r.rollout, engine="hf")), "rollout.engine", ""),
    (lambda r: replace(r, resources=replace(r.resources, gpus_per_node=0)), "resources.gpus_per_node", "GPUs"),
    (lambda r: replace(r, rollout=replace(r.rollout, tensor_parallel=3)), "rollout.tensor_parallel", "divide"),
], ids=["loss_aggregation", "advantage_norm", "epochs", "max_prompt_tokens", "dtype", "hub_model", "engine",
        "no_gpu", "tensor_parallel"])
def test_unsupported_fields_are_refused_by_name(backend: str, change, field: str, supported: str) -> None:
    with pytest.raises(RecipeInvalid) as caught:
        plan_of(backend, change(shipped(backend)))
    problems = [p for p in caught.value.problems if p.field == field]
    assert problems, str(caught.value)
    assert supported in str(problems[0])


def test_the_other_engine_is_refused_with_what_each_supports() -> None:
    with pytest.raises(RecipeInvalid, match=r"rollout\.engine='vllm': not supported by slime; slime supports sglang"):
        plan_of("slime", replace(shipped("slime"), rollout=replace(shipped("slime").rollout, engine="vllm")))
    with pytest.raises(RecipeInvalid, match=r"rollout\.engine='sglang': not supported by vime; vime supports vllm"):
        plan_of("vime", replace(shipped("vime"), rollout=replace(shipped("vime").rollout, engine="sglang")))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_model_args_are_derived_else_required_and_point_at_the_model_scripts(backend: str, tmp_path: Path) -> None:
    recipe = replace(shipped(backend), framework={"name": backend})
    assert plan_of(backend, recipe).native_config["model_args"][:3] == ["--swiglu", "--num-layers", "2"]  # builtin
    moe = tmp_path / "moe"
    moe.mkdir()
    (moe / "config.json").write_text(json.dumps({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
                                                 "num_experts": 128}))
    with pytest.raises(RecipeInvalid, match=r"framework\.model_args=None: .*scripts/models/"):
        plan_of(backend, replace(recipe, model=replace(recipe.model, path=str(moe))))


def test_model_args_script_is_sourced_at_launch() -> None:
    recipe = replace(shipped("slime"), framework={"name": "slime",
                                                  "model_args_script": "scripts/models/qwen2.5-0.5B.sh"})
    plan = plan_of("slime", recipe)
    assert "source scripts/models/qwen2.5-0.5B.sh" in plan.command[2]
    assert plan.command[2].endswith('"${MODEL_ARGS[@]}"')
    SlimeFramework().validate(plan)  # architecture checks are skipped: the flags arrive at launch


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_misspelled_override_is_caught_by_the_schema(backend: str) -> None:
    recipe = replace(shipped(backend), framework={**shipped(backend).framework,
                                                  "overrides": {"--rollout-temprature": 0.7, "rollout_top_k": 5}})
    plan = plan_of(backend, recipe)
    problems = BACKENDS[backend][0].schema_problems(plan)
    assert len(problems) == 1 and problems[0].startswith("--rollout-temprature: not a flag of")
    assert "--rollout-temperature" in problems[0]
    assert value(args_of(plan), "--rollout-top-k") == "5"  # a correct override passes through
    with pytest.raises(UnirlError, match="rollout-temprature"):
        BACKENDS[backend][0].validate(plan)


def test_override_replaces_or_removes_a_mapped_flag() -> None:
    recipe = replace(shipped("slime"), framework={**shipped("slime").framework,
                                                  "overrides": {"lr": 3e-6, "colocate": False}})
    args = args_of(plan_of("slime", recipe))
    assert value(args, "--lr") == "3e-06" and args.count("--lr") == 1
    assert "--colocate" not in args


def test_schema_catches_a_broken_batch_invariant() -> None:
    args = args_of(plan_of("slime", shipped("slime")))
    broken = [*args, "--global-batch-size", "48"]
    problems = schema_problems(broken, "slime")
    assert any("--global-batch-size: 48 !=" in p and "num_steps_per_rollout" in p for p in problems)
    no_steps = [a for a in args if a not in ("--num-steps-per-rollout",)]
    del no_steps[no_steps.index("--global-batch-size") + 1:no_steps.index("--global-batch-size") + 2]
    no_steps.remove("--global-batch-size")
    problems = schema_problems([*no_steps, "--global-batch-size", "48"], "slime")
    assert any("does not divide the 128 samples" in p for p in problems), problems


def test_schema_checks_types_choices_required_and_post_parse_asserts() -> None:
    problems = schema_problems(["--lr", "fast", "--kl-loss-type", "k9", "--use-kl-loss", "--save-interval", "5",
                                "--rollout-temperature", "0", "--num-layers", "2", "--hidden-size", "8",
                                "--num-attention-heads", "2"], "slime")
    text = "\n".join(problems)
    assert "--lr: 'fast' is not a float" in text
    assert "--kl-loss-type: 'k9' is not one of" in text
    assert "--rollout-batch-size: required" in text
    assert "--ref-load: required when --use-kl-loss" in text
    assert "--save-interval: needs --save" in text
    assert "--rollout-temperature: must be > 0" in text
    assert "--num-rollout: one of --num-rollout / --num-epoch" in text
    # vime has no temperature check, and its own flags
    assert not any("temperature" in p for p in schema_problems(["--rollout-temperature", "0"], "vime"))
    assert "--megatron-to-hf-mode" in flags_for("vime") and "--megatron-to-hf-mode" not in flags_for("slime")
    assert "--release-train" in flags_for("slime") and "--release-train" not in flags_for("vime")


def test_engine_owned_flags_are_refused() -> None:
    assert any("--rollout-num-gpus-per-engine" in p for p in schema_problems(["--sglang-tp-size", "2"], "slime"))
    assert any("--vllm-seed" in p for p in schema_problems(["--vllm-seed", "1"], "vime"))


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_custom_rm_path_is_dotted_importable_and_async(backend: str) -> None:
    path = value(args_of(plan_of(backend, shipped(backend))), "--custom-rm-path")
    assert ":" not in path and "/" not in path
    module, _, attr = path.rpartition(".")  # slime/utils/misc.py:39-47
    function = getattr(importlib.import_module(module), attr)
    assert inspect.iscoroutinefunction(function)
    assert value(args_of(plan_of(backend, shipped(backend))), "--reward-key") == "score"


def test_plugin_registers_both_backends() -> None:
    from unirl.plugins.slime import plugin

    added: list[object] = []

    class Recorder:
        def add(self, component: object) -> None:
            added.append(component)

    plugin.unirl_add_frameworks(Recorder())
    assert [f.name for f in added] == ["slime", "vime"]  # type: ignore[attr-defined]
    assert all(f.capabilities.distribution is None and f.capabilities.needs_gpu for f in added)  # type: ignore


def test_golden_plans_are_json() -> None:
    for path in sorted(GOLDEN.glob("*ime/*.json")):
        assert json.loads(path.read_text())["framework"] in ("slime", "vime")
