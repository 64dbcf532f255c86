"""The TRL mapping table: honest batch semantics, TRL's defaults overridden, unsupported fields refused,
and every generated config accepted by TRL's own GRPOConfig."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from unirl.backend.plan import LaunchPlan
from unirl.errors import RecipeInvalid
from unirl.host.manager import get_host
from unirl.host.planning import prepare_run
from unirl.launch.resume import resume_checkpoint
from unirl.plugins.trl.framework import CHECKPOINTS, TrlFramework, launch_args
from unirl.recipe.schema import AlgorithmConfig, Recipe, ResourcesConfig, RolloutConfig, RunSection


def plan_for(**algorithm: object) -> LaunchPlan:
    recipe = Recipe(algorithm=replace(AlgorithmConfig(), **algorithm))
    return TrlFramework().plan(recipe)


def test_completions_not_prompts_fill_trl_batches() -> None:
    args = plan_for(prompts_per_step=8, samples_per_prompt=16).native_config["trainer_config"]
    assert args["num_generations"] == 16
    assert args["per_device_train_batch_size"] == 128  # 8 prompts x 16 completions
    assert args["gradient_accumulation_steps"] == 1
    assert args["steps_per_generation"] == 1


def test_mini_and_micro_batches_become_accumulation_and_generation_spread() -> None:
    args = plan_for(prompts_per_step=8, samples_per_prompt=16, mini_batches_per_step=2, micro_batch_size=16,
                    steps=10).native_config["trainer_config"]
    # 128 completions per step, 2 updates of 64, each as 4 micro-batches of 16.
    assert args["per_device_train_batch_size"] == 16
    assert args["gradient_accumulation_steps"] == 4
    assert args["steps_per_generation"] == 8
    assert args["max_steps"] == 20  # TRL counts optimizer updates
    generation = args["per_device_train_batch_size"] * args["steps_per_generation"]
    assert generation == 8 * 16


def test_trl_defaults_that_are_wrong_for_unirl_are_set_explicitly() -> None:
    args = plan_for(lr=3e-4).native_config["trainer_config"]
    assert args["learning_rate"] == 3e-4
    assert args["bf16"] is False  # TRL turns bf16 on even on CPU
    assert args["gradient_checkpointing"] is False
    assert args["logging_steps"] == 1
    assert args["report_to"] == "none"


@pytest.mark.parametrize(("aggregation", "loss_type"), [("token_mean", "dapo"), ("seq_mean_token_mean", "grpo"),
                                                         ("seq_mean_token_sum_norm", "dr_grpo")])
def test_loss_aggregation_names_map_to_trl_loss_types(aggregation: str, loss_type: str) -> None:
    assert plan_for(loss_aggregation=aggregation).native_config["trainer_config"]["loss_type"] == loss_type


def test_kl_estimator_trl_cannot_honour_is_refused_not_dropped() -> None:
    refused = (r"algorithm\.kl_estimator='k1': not supported by trl; trl supports when kl_coef > 0: k3 .* "
               r"with GRPOTrainer")
    with pytest.raises(RecipeInvalid, match=refused):
        plan_for(kl_coef=0.04, kl_estimator="k1")
    plan_for(kl_coef=0.0, kl_estimator="k1")  # no KL term: the estimator is irrelevant
    assert plan_for(kl_coef=0.04, kl_estimator="k3").native_config["trainer_config"]["beta"] == 0.04


def rloo(**changes: object) -> dict[str, object]:
    """The rloo preset's fields, with changes."""
    return {"advantage_baseline": "leave_one_out", "advantage_norm": "none", "loss_aggregation": "token_mean",
            "kl_placement": "reward", "kl_estimator": "k1", **changes}


def test_leave_one_out_trains_with_trls_own_rloo_trainer() -> None:
    plan = plan_for(**rloo(kl_coef=0.05, reward_clip=5.0))
    args = plan.native_config["trainer_config"]
    assert plan.native_config["trainer"] == "RLOOTrainer"
    # KL in the reward (k1, RLOOTrainer's own), advantages not rescaled, rewards clamped to +-5
    assert (args["beta"], args["normalize_advantages"], args["reward_clip_range"]) == (0.05, False, [-5.0, 5.0])
    # GRPOConfig-only keys are not sent: RLOOConfig would reject them
    assert not {"loss_type", "scale_rewards", "importance_sampling_level", "delta", "entropy_coef",
                "vllm_importance_sampling_correction"} & set(args)
    TrlFramework().validate(plan)  # TRL's own RLOOConfig takes it
    assert plan_for().native_config["trainer"] == "GRPOTrainer"


