"""NeMo RL 0.7 as a unirl backend: capabilities, the recipe -> Hydra-override mapping table, plan, validate.

NeMo RL runs ``examples/run_grpo.py --config examples/configs/grpo_math_1B.yaml <overrides>`` from its repository
(``/opt/nemo-rl`` in its image). That script never registers a custom environment, so unirl launches it through
its own launcher, ``python -m unirl.plugins.nemo_rl.launch``, which registers the ``unirl`` reward environment in the
same
process and then runs the script unchanged.

Batch semantics are NeMo RL's, converted honestly: ``grpo.num_prompts_per_step`` counts prompts, while
``policy.train_global_batch_size`` counts *sequences* (rollouts) per optimizer step, so
``prompts x samples / mini_batches`` of them give ``mini_batches_per_step`` updates per GRPO step
(nemo_rl/models/policy/workers/dtensor_policy_worker_v2.py:401-410 @ v0.7.0). ``policy.train_micro_batch_size`` is
per GPU; with sequence packing on (the base config's default) it sets the token budget of a packed micro-batch
(``max_total_sequence_length x train_micro_batch_size``) rather than a sequence count.

Versions: NeMo RL is not on the package index, so its version cannot be read from an interpreter; unirl translates
for ``framework.version`` or the tested 0.7.0. Older releases are refused, not half-translated: up to 0.5 the data
section was flat (``data.dataset_name``, ``data.prompt_file``) and the entry point was ``examples/run_grpo_math.py``
(removed by NVIDIA-NeMo/RL 4b4824887f52); 0.6 has today's ``data.train``/``data.default`` layout but a different
key set in ``grpo``/``loss_fn``, which this plugin's schema does not describe.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar

from unirl.backend.advantage_rows import advantage_rows, pair
from unirl.backend.contract import OMIT, Capabilities, Mapping
from unirl.backend.export import export_path
from unirl.backend.hydra_overrides import to_overrides
from unirl.backend.native import (
    CHECKPOINTS,
    DEFAULT_PROMPT_TOKENS,
    GPU_ON_RAY,
    LOGPROB_MICRO_BATCH_NOTE,
    MICRO_BATCH_NOTE,
    SPEC_PATH,
    NativeFramework,
    logprob_micro_batch,
    micro_batch_note,
    model_location,
    prompt_budget,
    prompt_budget_note,
)
from unirl.backend.native import micro_batch as native_micro_batch
from unirl.backend.parity.certificate import ParityHarness
from unirl.backend.plan import LaunchPlan, MappedField, in_run_dir
from unirl.data.builtin.tiny_model import SHAPES
from unirl.data.run_length import counted_at_launch
from unirl.environments.runtime import ENVIRONMENT_SPEC_FILE
from unirl.errors import FieldError
from unirl.recipe.schema import ALL_LINEAR, BUILTIN_PREFIX, Recipe, is_local_path

NAME = "nemo_rl"
CAPABILITIES = Capabilities(
    **GPU_ON_RAY,
    native_algorithms=("GRPO", "DAPO", "GSPO", "CISPO", "GDPO", "REINFORCE++", "RLOO", "PPO (critic)", "DPO",
                       "SFT", "reward modelling", "on-policy distillation"),
    algorithms=("grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline"),
    rollout_engines=("vllm",),
    placement=("colocated (policy.generation.colocated.enabled=true)",
               "disaggregated (colocated.enabled=false with colocated.resources.*)"),
    modes=("sync", "async (grpo.async_grpo: non-colocated async vLLM, importance-sampling correction)"),
    training_backends=("DTensor/FSDP2 (NeMo Automodel)", "Megatron-Core (Megatron-Bridge)"),
    multi_node="Ray cluster: cluster.num_nodes x cluster.gpus_per_node (ray.sub on Slurm, or KubeRay)",
    custom_reward="an EnvironmentInterface Ray actor registered in ENV_REGISTRY and ACTOR_ENVIRONMENT_REGISTRY "
                  "by a launcher in the driver (unirl.plugins.nemo_rl.launch)",
    async_rollouts=True,
    model_parallel=True,
    distribution=None,  # "nemo-rl" on PyPI is an empty 0.0.0 placeholder
    tested_version="0.7.0",
    install="docker pull nvcr.io/nvidia/nemo-rl:v0.7.0 (the repository is at /opt/nemo-rl inside), or "
            "git clone --recursive -b v0.7.0 https://github.com/NVIDIA-NeMo/RL and uv sync (Python 3.13)",
    image="nvcr.io/nvidia/nemo-rl:v0.7.0",
)
SUPPORTED_VERSIONS = ">=0.7,<0.8"

DEFAULT_REPO = "/opt/nemo-rl"  # where the NeMo RL image keeps its checkout (docker/Dockerfile:112 @ v0.7.0)
BASE_CONFIG = "examples/configs/grpo_math_1B.yaml"
LAUNCH_MODULE = "unirl.plugins.nemo_rl.launch"
ENV_NAME = "unirl"  # unirl.adapters.nemo_rl.ENV_NAME; not imported: that module imports nemo_rl
MAX_ROLLOUT_TURNS = 10_000  # above any environment's max_turns (environment.max_turns is at most 10,000)
EXPORT_FORMAT = "nemo_rl_jsonl"
TRAIN_FILE = export_path("train", EXPORT_FORMAT)
EVAL_FILE = export_path("eval", EXPORT_FORMAT)
VAL_BATCH_SIZE = 256  # grpo.val_batch_size in the base config
EVERY_VALIDATION_ROW = 10**9  # validate() stops at the end of its loader (no drop_last, grpo.py:410-416 @ v0.7.0)

P = "policy"
LORA = "policy.dtensor_cfg.lora_cfg"
G = "policy.generation"
KL_TYPE = {"k1": "k1", "k2": "k2", "k3": "k3", "low_var_kl": "k3"}
TOKEN_LEVEL_LOSS = {"token_mean": True, "seq_mean_token_mean": False}
SCHEDULER = "torch.optim.lr_scheduler."


# --- conversions used by the table -------------------------------------------------------------------------


def option(r: Recipe, name: str) -> Any:
    """A plugin option from ``framework.*``, else its default (recipes built in code may omit them)."""
    return r.framework.get(name, NemoRlFramework.extra_options[name])


def total_sequence_length(r: Recipe) -> int:
    """Prompt plus completion, in tokens: the option, else a builtin model's whole context, else unirl's prompt budget
    (:func:`unirl.backend.native.prompt_budget`) + completion."""
    explicit = option(r, "max_total_sequence_length")
    if explicit:
        return int(explicit)
    if r.model.path.startswith(BUILTIN_PREFIX):
        shape = SHAPES.get(r.model.path[len(BUILTIN_PREFIX):], {})
        if "max_position_embeddings" in shape:
            return int(shape["max_position_embeddings"])  # vLLM refuses a max_model_len beyond the model's
    return prompt_budget(r) + r.algorithm.max_new_tokens


def generation_gpus_per_node(r: Recipe) -> int | None:
    """GPUs vLLM gets on each generation node when it is not colocated (None when it is)."""
    if r.rollout.colocated:
        return None
    if r.resources.nodes > 1:
        return r.gpus_per_node  # NeMo RL gives generation whole nodes there (grpo.py:652-660)
    return int(option(r, "generation_gpus_per_node") or r.rollout.tensor_parallel)


def generation_nodes(r: Recipe) -> int | None:
    if r.rollout.colocated or r.resources.nodes == 1:
        return None
    return int(option(r, "generation_nodes") or 1)


def training_gpus(r: Recipe) -> int:
    nodes, per_node = r.resources.nodes, r.gpus_per_node
    if r.rollout.colocated:
        return nodes * per_node
    if nodes == 1:
        return per_node - (generation_gpus_per_node(r) or 0)
    return (nodes - (generation_nodes(r) or 0)) * per_node


def micro_batch(r: Recipe) -> int:
    """Sequences per GPU per forward/backward: the recipe's, else unirl's memory-safe default over the training GPUs
    (:func:`unirl.backend.native.micro_batch`)."""
    return native_micro_batch(r, training_gpus(r))


def logprob_batch(r: Recipe) -> int:
    return logprob_micro_batch(r, training_gpus(r))


def warmup_steps(r: Recipe) -> int:
    """The warm-up in GRPO steps: NeMo RL steps its scheduler once per GRPO step, not per optimizer update."""
    return r.algorithm.warmup_steps // r.algorithm.mini_batches_per_step


def lr_scheduler(r: Recipe) -> list[dict[str, Any]]:
    """``policy.scheduler`` in NeMo RL's list form: schedulers then one ``milestones`` entry (SequentialLR).

    The milestones entry is always present: a list without one leaves ``milestones`` unbound
    (nemo_rl/models/automodel/setup.py:829-846 @ v0.7.0)."""
    warmup = warmup_steps(r)
    decay_steps = max(1, r.algorithm.steps - warmup)
    main: dict[str, Any] = {
        "constant": {"name": SCHEDULER + "ConstantLR", "kwargs": {"factor": 1.0, "total_iters": 1}},
        "linear": {"name": SCHEDULER + "LinearLR",
                   "kwargs": {"start_factor": 1.0, "end_factor": r.algorithm.min_lr_ratio, "total_iters": decay_steps}},
        "cosine": {"name": SCHEDULER + "CosineAnnealingLR",
                   "kwargs": {"T_max": decay_steps, "eta_min": r.algorithm.lr * r.algorithm.min_lr_ratio}},
    }[r.algorithm.lr_schedule]
    if not warmup:
        return [main, {"milestones": []}]
    # torch's LinearLR cannot start at 0: the first step runs at lr / (warmup + 1)
    ramp = {"name": SCHEDULER + "LinearLR",
            "kwargs": {"start_factor": 1.0 / (warmup + 1), "end_factor": 1.0, "total_iters": warmup}}
    return [ramp, main, {"milestones": [warmup]}]


ESTIMATOR = {("group_mean", "group"): ("grpo", OMIT), ("group_mean", "none"): ("grpo", OMIT),
             ("leave_one_out", "none"): ("grpo", OMIT),
             ("group_mean", "batch_whiten"): ("reinforce_plus_plus", True),
             ("none", "batch_whiten"): ("reinforce_plus_plus", False)}
"""(advantage_baseline, advantage_norm) -> (grpo.adv_estimator.name, its minus_baseline)."""


def max_val_samples(r: Recipe) -> int:
    """Held-out prompts per validation: every exported row (validate() runs max_val_samples // val_batch_size
    batches, grpo.py:3164-3170 @ v0.7.0)."""
    rows = r.data.eval_rows
    return math.ceil(rows / VAL_BATCH_SIZE) * VAL_BATCH_SIZE if rows else EVERY_VALIDATION_ROW


def validation_dataset(r: Recipe) -> Any:
    if not r.data.eval:
        return OMIT
    return {"dataset_name": "ResponseDataset", "data_path": EVAL_FILE, "input_key": "input", "output_key": "output"}


def _hub_model(r: Recipe) -> bool:
    return not r.model.path.startswith(BUILTIN_PREFIX) and not is_local_path(r.model.path)


# --- the mapping table ----------------------------------------------------------------------------------------

NO_EARLY_STOP = ("null: NeMo RL 0.7's config has no early stop unirl maps (none in its key schema at v0.7.0); early "
                 "stopping is TRL's (framework=trl)")
"""Why eval.stop_after_plateau and eval.stop_at_accuracy are refused: TRL's runner alone stops early."""

