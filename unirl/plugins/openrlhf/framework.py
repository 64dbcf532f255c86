"""OpenRLHF 0.11 as a unirl backend: capabilities, the recipe -> dotted-flag mapping table, plan, validate.

OpenRLHF is launched as ``python -m openrlhf.cli.train_ppo_ray <flags>``. Since 0.10.2 its flags are
dotted (``--rollout.n_samples_per_prompt``); the flat names of earlier releases are errors there. Flags
are rendered from the *installed* version's own parser (a schema snapshot per version, checked against
the live parser by a test), always by their full names: argparse accepts prefixes, so an abbreviated or
stale flag could silently mean another option.

Batch semantics, converted honestly: ``--rollout.batch_size`` counts prompts per step,
``--train.batch_size`` counts *completions* per optimizer update, ``--train.micro_batch_size`` and
``--rollout.micro_batch_size`` count completions per GPU. OpenRLHF has no step count: it makes one pass
(``--train.num_episodes 1``) over the exported prompt file, which holds exactly steps x prompts_per_step.
"""

from __future__ import annotations

import functools
import json
import math
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend.advantage_rows import advantage_rows, critic_model, pair, uses_critic
from unirl.backend.contract import OMIT, Capabilities, Mapping, NativeView, store_true
from unirl.backend.export import export_path
from unirl.backend.native import (
    CHECKPOINTS,
    DEFAULT_PROMPT_TOKENS,
    GPU_ON_RAY,
    LOGPROB_MICRO_BATCH_NOTE,
    MICRO_BATCH_NOTE,
    SPEC_FILE,
    NativeFramework,
    logprob_micro_batch,
    micro_batch,
    micro_batch_note,
    model_location,
    prompt_budget,
    prompt_budget_note,
)
from unirl.backend.parity.certificate import Design, ParityHarness
from unirl.backend.plan import RUN_DIR, LaunchPlan, in_run_dir
from unirl.data.checks import DATA_SUFFIXES
from unirl.data.run_length import counted_at_launch
from unirl.environments.runtime import ENVIRONMENT_SPEC_FILE
from unirl.errors import FieldError, UnirlError, Unsupported
from unirl.recipe.schema import Recipe
from unirl.record.metrics_bridge import TB_DIR

NAME = "openrlhf"
CAPABILITIES = Capabilities(
    **GPU_ON_RAY,
    native_algorithms=("PPO", "GRPO (group_norm)", "Dr. GRPO", "REINFORCE++", "REINFORCE++-baseline", "RLOO",
                       "GSPO loss", "DPO/SFT/RM (other entry points)"),
    algorithms=("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo"),
    rollout_engines=("vllm",),
    placement=("colocated (--train.colocate_all, hybrid engine)", "disaggregated (vLLM engines on their own GPUs)"),
    modes=("sync", "async (--train.async_enable)"),
    training_backends=("DeepSpeed (ZeRO 1-3, AutoTP, ring attention)",),
    multi_node="Ray cluster (ray start; ray job submit python -m openrlhf.cli.train_ppo_ray)",
    custom_reward="--reward.remote_url: a .py file with reward_func(queries, prompts, labels) or an HTTP URL",
    async_rollouts=True,
    distribution="openrlhf",
    tested_version="0.11.2",
    install="pip install 'openrlhf[vllm]==0.11.2' (flash-attn and vLLM need CUDA) or the nvcr.io PyTorch image + pip",
    image="nvcr.io/nvidia/pytorch:25.02-py3",
)
SUPPORTED_VERSIONS = ">=0.10.2,<0.12"
REWARD_FILE = "openrlhf_reward.py"
AGENT_FILE = "openrlhf_agent.py"
EXPORT_FORMAT = "openrlhf_jsonl"

KL_ESTIMATOR = {"k1": "k1", "k2": "k2", "k3": "k3", "low_var_kl": "k3"}
LOSS_AGG = {"token_mean": "token-mean", "seq_mean_token_mean": "seq-mean-token-mean"}
# (advantage_baseline, advantage_norm) -> --algo.advantage.estimator (openrlhf/trainer/ppo_utils/experience_maker.py
# :265-338 @ 0.11.2): group_norm (r - mean) / (std + 1e-9); dr_grpo r - mean; rloo leave-one-out; reinforce_baseline
# r - mean, then token-weighted whitening over the batch; reinforce (no baseline) and gae (critic) whitened likewise.
ESTIMATOR = {("group_mean", "group"): "group_norm", ("group_mean", "none"): "dr_grpo",
             ("group_mean", "batch_whiten"): "reinforce_baseline", ("leave_one_out", "none"): "rloo",
             ("none", "batch_whiten"): "reinforce", ("critic", "batch_whiten"): "gae"}
NO_REWARD_CLIP = [-1e9, 1e9]
"""--reward.clip_range for rewards that are never clipped: OpenRLHF clips to (-10, 10) unless told
(train_ppo_ray.py:474)."""
LR_SCHEDULE = {"constant": "constant", "linear": "linear", "cosine": "cosine_with_min_lr"}
PARAM_DTYPE = {"auto": "bf16", "bfloat16": "bf16", "float16": "fp16"}


def train_gpus_per_node(r: Recipe) -> int:
    """The actor's GPUs per node: all of them when colocated, else what the rollout engines leave, which a critic
    shares half and half (outside --train.colocate_all OpenRLHF places the critic on GPUs of its own,
    train_ppo_ray.py:105-129 @ 0.11.2)."""
    training = training_gpus_per_node(r)
    return training // 2 if not r.rollout.colocated and uses_critic(r) else training


def training_gpus_per_node(r: Recipe) -> int:
    """The GPUs per node the rollout engines leave to training (the actor's, and a critic's outside colocation)."""
    return (r.total_gpus - r.rollout_gpus) // r.resources.nodes


def vllm_engines(r: Recipe) -> int:
    gpus = r.total_gpus if r.rollout.colocated else r.rollout_gpus
    return gpus // r.rollout.tensor_parallel


