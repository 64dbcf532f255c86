"""TRL as a unirl backend: capabilities, the recipe -> GRPOConfig mapping table, plan, validate.

Batch semantics are TRL's, converted honestly: TRL's ``per_device_train_batch_size`` counts
*completions* per micro-batch, ``max_steps`` counts optimizer updates, and one generation batch of
``prompts_per_step x samples_per_prompt`` completions is spread over
``steps_per_generation = mini_batches x gradient_accumulation_steps`` micro-batches.
"""

from __future__ import annotations

import importlib.metadata as md
import types
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend.auto import resolve
from unirl.backend.contract import (
    OMIT,
    Capabilities,
    FrameworkOptions,
    Mapping,
    NativeView,
    RunInputs,
    follows,
    translate,
)
from unirl.backend.environment import version_in
from unirl.backend.native import prompt_budget
from unirl.backend.parity.certificate import Design, ParityHarness
from unirl.backend.plan import RUN_DIR, BackendEnvironment, LaunchPlan, MappedField, in_run_dir
from unirl.backend.vllm_cpu import head_size_problems
from unirl.data.builtin.tiny_model import allowed_token_ids, never_sampled
from unirl.data.run_length import counted_at_launch
from unirl.errors import FieldError, RecipeInvalid, UnirlError, Unsupported
from unirl.launch.scheduler import RDZV_ENDPOINT, RDZV_ID
from unirl.recipe.fields import AUTO
from unirl.recipe.schema import BUILTIN_PREFIX, Recipe
from unirl.record.layout import PLAN, write_json

NAME = "trl"
CHECKPOINTS = "trl"  # GRPOConfig.output_dir under the run directory: TRL's checkpoint-<updates> folders
ENTRYPOINT = "unirl.plugins.trl.runner:run"

CAPABILITIES = Capabilities(
    native_algorithms=("GRPO (grpo, dapo, dr_grpo, bnpo, cispo, sapo losses)", "GSPO", "RLOO", "DPO", "SFT",
                       "reward modelling", "experimental online DPO / GKD (no PPO in 1.16)"),
    algorithms=("grpo", "dr_grpo", "dapo", "gspo", "rloo"),
    rollout_engines=("hf", "vllm"),
    placement=("colocated", "disaggregated (vLLM server mode)"),
    modes=("sync",),
    training_backends=("accelerate", "DeepSpeed", "FSDP"),
    multi_node="accelerate/torchrun; vLLM server on its own nodes",
    custom_reward="Python callables in reward_funcs (unirl passes an adapter per reward)",
    runs_on_cpu=True,
    launcher="in_process",
    colocated_rollouts=True,
    can_exclude_rewards=True,  # a failed call's reward is None, which TRL leaves out (NaN-aware sums)
    shards_training_state=True,
)

# The trainer a recipe runs on: GRPOTrainer, or RLOOTrainer for the leave-one-out baseline (a separate trainer with its
# own config class in TRL 1.16, trl/trainer/rloo_trainer.py).
TRAINERS = {"grpo": ("GRPOTrainer", "GRPOConfig"), "rloo": ("RLOOTrainer", "RLOOConfig")}


def trainer_of(r: Recipe) -> str:
    return "rloo" if r.algorithm.advantage_baseline == "leave_one_out" else "grpo"


def on_grpo(value: Any) -> Any:
    """A GRPOConfig-only key: OMIT on RLOOTrainer (RLOOConfig has no such field)."""
    return lambda r: value(r) if trainer_of(r) == "grpo" else OMIT


def on_policy(r: Recipe) -> bool:
    """One optimizer update per generation: TRL then reuses the generating log-probs, so every ratio is exactly 1."""
    return updates_per_step(r) == 1


LOSS_TYPE = {"token_mean": "dapo", "seq_mean_token_mean": "grpo", "seq_mean_token_sum_norm": "dr_grpo"}
IS_MODE = {"token": "token_truncate", "sequence": "sequence_truncate"}


def batch_layout(r: Recipe) -> dict[str, int]:
    """Completions per micro-batch, accumulation and generation spread, from the recipe's batch fields."""
    micro = r.micro_batch()
    accumulation = r.completions_per_update // r.world_size // micro
    spread = r.algorithm.mini_batches_per_step * accumulation
    return {"micro": micro, "accumulation": accumulation, "steps_per_generation": spread}


def updates_per_step(r: Recipe) -> int:
    """TRL's optimizer updates per unirl step (one rollout batch): mini_batches_per_step x epochs_per_batch.

    TRL generates once every ``steps_per_generation x num_iterations`` micro-steps (trl 1.16,
    trl/trainer/grpo_trainer.py:1538-1539, ``generate_every``) and steps the optimizer once every
    ``gradient_accumulation_steps`` micro-steps; with ``steps_per_generation = mini_batches x accumulation``
    (:func:`batch_layout`), one generation feeds ``mini_batches x num_iterations`` optimizer updates."""
    return r.algorithm.mini_batches_per_step * r.algorithm.epochs_per_batch


def _updates(r: Recipe, steps: int) -> int:
    """unirl counts training steps (rollout batches); TRL counts optimizer updates (:func:`updates_per_step`)."""
    return steps * updates_per_step(r)