MAPPING: tuple[Mapping, ...] = (
    # algorithm and batch shape
    Mapping("algorithm.steps", "grpo.max_num_steps", lambda r: r.algorithm.steps,
            "the exported train file holds exactly steps x prompts_per_step prompts", native_default=1000000),
    Mapping("algorithm.steps", "grpo.max_num_epochs", lambda r: 1, "one pass over the exported prompts",
            native_default=1),
    Mapping("algorithm.epochs", "(counted by unirl)", lambda r: OMIT, "epochs become steps where the plan counts the "
            "rows", supported=lambda r: not counted_at_launch(r),
            supported_text="epochs over rows the plan can count (a data file on this machine, a builtin dataset); "
                           "otherwise set algorithm.steps: unirl sends NeMo RL a step count"),
    Mapping("algorithm.prompts_per_step", "grpo.num_prompts_per_step", lambda r: r.algorithm.prompts_per_step,
            "NeMo RL counts prompts per step (the dataloader's batch, drop_last=True)", native_default=32),
    Mapping("algorithm.samples_per_prompt", "grpo.num_generations_per_prompt",
            lambda r: r.algorithm.samples_per_prompt, native_default=16),
    Mapping("algorithm.mini_batches_per_step", f"{P}.train_global_batch_size", lambda r: r.completions_per_update,
            "counts sequences per optimizer step: prompts x samples / mini_batches_per_step", native_default=512),
    Mapping("algorithm.micro_batch_size", f"{P}.train_micro_batch_size", micro_batch,
            f"{MICRO_BATCH_NOTE}; with sequence packing it sets the packed token budget, x max_total_sequence_length",
            note_for=lambda r: micro_batch_note(r, training_gpus(r)) + "; with sequence packing it sets the packed "
                                                                      "token budget, x max_total_sequence_length",
            native_default=4),
    Mapping("algorithm.logprob_micro_batch_size", f"{P}.logprob_batch_size", logprob_batch,
            f"{LOGPROB_MICRO_BATCH_NOTE} (the base config interpolates the training one)",
            native_default="${policy.train_micro_batch_size}"),
    Mapping("algorithm.epochs_per_batch", "(one pass per step)", lambda r: 1, allowed=(1,),
            supported_text="epochs_per_batch=1 only: GRPO in NeMo RL trains once on each step's rollouts "
                           "(no PPO epochs key)"),
    # optimizer
    Mapping("algorithm.lr", f"{P}.optimizer.kwargs.lr", lambda r: r.algorithm.lr, native_default=5e-06),
    Mapping("algorithm.lr_schedule", f"{P}.scheduler", lr_scheduler,
            "torch schedulers chained by SequentialLR, stepped once per GRPO step (a step's optimizer updates "
            "share its learning rate)", native_default="LinearLR warm-up over 50 steps, then constant"),
    Mapping("algorithm.warmup_steps", "(policy.scheduler warm-up, GRPO steps)", warmup_steps,
            "optimizer updates / mini_batches_per_step",
            supported=lambda r: r.algorithm.warmup_steps % r.algorithm.mini_batches_per_step == 0,
            supported_text="warmup_steps divisible by mini_batches_per_step: NeMo RL steps its scheduler once "
                           "per GRPO step (dtensor_policy_worker_v2.py:555-557), so warm-up is whole steps"),
    Mapping("algorithm.weight_decay", f"{P}.optimizer.kwargs.weight_decay", lambda r: r.algorithm.weight_decay,
            native_default=0.01),
    Mapping("algorithm.max_grad_norm", f"{P}.max_grad_norm", lambda r: r.algorithm.max_grad_norm or None,
            "0 becomes null: NeMo RL skips clipping on null, while a norm of 0 would zero every gradient",
            native_default=1.0),
    # loss
    Mapping("algorithm.kl_coef", "loss_fn.reference_policy_kl_penalty", lambda r: r.algorithm.kl_coef,
            native_default=0.01),
    Mapping("algorithm.kl_coef", "+grpo.skip_reference_policy_logprobs_calculation",
            lambda r: r.algorithm.kl_coef == 0, "no KL term: the reference policy's log-probs are not computed "
            "(grpo.py:439-444)", native_default=False),
    Mapping("algorithm.kl_estimator", "loss_fn.reference_policy_kl_type", lambda r: KL_TYPE[r.algorithm.kl_estimator],
            "low_var_kl is k3; NeMo RL clamps it like verl (kl_output_clamp_value=10)", native_default="k3"),
    Mapping("algorithm.clip_low", "loss_fn.ratio_clip_min", lambda r: r.algorithm.clip_low, native_default=0.2),
    Mapping("algorithm.clip_high", "loss_fn.ratio_clip_max", lambda r: r.algorithm.clip_high or r.algorithm.clip_low,
            native_default=0.2),
    Mapping("algorithm.loss_aggregation", "loss_fn.token_level_loss",
            lambda r: TOKEN_LEVEL_LOSS[r.algorithm.loss_aggregation],
            "true: mean over the global batch's tokens; false: token mean per sequence, then over sequences",
            allowed=tuple(TOKEN_LEVEL_LOSS),
            supported_text="token_mean (token_level_loss=true) and seq_mean_token_mean (token_level_loss=false); "
                           "NeMo RL has no sum-per-sequence / max-length normalisation (Dr. GRPO)",
            native_default=True),
    Mapping("algorithm.entropy_coef", "(no entropy bonus)", lambda r: 0.0, allowed=(0.0,),
            supported_text="entropy_coef=0 only: ClippedPGLossFn has no entropy term (it logs approx_entropy)"),
    # advantages: standard GRPO = group mean baseline (NeMo RL defaults to leave-one-out), optionally / group std
    *advantage_rows(
        ESTIMATOR, "grpo.adv_estimator.name", lambda r: ESTIMATOR[pair(r)][0],
        "grpo (group mean or leave-one-out, / group std or not) or reinforce_plus_plus (group mean or none, then "
        "token whitening over the batch) (nemo_rl/algorithms/advantage_estimator.py:53-230 @ v0.7.0)",
        "with a leave-one-out baseline NeMo RL divides by the std of the other samples, not the group's, and PPO with "
        "a critic is another entry point (examples/run_ppo.py), not this GRPO plan", native_default="grpo"),
    Mapping("algorithm.advantage_norm", "grpo.normalize_rewards", lambda r: r.algorithm.advantage_norm == "group",
            native_default=True),
    Mapping("algorithm.advantage_norm", "grpo.adv_estimator.normalize_rewards",
            lambda r: r.algorithm.advantage_norm == "group",
            "the estimator reads grpo.adv_estimator.* (grpo.py:1791-1801); set with the top-level key",
            native_default="${grpo.normalize_rewards}"),
    Mapping("algorithm.advantage_baseline", "grpo.use_leave_one_out_baseline",
            lambda r: r.algorithm.advantage_baseline == "leave_one_out",
            "group_mean: the group mean including the sample itself; NeMo RL defaults to leave-one-out",
            native_default=True),
    Mapping("algorithm.advantage_baseline", "grpo.adv_estimator.use_leave_one_out_baseline",
            lambda r: r.algorithm.advantage_baseline == "leave_one_out",
            native_default="${grpo.use_leave_one_out_baseline}"),
    Mapping("algorithm.advantage_baseline", "grpo.adv_estimator.minus_baseline",
            lambda r: ESTIMATOR[pair(r)][1] if pair(r) in ESTIMATOR else OMIT,
            "reinforce_plus_plus: subtract the group mean (REINFORCE++-baseline, NeMo RL's default) or not",
            native_default=True),
    Mapping("algorithm.kl_placement", "loss_fn.use_kl_in_reward", lambda r: False,
            supported=lambda r: r.algorithm.kl_coef == 0 or r.algorithm.kl_placement == "loss",
            supported_text="loss (or kl_coef=0): NeMo RL's grpo estimator drops an in-reward KL entirely, and its "
                           "reinforce_plus_plus subtracts each token's KL from that token alone, without the later "
                           "tokens' (advantage_estimator.py:158-230), unlike the discounted returns of verl and "
                           "OpenRLHF", native_default=False),
    Mapping("algorithm.importance_sampling_level", "loss_fn.sequence_level_importance_ratios",
            lambda r: r.algorithm.importance_sampling_level == "sequence",
            supported=lambda r: r.algorithm.importance_sampling_level == "token"
            or r.algorithm.loss_aggregation == "seq_mean_token_mean",
            supported_text="sequence only with loss_aggregation=seq_mean_token_mean: NeMo RL asserts "
                           "token_level_loss=false for sequence-level ratios (loss_functions.py:249-252)",
            native_default=False),
    Mapping("algorithm.dual_clip", "loss_fn.ratio_clip_c", lambda r: r.algorithm.dual_clip, native_default=None),
    Mapping("algorithm.reward_clip", "(no reward clipping)", lambda r: None, allowed=(None,),
            supported_text="null: NeMo RL's grpo.reward_scaling maps a range linearly, it does not clip"),
    Mapping("algorithm.dynamic_sampling", "grpo.use_dynamic_sampling", lambda r: r.algorithm.dynamic_sampling,
            "drops groups whose rewards have zero std and generates more batches, up to "
            "grpo.dynamic_sampling_max_gen_batches (10) per step", native_default=False),
    Mapping("algorithm.overlong_filter", "grpo.overlong_filtering", lambda r: r.algorithm.overlong_filter,
            "truncated samples are left out of the loss", native_default=False),
    Mapping("algorithm.overlong_buffer", "grpo.reward_shaping.enabled", lambda r: bool(r.algorithm.overlong_buffer),
            "NeMo RL's DAPO reward shaping, applied to unirl's reward", native_default=False),
    Mapping("algorithm.overlong_buffer", "grpo.reward_shaping.overlong_buffer_length",
            lambda r: r.algorithm.overlong_buffer or OMIT, native_default=128),
    Mapping("algorithm.overlong_penalty", "grpo.reward_shaping.overlong_buffer_penalty",
            lambda r: r.algorithm.overlong_penalty if r.algorithm.overlong_buffer else OMIT, native_default=1),
    Mapping("algorithm.overlong_buffer", "grpo.reward_shaping.max_response_length",
            lambda r: r.algorithm.max_new_tokens if r.algorithm.overlong_buffer else OMIT,
            native_default="${policy.max_total_sequence_length}"),
    Mapping("algorithm.rollout_correction", "loss_fn.use_importance_sampling_correction",
            lambda r: r.algorithm.rollout_correction == "token", allowed=("none", "token"),
            supported_text="none or token: NeMo RL's sequence variant (seq-mask-tis) masks, it does not truncate",
            native_default=False),
    Mapping("algorithm.rollout_correction", "loss_fn.truncated_importance_sampling_type",
            lambda r: "tis" if r.algorithm.rollout_correction == "token" else OMIT, native_default=None),
    Mapping("algorithm.rollout_correction_cap", "loss_fn.truncated_importance_sampling_ratio",
            lambda r: r.algorithm.rollout_correction_cap if r.algorithm.rollout_correction == "token" else OMIT,
            native_default=None),
    Mapping("algorithm.min_lr_ratio", "(policy.scheduler floor)", lambda r: r.algorithm.min_lr_ratio,
            "linear: end_factor; cosine: eta_min = lr x min_lr_ratio",
            supported=lambda r: r.algorithm.min_lr_ratio == 0 or r.algorithm.lr_schedule != "constant",
            supported_text="0 with lr_schedule=constant"),
    # generation
    Mapping("algorithm.temperature", f"{G}.temperature", lambda r: r.algorithm.temperature, native_default=1.0),
    Mapping("algorithm.top_p", f"{G}.top_p", lambda r: r.algorithm.top_p, native_default=1.0),
    Mapping("algorithm.max_new_tokens", f"{G}.max_new_tokens", lambda r: r.algorithm.max_new_tokens,
            native_default="${policy.max_total_sequence_length}"),
    Mapping("algorithm.max_new_tokens", f"{P}.max_total_sequence_length", total_sequence_length,
            "prompt + completion; also vLLM's max_model_len and the prompt limit data.max_input_seq_length "
            "(interpolated); framework.max_total_sequence_length sets it", native_default=512),
    Mapping("rollout.engine", f"{G}.backend", lambda r: "vllm", native_default="vllm"),
    Mapping("rollout.tensor_parallel", f"{G}.vllm_cfg.tensor_parallel_size", lambda r: r.rollout.tensor_parallel,
            native_default=1),
    Mapping("rollout.gpu_memory_fraction", f"{G}.vllm_cfg.gpu_memory_utilization",
            lambda r: r.rollout.gpu_memory_fraction, native_default=0.6),
    Mapping("rollout.colocated", f"{G}.colocated.enabled", lambda r: r.rollout.colocated, native_default=True),
    Mapping("rollout.colocated", f"{G}.colocated.resources.gpus_per_node",
            lambda r: OMIT if r.rollout.colocated else generation_gpus_per_node(r),
            "vLLM's own GPUs per node: framework.generation_gpus_per_node, else rollout.tensor_parallel "
            "(whole nodes on several nodes)", native_default=None),
    Mapping("rollout.colocated", f"{G}.colocated.resources.num_nodes",
            lambda r: OMIT if generation_nodes(r) is None else generation_nodes(r),
            "nodes given to vLLM on a multi-node run: framework.generation_nodes, else 1", native_default=None),
    # data: the exported JSONL through NeMo RL's ResponseDataset and math_hf_data_processor
    Mapping("data.train", "data.train.dataset_name", lambda r: "ResponseDataset", native_default="OpenMathInstruct-2"),
    Mapping("data.train", "+data.train.data_path", lambda r: TRAIN_FILE, "exported by unirl in NeMo RL's row format"),
    Mapping("data.train", "+data.train.input_key", lambda r: "input"),
    Mapping("data.train", "+data.train.output_key", lambda r: "output"),
    Mapping("data.train", "data.train.split_validation_size", lambda r: 0.0,
            "no 5% of the training prompts is held back: held-out data is data.eval", native_default=0.05),
    Mapping("data.train", "data.shuffle", lambda r: False, "the exported order is already the seeded order",
            native_default=True),
    Mapping("data.eval", "data.validation", validation_dataset, "the exported held-out file, if any",
            native_default=None),
    Mapping("data.prompt_template", "data.default.prompt_file", lambda r: None,
            "unirl renders the prompt; NeMo RL's chain-of-thought template would wrap it again",
            native_default="examples/prompts/cot.txt"),
    Mapping("data.chat_template", "data.default.processor", lambda r: "math_hf_data_processor", allowed=(True,),
            supported_text="data.chat_template=true only: math_hf_data_processor always renders the prompt with "
                           "the tokenizer's chat template (nemo_rl/data/processors.py:408-413)",
            native_default="math_hf_data_processor"),
    Mapping("data.max_prompt_tokens", "(data.max_input_seq_length)", prompt_budget, allowed=(None,),
            note=f"null: unirl's default prompt budget of {DEFAULT_PROMPT_TOKENS} tokens, sent as part of "
                 "policy.max_total_sequence_length (= budget + max_new_tokens)",
            note_for=lambda r: prompt_budget_note(r, "sent as part of policy.max_total_sequence_length "
                                                     f"({total_sequence_length(r)} = budget + max_new_tokens, unless "
                                                     "framework.max_total_sequence_length or a builtin model's "
                                                     "context sets it)"),
            supported_text="null only: NeMo RL does not cut long prompts from the left; a prompt reaching "
                           "data.max_input_seq_length is cut to 4 tokens and masked out of the loss "
                           "(processors.py:427-433); size framework.max_total_sequence_length instead"),
    Mapping("rewards", "data.default.env_name", lambda r: ENV_NAME, "unirl's reward environment, registered by "
            "unirl.plugins.nemo_rl.launch", native_default="math"),
    Mapping("rewards", f"+env.{ENV_NAME}.unirl_spec", lambda r: SPEC_PATH,
            "the run's reward spec reaches the environment actor"),
    Mapping("seed", "grpo.seed", lambda r: r.seed, native_default=42),
    # model
    Mapping("model.path", f"{P}.model_name", model_location, "the tokenizer follows (policy.tokenizer.name)",
            native_default="Qwen/Qwen2.5-1.5B"),
    Mapping("model.revision", "(no revision key)", lambda r: None,
            supported=lambda r: r.model.revision is None or not _hub_model(r),
            supported_text="model.revision=null for hub models: NeMo RL loads policy.model_name at the hub's "
                           "default revision; download the revision and give its directory as model.path"),
    Mapping("model.dtype", f"{P}.precision",
            lambda r: OMIT if r.model.dtype == "auto" else r.model.dtype, "auto: NeMo RL's bfloat16 "
            "(weights kept in float32 for the optimizer, automodel/setup.py:328-331)", native_default="bfloat16"),
    # LoRA on the DTensor v2 worker (NeMo Automodel's PEFT: nemo_rl/models/automodel/setup.py:667-673 @ v0.7.0); the
    # refit merges the adapter into the weights vLLM gets (dtensor_policy_worker_v2.py:98-101, 143-150)
    Mapping("model.lora.rank", f"{LORA}.enabled", lambda r: r.model.lora.on, native_default=False),
    Mapping("model.lora.rank", f"{LORA}.dim", lambda r: r.model.lora.rank if r.model.lora.on else OMIT,
            "Automodel's rank (lora_A: in -> dim, lora_B: dim -> out)", native_default=8),
    Mapping("model.lora.alpha", f"{LORA}.alpha", lambda r: r.model.lora.alpha if r.model.lora.on else OMIT,
            "scale alpha / dim, as PEFT's", native_default=32),
    Mapping("model.lora.dropout", f"{LORA}.dropout", lambda r: r.model.lora.dropout if r.model.lora.on else OMIT,
            native_default=0.0),
    Mapping("model.lora.dropout", f"{LORA}.dropout_position", lambda r: "pre" if r.model.lora.on else OMIT,
            "pre: on the adapter's input, as PEFT's lora_dropout (NeMo RL's default is post: on its output)",
            native_default="post"),
    Mapping("model.lora.target_modules", f"{LORA}.match_all_linear", lambda r: False if r.model.lora.on else OMIT,
            "off: Automodel's match_all_linear also adapts lm_head, which PEFT's all-linear leaves out",
            native_default=True),
    Mapping("model.lora.target_modules", f"{LORA}.target_modules",
            lambda r: [] if not r.model.lora.on or r.model.lora.peft_target_modules() == ALL_LINEAR
            else list(r.model.lora.target_modules), "module names, matched as PEFT does (by the module's own name)",
            native_default=[]),
    Mapping("model.lora.target_modules", f"{LORA}.exclude_modules",
            lambda r: ["lm_head"] if r.model.lora.on and r.model.lora.peft_target_modules() == ALL_LINEAR else OMIT,
            "all-linear: every linear layer but lm_head (Automodel's fallback when only exclude_modules is set)",
            native_default=[]),
    Mapping("model.lora.modules_to_save", "(no modules_to_save)", lambda r: OMIT,
            supported=lambda r: not r.model.lora.modules_to_save,
            supported_text="[]: NeMo RL's lora_cfg has no modules to train in full beside the adapters "
                           "(nemo_rl/models/policy/__init__.py LoRAConfig @ v0.7.0)"),
    Mapping("resources.gradient_checkpointing", f"{P}.dtensor_cfg.activation_checkpointing",
            lambda r: r.resources.gradient_checkpointing, native_default=False),
    # resources
    Mapping("resources.nodes", "cluster.num_nodes", lambda r: r.resources.nodes, native_default=1),
    Mapping("resources.gpus_per_node", "cluster.gpus_per_node", lambda r: r.gpus_per_node,
            native_default=1),
    # held-out evaluation = NeMo RL's validation
    Mapping("eval.every_steps", "grpo.val_period", lambda r: r.eval.every_steps if r.data.eval else 0,
            "0: only before (eval.before_training) and after training", native_default=10),
    Mapping("eval.before_training", "grpo.val_at_start", lambda r: bool(r.eval.before_training and r.data.eval),
            native_default=False),
    Mapping("data.eval", "grpo.val_at_end", lambda r: bool(r.data.eval), "unirl always evaluates at the end",
            native_default=False),
    Mapping("data.eval_rows", "grpo.max_val_samples", max_val_samples,
            "every exported held-out prompt, rounded up to whole validation batches of 256", native_default=256),
    Mapping("eval.greedy", "(validation sampling)", lambda r: False,
            supported=lambda r: not (r.eval.greedy and r.data.eval),
            supported_text="eval.greedy=false: NeMo RL 0.7 validates by sampling at policy.generation.temperature "
                           "(validate() passes greedy=False, grpo.py:3186-3210)"),
    # eval.stop_after_plateau / eval.stop_at_accuracy: no early stop here (a value is refused, never dropped)
    Mapping("eval.stop_after_plateau", "(no early stop)", lambda r: None,
            supported=lambda r: r.eval.stop_after_plateau is None, supported_text=NO_EARLY_STOP, native_default=None),
    Mapping("eval.stop_at_accuracy", "(no early stop)", lambda r: None,
            supported=lambda r: r.eval.stop_at_accuracy is None, supported_text=NO_EARLY_STOP, native_default=None),
    Mapping("eval.keep_best", "(no best-checkpoint selection)", lambda r: None,
            supported=lambda r: not r.eval.keep_best,
            supported_text="false: the run ends with its last weights (unirl selects the best held-out "
                           "evaluation's weights on TRL only)", native_default=False),
    # checkpoints and logs, all inside the run directory
    Mapping("run.checkpoint_every", "checkpointing.save_period", lambda r: r.run.checkpoint_every or r.algorithm.steps,
            "0: only the last step (NeMo RL always saves the last step; a period of 0 would divide by zero)",
            native_default=10),
    Mapping("run.checkpoint_every", "checkpointing.checkpoint_dir", lambda r: CHECKPOINTS,
            native_default="results/grpo"),
    Mapping("run.checkpoint_every", "checkpointing.metric_name", lambda r: None,
            "null: keep the newest checkpoints, not the best by a validation metric", native_default="val:accuracy"),
    Mapping("run.resume", "(checkpointing.checkpoint_dir)", lambda r: r.run.resume,
            "NeMo RL resumes from the newest checkpoint in checkpoint_dir whenever there is one (grpo.py:320); "
            "a new run directory has none"),
    Mapping("run.name", "logger.wandb.name", lambda r: r.run.name, native_default="grpo-dev-logger"),
    Mapping("logging.every_steps", "logger.log_dir", lambda r: in_run_dir("logs"),
            "NeMo RL logs every step into a new exp_NNN folder here; unirl's cadence applies to its own records",
            native_default="logs"),
    # The TensorBoard logger writes <log_dir>/exp_NNN/tensorboard/ (nemo_rl/utils/logger.py:974-981, run_grpo.py:90,
    # v0.7.0); unirl's follower reads every event file under the log directory.
    Mapping("logging.every_steps", "logger.tensorboard_enabled", lambda r: True,
            "NeMo RL's TensorBoard events, which unirl's follower reads into metrics.jsonl", native_default=False),
    # An environment runs in unirl's environment actor, turn by turn (unirl/adapters/nemo_rl_episodes.py): NeMo RL
    # drives the turns (nemo_rl/experience/rollouts.py:574-826 @ v0.7.0) and the actor ends each episode.
    Mapping("environment.name", f"+env.{ENV_NAME}.unirl_environment",
            lambda r: in_run_dir(ENVIRONMENT_SPEC_FILE) if r.environment.name else OMIT,
            "the run's environment reaches unirl's environment actor, which keeps each episode's state",
            native_default=None),
    Mapping("environment.name", f"+env.{ENV_NAME}.tokenizer", lambda r: model_location(r) if r.environment.name
            else OMIT, "the policy's tokenizer: the actor renders observations with its chat template (NeMo RL "
            "tokenizes them raw, rollouts.py:722-726)", native_default=None),
    Mapping("environment.max_turns", "grpo.max_rollout_turns",
            lambda r: (r.environment.max_turns or MAX_ROLLOUT_TURNS) if r.environment.name else OMIT,
            "NeMo RL's turn cap, at or above the environment's: the environment ends each episode itself (its "
            "max_turns, done, or the episode's token budget); null: the environment's own max_turns",
            native_default=1),
)