@pytest.mark.parametrize(("changes", "field"), [
    ({"advantage_norm": "group"}, "advantage_norm"),  # RLOOTrainer has no group std
    ({"advantage_norm": "batch_whiten"}, "advantage_norm"),  # its whitening is per completion, not per token
    ({"loss_aggregation": "seq_mean_token_mean"}, "loss_aggregation"),
    ({"kl_coef": 0.05, "kl_placement": "loss"}, "kl_placement"),
    ({"kl_coef": 0.05, "kl_estimator": "k3"}, "kl_estimator"),
    ({"mini_batches_per_step": 2, "micro_batch_size": 32}, "importance_sampling_level"),  # off-policy: product ratio
    ({"epochs_per_batch": 2}, "importance_sampling_level"),
    ({"dual_clip": 3.0}, "dual_clip"),
    ({"entropy_coef": 0.01}, "entropy_coef"),
    ({"rollout_correction": "token"}, "rollout_correction"),
])
def test_what_rloo_trainer_cannot_do_is_refused_by_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(RecipeInvalid, match=rf"algorithm\.{field}=.*not supported by trl"):
        plan_for(**rloo(**changes))


def test_grpo_trainer_does_not_clip_rewards_and_rloo_trainer_does() -> None:
    with pytest.raises(RecipeInvalid, match=r"algorithm\.reward_clip=5\.0: not supported by trl; trl supports null "
                                            r"with GRPOTrainer"):
        plan_for(reward_clip=5.0)


def test_overlong_buffer_adds_trls_soft_overlong_punishment_weighted_by_the_penalty() -> None:
    plan = plan_for(overlong_buffer=16, overlong_penalty=0.5, max_new_tokens=64)
    funcs = plan.native_config["reward_funcs"]
    assert funcs[-1] == {"name": "soft_overlong_punishment_reward", "weight": 0.5,
                         "trl": "trl.rewards.get_soft_overlong_punishment",
                         "kwargs": {"max_completion_len": 64, "soft_punish_cache": 16}}
    assert plan.native_config["trainer_config"]["reward_weights"] == [1.0, 0.5]  # the recipe's reward, then it
    from unirl.plugins.trl.runner import trl_reward_funcs

    [punish] = trl_reward_funcs(plan)
    # DAPO eq. 13: nothing up to 48 tokens, then linear down to -1 at 64
    assert punish(completion_ids=[[1] * 48, [1] * 56, [1] * 64]) == [0.0, -0.5, -1.0]
    assert plan_for().native_config["reward_funcs"][-1]["name"] != "soft_overlong_punishment_reward"


def test_sglang_rollouts_are_refused_with_what_trl_supports() -> None:
    with pytest.raises(RecipeInvalid, match=r"rollout\.engine='sglang': not supported by trl; trl supports hf"):
        TrlFramework().plan(Recipe(rollout=RolloutConfig(engine="sglang")))


def test_vllm_server_mode_maps_from_colocation() -> None:
    args = TrlFramework().plan(Recipe(rollout=RolloutConfig(engine="vllm", colocated=False, tensor_parallel=2),
                                      resources=ResourcesConfig(gpus_per_node=4))).native_config["trainer_config"]
    assert args["use_vllm"] is True and args["vllm_mode"] == "server" and args["vllm_tensor_parallel_size"] == 2


def test_raw_overrides_are_applied_last_and_shown_in_the_mapping() -> None:
    recipe = Recipe(framework={"name": "trl", "overrides": {"top_k": 5, "learning_rate": 1e-5}})
    plan = TrlFramework().plan(recipe)
    assert plan.native_config["trainer_config"]["top_k"] == 5
    assert plan.native_config["trainer_config"]["learning_rate"] == 1e-5
    assert any(row.recipe_field == "framework.overrides.top_k" for row in plan.mapping)


def test_every_mapped_field_is_a_real_grpoconfig_argument() -> None:
    from trl import GRPOConfig

    fields = set(GRPOConfig.__dataclass_fields__)
    args = plan_for().native_config["trainer_config"]
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