def updates(r: Recipe) -> int:
    """Optimizer updates in the whole run: OpenRLHF's scheduler horizon."""
    return r.algorithm.steps * r.algorithm.mini_batches_per_step * r.algorithm.epochs_per_batch


def warmup_known(r: Recipe) -> bool:
    """A warm-up needs the run's updates (OpenRLHF takes it as a ratio of them): unknown while OpenRLHF itself counts
    the steps of algorithm.epochs."""
    return not r.algorithm.warmup_steps or not counted_at_launch(r)


def warmup_ratio(r: Recipe) -> float:
    """``--actor.lr_warmup_ratio`` that OpenRLHF turns back into exactly ``warmup_steps`` optimizer updates.

    OpenRLHF warms up for ``math.ceil(scheduler_steps * lr_warmup_ratio)`` updates (openrlhf/utils/deepspeed/
    deepspeed.py:367-383 @ 0.11.2), ``scheduler_steps`` being every optimizer update of the run (ppo_trainer.py:72-78).
    The plain quotient can land one ulp above the integer (7 / 25 * 25 = 7.000000000000001, a warm-up of 8), so the
    ratio is lowered by ulps until the product rounds up to the recipe's count."""
    warmup, total = r.algorithm.warmup_steps, updates(r)
    if not warmup:
        return 0.0
    ratio = warmup / total
    while ratio > 0 and math.ceil(total * ratio) > warmup:
        ratio = math.nextafter(ratio, 0.0)
    return ratio


def lr_scheduler(r: Recipe) -> str:
    """transformers' ``constant`` schedule ignores ``num_warmup_steps`` (transformers/optimization.py get_scheduler:
    ``if name == SchedulerType.CONSTANT: return schedule_func(optimizer)``), so a warm-up needs constant_with_warmup."""
    if r.algorithm.lr_schedule == "constant" and r.algorithm.warmup_steps:
        return "constant_with_warmup"
    return LR_SCHEDULE[r.algorithm.lr_schedule]


# --- `unirl import openrlhf`: the inverses of the rows that are more than a rename (unirl.backend.importing) ---------