class NemoRlFramework(NativeFramework):
    name = NAME
    description = "NeMo RL (NVIDIA): Ray single controller, DTensor/Megatron training, vLLM rollouts; GPU only"
    capabilities = CAPABILITIES
    mapping = MAPPING
    plugin_package = "unirl.plugins.nemo_rl"
    parity = ParityHarness(None, why_not="NeMo RL is not on the package index (it needs Python 3.13 and CUDA): its "
                           "loss code cannot run here, and no reproduction of it is certified")
    check_module = None  # NeMo RL needs Python 3.13 and GPUs: plans are checked against the key schema
    export_format = EXPORT_FORMAT
    supported_versions = SUPPORTED_VERSIONS
    supported_versions_text = ("the data.train/data.default layout and examples/run_grpo.py this plugin's mapping and "
                               "key schema are written for; a newer main checkout such as 7ea279a takes every key "
                               "sent, so translate for it as 0.7.0")
    extra_options: ClassVar[dict[str, Any]] = {
        "repo": DEFAULT_REPO,
        "base_config": BASE_CONFIG,
        "max_total_sequence_length": None,
        "generation_gpus_per_node": None,
        "generation_nodes": None,
    }

    def rollout_engine_gpus(self, recipe: Recipe) -> int:
        """vLLM's world: every GPU when colocated, else the generation GPUs per node x generation nodes
        (the tensor-parallel degree must divide it, nemo_rl/models/generation/vllm/vllm_generation.py:108-114)."""
        if recipe.rollout.colocated:
            return recipe.total_gpus
        return (generation_gpus_per_node(recipe) or 0) * (generation_nodes(recipe) or 1)

    def extra_problems(self, recipe: Recipe) -> list[FieldError]:
        return _resource_problems(recipe) + _twin_problems(recipe)

    def apply_overrides(self, native: dict[str, Any], raw: list[MappedField]) -> dict[str, Any]:
        """An override of one key of a pinned pair (:data:`TWIN_KEYS`) sets its twin too, so the two stay equal."""
        native = super().apply_overrides(native, raw)
        for row in raw:
            twin = TWIN_KEYS.get(row.native_key)
            if twin is not None:
                native[twin] = row.value
        return native

    def overrides(self, recipe: Recipe) -> list[MappedField]:
        rows = super().overrides(recipe)
        return [replace(row, note=f"{row.note}; sets {TWIN_KEYS[row.native_key]} too (NeMo RL reads both)")
                if row.native_key in TWIN_KEYS else row for row in rows]

    def native_config(self, recipe: Recipe, native: dict[str, Any], version: str) -> dict[str, Any]:
        return {"base_config": str(option(recipe, "base_config")), "overrides": native}

    def command(self, recipe: Recipe, native: dict[str, Any], version: str) -> list[str]:
        return ["python", "-m", LAUNCH_MODULE, "--repo", str(option(recipe, "repo")), "--config",
                str(option(recipe, "base_config")), *to_overrides(native)]

    def notes(self, recipe: Recipe) -> list[str]:
        repo, base_config = str(option(recipe, "repo")), str(option(recipe, "base_config"))
        notes = [
            "launched through unirl.plugins.nemo_rl.launch, which registers the 'unirl' environment and then runs "
            f"{repo}/examples/run_grpo.py unchanged, from {repo} (NeMo RL's prompt files are relative to it)",
            "math_hf_data_processor renders every prompt with the model's chat template; a chat prompt must be one "
            "user message, and the reference answer reaches the rewards as metadata['ground_truth']",
            "ResponseDataset keeps only the input and output columns: rewards see no data_source or extra columns",
            "prompts are exported in the seeded order unirl uses for every backend; NeMo RL's shuffle is off",
            "advantages group completions by identical prompt tokens (torch.unique over the prompts): a prompt "
            "drawn twice in one step forms one larger group",
            "held-out evaluation is NeMo RL's validation: sampled completions, val:accuracy = mean total reward",
        ]
        if base_config != BASE_CONFIG:
            notes.append(f"framework.base_config={base_config}: the key schema describes {BASE_CONFIG} only, so "
                         "the overrides are not checked against it")
        return notes

    def schema_problems(self, plan: LaunchPlan) -> list[str]:
        from unirl.plugins.nemo_rl.schema import cross_field_problems, key_problems, merged_config

        if plan.native_config.get("base_config") != BASE_CONFIG:
            return []
        overrides = plan.native_config["overrides"]
        problems = key_problems(overrides, self.plan_tables_version(plan))
        if problems:
            return problems  # the cross-field checks assume every key exists with its type
        return cross_field_problems(merged_config(overrides))