def test_epochs_per_batch_multiply_trls_updates_so_that_steps_stay_rollout_batches() -> None:
    """TRL generates once every steps_per_generation x num_iterations micro-steps (trl 1.16
    trl/trainer/grpo_trainer.py:1538-1539): one unirl step is mini_batches x epochs optimizer updates."""
    args = plan_for(steps=6, epochs_per_batch=2, mini_batches_per_step=2).native_config["trainer_config"]
    assert args["num_iterations"] == 2 and args["steps_per_generation"] == 2
    assert args["max_steps"] == 6 * 2 * 2
    generations = args["max_steps"] * args["gradient_accumulation_steps"] // (
        args["steps_per_generation"] * args["num_iterations"])
    assert generations == 6  # algorithm.steps rollout batches, as `unirl explain algorithm.steps` defines a step
    assert args["logging_steps"] == 4  # logging.every_steps=1: once per unirl step
    recipe = Recipe(algorithm=replace(AlgorithmConfig(), steps=6, epochs_per_batch=3),
                    run=RunSection(checkpoint_every=2))
    assert TrlFramework().plan(recipe).native_config["trainer_config"]["save_steps"] == 6


def test_tensor_parallel_that_trl_would_crash_on_after_start_up_is_refused_by_field() -> None:
    def plan(tp: int, gpus: int, engine: str = "vllm", colocated: bool = True) -> LaunchPlan:
        return TrlFramework().plan(Recipe(rollout=RolloutConfig(engine=engine, tensor_parallel=tp, colocated=colocated),
                                          resources=ResourcesConfig(gpus_per_node=gpus)))

    # colocate: TRL raises "tensor_parallel_size (4) must divide world size (2)" once the processes have started
    # (trl 1.16 trl/generation/vllm_generation.py:314-318)
    with pytest.raises(RecipeInvalid, match=r"rollout\.tensor_parallel=4: not supported by trl; trl supports a "
                                            r"divisor of the run's 2 training GPU"):
        plan(4, 2)
    with pytest.raises(RecipeInvalid, match=r"rollout\.tensor_parallel=2: .* a divisor of the run's 0 training"):
        plan(2, 0)
    with pytest.raises(RecipeInvalid, match=r"rollout\.tensor_parallel=3: .* a divisor of the run's 4"):
        plan(3, 4)
    assert plan(2, 4).native_config["trainer_config"]["vllm_tensor_parallel_size"] == 2
    with pytest.raises(RecipeInvalid, match=r"rollout\.tensor_parallel=2: .* 1 with rollout\.engine=hf"):
        plan(2, 2, engine="hf")
    with pytest.raises(RecipeInvalid, match=r"rollout\.tensor_parallel=4: .* at most the 2 GPU\(s\) of the vLLM"):
        plan(4, 4, colocated=False)


def test_several_processes_launch_through_torchrun_and_one_stays_in_process() -> None:
    runner = ["-m", "unirl.plugins.trl.runner", "--plan", "{run_dir}/plan.json", "--run-dir", "{run_dir}"]
    one = TrlFramework().plan(Recipe())
    assert one.command == ["python", *runner] and one.in_process and one.environment.nodes == 1
    cpu = TrlFramework().plan(Recipe(resources=ResourcesConfig(device="cpu", cpu_processes=2)))
    assert cpu.command == ["python", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                           "--standalone", *runner]
    assert not cpu.in_process  # a child process (torchrun) even with unirl's own interpreter
    assert cpu.native_config["trainer_config"]["per_device_train_batch_size"] == 32  # 64 completions over 2 ranks
    gpus = TrlFramework().plan(Recipe(resources=ResourcesConfig(gpus_per_node=8)))
    assert gpus.command[gpus.command.index("--nproc_per_node") + 1] == "8"
    nodes = TrlFramework().plan(Recipe(resources=ResourcesConfig(nodes=2, gpus_per_node=4)))
    assert nodes.environment.nodes == 2
    assert nodes.command[:12] == ["python", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "4",
                                  "--rdzv_backend", "c10d", "--rdzv_endpoint", "{rdzv_endpoint}", "--rdzv_id"]
    assert nodes.native_config["trainer_config"]["per_device_train_batch_size"] == 8  # 64 over 8 ranks


def test_cpu_processes_are_for_cpu_runs_and_must_split_the_batch() -> None:
    from unirl.recipe.schema import validate

    with pytest.raises(RecipeInvalid, match=r"resources\.cpu_processes=2: only for CPU runs"):
        validate(Recipe(resources=ResourcesConfig(gpus_per_node=1, cpu_processes=2)), ["math_answer"])
    with pytest.raises(RecipeInvalid, match=r"64 completions per update do not split evenly over 3 devices"):
        validate(Recipe(resources=ResourcesConfig(gpus_per_node=0, cpu_processes=3)), ["math_answer"])
    validate(Recipe(resources=ResourcesConfig(gpus_per_node=0, cpu_processes=4)), ["math_answer"])