def sharding_args(sharding: str | None) -> dict[str, Any]:
    """GRPOConfig's keys for ``resources.sharding`` (transformers 5.24 TrainingArguments ``fsdp``/``fsdp_config``,
    training_args.py:1447-1458 and ``_process_fsdp_args`` 2775-2885; ``deepspeed``, a config dict whose "auto" values
    transformers fills from the other arguments)."""
    if sharding == "fsdp":
        return {"fsdp": True, "fsdp_config": {"version": 2, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}}
    if sharding in ("zero2", "zero3"):
        return {"deepspeed": {"zero_optimization": {"stage": int(sharding[-1])},
                              "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
                              "train_batch_size": "auto", "gradient_clipping": "auto",
                              "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}}
    return {}


# --- `unirl import trl`: the inverses of the rows that are more than a rename (unirl.backend.importing) --------------


def _whole(value: Any, per: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not isinstance(per, int) or per <= 0 or value % per:
        raise ValueError(f"{value!r} is not a whole multiple of {what} ({per!r})")
    return value // per


def _updates_of(view: NativeView) -> int:
    return int(view.field("algorithm.mini_batches_per_step")) * int(view.field("algorithm.epochs_per_batch"))


def _processes(view: NativeView) -> int:
    """Training processes (GRPOConfig does not say; the recipe's resources do: one per training GPU, else
    ``resources.cpu_processes`` per node), as :attr:`Recipe.world_size` counts them."""
    nodes, per_node = int(view.field("resources.nodes")), view.field("resources.gpus_per_node")
    gpus = 0 if per_node == AUTO else int(per_node)  # auto: TRL's auto is one process (one GPU, or the CPU)
    if nodes * gpus == 0:
        return nodes * max(1, int(view.field("resources.cpu_processes")))
    rollout = 0 if view.field("rollout.colocated") else (view.field("rollout.gpus") or nodes * gpus // 2)
    return max(1, nodes * gpus - int(rollout))


def batch_from(value: Any, view: NativeView) -> dict[str, Any]:
    """per_device_train_batch_size x processes x steps_per_generation completions are one generation (trl 1.16
    trl/trainer/grpo_config.py:1098-1100, steps_per_generation defaulting to gradient_accumulation_steps), i.e. one
    unirl step of prompts_per_step x num_generations; an optimizer update takes gradient_accumulation_steps of them."""
    accumulation = view.get("gradient_accumulation_steps")
    generation = view.get("generation_batch_size")  # the other way to say steps_per_generation (lines 1101-1110)
    spread = view.get("steps_per_generation") or (
        _whole(generation, value * _processes(view), "the global batch") if generation else accumulation)
    completions = value * _processes(view) * spread
    return {"algorithm.prompts_per_step": _whole(completions, view.get("num_generations"), "num_generations"),
            "algorithm.mini_batches_per_step": _whole(spread, accumulation, "gradient_accumulation_steps"),
            "algorithm.micro_batch_size": value}


def steps_from(value: Any, view: NativeView) -> dict[str, Any]:
    """max_steps counts optimizer updates (:func:`_updates`); -1 trains num_train_epochs (:func:`epochs_from`)."""
    if isinstance(value, int) and value < 1:
        return {}
    return {"algorithm.steps": _whole(value, _updates_of(view), "optimizer updates per step"), "algorithm.epochs": None}


def epochs_from(value: Any, view: NativeView) -> dict[str, Any]:
    """num_train_epochs is the run's length when max_steps is -1 (transformers' Trainer): the recipe's epochs; a
    fraction of a pass has no recipe form."""
    max_steps = view.get("max_steps")
    if isinstance(max_steps, int) and max_steps > 0:
        return {}
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 1 or float(value) != int(value):
        raise ValueError(f"num_train_epochs={value!r}: the recipe counts whole passes over the data "
                         "(algorithm.epochs), or steps")
    return {"algorithm.epochs": int(value)}


def schedule_from(value: Any, view: NativeView) -> dict[str, Any]:
    if value == "constant_with_warmup":
        return {"algorithm.lr_schedule": "constant"}
    if value == "cosine_with_min_lr":
        rate = (view.get("lr_scheduler_kwargs") or {}).get("min_lr_rate")
        if not isinstance(rate, int | float):
            raise ValueError("cosine_with_min_lr without lr_scheduler_kwargs.min_lr_rate")
        return {"algorithm.lr_schedule": "cosine", "algorithm.min_lr_ratio": float(rate)}
    if value not in ("constant", "linear", "cosine"):
        raise ValueError(f"{value!r}: the recipe has constant, linear and cosine")
    return {"algorithm.lr_schedule": value}


def clip_high_from(value: Any, view: NativeView) -> dict[str, Any]:
    """epsilon_high null or equal to epsilon is the recipe's null (= clip_low)."""
    return {"algorithm.clip_high": None if value is None or value == view.get("epsilon") else float(value)}


def rollout_correction_from(value: Any, view: NativeView) -> dict[str, Any]:
    """vllm_importance_sampling_correction with its mode: off is none; on acts only with vLLM (without it TRL has no
    second set of log-probs), and only the truncating modes are the recipe's."""
    if not value:
        return {"algorithm.rollout_correction": "none"}
    if not view.get("use_vllm"):
        return {}
    mode = view.get("vllm_importance_sampling_mode")
    level = {native: level for level, native in IS_MODE.items()}.get(mode)
    if level is None:
        raise ValueError(f"vllm_importance_sampling_mode={mode!r} masks ratios; the recipe's rollout_correction "
                         f"truncates them ({', '.join(IS_MODE.values())})")
    return {"algorithm.rollout_correction": level}


def logging_from(value: Any, view: NativeView) -> dict[str, Any]:
    return {"logging.every_steps": _whole(value, _updates_of(view), "optimizer updates per step")}


def checkpoints_from(value: Any, view: NativeView) -> dict[str, Any]:
    if value.get("save_strategy", "steps") == "no":
        return {"run.checkpoint_every": 0}
    if value.get("save_strategy", "steps") != "steps":
        raise ValueError(f"save_strategy={value['save_strategy']!r}: the recipe checkpoints every N steps")
    return {"run.checkpoint_every": _whole(value.get("save_steps", 500), _updates_of(view),
                                           "optimizer updates per step")}


def precision_from(value: Any, view: NativeView) -> dict[str, Any]:
    """:func:`_precision` backwards: bf16 or fp16 on, else float32 (the recipe's auto is bf16 on CUDA)."""
    if value.get("bf16") and value.get("fp16"):
        raise ValueError("bf16 and fp16 both on")
    return {"model.dtype": "bfloat16" if value.get("bf16") else "float16" if value.get("fp16") else "float32"}


def sharding_from(value: Any, view: NativeView) -> dict[str, Any]:
    """:func:`sharding_args` backwards: FSDP, or a DeepSpeed config's ZeRO stage 2 or 3."""
    if value.get("fsdp"):
        return {"resources.sharding": "fsdp"}
    stage = (value.get("deepspeed") or {}).get("zero_optimization", {}).get("stage")
    if stage in (2, 3):
        return {"resources.sharding": f"zero{stage}"}
    raise ValueError(f"{value!r}: the recipe shards with fsdp, zero2 or zero3")


SOFT_OVERLONG = "trl.rewards.get_soft_overlong_punishment"
"""The plan's name for TRL's own reward function that :func:`overlong_punishment` configures (the runner builds it)."""


def overlong_punishment(r: Recipe) -> dict[str, Any] | None:
    """TRL's soft overlong punishment (``get_soft_overlong_punishment(max_completion_len, soft_punish_cache)``) for
    ``algorithm.overlong_buffer``: 0 up to max_new_tokens - buffer, then falling linearly to -1 at max_new_tokens;
    weighted by overlong_penalty in :func:`reward_weights`. None: no shaping."""
    buffer = r.algorithm.overlong_buffer
    if not isinstance(buffer, int):
        return None
    return {"max_completion_len": r.algorithm.max_new_tokens, "soft_punish_cache": buffer}


ENVIRONMENT_REWARD = "environment"
"""The reward column of an environment's episode return: TRL's first reward function, weight 1."""


def reward_weights(r: Recipe) -> list[float]:
    weights = [*([1.0] if r.environment.name else []), *(float(s.weight) for s in r.rewards)]
    return [*weights, float(r.algorithm.overlong_penalty)] if overlong_punishment(r) else weights


def processes_per_node(r: Recipe) -> int:
    """Training processes on each node: one per training GPU, else ``resources.cpu_processes`` (gloo on CPU)."""
    if r.total_gpus == 0:
        return max(1, r.resources.cpu_processes)
    return max(1, r.world_size // r.resources.nodes)


RUNNER = ["-m", "unirl.plugins.trl.runner", "--plan", in_run_dir(PLAN), "--run-dir", RUN_DIR]


def runner_command(r: Recipe) -> list[str]:
    """One process: the runner itself. Several: torchrun (``python -m torch.distributed.run``, the backend's own
    interpreter) starting one runner per process; across nodes with a c10d rendezvous whose endpoint and id the
    scheduler fills in (:func:`unirl.launch.scheduler.with_rendezvous`)."""
    nodes, per_node = r.resources.nodes, processes_per_node(r)
    if nodes == 1 and per_node == 1:
        return ["python", *RUNNER]
    command = ["python", "-m", "torch.distributed.run", "--nnodes", str(nodes), "--nproc_per_node", str(per_node)]
    if nodes == 1:
        command.append("--standalone")  # a free local port, no rendezvous server to name
    else:
        command += ["--rdzv_backend", "c10d", "--rdzv_endpoint", RDZV_ENDPOINT, "--rdzv_id", RDZV_ID]
    return [*command, *RUNNER]


def _precision(r: Recipe) -> dict[str, Any]:
    dtype = r.model.dtype
    if dtype == "bfloat16":
        return {"bf16": True, "fp16": False}
    if dtype == "float16":
        return {"bf16": False, "fp16": True}
    if dtype == "auto" and r.resources.device == "cuda":
        return {"bf16": True, "fp16": False}
    # float32, or auto where the device is only known at launch (the runner turns bf16 on for CUDA).
    return {"bf16": False, "fp16": False}


# native_default: GRPOConfig's own defaults in TRL 1.16 (what TRL would use if unirl did not set the key).
MAPPING: tuple[Mapping, ...] = (
    Mapping("seed", "seed", lambda r: r.seed, native_default=42),
    Mapping("algorithm.steps", "max_steps", lambda r: -1 if counted_at_launch(r) else _updates(r, r.algorithm.steps),
            "TRL counts optimizer updates: steps x mini_batches_per_step x epochs_per_batch (one generation each "
            "step); -1 while algorithm.epochs waits for the data: the runner sets it when it has counted the rows",
            native_default=-1, inverse=steps_from, run_length=True),
    Mapping("algorithm.epochs", "num_train_epochs", lambda r: r.algorithm.epochs if counted_at_launch(r) else OMIT,
            "passes over the data, counted by unirl's runner at launch as epochs x floor(rows / prompts_per_step) "
            "steps (the plan counts them when it can read the data, and sends max_steps)", native_default=3.0,
            inverse=epochs_from, run_length=True),
    Mapping("algorithm.samples_per_prompt", "num_generations", lambda r: r.algorithm.samples_per_prompt,
            native_default=8),
    Mapping("algorithm.prompts_per_step", "per_device_train_batch_size", lambda r: batch_layout(r)["micro"],
            "TRL counts completions per device micro-batch, not prompts", native_default=8, inverse=batch_from),
    Mapping("algorithm.micro_batch_size", "gradient_accumulation_steps", lambda r: batch_layout(r)["accumulation"],
            # batch_from reads it (the three batch keys are one layout)
            "micro-batches per optimizer update on one device", native_default=1, inverse=follows),
    Mapping("algorithm.mini_batches_per_step", "steps_per_generation",
            lambda r: batch_layout(r)["steps_per_generation"],
            "one generation of prompts_per_step x samples_per_prompt completions feeds this many micro-batches",
            native_default=None, inverse=follows),  # batch_from reads it
    Mapping("algorithm.epochs_per_batch", "num_iterations", lambda r: r.algorithm.epochs_per_batch, native_default=1),
    Mapping("algorithm.lr", "learning_rate", lambda r: r.algorithm.lr, "TRL's default 1e-6 is set explicitly",
            native_default=1e-06),
    # transformers' plain "constant" ignores warmup_steps (optimization.py get_constant_schedule takes none)
    Mapping("algorithm.lr_schedule", "lr_scheduler_type",
            lambda r: "constant_with_warmup" if r.algorithm.lr_schedule == "constant" and r.algorithm.warmup_steps
            else "cosine_with_min_lr" if r.algorithm.lr_schedule == "cosine" and r.algorithm.min_lr_ratio
            else r.algorithm.lr_schedule, "constant with a warm-up is sent as constant_with_warmup, cosine with a "
            "min_lr_ratio as cosine_with_min_lr",
            native_default='linear', inverse=schedule_from),
    Mapping("algorithm.warmup_steps", "warmup_steps", lambda r: r.algorithm.warmup_steps, native_default=0),
    Mapping("algorithm.weight_decay", "weight_decay", lambda r: r.algorithm.weight_decay, native_default=0.0),
    Mapping("algorithm.max_grad_norm", "max_grad_norm", lambda r: r.algorithm.max_grad_norm, native_default=1.0),
    Mapping("algorithm.kl_coef", "beta", lambda r: r.algorithm.kl_coef, "0 = no reference model is loaded",
            native_default=0.0),
    Mapping("algorithm.kl_estimator", "(fixed by the trainer)", lambda r: "k1" if trainer_of(r) == "rloo" else "k3",
            "GRPOTrainer's KL is k3 in the loss (grpo_trainer.py:3099-3103); RLOOTrainer's is k1 summed over the "
            "sequence and subtracted from the reward (rloo_trainer.py:1664-1673)",
            supported=lambda r: r.algorithm.kl_coef == 0 or r.algorithm.kl_estimator in (
                ("k1",) if trainer_of(r) == "rloo" else ("k3", "low_var_kl")),
            supported_text="when kl_coef > 0: k3 (low_var_kl) with GRPOTrainer, k1 with RLOOTrainer "
                           "(advantage_baseline=leave_one_out)"),
    Mapping("algorithm.kl_estimator", "use_bias_correction_kl", on_grpo(lambda r: False),
            "the recipe's KL is the plain estimator of the current against the reference policy; GRPOTrainer "
            "multiplies it by the importance ratio by default (grpo_config.py:972, grpo_trainer.py:3101-3103), a "
            "43% larger KL term on the parity batch (unirl parity)", native_default=True),
    Mapping("algorithm.clip_low", "epsilon", lambda r: r.algorithm.clip_low, native_default=0.2),
    Mapping("algorithm.clip_high", "epsilon_high", lambda r: r.algorithm.clip_high or r.algorithm.clip_low,
            native_default=None, inverse=clip_high_from),
    Mapping("algorithm.loss_aggregation", "loss_type", on_grpo(lambda r: LOSS_TYPE[r.algorithm.loss_aggregation]),
            "token_mean=dapo, seq_mean_token_mean=grpo, seq_mean_token_sum_norm=dr_grpo; RLOOTrainer has one loss: "
            "the mean over completions of each one's summed log-ratio x advantage (rloo_trainer.py:1818-1833), whose "
            "gradient is token_mean's times the batch's mean completion length", native_default='dapo',
            supported=lambda r: trainer_of(r) == "grpo" or r.algorithm.loss_aggregation == "token_mean",
            supported_text="token_mean with advantage_baseline=leave_one_out: RLOOTrainer sums each completion's "
                           "tokens and averages completions (rloo_trainer.py:1818-1833), which weighs every token "
                           "alike as token_mean does (up to the batch's mean length); it has no per-sequence mean "
                           "and no constant normaliser"),
    Mapping("algorithm.advantage_baseline", "(trainer)", lambda r: TRAINERS[trainer_of(r)][0],
            "group_mean: GRPOTrainer (the group's mean reward, grpo_trainer.py:2761-2812); leave_one_out: TRL's "
            "RLOOTrainer (the mean of the group's other completions, rloo_trainer.py:1682-1690)",
            allowed=("group_mean", "leave_one_out"),
            supported_text="group_mean (GRPOTrainer) or leave_one_out (RLOOTrainer): TRL 1.16 has no critic (no "
                           "PPOTrainer in the wheel) and no baseline-free REINFORCE"),
    Mapping("algorithm.advantage_norm", "scale_rewards", on_grpo(lambda r: r.algorithm.advantage_norm),
            "group: / the group's reward std; batch: / the whole batch's reward std (grpo_config.py:789)",
            supported=lambda r: r.algorithm.advantage_norm in (
                ("group", "batch", "none") if trainer_of(r) == "grpo" else ("none",)),
            supported_text="group, batch or none with GRPOTrainer (no token-weighted whitening, batch_whiten); none "
                           "with RLOOTrainer, whose only normalisation (normalize_advantages) whitens per completion, "
                           "not per token (rloo_trainer.py:1695-1696)",
            native_default='group'),
    Mapping("algorithm.advantage_norm", "normalize_advantages",
            lambda r: False if trainer_of(r) == "rloo" else OMIT, "RLOOTrainer: leave-one-out advantages unscaled",
            native_default=False),
    Mapping("algorithm.kl_placement", "(KL placement)", lambda r: "reward" if trainer_of(r) == "rloo" else "loss",
            "GRPOTrainer's KL is a loss term (grpo_trainer.py:3099-3103); RLOOTrainer's is subtracted from the reward "
            "(rloo_trainer.py:1664-1673)",
            supported=lambda r: r.algorithm.kl_coef == 0 or r.algorithm.kl_placement == (
                "reward" if trainer_of(r) == "rloo" else "loss"),
            supported_text="when kl_coef > 0: loss with GRPOTrainer, reward with RLOOTrainer "
                           "(advantage_baseline=leave_one_out)"),
    Mapping("algorithm.importance_sampling_level", "importance_sampling_level",
            on_grpo(lambda r: r.algorithm.importance_sampling_level), native_default="token",
            supported=lambda r: trainer_of(r) == "grpo" or (r.algorithm.importance_sampling_level == "token"
                                                            and on_policy(r)),
            supported_text="with advantage_baseline=leave_one_out, token and one update per step "
                           "(mini_batches_per_step = epochs_per_batch = 1): RLOOTrainer clips one ratio per "
                           "completion, the product of its token ratios (rloo_trainer.py:1818-1829), which equals "
                           "per-token clipping only while every ratio is 1"),
    Mapping("algorithm.dual_clip", "delta", on_grpo(lambda r: r.algorithm.dual_clip),
            "caps the unclipped ratio (grpo_trainer.py:3115-3116): with delta above 1 + clip_high this bounds only "
            "negative advantages' loss, the dual clip", native_default=None,
            supported=lambda r: r.algorithm.dual_clip is None or (trainer_of(r) == "grpo" and r.algorithm.dual_clip > 1
                                                                   + (r.algorithm.clip_high or r.algorithm.clip_low)),
            supported_text="null, or above 1 + clip_high with GRPOTrainer: TRL's delta caps every ratio, which equals "
                           "the dual clip only above the upper clip; RLOOTrainer has no delta"),
    Mapping("algorithm.reward_clip", "reward_clip_range",
            lambda r: OMIT if trainer_of(r) == "grpo" else None if r.algorithm.reward_clip is None
            else [-r.algorithm.reward_clip, r.algorithm.reward_clip],
            "RLOOTrainer clamps the weighted total reward (rloo_trainer.py:1660-1661); GRPOTrainer never clips",
            native_default=None,
            supported=lambda r: r.algorithm.reward_clip is None or trainer_of(r) == "rloo",
            supported_text="null with GRPOTrainer: it does not clip rewards and unirl's reward adapter does not either "
                           "(TRL sums the weighted reward functions itself, grpo_trainer.py:2763); RLOOTrainer "
                           "(advantage_baseline=leave_one_out) clips"),
    Mapping("algorithm.dynamic_sampling", "(no dynamic sampling)", lambda r: False, allowed=(False,),
            supported_text="false: TRL 1.16 has no dynamic sampling; groups whose rewards all equal get zero "
                           "advantage and are counted in frac_reward_zero_std (grpo_trainer.py:2823-2830)"),
    Mapping("algorithm.overlong_filter", "mask_truncated_completions", lambda r: r.algorithm.overlong_filter,
            native_default=False),
    Mapping("algorithm.overlong_buffer", "(reward_funcs: soft_overlong_punishment_reward)", overlong_punishment,
            "TRL's own soft overlong punishment reward (trl/rewards/other_rewards.py:83 get_soft_overlong_punishment, "
            "DAPO eq. 13) is added to the reward functions with weight overlong_penalty; null: not added"),
    Mapping("algorithm.loss_normalizer", "(max_completion_length)", lambda r: r.algorithm.max_new_tokens,
            "TRL's dr_grpo loss divides by max_completion_length (grpo_trainer.py:3153-3180)",
            supported=lambda r: r.algorithm.loss_normalizer in (None, r.algorithm.max_new_tokens),
            supported_text="null (= max_new_tokens): TRL's dr_grpo loss divides by max_completion_length"),
    Mapping("algorithm.rollout_correction", "vllm_importance_sampling_correction",
            on_grpo(lambda r: r.algorithm.rollout_correction != "none"),
            "on by default in TRL 1.16 with vLLM (sequence_mask, cap 3); unirl sends the recipe's choice",
            native_default=True, inverse=rollout_correction_from,
            supported=lambda r: r.algorithm.rollout_correction == "none" or (trainer_of(r) == "grpo"
                                                                              and r.rollout.engine == "vllm"),
            supported_text="none with RLOOTrainer (advantage_baseline=leave_one_out): RLOOConfig has no "
                           "importance-sampling correction; none without rollout.engine=vllm: the correction "
                           "compares vLLM's log-probs with the trainer's, and TRL applies it only with vLLM "
                           "(grpo_trainer.py:2660, 2860)"),
    Mapping("algorithm.rollout_correction", "vllm_importance_sampling_mode",
            on_grpo(lambda r: IS_MODE.get(r.algorithm.rollout_correction, OMIT)), "truncation (the ratio capped), per "
            "token or per sequence", native_default="sequence_mask", inverse=follows),  # rollout_correction_from
    Mapping("algorithm.rollout_correction_cap", "vllm_importance_sampling_clip_max",
            on_grpo(lambda r: r.algorithm.rollout_correction_cap), native_default=3.0),
    Mapping("algorithm.min_lr_ratio", "lr_scheduler_kwargs",
            lambda r: {"min_lr_rate": r.algorithm.min_lr_ratio} if r.algorithm.min_lr_ratio else OMIT,
            "with lr_scheduler_type cosine_with_min_lr (transformers optimization.py:337-377)",
            supported=lambda r: r.algorithm.min_lr_ratio == 0 or r.algorithm.lr_schedule == "cosine",
            supported_text="0, or lr_schedule=cosine: transformers has a floor only for its cosine schedule "
                           "(cosine_with_min_lr)", native_default=None),
    Mapping("algorithm.entropy_coef", "entropy_coef", on_grpo(lambda r: r.algorithm.entropy_coef), native_default=0.0,
            supported=lambda r: trainer_of(r) == "grpo" or r.algorithm.entropy_coef == 0,
            supported_text="0 with RLOOTrainer (advantage_baseline=leave_one_out): RLOOConfig has no entropy bonus"),
    Mapping("algorithm.temperature", "temperature", lambda r: r.algorithm.temperature, native_default=1.0),
    Mapping("algorithm.top_p", "top_p", lambda r: r.algorithm.top_p, native_default=1.0),
    Mapping("algorithm.max_new_tokens", "max_completion_length", lambda r: r.algorithm.max_new_tokens,
            native_default=512),
    Mapping("reward_policy.on_error", "(unirl reward adapter)",
            lambda r: r.reward_policy.resolved(CAPABILITIES.can_exclude_rewards).on_error,
            "exclude: a failed call's reward is None, which TRL leaves out of the group baseline"),
    Mapping("rewards[].weight", "reward_weights", reward_weights, "one weight per reward, then overlong_penalty when "
            "algorithm.overlong_buffer adds TRL's soft overlong punishment", native_default=None),
    Mapping("environment.name", "(rollout_func: unirl's episode loop)", lambda r: r.environment.name or OMIT,
            "GRPOTrainer's rollout_func (grpo_trainer.py:2200-2218) runs each episode with transformers generate, "
            "token in, token out; observation tokens get env_mask 0 (no loss, L2270-2272); the return is the first "
            "reward column, weight 1",
            supported=lambda r: r.environment.name is None or (r.rollout.engine == "hf" and trainer_of(r) == "grpo"),
            supported_text="null with rollout.engine=vllm or advantage_baseline=leave_one_out: the episode loop "
                           "generates with transformers, and RLOOTrainer 1.16 takes no rollout_func"),
    Mapping("eval.keep_best", "(unirl's runner: the best held-out evaluation's weights)",
            lambda r: True if r.eval.keep_best else OMIT,
            "a host-memory copy of the weights at each new best evaluation, restored when training ends, evaluated "
            "again (on fresh seeds with an environment) and saved to <run>/best",
            supported=lambda r: not r.eval.keep_best or (r.world_size == 1 and not r.model.lora.on),
            supported_text="false with several training processes or model.lora: the copy is one process's whole "
                           "state_dict, which a LoRA model only gets at the trainer's start", native_default=False),
    Mapping("model.lora.rank", "(peft_config: LoraConfig.r)", lambda r: r.model.lora.rank or OMIT,
            "TRL wraps the model with PEFT's get_peft_model (grpo_trainer.py:433-476, rloo_trainer.py:353-396); its "
            "reference policy is the model with the adapter disabled (grpo_trainer.py:987-990); 0: no peft_config"),
    Mapping("model.lora.alpha", "(peft_config: LoraConfig.lora_alpha)",
            lambda r: r.model.lora.alpha if r.model.lora.on else OMIT),
    Mapping("model.lora.dropout", "(peft_config: LoraConfig.lora_dropout)",
            lambda r: r.model.lora.dropout if r.model.lora.on else OMIT),
    Mapping("model.lora.target_modules", "(peft_config: LoraConfig.target_modules)",
            lambda r: r.model.lora.peft_target_modules() if r.model.lora.on else OMIT,
            supported=lambda r: "lm_head" not in r.model.lora.target_modules,
            supported_text="module names without lm_head: TRL computes log-probabilities from lm_head.weight "
                           "directly and refuses an adapter on it after loading the model"),
    Mapping("model.lora.modules_to_save", "(peft_config: LoraConfig.modules_to_save)",
            lambda r: list(r.model.lora.modules_to_save) or OMIT,
            "trained in full beside the adapters, with ensure_weight_tying=True: a tied output layer shares the "
            "trained embedding"),
    Mapping("model.dtype", "bf16/fp16", _precision, "auto: bf16 on CUDA (decided at launch), fp32 on CPU",
            inverse=precision_from),
    Mapping("resources.device", "use_cpu", lambda r: r.resources.device == "cpu",
            "auto: CPU unless CUDA is present (decided at launch)", native_default=False),
    Mapping("rollout.engine", "use_vllm", lambda r: r.rollout.engine == "vllm", allowed=CAPABILITIES.rollout_engines,
            supported_text="hf (transformers generate) and vllm", native_default=False),
    Mapping("rollout.colocated", "vllm_mode", lambda r: "colocate" if r.rollout.colocated else "server",
            "only used with rollout.engine=vllm", native_default='colocate'),
    Mapping("rollout.tensor_parallel", "vllm_tensor_parallel_size", lambda r: r.rollout.tensor_parallel,
            native_default=1),
    Mapping("rollout.gpu_memory_fraction", "vllm_gpu_memory_utilization", lambda r: r.rollout.gpu_memory_fraction,
            native_default=0.3),
    Mapping("logging.every_steps", "logging_steps", lambda r: _updates(r, r.logging.every_steps), native_default=10,
            inverse=logging_from),
    Mapping("run.checkpoint_every", "save_strategy/save_steps",
            lambda r: {"save_strategy": "steps", "save_steps": _updates(r, r.run.checkpoint_every)}
            if r.run.checkpoint_every else {"save_strategy": "no"}, inverse=checkpoints_from),
    Mapping("resources.gradient_checkpointing", "gradient_checkpointing",
            lambda r: r.resources.gradient_checkpointing, "TRL defaults to True; unirl to the recipe (False)",
            native_default=True),
    Mapping("resources.cpu_processes", "(torchrun --nproc_per_node)", processes_per_node,
            "training processes per node: one per training GPU, else resources.cpu_processes (gloo on CPU); above "
            "one process or one node, the plan's command is torchrun"),
    Mapping("resources.sharding", "fsdp/fsdp_config/deepspeed", lambda r: sharding_args(r.resources.sharding),
            "fsdp: transformers' FSDP2 (fsdp_config.version=2, wrapping the model's _no_split_modules); zero2/zero3: a "
            "DeepSpeed config whose 'auto' values transformers fills from GRPOConfig",
            supported=lambda r: r.resources.sharding in (None, "none") or (r.total_gpus > 0 and r.world_size > 1),
            supported_text="sharding over 2 or more training GPUs only: accelerate 1.15 sets up FSDP and DeepSpeed "
                           "only for multi-GPU runs (accelerate/state.py:974-1016), so a CPU or one-GPU run would "
                           "silently train unsharded", inverse=sharding_from),
    Mapping("data.max_prompt_tokens", "(dataset truncation)", prompt_budget,
            "TRL 1.16 has no max_prompt_length; unirl cuts prompts from the left before training, text prompts by "
            "tokens and chat messages by their rendered template (oldest non-system messages first)"),
)

# GRPOConfig keys unirl always sets, because TRL's defaults are wrong for unirl's contract.
FIXED: dict[str, Any] = {
    "report_to": "none",  # unirl records metrics itself (metrics.jsonl, lifecycle hooks)
    "disable_tqdm": True,  # unirl draws its own progress bar
    "remove_unused_columns": False,  # reward adapters read reference/data_source columns
}


def placement_problems(r: Recipe) -> list[FieldError]:
    """What TRL would accept and then fail on after start-up (model loaded, processes started), refused by field."""
    problems: list[FieldError] = []
    res, tp = r.resources, r.rollout.tensor_parallel
    if r.total_gpus and r.world_size % res.nodes:
        problems.append(FieldError("rollout.gpus", r.rollout.gpus,
                                   f"the {r.world_size} training GPUs must split evenly over resources.nodes="
                                   f"{res.nodes} (one torchrun per node)"))
    if tp > 1 and r.rollout.engine != "vllm":
        # TRL reads vllm_tensor_parallel_size only for vLLM (trl 1.16 grpo_trainer.py:1105-1121)
        problems.append(Unsupported("rollout.tensor_parallel", tp, NAME,
                                    f"1 with rollout.engine={r.rollout.engine} (only vLLM rollouts are sharded)"))
    elif tp > 1 and r.rollout.colocated:
        # colocate: TRL raises after start-up unless tp divides the number of processes
        # (trl 1.16 trl/generation/vllm_generation.py:311-318); a process is one GPU.
        gpus = r.world_size if r.total_gpus else 0
        if not gpus or gpus % tp:
            problems.append(Unsupported("rollout.tensor_parallel", tp, NAME,
                                        f"a divisor of the run's {gpus} training GPU(s) (nodes x gpus_per_node): "
                                        "colocated vLLM shards over the training processes' GPUs"))
    elif tp > 1 and tp > r.rollout_gpus:
        problems.append(Unsupported("rollout.tensor_parallel", tp, NAME,
                                    f"at most the {r.rollout_gpus} GPU(s) of the vLLM server (rollout.gpus)"))
    if r.rollout.engine == "vllm" and not r.total_gpus:
        problems += cpu_vllm_problems(r)
    return problems


def cpu_vllm_problems(r: Recipe) -> list[FieldError]:
    """vLLM on CPU (vllm-cpu): colocated with the trainer, on a model whose head size its CPU attention computes,
    refused by field before the engine fails after start-up."""
    problems: list[FieldError] = []
    if not r.rollout.colocated:
        problems.append(Unsupported("rollout.colocated", False, NAME,
                                    "true on CPU: TRL's vLLM server mode syncs weights through vLLM's NCCL "
                                    "weight-transfer engine, which needs a CUDA device "
                                    "(trl/generation/vllm_client.py:755-759)"))
    return problems + head_size_problems(r, NAME, ", or rollout.engine=hf")


def parity_designs(recipe: Recipe) -> list[Design]:
    """What TRL's GRPOTrainer computes differently from unirl's reference by construction."""
    designs = []
    if recipe.algorithm.advantage_norm in ("group", "batch"):
        designs.append(Design(
            "std + 1e-4 in float32", "GRPOTrainer divides the centred rewards by their std + 1e-4 "
            "(grpo_trainer.py:2785-2787) in float32, so a group of equal rewards that binary cannot hold exactly gets "
            "advantages of about one rounding unit / 1e-4 instead of 0", ("advantages",),
            {"std_eps": 1e-4, "precision": "float32", "group_rows": True}))
    if trainer_of(recipe) == "rloo":
        designs.append(Design(
            "one ratio per completion, tokens summed", "RLOOTrainer's loss is the mean over completions of "
            "-min(r A, clip(r) A) with r the product of the completion's token ratios (rloo_trainer.py:1818-1833): "
            "with ratios of 1 (one update per step, which the plan requires) its gradient is token_mean's times "
            "the batch's mean completion length, a larger step the learning rate does not undo",
            ("loss", "grad", "clip_fraction"), {"ratio_per_completion": True}))
    if recipe.algorithm.entropy_coef and recipe.algorithm.loss_aggregation != "token_mean":
        designs.append(Design("entropy as a token mean", "TRL's entropy bonus is a token mean whatever loss_type "
                              "aggregates the loss (grpo_trainer.py:3184-3196)", ("loss",),
                              {"entropy_aggregation": "token_mean"}))
    return designs


class TrlFramework:
    name = NAME
    parity = ParityHarness("unirl.plugins.trl.parity_harness", parity_designs)
    description = "Hugging Face TRL GRPOTrainer; in-process, runs on CPU or CUDA"
    capabilities = CAPABILITIES
    mapping = MAPPING
    options: ClassVar[dict[str, Any]] = asdict(FrameworkOptions(name=NAME))
    import_data_keys: ClassVar[tuple[str, ...]] = ()
    """The native keys that name the training data: none, a GRPOConfig holds no dataset (the trainer is handed one)."""
    import_dropped: ClassVar[dict[str, str]] = {
        "output_dir": "a path unirl sets itself (<run dir>/trl)",
        "report_to": "unirl records metrics itself (report_to=none)",
        "disable_tqdm": "unirl draws its own progress bar",
        "generation_batch_size": "read as steps_per_generation (the two cannot both be set)"}
    """``unirl import trl``: GRPOConfig keys outside the mapping table that unirl sets itself."""

    def installed_version(self, python: str | None = None) -> str | None:
        if python:
            return version_in(python, "trl")
        try:
            return md.version("trl")
        except md.PackageNotFoundError:
            return None

    def plan(self, recipe: Recipe) -> LaunchPlan:
        resolution = resolve(recipe, self)
        recipe = resolution.recipe
        rows, native, problems = translate(recipe, MAPPING, NAME, self.installed_version() or "1.16")
        problems += placement_problems(recipe)
        if problems:
            raise RecipeInvalid(problems, context=f"recipe for {NAME}")

        args: dict[str, Any] = {}
        for key, value in native.items():
            if "/" in key:  # one recipe field that sets several GRPOConfig keys (a dict of them)
                args.update(value)
            else:
                args[key] = value
        args.update(FIXED)
        if recipe.model.path.startswith(BUILTIN_PREFIX):
            # transformers' generate takes the tokens to suppress; vLLM's SamplingParams an allow-list
            args["generation_kwargs"] = (
                {"allowed_token_ids": allowed_token_ids(recipe.model.path)}
                if recipe.rollout.engine == "vllm" else {"suppress_tokens": never_sampled(recipe.model.path)})
        overrides = dict(recipe.framework.get("overrides") or {})
        for key, value in sorted(overrides.items()):
            rows.append(MappedField(f"framework.overrides.{key}", key, value, "raw GRPOConfig key, applied last"))
        args.update(overrides)

        trainer, config = TRAINERS[trainer_of(recipe)]
        overlong = overlong_punishment(recipe)
        native = {
            "trainer": trainer,
            "trainer_config": dict(sorted(args.items())),
            "reward_funcs": [*([{"name": ENVIRONMENT_REWARD, "weight": 1.0, "environment": recipe.environment.name}]
                               if recipe.environment.name else []),
                             *({"name": s.name, "weight": s.weight, "kwargs": dict(s.kwargs)} for s in recipe.rewards)]
            + ([{"name": "soft_overlong_punishment_reward", "weight": recipe.algorithm.overlong_penalty,
                 "trl": SOFT_OVERLONG, "kwargs": overlong}] if overlong else []),
            "model": {"path": recipe.model.path, "revision": recipe.model.revision, "dtype": recipe.model.dtype},
            "peft_config": peft_config(recipe),
            "data": {"train": recipe.data.train, "eval": recipe.data.eval},
        }
        python = recipe.framework.get("python")
        command = runner_command(recipe)
        single = command[1:] == RUNNER
        return LaunchPlan(
            framework=NAME,
            framework_version=self.installed_version(),
            entrypoint=ENTRYPOINT,
            native_config=native,
            mapping=rows,
            command=command,
            in_process=python is None and single,
            notes=[
                f"trains with TRL's {trainer} ({config})"
                + (f", LoRA rank {recipe.model.lora.rank} through PEFT" if recipe.model.lora.on else ""),
                f"held-out evaluation is unirl's ({'greedy' if recipe.eval.greedy else 'sampled'}, "
                f"{'before and ' if recipe.eval.before_training else ''}after training), not TRL's eval loop",
                "output_dir is set to <run dir>/trl at launch",
                *([] if single else [f"{recipe.world_size} training processes through torchrun "
                                     f"({recipe.resources.nodes} node(s) x {processes_per_node(recipe)}); rank 0 alone "
                                     "writes the run record and runs the held-out eval"]),
            ],
            recipe=asdict(recipe),
            target_version=self.installed_version(),
            auto=list(resolution.values),
            environment=BackendEnvironment(kind="in_process" if python is None else "interpreter",
                                           python=python or "python", nodes=recipe.resources.nodes,
                                           gpus_per_node=recipe.gpus_per_node),
        )

    def effective_run(self, native: dict[str, Any], rows: int | None, config_class: str | None = None) -> Any:
        """The run TRL executes for these config arguments (:mod:`unirl.plugins.trl.effective_run`), one process."""
        from unirl.plugins.trl.effective_run import effective_run

        return effective_run(native, rows, config_class or "GRPOConfig")

    def require_resumable(self, run_dir: Path) -> None:
        """Nothing to refuse: a resume continues from the newest complete Trainer checkpoint, and a run stopped before
        its first one starts again from step 0 in its directory (unirl.launch.resume.resume_checkpoint)."""

    def prepare(self, plan: LaunchPlan, run_dir: Path, inputs: RunInputs) -> LaunchPlan:
        """The run directory with the resolved plan in it: every launch but the in-process one points the runner
        at that file (a child, a Ray job, a Slurm job). ``inputs`` are not staged: TRL's runner is unirl's own
        process and resolves its rewards and plugins through its host."""
        resolved = plan.resolve(str(run_dir))
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json(run_dir / PLAN, resolved.to_dict())
        return resolved

    def validate(self, plan: LaunchPlan) -> None:
        """Construct TRL's own GRPOConfig or RLOOConfig from the plan: TRL's checks, before any model loads."""
        try:
            config_class = trainer_classes(plan)[1]
        except ImportError as exc:
            raise UnirlError(f"TRL is not installed in this interpreter ({exc}); pip install 'unirl[trl]'") from exc
        import tempfile

        args = launch_args(plan)
        overrides = (plan.recipe.get("framework") or {}).get("overrides") or {}
        # Only the user's native values are type-checked: the annotations are narrower than what the configs accept
        # (GRPOConfig.fsdp is annotated str | None, and transformers itself sets it to True).
        for key in overrides:
            wrong = wrong_type(config_class, key, args.get(key))
            if key in args and wrong:
                raise FieldError(f"framework.overrides.{key}", args[key], f"{wrong} ({config_class.__name__}.{key}'s "
                                 "type)")
        with tempfile.TemporaryDirectory() as tmp:
            try:
                config_class(output_dir=tmp, **args)
            except ImportError as exc:  # DeepSpeed for resources.sharding=zero2/zero3
                raise UnirlError(f"resources.sharding={plan.recipe['resources'].get('sharding')!r}: TRL's GRPOConfig "
                                 f"needs a package this interpreter lacks ({exc}); for zero2/zero3, pip install "
                                 "deepspeed where TRL runs") from exc
            except (TypeError, ValueError) as exc:
                raise UnirlError(f"TRL {plan.framework_version} rejected the generated {config_class.__name__}: "
                                 f"{exc}") from exc


def wrong_type(config_class: type[Any], key: str, value: Any) -> str | None:
    """What ``value`` should be when it does not fit the annotation of ``config_class``'s field ``key`` (plain
    scalars, their Optional and Literal forms; anything else is left to the config's own checks), else None.

    TRL's configs are dataclasses that do not check types: ``learning_rate="abc"`` is accepted and fails inside the
    optimizer once the model has loaded."""
    import dataclasses
    import typing

    fields = {f.name for f in dataclasses.fields(config_class)}
    if key not in fields:
        return None
    try:
        hint = typing.get_type_hints(config_class).get(key)
    except (NameError, TypeError):  # an annotation that does not resolve here: nothing to compare with
        return None
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    if value is None:
        return None if type(None) in options else "a value, not null"
    allowed: list[str] = []
    for option in options:
        if typing.get_origin(option) is typing.Literal:
            if value in typing.get_args(option):
                return None
            allowed.append(f"one of {list(typing.get_args(option))}")
        elif option in (int, float, bool, str):
            if _scalar_fits(value, option):
                return None
            allowed.append({int: "a whole number", float: "a number", bool: "true or false", str: "text"}[option])
        elif option is not type(None):
            return None  # a list, a dict, a class: the config's own checks
    return " or ".join(allowed) or None


def _scalar_fits(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def peft_config(r: Recipe) -> dict[str, Any] | None:
    """PEFT's LoraConfig arguments for ``model.lora`` (the runner builds it; TRL wraps the model), None without LoRA."""
    lora = r.model.lora
    if not lora.on:
        return None
    spec = {"task_type": "CAUSAL_LM", "r": lora.rank, "lora_alpha": lora.alpha, "lora_dropout": lora.dropout,
            "target_modules": lora.peft_target_modules(), "bias": "none"}
    if lora.modules_to_save:
        # ensure_weight_tying: with tied embeddings the output layer uses the trained copy of embed_tokens, not the
        # frozen original (PEFT warns and leaves them untied otherwise)
        spec.update(modules_to_save=list(lora.modules_to_save), ensure_weight_tying=True)
    return spec


def trainer_classes(plan: LaunchPlan) -> tuple[Any, Any]:
    """The plan's TRL trainer and config classes (plans written before RLOO support name no trainer: GRPO)."""
    import trl

    trainer = plan.native_config.get("trainer", "GRPOTrainer")
    config = dict(TRAINERS.values())[trainer]
    return getattr(trl, trainer), getattr(trl, config)


def launch_args(plan: LaunchPlan) -> dict[str, Any]:
    """The plan's GRPOConfig arguments with the device and precision decided for this machine."""
    import torch

    args = dict(plan.native_config["trainer_config"])
    device, dtype = plan.recipe["resources"]["device"], plan.recipe["model"]["dtype"]
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise UnirlError("resources.device='cuda': this run expects a CUDA GPU and torch sees none "
                         f"(torch {torch.__version__}); use resources.device=cpu or auto")
    # resources.cpu_processes > 1 is a CPU run (gloo) even where CUDA is present: its processes share no GPUs.
    args["use_cpu"] = device == "cpu" or not has_cuda or plan.recipe["resources"].get("cpu_processes", 1) > 1
    if dtype == "auto":
        args["bf16"] = not args["use_cpu"] and torch.cuda.is_bf16_supported()
        args["fp16"] = False
    # Version gate: transformers 5.x renamed gradient_checkpointing to activation_checkpointing.
    config_class = trainer_classes(plan)[1]
    if "activation_checkpointing" in config_class.__dataclass_fields__ and "gradient_checkpointing" in args:
        args["activation_checkpointing"] = args.pop("gradient_checkpointing")
    return args