_PAIRS = (("grpo.use_leave_one_out_baseline", "grpo.adv_estimator.use_leave_one_out_baseline"),
          ("grpo.normalize_rewards", "grpo.adv_estimator.normalize_rewards"))
TWIN_KEYS = {**dict(_PAIRS), **{b: a for a, b in _PAIRS}}
"""Keys unirl pins in pairs: the advantage estimator reads ``grpo.adv_estimator.*`` (grpo.py:1791-1801 @ v0.7.0)
while other code reads the top-level key, and the base config's interpolation between them is replaced by the
explicit values unirl sends, so an override of one alone would leave the two disagreeing."""


def _twin_problems(r: Recipe) -> list[FieldError]:
    """Both keys of a pair overridden with different values: no consistent configuration honours both."""
    from unirl.backend.native import flatten

    raw = flatten(r.framework.get("overrides") or {})
    problems: list[FieldError] = []
    for a, b in _PAIRS:
        if a in raw and b in raw and raw[a] != raw[b]:
            problems.append(FieldError(f"framework.overrides.{a}", raw[a],
                                       f"the same value as framework.overrides.{b}={raw[b]!r}: NeMo RL reads both "
                                       "keys (grpo.py:1791-1801 @ v0.7.0) and they must agree; override one of them "
                                       "(unirl sets its twin) or both alike"))
    return problems