def test_the_prompt_budget_is_resolved_for_trl_too() -> None:
    rows = {r.recipe_field: r for r in plan_for().mapping}
    assert rows["data.max_prompt_tokens"].value == 512  # null: unirl's default budget (unirl/backend/native.py)


def test_resume_plans_and_a_run_stopped_before_its_first_checkpoint_starts_again(tmp_path: Path) -> None:
    plan = TrlFramework().plan(Recipe(run=RunSection(resume=True, checkpoint_every=5)))
    prepare_run(get_host(), plan, tmp_path)  # no checkpoint yet: not refused (unirl resume checks the directory)
    checkpoint = resume_checkpoint(tmp_path / CHECKPOINTS)
    assert (checkpoint.path, checkpoint.global_step) == (None, 0)


def test_sharding_becomes_fsdp2_or_a_deepspeed_config_and_is_refused_where_accelerate_would_drop_it() -> None:
    def args(sharding: str | None, gpus: int = 8) -> dict:
        return TrlFramework().plan(Recipe(resources=ResourcesConfig(gpus_per_node=gpus, sharding=sharding))
                                   ).native_config["trainer_config"]

    assert "fsdp" not in args(None) and "deepspeed" not in args("none")  # plain DDP, TRL's default
    fsdp = args("fsdp")
    assert fsdp["fsdp"] is True and fsdp["fsdp_config"] == {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}
    assert args("zero3")["deepspeed"]["zero_optimization"] == {"stage": 3}
    assert args("zero2")["deepspeed"]["train_micro_batch_size_per_gpu"] == "auto"
    # accelerate 1.15 builds FSDP/DeepSpeed only for multi-GPU distributed types (accelerate/state.py:974-1016)
    for gpus in (0, 1):
        with pytest.raises(RecipeInvalid, match=r"resources\.sharding='fsdp': not supported by trl; trl supports "
                                                r"sharding over 2 or more training GPUs only"):
            args("fsdp", gpus)
    TrlFramework().validate(TrlFramework().plan(Recipe(resources=ResourcesConfig(gpus_per_node=8, sharding="fsdp"))))


CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_chat_prompts_are_cut_from_the_left_to_the_one_prompt_budget() -> None:
    """TRL cuts only string prompts to max_prompt_length; unirl fits chat messages to the same budget: the oldest
    non-system messages go first, then the start of the first kept one; the system message and the end stay."""
    from unirl.data.builtin.tiny_model import build_tokenizer
    from unirl.errors import RecipeInvalid
    from unirl.plugins.trl.runner import chat_tokens, fit_messages

    tok = build_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    system = {"role": "system", "content": "1=1"}
    old = {"role": "user", "content": "9" * 40}
    last = {"role": "user", "content": "1234567890" * 3 + "+2=?"}
    messages = [system, old, last]
    assert fit_messages(messages, chat_tokens(messages, tok), tok) == messages  # within the budget: untouched

    budget = chat_tokens([system, last], tok) - 5
    fitted = fit_messages(messages, budget, tok)
    assert chat_tokens(fitted, tok) <= budget
    assert fitted[0] == system and len(fitted) == 2  # the old message went first
    assert fitted[1]["content"].endswith("+2=?") and last["content"].endswith(fitted[1]["content"])
    assert len(fitted[1]["content"]) == len(last["content"]) - 5  # exactly the 5 leading tokens cut (1 char each)

    with pytest.raises(RecipeInvalid, match=r"data\.max_prompt_tokens"):
        fit_messages(messages, chat_tokens([system, {"role": "user", "content": ""}], tok) - 1, tok)


def test_a_constant_schedule_with_warm_up_keeps_its_warm_up() -> None:
    """transformers' "constant" schedule takes no warm-up (it would be silently dropped); TRL runs the warm-up the
    recipe asks for, checked on the scheduler TRL's Trainer builds from these arguments."""
    from transformers.optimization import get_scheduler

    args = plan_for(lr_schedule="constant", warmup_steps=4, steps=10).native_config["trainer_config"]
    assert args["lr_scheduler_type"] == "constant_with_warmup"
    import torch

    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = get_scheduler(args["lr_scheduler_type"], optimizer, num_warmup_steps=args["warmup_steps"],
                              num_training_steps=args["max_steps"])
    lrs = []
    for _ in range(6):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert plan_for(lr_schedule="constant", warmup_steps=0).native_config["trainer_config"]["lr_scheduler_type"] == \
        "constant"