def _whole(value: Any, per: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not isinstance(per, int) or per <= 0 or value % per:
        raise ValueError(f"{value!r} is not a whole multiple of {what} ({per!r})")
    return value // per


def _exported(view: NativeView, key: str) -> bool:
    """The key names unirl's own export (a plan read back), not the user's data."""
    return str(view.get(key) or "").startswith(RUN_DIR)


def mini_batches_from(value: Any, view: NativeView) -> dict[str, Any]:
    """--train.batch_size counts completions per optimizer update (the row's note)."""
    completions = int(view.field("algorithm.prompts_per_step")) * int(view.field("algorithm.samples_per_prompt"))
    return {"algorithm.mini_batches_per_step": _whole(completions, value, "--train.batch_size")}


DEFAULT_MAX_SAMPLES = 100_000_000
"""--data.max_samples's default (train_ppo_ray.py:405 @ 0.11.2): every row."""


def max_samples_from(value: Any, view: NativeView) -> dict[str, Any]:
    """--data.max_samples below its default caps the rows (:func:`episodes_from` reads it with the episodes)."""
    if isinstance(value, int) and 0 < value < DEFAULT_MAX_SAMPLES and view.get("train.num_episodes") != 1:
        return {"data.train_rows": value}
    return {}


def episodes_from(value: Any, view: NativeView) -> dict[str, Any]:
    """--train.num_episodes passes over the first --data.max_samples rows (ppo_trainer.py:26-83, 520-540 @ 0.11.2).

    One episode over a whole number of rollout batches is that many steps (what unirl's own plans send: the file
    it exports holds exactly those rows); otherwise the recipe's epochs over at most data.train_rows rows, exact
    whatever the dataset's size, which an import cannot know."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{value!r}: a number of passes over the prompts")
    samples = view.get("data.max_samples")
    limited = isinstance(samples, int) and 0 < samples < DEFAULT_MAX_SAMPLES
    per_step = view.field("algorithm.prompts_per_step")
    if value == 1 and limited and isinstance(per_step, int) and per_step > 0 and samples % per_step == 0:
        return {"algorithm.steps": samples // per_step, "algorithm.epochs": None}
    return {"algorithm.epochs": value, **({"data.train_rows": samples} if limited else {})}


def schedule_from(value: Any, view: NativeView) -> dict[str, Any]:
    """:func:`lr_scheduler` backwards."""
    back = {"constant_with_warmup": "constant", **{v: k for k, v in LR_SCHEDULE.items()}}
    if value not in back:
        raise ValueError(f"{value!r}: the recipe has {', '.join(sorted(back))}")
    return {"algorithm.lr_schedule": back[value]}


def warmup_from(value: Any, view: NativeView) -> dict[str, Any]:
    """:func:`warmup_ratio` backwards: ceil(all optimizer updates x ratio) (deepspeed.py:367-383 @ 0.11.2); a ratio of
    a run counted in passes over data the import cannot count stays native."""
    if not float(value):
        return {"algorithm.warmup_steps": 0}
    if view.field("algorithm.epochs") is not None:
        raise ValueError("a ratio of the run's updates, which OpenRLHF counts from the data (algorithm.epochs)")
    total = (int(view.field("algorithm.steps")) * int(view.field("algorithm.mini_batches_per_step"))
             * int(view.field("algorithm.epochs_per_batch")))
    return {"algorithm.warmup_steps": math.ceil(total * float(value))}


def kl_from(value: Any, view: NativeView) -> dict[str, Any]:
    """--algo.kl.init_coef is the recipe's kl_coef, as a loss term with --algo.kl.use_loss, else in the reward."""
    if not float(value):
        return {"algorithm.kl_coef": 0.0}  # no KL: where it would go is moot
    return {"algorithm.kl_coef": float(value),
            "algorithm.kl_placement": "loss" if view.get("algo.kl.use_loss") else "reward"}


def reward_clip_from(value: Any, view: NativeView) -> dict[str, Any]:
    """--reward.clip_range [-c, c] is reward_clip c (OpenRLHF's default [-10, 10] included: it clips unless told not
    to); :data:`NO_REWARD_CLIP` or wider is null; a lopsided range has no recipe field."""
    low, high = (float(v) for v in value)
    if low <= NO_REWARD_CLIP[0] and high >= NO_REWARD_CLIP[1]:
        return {"algorithm.reward_clip": None}
    if low != -high or high <= 0:
        raise ValueError(f"reward.clip_range={list(value)}: the recipe's reward_clip is a symmetric range [-c, c]")
    return {"algorithm.reward_clip": high}


def estimator_from(value: Any, view: NativeView) -> dict[str, Any]:
    """:data:`ESTIMATOR` backwards."""
    pairs = [pair for pair, name in ESTIMATOR.items() if name == value]
    if not pairs:
        raise ValueError(f"{value!r}: the recipe maps {sorted(set(ESTIMATOR.values()))}")
    baseline, norm = pairs[0]
    return {"algorithm.advantage_baseline": baseline, "algorithm.advantage_norm": norm}


def clip_from(value: Any, view: NativeView) -> dict[str, Any]:
    low, high = value
    return {"algorithm.clip_low": float(low), "algorithm.clip_high": None if high == low else float(high)}


def prompt_budget_from(value: Any, view: NativeView) -> dict[str, Any]:
    """--data.max_len is prompt + completion tokens (the row's note)."""
    budget = int(value) - int(view.field("algorithm.max_new_tokens"))
    if budget < 1:
        raise ValueError(f"--data.max_len {value} leaves no prompt tokens after --rollout.max_new_tokens")
    return {"data.max_prompt_tokens": budget}


def data_sources(value: Any, split: Any, probabilities: Any) -> str | list[str]:
    """OpenRLHF's ``--data.prompt_dataset`` / ``--eval.dataset`` as recipe data sources. OpenRLHF reads each
    comma-separated entry as a local data file by its suffix, else a hub dataset whose ``split`` it selects
    (openrlhf/datasets/utils.py:29-80 @ 0.11.2): a hub id becomes ``hf:<id>@<split>``, a list of entries a list
    of sources (concatenated, as OpenRLHF does without probabilities). What the recipe cannot say (sampling
    probabilities, a data_dir after ``@``, a local folder, .csv or .arrow files) stays native (ValueError)."""
    entries = [e.strip() for e in str(value).split(",") if e.strip()]
    if probabilities is not None and len(entries) > 1:
        raise ValueError(f"{value!r} is mixed with probabilities {probabilities!r}: the recipe concatenates")
    sources = []
    for entry in entries:
        if "@" in entry:
            raise ValueError(f"{entry!r} names a data_dir after '@'")
        if entry.lower().endswith(DATA_SUFFIXES):
            sources.append(entry)
        elif Path(entry).suffix.lower() in (".csv", ".arrow", ".py") or entry.startswith(("/", ".", "~", "$")):
            raise ValueError(f"{entry!r}: a local folder or file unirl does not read (it reads "
                             f"{', '.join(DATA_SUFFIXES)} files and hf:<dataset>@<split>)")
        else:
            sources.append(f"hf:{entry}@{split or 'train'}")
    if not sources:
        raise ValueError(f"{value!r}: no data source")
    return sources[0] if len(sources) == 1 else sources


def train_from(value: Any, view: NativeView) -> dict[str, Any]:
    if str(value).startswith(RUN_DIR):
        return {}
    return {"data.train": data_sources(value, view.get("data.prompt_split"), view.get("data.prompt_probs"))}


def eval_from(value: Any, view: NativeView) -> dict[str, Any]:
    if str(value).startswith(RUN_DIR):
        return {}
    return {"data.eval": data_sources(value, view.get("eval.split"), None)}


def prompt_key_from(value: Any, view: NativeView) -> dict[str, Any]:
    return {} if _exported(view, "data.prompt_dataset") else {"data.prompt_key": value}


def answer_key_from(value: Any, view: NativeView) -> dict[str, Any]:
    return {} if _exported(view, "data.prompt_dataset") else {"data.answer_key": value}


def eval_steps_from(value: Any, view: NativeView) -> dict[str, Any]:
    if not isinstance(value, int) or value <= 0:
        return {}
    return {"eval.every_steps": 0 if value == view.field("algorithm.steps") else value}


def greedy_from(value: Any, view: NativeView) -> dict[str, Any]:
    """Temperature 0 is greedy in vLLM (the row's note)."""
    return {"eval.greedy": float(value) == 0.0}


def engines_from(value: Any, view: NativeView) -> dict[str, Any]:
    """Disaggregated: the engines' GPUs are rollout.gpus (:func:`vllm_engines`)."""
    if view.get("train.colocate_all"):
        return {}
    return {"rollout.gpus": int(value) * int(view.field("rollout.tensor_parallel"))}


def gpus_from(value: Any, view: NativeView) -> dict[str, Any]:
    """:func:`train_gpus_per_node` backwards: the rollout GPUs (disaggregated) are on top of the training GPUs, and
    so are a critic's, which the recipe gives as many GPUs as the actor."""
    nodes = int(view.field("resources.nodes"))
    rollout = 0 if view.get("train.colocate_all") else int(view.field("rollout.gpus") or 0)
    critic = 0
    if not view.get("train.colocate_all") and view.get("algo.advantage.estimator") == "gae":  # a critic (:645-650)
        critic = int(view.get("critic.num_gpus_per_node") or 0)
        if critic != int(value):
            raise ValueError(f"the critic's {critic} GPUs per node differ from the actor's {value}: the recipe splits "
                             "its training GPUs evenly between them")
    return {"resources.gpus_per_node": int(value) + critic + _whole(rollout, nodes, "resources.nodes")}


def save_steps_from(value: Any, view: NativeView) -> dict[str, Any]:
    return {"run.checkpoint_every": max(int(value), 0)}


NO_EARLY_STOP = ("null: OpenRLHF 0.11 trains every episode of --train.num_episodes and has no early stop on evaluation"
                 " results (PPOTrainer.fit, openrlhf/trainer/ppo_trainer.py:503-580 @ 0.11.2); early stopping is TRL's"
                 " (framework=trl)")
"""Why eval.stop_after_plateau and eval.stop_at_accuracy are refused: TRL's runner alone stops early."""

MAPPING: tuple[Mapping, ...] = (
    *advantage_rows(
        ESTIMATOR, "algo.advantage.estimator", lambda r: ESTIMATOR[pair(r)],
        "from advantage_baseline x advantage_norm: group_norm, dr_grpo (an advantage change only: the loss stays "
        "the recipe's loss_aggregation), rloo, reinforce_baseline, reinforce, gae",
        "OpenRLHF has no batch-std normalisation that is not a whitening", native_default="gae",
        inverse=estimator_from),
    Mapping("algorithm.samples_per_prompt", "rollout.n_samples_per_prompt", lambda r: r.algorithm.samples_per_prompt,
            native_default=1),
    Mapping("algorithm.prompts_per_step", "rollout.batch_size", lambda r: r.algorithm.prompts_per_step,
            "prompts per step", native_default=1024),
    Mapping("algorithm.mini_batches_per_step", "train.batch_size", lambda r: r.completions_per_update,
            "completions per optimizer update", native_default=128, inverse=mini_batches_from),
    Mapping("algorithm.micro_batch_size", "train.micro_batch_size", micro_batch, MICRO_BATCH_NOTE,
            note_for=micro_batch_note, native_default=1),
    Mapping("algorithm.logprob_micro_batch_size", "rollout.micro_batch_size", logprob_micro_batch,
            LOGPROB_MICRO_BATCH_NOTE, native_default=1),
    Mapping("algorithm.epochs", "train.num_episodes", lambda r: r.algorithm.epochs if counted_at_launch(r) else 1,
            "one pass over the exported file of steps x prompts_per_step prompts; with algorithm.epochs whose rows "
            "the plan cannot count, epochs passes over every exported row, OpenRLHF training each pass's incomplete "
            "last batch as a smaller step (samples_generator.py:89-137 @ 0.11.2)", native_default=1,
            inverse=episodes_from, run_length=True),
    Mapping("algorithm.steps", "data.max_samples",
            lambda r: (r.data.train_rows or OMIT) if counted_at_launch(r) else r.prompts_per_run,
            "the exported rows: steps x prompts_per_step, or data.train_rows with algorithm.epochs counted by "
            "OpenRLHF", native_default=DEFAULT_MAX_SAMPLES, inverse=max_samples_from, run_length=True),
    Mapping("algorithm.epochs_per_batch", "train.max_epochs", lambda r: r.algorithm.epochs_per_batch, native_default=1),
    Mapping("algorithm.lr", "actor.adam.lr", lambda r: r.algorithm.lr, native_default=1e-6),
    Mapping("algorithm.lr_schedule", "actor.lr_scheduler", lr_scheduler,
            "constant with a warm-up: constant_with_warmup (transformers' constant has none)",
            native_default="cosine_with_min_lr", inverse=schedule_from),
    Mapping("algorithm.min_lr_ratio", "actor.min_lr_ratio", lambda r: r.algorithm.min_lr_ratio,
            "the floor of cosine_with_min_lr; OpenRLHF's default stops at 10%", native_default=0.1,
            supported=lambda r: r.algorithm.min_lr_ratio == 0 or r.algorithm.lr_schedule == "cosine",
            supported_text="0, or lr_schedule=cosine: only OpenRLHF's cosine_with_min_lr has a floor"),
    Mapping("algorithm.warmup_steps", "actor.lr_warmup_ratio", warmup_ratio,
            "a fraction of all optimizer updates, which OpenRLHF rounds up to exactly warmup_steps",
            native_default=0.03, inverse=warmup_from, supported=warmup_known,
            supported_text="0 while OpenRLHF counts the run's steps (algorithm.epochs over rows the plan cannot "
                           "count): it takes the warm-up as a ratio of all updates, unknown here; set algorithm.steps "
                           "or give the data here"),
    Mapping("algorithm.weight_decay", "actor.adam.weight_decay", lambda r: r.algorithm.weight_decay,
            native_default=0.0),
    Mapping("algorithm.max_grad_norm", "actor.max_norm", lambda r: r.algorithm.max_grad_norm, native_default=1.0),
    Mapping("algorithm.kl_coef", "algo.kl.init_coef", lambda r: r.algorithm.kl_coef,
            "0 = no reference model", native_default=0.01, inverse=kl_from),
    Mapping("algorithm.kl_placement", "algo.kl.use_loss",
            lambda r: store_true(r.algorithm.kl_coef > 0 and r.algorithm.kl_placement == "loss"),
            "on: KL as a loss term; off: KL in each token's reward (OpenRLHF's default, models/utils.py:131-159)",
            native_default=False),
    Mapping("algorithm.kl_estimator", "algo.kl.estimator", lambda r: KL_ESTIMATOR[r.algorithm.kl_estimator],
            native_default="k1"),
    Mapping("algorithm.clip_high", "actor.eps_clip_low_high",
            lambda r: [r.algorithm.clip_low, r.algorithm.clip_high or r.algorithm.clip_low], native_default=None,
            inverse=clip_from),
    Mapping("algorithm.loss_aggregation", "actor.loss_agg_mode",
            lambda r: LOSS_AGG.get(r.algorithm.loss_aggregation, OMIT), allowed=tuple(LOSS_AGG),
            supported_text="token_mean and seq_mean_token_mean (--actor.loss_agg_mode)", native_default="token-mean"),
    Mapping("algorithm.importance_sampling_level", "actor.policy_loss_type",
            lambda r: "gspo" if r.algorithm.importance_sampling_level == "sequence" else "ppo",
            supported=lambda r: r.algorithm.importance_sampling_level == "token"
            or r.algorithm.loss_aggregation == "seq_mean_token_mean",
            supported_text="sequence only with loss_aggregation=seq_mean_token_mean: OpenRLHF's gspo loss forces a "
                           "per-sample mean (openrlhf/models/loss.py PolicyLoss)", native_default="ppo"),
    Mapping("algorithm.dual_clip", "actor.dual_clip", lambda r: r.algorithm.dual_clip or OMIT, native_default=None),
    Mapping("algorithm.reward_clip", "reward.clip_range",
            lambda r: [-r.algorithm.reward_clip, r.algorithm.reward_clip] if r.algorithm.reward_clip
            else NO_REWARD_CLIP, "null sends a range no reward reaches: OpenRLHF clips to [-10, 10] by default "
                                 "(experience_maker.py:289)", native_default=[-10, 10], inverse=reward_clip_from,
            # compute_reward clips what it is given: after group_norm, rloo and dr_grpo that is the baselined,
            # normalised reward (experience_maker.py:268-289), so it would clip advantages, not rewards (unirl parity)
            supported=lambda r: r.algorithm.reward_clip is None or r.algorithm.advantage_baseline in ("none", "critic"),
            supported_text="null, or a clip with advantage_baseline none or critic: with a group baseline OpenRLHF "
                           "clips the baselined, normalised reward (experience_maker.py:268-289), not the reward"),
    Mapping("algorithm.dynamic_sampling", "(no std-based dynamic sampling)", lambda r: False, allowed=(False,),
            supported_text="false: OpenRLHF's --algo.dynamic_filtering_enable keeps a group when its mean reward is "
                           "strictly inside --algo.dynamic_filtering_range (samples_generator.py:168-177), not when "
                           "its rewards differ; set it through framework.overrides for bounded rewards"),
    Mapping("algorithm.overlong_filter", "(no overlong filtering)", lambda r: False, allowed=(False,),
            supported_text="false: OpenRLHF 0.11 does not leave truncated completions out of the loss"),
    Mapping("algorithm.overlong_buffer", "reward.overlong_buffer_len", lambda r: r.algorithm.overlong_buffer or OMIT,
            "penalty -(length - (max_new_tokens - buffer)) / buffer x factor (trainer/ppo_utils/length_penalty.py"
            ":16-57), added after unirl's reward", native_default=None),
    Mapping("algorithm.overlong_penalty", "reward.overlong_penalty_factor",
            lambda r: r.algorithm.overlong_penalty if r.algorithm.overlong_buffer else OMIT, native_default=1.0),
    Mapping("algorithm.rollout_correction", "algo.advantage.is_correction_level",
            lambda r: "token" if r.algorithm.rollout_correction == "token" else "off",
            allowed=("none", "token"),
            supported_text="none or token: OpenRLHF's sequence level is a rejection filter (mask only), not a "
                           "truncated ratio (train_ppo_ray.py:261-290)", native_default="off"),
    Mapping("algorithm.rollout_correction", "algo.advantage.is_correction_mode",
            lambda r: "clip" if r.algorithm.rollout_correction == "token" else OMIT,
            "clip: the token ratio clamped into [0, cap], truncated importance sampling", native_default="mask"),
    Mapping("algorithm.rollout_correction_cap", "algo.advantage.is_correction_threshold",
            lambda r: [0.0, r.algorithm.rollout_correction_cap] if r.algorithm.rollout_correction == "token"
            else OMIT, native_default=[0.5, 5.0]),
    Mapping("algorithm.critic.model", "critic.model_name_or_path",
            lambda r: critic_model(r) if uses_critic(r) else OMIT,
            "null: the policy's model (OpenRLHF would take the reward model's first)", native_default=None),
    Mapping("algorithm.critic.lr", "critic.adam.lr", lambda r: r.algorithm.critic.lr if uses_critic(r) else OMIT,
            native_default=9e-6),
    Mapping("algorithm.critic.value_clip", "critic.value_clip",
            lambda r: r.algorithm.critic.value_clip if uses_critic(r) else OMIT, native_default=0.5),
    Mapping("algorithm.critic.gamma", "algo.advantage.gamma", lambda r: r.algorithm.critic.gamma, native_default=1.0),
    Mapping("algorithm.critic.gae_lambda", "algo.advantage.lambd", lambda r: r.algorithm.critic.gae_lambda,
            native_default=1.0),
    Mapping("resources.nodes", "critic.num_nodes", lambda r: r.resources.nodes if uses_critic(r) else OMIT,
            native_default=1),
    Mapping("resources.gpus_per_node", "critic.num_gpus_per_node",
            lambda r: train_gpus_per_node(r) if uses_critic(r) else OMIT, "the critic shares the actor's GPUs",
            native_default=8),
    Mapping("algorithm.entropy_coef", "actor.entropy_coef",
            lambda r: r.algorithm.entropy_coef if r.algorithm.entropy_coef else OMIT, native_default=None),
    Mapping("algorithm.temperature", "rollout.temperature", lambda r: r.algorithm.temperature, native_default=1.0),
    Mapping("algorithm.top_p", "rollout.top_p", lambda r: r.algorithm.top_p, native_default=1.0),
    Mapping("algorithm.max_new_tokens", "rollout.max_new_tokens", lambda r: r.algorithm.max_new_tokens,
            native_default=None),
    Mapping("data.max_prompt_tokens", "data.max_len", lambda r: prompt_budget(r) + r.algorithm.max_new_tokens,
            f"prompt budget + max_new_tokens (null: unirl's default of {DEFAULT_PROMPT_TOKENS} prompt tokens): vLLM's "
            "max_model_len and the length every sequence is cut to; OpenRLHF does not cut the prompt itself",
            note_for=lambda r: prompt_budget_note(r, f"{prompt_budget(r)} prompt + {r.algorithm.max_new_tokens} "
                                                     "completion tokens: vLLM's max_model_len and the length every "
                                                     "sequence is cut to (OpenRLHF does not cut the prompt itself)"),
            native_default=2048, inverse=prompt_budget_from),
    Mapping("data.train", "data.prompt_dataset", lambda r: export_path("train", EXPORT_FORMAT),
            "exported by unirl as JSONL {input, label, datasource}", native_default=None, inverse=train_from),
    Mapping("data.prompt_key", "data.input_key", lambda r: "input", native_default="input", inverse=prompt_key_from),
    Mapping("data.answer_key", "data.label_key", lambda r: "label", native_default=None, inverse=answer_key_from),
    # With an environment, unirl's agent renders the episode (the opening through the environment's reset) with the
    # template, so OpenRLHF hands the agent the row's own prompt.
    Mapping("data.chat_template", "data.apply_chat_template",
            lambda r: store_true(r.data.chat_template is True and not r.environment.name), native_default=False),
    Mapping("data.eval", "eval.dataset", lambda r: export_path("eval", EXPORT_FORMAT) if r.data.eval else OMIT,
            native_default=None, inverse=eval_from),
    Mapping("eval.every_steps", "eval.steps",
            lambda r: (r.eval.every_steps or r.algorithm.steps) if r.data.eval else OMIT,
            "training steps; 0: algorithm.steps, the one evaluation after the last step (OpenRLHF evaluates when "
            "global_step % eval.steps == 0, openrlhf/trainer/ppo_trainer.py:563 @ 0.11.2)",
            supported=lambda r: not r.data.eval or (
                bool(r.eval.every_steps) if counted_at_launch(r) else
                not (r.eval.every_steps and r.algorithm.steps % r.eval.every_steps)),
            supported_text="eval.every_steps dividing algorithm.steps (or 0): OpenRLHF evaluates only at multiples "
                           "of --eval.steps (openrlhf/trainer/ppo_trainer.py:563 @ 0.11.2), so otherwise the run "
                           "would end without the evaluation after training; with algorithm.epochs counted by "
                           "OpenRLHF, a cadence (the last step is not known here)", native_default=-1,
            inverse=eval_steps_from),
    Mapping("eval.before_training", "(no evaluation before training)", lambda r: False,
            supported=lambda r: not (r.eval.before_training and r.data.eval),
            supported_text="eval.before_training=false (or no data.eval): OpenRLHF 0.11 evaluates only after "
                           "training steps (PPOTrainer.fit, openrlhf/trainer/ppo_trainer.py:503-580 @ 0.11.2) and "
                           "has no option to evaluate first", native_default=False),
    Mapping("eval.greedy", "eval.n_samples_per_prompt", lambda r: 1 if r.data.eval else OMIT, native_default=4),
    Mapping("eval.greedy", "eval.temperature",
            lambda r: (0.0 if r.eval.greedy else r.algorithm.temperature) if r.data.eval else OMIT,
            "temperature 0 = greedy in vLLM", native_default=0.6, inverse=greedy_from),
    # eval.stop_after_plateau / eval.stop_at_accuracy: no early stop here (a value is refused, never dropped)
    Mapping("eval.stop_after_plateau", "(no early stop)", lambda r: None,
            supported=lambda r: r.eval.stop_after_plateau is None, supported_text=NO_EARLY_STOP, native_default=None),
    Mapping("eval.stop_at_accuracy", "(no early stop)", lambda r: None,
            supported=lambda r: r.eval.stop_at_accuracy is None, supported_text=NO_EARLY_STOP, native_default=None),
    Mapping("eval.keep_best", "(no best-checkpoint selection)", lambda r: None,
            supported=lambda r: not r.eval.keep_best,
            supported_text="false: the run ends with its last weights (unirl selects the best held-out "
                           "evaluation's weights on TRL only)", native_default=False),
    Mapping("seed", "train.seed", lambda r: r.seed, native_default=42),
    Mapping("model.path", "actor.model_name_or_path", model_location, native_default=None),
    Mapping("model.lora.rank", "ds.lora.rank", lambda r: r.model.lora.rank or OMIT, allowed=(0,), native_default=0,
            supported_text="0: OpenRLHF 0.11.2 wraps the actor with PEFT (openrlhf/models/actor.py:177-188) but "
                           "syncs it to vLLM parameter by parameter under PEFT's names, adapters unmerged "
                           "(openrlhf/trainer/ray/ppo_actor.py:409-485 broadcast_to_vllm), names vLLM's model does not "
                           "have (OpenRLHF issue #546: a KeyError in update_weight); with LoRA its rollouts could "
                           "never follow the trained policy"),
    Mapping("model.dtype", "ds.param_dtype", lambda r: PARAM_DTYPE[r.model.dtype], allowed=tuple(PARAM_DTYPE),
            supported_text="bfloat16 and float16 (--ds.param_dtype bf16|fp16)", native_default="bf16"),
    Mapping("resources.gradient_checkpointing", "actor.gradient_checkpointing_enable",
            lambda r: store_true(r.resources.gradient_checkpointing), native_default=False),
    Mapping("rollout.tensor_parallel", "vllm.tensor_parallel_size", lambda r: r.rollout.tensor_parallel,
            native_default=1),
    Mapping("rollout.gpu_memory_fraction", "vllm.gpu_memory_utilization", lambda r: r.rollout.gpu_memory_fraction,
            native_default=0.95),
    Mapping("rollout.colocated", "vllm.num_engines", vllm_engines,
            "colocated: every GPU / TP; else rollout.gpus / TP", native_default=None, inverse=engines_from),
    Mapping("rollout.colocated", "train.colocate_all", lambda r: store_true(r.rollout.colocated), native_default=False),
    Mapping("rollout.colocated", "vllm.enable_sleep", lambda r: store_true(r.rollout.colocated),
            "colocated engines sleep while the actor trains", native_default=False),
    Mapping("rollout.colocated", "ds.enable_sleep", lambda r: store_true(r.rollout.colocated), native_default=False),
    Mapping("rollout.colocated", "train.colocate_actor_ref", lambda r: store_true(not r.rollout.colocated),
            "the reference model shares the actor's GPUs", native_default=False),
    Mapping("resources.nodes", "actor.num_nodes", lambda r: r.resources.nodes, native_default=1),
    Mapping("resources.gpus_per_node", "actor.num_gpus_per_node", train_gpus_per_node,
            "training GPUs per node (rollout-only GPUs excluded)", native_default=8, inverse=gpus_from),
    Mapping("resources.nodes", "ref.num_nodes", lambda r: r.resources.nodes, native_default=1),
    Mapping("resources.gpus_per_node", "ref.num_gpus_per_node", train_gpus_per_node, native_default=8,
            inverse=gpus_from),
    # With an environment, the agent scores each episode (the recipe's rewards included) and OpenRLHF replaces
    # remote_url with "agent" anyway (openrlhf/cli/train_ppo_ray.py:636-637 @ 0.11.2).
    Mapping("rewards", "reward.remote_url", lambda r: OMIT if r.environment.name else in_run_dir(REWARD_FILE),
            "generated at launch: unirl's reward_func, reading the run's reward spec", native_default=None),
    Mapping("run.checkpoint_every", "ckpt.save_steps", lambda r: r.run.checkpoint_every or -1, native_default=-1,
            inverse=save_steps_from),
    Mapping("run.name", "ckpt.output_dir", lambda r: CHECKPOINTS, native_default="./ckpt"),
    Mapping("run.name", "ckpt.path", lambda r: f"{CHECKPOINTS}/ppo_ray",
            native_default="./ckpt/checkpoints_ppo_ray"),
    Mapping("run.resume", "ckpt.load_enable", lambda r: store_true(r.run.resume), native_default=False),
    Mapping("logging.every_steps", "logger.logging_steps", lambda r: r.logging.every_steps, native_default=1),
    # TensorboardLogger writes <dir>/<logger.wandb.run_name>/ (openrlhf/utils/logging_utils.py:115-120, 0.11.2),
    # train/<key> and eval/<key> at global_step; unirl's follower reads every event file under it.
    Mapping("logging.every_steps", "logger.tensorboard_dir", lambda r: in_run_dir(TB_DIR),
            "OpenRLHF's TensorBoard events, which unirl's follower reads into metrics.jsonl", native_default=None),
    # OpenRLHF's MultiTurnAgentExecutor over unirl's AgentInstance (unirl/adapters/openrlhf_agent.py), loaded in
    # every vLLM engine actor (openrlhf/trainer/ray/vllm_engine.py:19-30, 56-57).
    Mapping("environment.name", "train.agent_func_path",
            lambda r: in_run_dir(AGENT_FILE) if r.environment.name else OMIT,
            "generated at launch: OpenRLHF's multi-turn executor over unirl's environment; the episode's budget is "
            "algorithm.max_new_tokens and its turns the environment's max_turns (OpenRLHF has neither)",
            native_default=None),
)


@functools.cache
def option_schema(version: str) -> dict[str, dict[str, Any]]:
    """dest -> option, from the shipped snapshot of that version's parser."""
    resource = files("unirl.plugins.openrlhf") / f"schema_{version}.json"
    if not resource.is_file():
        have = sorted(p.name for p in files("unirl.plugins.openrlhf").iterdir() if p.name.startswith("schema_"))
        raise UnirlError(f"no parser snapshot for OpenRLHF {version} in unirl.plugins.openrlhf (have {have}); "
                         "install it where framework.python points so unirl reads its parser")
    options = json.loads(resource.read_text())["options"]
    by_dest: dict[str, dict[str, Any]] = {}
    for option in options:
        by_dest.setdefault(option["dest"], option)  # a store_false twin (--no_x) shares the dest
    return by_dest


def render(flags: dict[str, Any], schema: dict[str, dict[str, Any]], version: str) -> list[str]:
    """``{"rollout.batch_size": 8, "train.colocate_all": True}`` -> full-name argv, checked against the parser."""
    argv: list[str] = []
    for dest, value in flags.items():
        option = schema.get(dest)
        if option is None:
            raise FieldError(f"framework.overrides.{dest}" if "." in dest else dest, value,
                             f"OpenRLHF {version} has no option --{dest}")
        if option["kind"] == "store_true":
            if value is True:
                argv.append(option["flag"])
            elif value not in (False, None):
                raise FieldError(dest, value, f"--{dest} is a switch in OpenRLHF {version}: true or false")
            continue
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        argv += [option["flag"], *(_text(v) for v in values)]
    return argv


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def parity_designs(recipe: Recipe) -> list[Design]:
    """What OpenRLHF 0.11.2 computes differently from unirl's reference by construction."""
    designs = []
    if recipe.algorithm.advantage_norm in ("group", "batch"):
        designs.append(Design(
            "std + 1e-9 in float32", "group_norm divides by the group's std + 1e-9 in float32 "
            "(experience_maker.py:273-274): a group of equal rewards that binary cannot hold exactly gets advantages "
            "of one rounding unit / 1e-9, about +-100 for rewards near 1, instead of 0", ("advantages",),
            {"std_eps": 1e-9, "precision": "float32", "group_rows": True}))
    a = recipe.algorithm
    if a.kl_coef > 0 and a.kl_placement == "reward" and a.advantage_baseline in ("group_mean", "leave_one_out"):
        designs.append(Design("KL added after the baseline", "the group baseline and normalisation use the outcome "
                              "rewards alone; compute_reward then adds -kl_coef x KL per token and each token's "
                              "advantage is its return to go (experience_maker.py:268-318), so the KL is neither "
                              "baselined nor summed over the whole completion", ("advantages",),
                              {"kl_after_baseline": True}))
    if a.advantage_norm == "batch_whiten":
        designs.append(Design("biased whitening variance", "the global whitening divides by the token variance over "
                              "n, not n - 1 (experience_maker.py:325-338)", ("advantages",),
                              {"whiten_unbiased": False}))
    if recipe.algorithm.loss_aggregation != "token_mean":
        designs.append(Design("KL and entropy as token means", "the KL loss and the entropy term go through "
                              "aggregate_loss with its token-mean default whatever --actor.loss_agg_mode says "
                              "(ppo_actor.py:331, 347-351)", ("loss", "grad", "kl_term"),
                              {"kl_aggregation": "token_mean", "entropy_aggregation": "token_mean"}))
    return designs


class OpenRlhfFramework(NativeFramework):
    name = NAME
    description = "OpenRLHF: Ray + DeepSpeed training, vLLM rollouts; GPU only"
    capabilities = CAPABILITIES
    mapping = MAPPING
    plugin_package = "unirl.plugins.openrlhf"
    check_module = "unirl.plugins.openrlhf.native_check"
    parity = ParityHarness("unirl.plugins.openrlhf.parity_harness", lambda recipe: parity_designs(recipe))
    export_format = EXPORT_FORMAT
    supported_versions = SUPPORTED_VERSIONS
    supported_versions_text = "dotted flags (the flat flag names before 0.10.2 are not emitted)"
    import_base: ClassVar[dict[str, Any]] = {"eval.before_training": False}
    import_data_keys = ("data.prompt_dataset",)
    """``unirl import openrlhf`` starts from these: OpenRLHF 0.11 has no evaluation before training."""

    @staticmethod
    def import_defaults(native: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """What ``unirl import`` reads into keys a command leaves out, beyond their default values: recipe fields, and
        native keys kept as left out (None: not sent).

        - No ``--eval.dataset``: no held-out set (ppo_trainer.py:51-70 @ 0.11.2).
        - No ``--rollout.max_new_tokens``: each completion may take what its prompt leaves of ``--data.max_len``
          (train_ppo_ray.py:398-403, "dynamically computed as max_len - prompt_len"). The recipe holds the bounds
          (a prompt or a completion of up to max_len - 1 tokens) and the command keeps OpenRLHF's rule: max_len as
          given, no max_new_tokens sent."""
        fields: dict[str, Any] = {}
        kept: dict[str, Any] = {}
        if "eval.dataset" not in native:
            fields["data.eval"] = None
        total = native.get("data.max_len", 2048)
        if native.get("rollout.max_new_tokens") is None and isinstance(total, int) and total > 1:
            fields.update({"algorithm.max_new_tokens": total - 1, "data.max_prompt_tokens": total - 1})
            kept.update({"rollout.max_new_tokens": None, "data.max_len": total})
        return fields, kept

    def extra_problems(self, recipe: Recipe) -> list[FieldError]:
        return _resource_problems(recipe)

    def native_config(self, recipe: Recipe, native: dict[str, Any], version: str) -> dict[str, Any]:
        return {"flags": native}

    def effective_run(self, native: dict[str, Any], rows: int | None, config_class: str | None = None) -> Any:
        """The run OpenRLHF executes for these flags (:mod:`unirl.plugins.openrlhf.effective_run`)."""
        from unirl.plugins.openrlhf.effective_run import effective_run

        return effective_run(native, rows)

    def command(self, recipe: Recipe, native: dict[str, Any], version: str) -> list[str]:
        """Full flag names from the version's own parser (an unknown override flag is refused here)."""
        return ["python", "-m", "openrlhf.cli.train_ppo_ray", *render(native, option_schema(version), version)]

    def notes(self, recipe: Recipe) -> list[str]:
        return [
            "OpenRLHF loads the reward file inside every vLLM engine actor and calls it once per sample",
            "--ds.attn_implementation keeps OpenRLHF's flash_attention_2 default (needs flash-attn on the GPUs)",
            "held-out evaluation is OpenRLHF's (--eval.dataset, pass@1), not unirl's greedy eval",
        ]

    def extra_files(self, recipe: Recipe) -> dict[str, str]:
        if recipe.environment.name:
            return {AGENT_FILE: "<unirl's AgentExecutor module for --train.agent_func_path, written at launch>"}
        return {REWARD_FILE: "<unirl's reward_func module for --reward.remote_url, written at launch>"}

    def schema_problems(self, plan: LaunchPlan) -> list[str]:
        """Without OpenRLHF installed: every flag exists with a valid value, and the Ray GPU demand fits."""
        from unirl.plugins.openrlhf.resources import demand_problems

        schema = option_schema(self.plan_tables_version(plan))
        problems = []
        for dest, value in plan.native_config["flags"].items():
            option = schema.get(dest)
            if option is None:
                problems.append(f"--{dest}: not an option of OpenRLHF {plan.target_version}")
            elif option["choices"] and value not in option["choices"]:
                problems.append(f"--{dest}={value!r}: OpenRLHF allows {option['choices']}")
        return problems + demand_problems(plan.native_config["flags"], plan.environment)

    def write_files(self, plan: LaunchPlan, run_dir: Path) -> None:
        from unirl.adapters.openrlhf import write_agent_file, write_reward_file

        if AGENT_FILE in plan.files:
            write_agent_file(run_dir / AGENT_FILE, run_dir / ENVIRONMENT_SPEC_FILE)
        else:
            write_reward_file(run_dir / REWARD_FILE, run_dir / SPEC_FILE)


def _resource_problems(r: Recipe) -> list[FieldError]:
    """What OpenRLHF would assert only after Ray started (train_ppo_ray.py:41-64), or hang on."""
    problems: list[FieldError] = []
    if r.total_gpus and not r.rollout.colocated and r.rollout_gpus < 1:
        problems.append(FieldError("rollout.gpus", r.rollout_gpus,
                                   "at least one GPU for the vLLM engines: OpenRLHF 0.11 generates only with vLLM "
                                   "(a disaggregated run of one GPU has none left; keep rollout.colocated=true)"))
    if r.total_gpus and not r.rollout.colocated and (r.total_gpus - r.rollout_gpus) % r.resources.nodes:
        problems.append(Unsupported("rollout.gpus", r.rollout_gpus, NAME,
                                    "a split that leaves every node the same number of training GPUs"))
    if r.total_gpus and not r.rollout.colocated and uses_critic(r) and training_gpus_per_node(r) % 2:
        training = r.total_gpus - r.rollout_gpus
        problems.append(Unsupported(
            "rollout.gpus", r.rollout_gpus, NAME,
            f"a split that leaves an even number of training GPUs per node with a critic: outside "
            f"--train.colocate_all OpenRLHF places the critic on GPUs of its own (train_ppo_ray.py:105-129), so the "
            f"{training} training GPUs are shared half and half by the actor and the critic"))
    return problems