def _resource_problems(r: Recipe) -> list[FieldError]:
    """What NeMo RL checks only once Ray is up: generation GPUs, the sequence budget, and batch splits."""
    problems: list[FieldError] = []
    if r.gpus_per_node < 1:
        return problems  # already refused by common_problems
    if not r.rollout.colocated:
        gen = generation_gpus_per_node(r) or 0
        if r.resources.nodes == 1 and gen >= r.gpus_per_node:
            problems.append(FieldError(
                "rollout.colocated", False,
                f"non-colocated vLLM takes {gen} of the node's {r.gpus_per_node} GPUs and leaves none "
                "to train on (grpo.py:636-641); raise resources.gpus_per_node or lower "
                "framework.generation_gpus_per_node"))
        if r.resources.nodes > 1 and (generation_nodes(r) or 0) >= r.resources.nodes:
            problems.append(FieldError(
                "framework.generation_nodes", generation_nodes(r),
                f"must leave at least one of the {r.resources.nodes} nodes to train on (grpo.py:662-665)"))
    if r.algorithm.max_new_tokens >= total_sequence_length(r):
        problems.append(FieldError(
            "algorithm.max_new_tokens", r.algorithm.max_new_tokens,
            f"must be below policy.max_total_sequence_length={total_sequence_length(r)} (prompt + completion); "
            "set framework.max_total_sequence_length"))
    train = training_gpus(r)
    if train > 0 and r.completions_per_step % r.algorithm.mini_batches_per_step == 0:
        per_update = r.completions_per_update
        if per_update % train:
            problems.append(FieldError(
                "algorithm.mini_batches_per_step", r.algorithm.mini_batches_per_step,
                f"each optimizer step's {per_update} sequences must split evenly over the {train} training GPUs "
                "(nemo_rl/distributed/batched_data_dict.py:398-400)"))
        elif r.algorithm.micro_batch_size and (per_update // train) % r.algorithm.micro_batch_size:
            problems.append(FieldError(
                "algorithm.micro_batch_size", r.algorithm.micro_batch_size,
                f"must divide the {per_update // train} sequences each training GPU gets per optimizer step"))
    return problems
