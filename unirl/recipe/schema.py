"""The recipe: one typed, framework-neutral schema, and its validation.

Every field carries its documentation, unit, range and choices as field metadata (:func:`unirl.recipe.fields.setting`):
``unirl explain FIELD`` and ``unirl plan --help`` print them, and :func:`validate` checks every field against them in
one generic pass. The schema is registered in Hydra's ConfigStore (``unirl_schema``) so that composition itself
rejects unknown keys and wrong types; :func:`validate` then checks ranges and arithmetic across fields, all before any
model or backend is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirl.errors import FieldError, RecipeInvalid, UnirlError
from unirl.recipe.fields import AUTO, documented, field_problems, setting, value_at
from unirl.rewards.spec import RewardPolicy

BUILTIN_PREFIX = "builtin:"
HUB_PREFIX = "hf:"
SPLIT_SEP = "@"  # source@split; "#" would need quoting in Hydra's override grammar
CONFIG_SEP = ":"  # hf:<dataset>:<config>@<split>, the config (subset) datasets.load_dataset takes as its `name`
HUB_ID = re.compile(r"^([A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")  # "gpt2" or "org/name"
# The rollout engines unirl itself registers (unirl.plugins.rollout_engines); validate's default when the caller does
# not pass the host's registry, which plugins may extend.
BUILTIN_ROLLOUT_ENGINES = ("hf", "vllm", "sglang")
AUTO_ARITHMETIC = ("resources.gpus_per_node",)
"""``auto`` fields the cross-field checks compute with: until a backend resolves them, only the per-field pass runs."""


ALL_LINEAR = "all-linear"
"""``model.lora.target_modules=[all-linear]``: PEFT's shorthand, every linear layer but the output layer."""


@dataclass
class LoraConfig:
    """Low-rank adapters (LoRA, Hu et al. 2021) on the policy: the weights stay frozen and only the adapters train.
    The semantics are PEFT's (peft/tuners/lora/layer.py): the update is
    ``lora_B(lora_A(dropout(x))) * alpha / rank``."""

    rank: int = setting(0, "Adapter rank r; 0 = no LoRA (full fine-tuning: every weight trains).", at_least=0,
                        typo_above=4096)
    alpha: int = setting(16, "Scale numerator: the adapter's update is multiplied by alpha / rank.", at_least=1,
                         typo_above=65536)
    dropout: float = setting(0.0, "Dropout on the adapter's input (PEFT's lora_dropout).", at_least=0, below=1)
    target_modules: list[str] = field(default_factory=lambda: [ALL_LINEAR], metadata=documented(
        """The layers that get adapters, by module name as PEFT matches them (``[q_proj, v_proj]``: every module whose
        name ends so), or ``[all-linear]``: every linear layer but the output layer."""))
    modules_to_save: list[str] = field(default_factory=list, metadata=documented(
        """Modules trained in full beside the adapters and saved with them (PEFT's ``modules_to_save``; each name
        matches the modules whose path ends with it): ``[embed_tokens]`` trains the input embedding, and with tied
        embeddings (the builtin models, Qwen2.5's small sizes) the output layer that shares it; ``norm`` matches
        every RMSNorm of a Qwen2 model. Empty: only the adapters train."""))

    @property
    def on(self) -> bool:
        return self.rank > 0

    def peft_target_modules(self) -> str | list[str]:
        """``target_modules`` as PEFT's LoraConfig takes it: the shorthand is a string there (a list holding it
        would name a module called all-linear)."""
        return ALL_LINEAR if list(self.target_modules) == [ALL_LINEAR] else list(self.target_modules)


@dataclass
class ModelConfig:
    path: str = setting("builtin:tiny-arith", """Hub id (``Qwen/Qwen2.5-0.5B``), local directory with config.json, or
        ``builtin:<name>``.""")
    revision: str | None = setting(None, "Hub revision (branch, tag or commit); ignored for local and builtin models.")
    dtype: str = setting("auto", "Weights and compute dtype: auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, "
                         "float16.", choices=("auto", "float32", "bfloat16", "float16"))
    init_seed: int | None = setting(None, "Seed for a builtin model's random init; null = the run's seed.")
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class DataConfig:
    # str | list[str]: OmegaConf types no union of a scalar and a list, so the schema says Any and
    # data_source_problems checks the shape; read them through DataConfig.train_sources / eval_sources.
    train: Any = setting("builtin:arith@train", """Training prompts: ``builtin:<name>@<split>``, a
        .jsonl/.json/.parquet file, or ``hf:<dataset>[:<config>]@<split>`` (a hub id or a local dataset folder, as
        ``datasets.load_dataset(<dataset>, <config>, split=<split>)`` takes them; e.g.
        ``hf:openai/gsm8k:main@train``); or a list of them, read one after the other as one dataset (verl's
        ``data.train_files=[gsm8k.parquet,math.parquet]``).""")  # noqa: RUF009 (setting() returns a field)
    eval: Any = setting("builtin:arith@heldout", """Held-out prompts, same forms as ``train`` (a list included); null
        = no held-out evaluation.""")  # noqa: RUF009 (setting() returns a field)
    prompt_key: str = setting("prompt", """Column holding the prompt (text, or chat messages); a dotted name
        reaches into nested columns (``extra_info.question``) when no column has that literal name.""")
    answer_key: str | None = setting("answer", """Column holding the reference answer passed to rewards as
        ``sample.reference``; dotted for nested columns, e.g. ``reward_model.ground_truth`` in verl's preprocessed
        parquet; null = no references.""")
    prompt_template: str = setting("{prompt}", """Python format string applied to text prompts; other columns are
        available by name.""")
    chat_template: bool | str = setting(AUTO, """Render prompts with the model's chat template: a text prompt becomes
        one user message. Prompts that are already message lists are always rendered with it.""",
                                        auto="""true on verl and NeMo RL (they always render it) and for a hub or
        local model (the frameworks' official examples render instruct models' prompts with it); false for a builtin
        model (trained from scratch on raw text)""")
    max_prompt_tokens: int | None = setting(None, """The prompt budget: prompts longer than this are truncated from
        the left; null = unirl's default budget of 512 tokens, resolved and sent explicitly to every backend (``unirl
        plan`` shows how each one receives it).""", unit="tokens", at_least=1, typo_above=1 << 20)
    train_rows: int | None = setting(None, """Use at most this many training rows (after shuffling with the seed);
        null = all.""", unit="rows", at_least=1, typo_above=10**9)
    eval_rows: int | None = setting(None, "Use at most this many held-out rows; null = all.", unit="rows", at_least=1,
                                    typo_above=10**9)
    options: dict[str, Any] = field(default_factory=dict, metadata=documented(
        "Options for a builtin dataset (e.g. ``max_sum`` for arith)."))

    @property
    def train_sources(self) -> list[str]:
        """``train`` as a list of sources (one, or the list given)."""
        return sources_of(self.train)

    @property
    def eval_sources(self) -> list[str]:
        """``eval`` as a list of sources (empty: no held-out evaluation)."""
        return sources_of(self.eval)


def sources_of(value: Any) -> list[str]:
    """A data field's sources: None -> [], a source -> [it], a list -> the list."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def source_text(value: Any) -> str:
    """A data field as the user wrote it, for messages: one source, or the list joined by commas."""
    return ",".join(sources_of(value))


@dataclass
class CriticConfig:
    """The value model of ``advantage_baseline=critic`` (PPO with GAE); read by no other algorithm."""

    model: str | None = setting(None, "The critic's initial weights (hub id or directory); null = the policy's model.")
    lr: float = setting(1e-5, "Critic learning rate, per optimizer update.", above=0, typo_above=1.0)
    gamma: float = setting(1.0, "Discount factor of the returns.", at_least=0, at_most=1)
    gae_lambda: float = setting(1.0, "GAE lambda: 1 = Monte-Carlo returns minus values, 0 = one-step TD.", at_least=0,
                                at_most=1)
    value_clip: float = setting(0.5, "Clip range of the value update around the old values (PPO's value clipping).",
                                above=0)


ALGORITHMS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo")
"""The algorithm presets: ``algorithm=NAME`` selects conf/algorithm/NAME.yaml, which sets the fields defining it."""


@dataclass
class AlgorithmConfig:
    name: str = setting("grpo", """The algorithm preset (select it with ``algorithm=NAME``, which sets every field that
        defines the algorithm: unirl/recipe/conf/algorithm/NAME.yaml): grpo, dr_grpo, dapo, gspo, rloo, reinforce_pp,
        reinforce_pp_baseline, ppo.""", choices=ALGORITHMS)
    steps: int = setting(200, """Training steps; one step = generate for ``prompts_per_step`` prompts, score,
        update. Not read when ``epochs`` is set.""", unit="training steps", at_least=1, typo_above=10**7)
    epochs: int | None = setting(None, """Passes over the training data, instead of ``steps``: the run is then
        epochs x floor(training rows / prompts_per_step) steps (every backend drops a pass's incomplete last batch).
        ``unirl plan`` counts the rows where it can read them (a data file here, a builtin dataset) and shows the
        arithmetic; otherwise the backend counts them at launch (verl's trainer.total_epochs, OpenRLHF's
        train.num_episodes, TRL's runner). null = the run is ``steps`` long.""", unit="passes over the data",
                                 at_least=1, typo_above=10**5)
    prompts_per_step: int = setting(8, "Distinct prompts per training step (verl's train_batch_size, OpenRLHF's "
                                    "rollout batch).", unit="prompts", at_least=1, typo_above=10**6)
    samples_per_prompt: int = setting(8, """Completions sampled per prompt: the group size of the group baselines
        (>= 2 with advantage_baseline group_mean or leave_one_out, which compare completions within a group); 1 is
        allowed with a critic or no baseline (PPO, REINFORCE++).""", unit="completions", at_least=1, typo_above=4096)
    mini_batches_per_step: int = setting(1, """Optimizer updates per step: the step's completions are split into this
        many mini-batches.""", unit="optimizer updates", at_least=1, typo_above=10**6)
    micro_batch_size: int | None = setting(None, """Completions per forward/backward pass on one device; null = a
        memory-safe default on the GPU backends (verl, OpenRLHF, NeMo RL, slime, vime): the largest divisor of one
        GPU's share of an update up to 4, shown in ``unirl plan``; on TRL a whole mini-batch at once.""",
                                           unit="completions", at_least=1, typo_above=10**6)
    logprob_micro_batch_size: int | None = setting(None, """Completions per forward pass on one device when computing
        log-probabilities (the rollout policy's and the reference's): no gradients, so it may be larger than
        ``micro_batch_size``; null = the training micro-batch. Refused by a backend with no such key.""",
                                                   unit="completions", at_least=1, typo_above=10**6)
    epochs_per_batch: int = setting(1, "Passes over each step's rollouts (PPO epochs; TRL's num_iterations).",
                                    unit="passes", at_least=1, typo_above=1000)
    lr: float = setting(1e-6, "Learning rate, per optimizer update.", above=0, typo_above=1.0)
    lr_schedule: str = setting("constant", "Learning-rate schedule: constant, linear, cosine.",
                               choices=("constant", "linear", "cosine"))
    warmup_steps: int = setting(0, "Linear warm-up length.", unit="optimizer updates", at_least=0, typo_above=10**8)
    weight_decay: float = setting(0.0, "AdamW weight decay.", at_least=0)
    max_grad_norm: float = setting(1.0, "Gradient clipping by global norm; 0 disables clipping.", at_least=0)
    kl_coef: float = setting(0.0, "KL penalty coefficient against the reference policy (0 = no reference model).",
                             at_least=0)
    kl_estimator: str = setting("k3", "KL estimator: k1, k2, k3 (a.k.a. low_var_kl).",
                                choices=("k1", "k2", "k3", "low_var_kl"))
    clip_low: float = setting(0.2, "Lower PPO ratio clip: the ratio is kept >= 1 - clip_low.", above=0, below=1)
    clip_high: float | None = setting(None, "Upper PPO ratio clip (DAPO clip-higher): ratio <= 1 + clip_high; null = "
                                      "clip_low.", above=0)
    loss_aggregation: str = setting("seq_mean_token_mean", """How per-token losses become one number: token_mean (all
        tokens of the batch), seq_mean_token_mean (mean per sequence, then over sequences; GRPO's),
        seq_mean_token_sum_norm (sum per sequence divided by loss_normalizer; Dr. GRPO).""",
                                    choices=("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"))
    advantage_baseline: str = setting("group_mean", """What is subtracted from a completion's reward: group_mean (the
        mean of its group, itself included; GRPO), leave_one_out (the mean of the group's other completions; RLOO),
        none (REINFORCE++: the batch whitening centres), critic (a learned value function with GAE; PPO, see
        algorithm.critic).""", choices=("group_mean", "leave_one_out", "none", "critic"))
    advantage_norm: str = setting("group", """What the baselined rewards are divided by: group (the std of the group's
        rewards), batch (the std of the whole step's rewards, not re-centred), batch_whiten (token-weighted
        whitening over the step: minus the token mean, divided by the token std; REINFORCE++ and PPO), none.""",
                                  choices=("group", "batch", "batch_whiten", "none"))
    kl_placement: str = setting("loss", """Where the KL penalty against the reference policy goes (when kl_coef > 0):
        loss (a loss term, GRPO's form) or reward (subtracted from each token's reward before advantages, PPO's and
        REINFORCE++'s form).""", choices=("loss", "reward"))
    importance_sampling_level: str = setting("token", """The PPO ratio: token (one ratio per token) or sequence (the
        geometric mean of the sequence's token ratios, one per completion; GSPO).""", choices=("token", "sequence"))
    dual_clip: float | None = setting(None, """Dual-clip constant c: for negative advantages the loss is bounded by
        c x advantage (Ye et al. 2020); null = no dual clip.""", above=1)
    reward_clip: float | None = setting(None, """Clip each total reward to [-c, c] before advantages; null = rewards
        are never clipped.""", above=0)
    dynamic_sampling: bool = setting(False, """Drop prompt groups whose rewards all equal (no learning signal) and
        generate more prompts until the step's batch is full again (DAPO).""")
    overlong_filter: bool = setting(False, """Leave completions cut at max_new_tokens out of the loss (DAPO's overlong
        filtering).""")
    overlong_buffer: int | str | None = setting(None, """DAPO's soft overlong punishment: a completion longer than
        max_new_tokens - buffer loses (length - (max_new_tokens - buffer)) / buffer x overlong_penalty reward; null = no
        shaping; auto = a fifth of max_new_tokens (DAPO's 4096 of 20480), null when that is under one token.""",
                                                unit="tokens", at_least=1, auto="a fifth of max_new_tokens")
    overlong_penalty: float = setting(1.0, "The largest soft overlong punishment (at max_new_tokens).", at_least=0)
    loss_normalizer: int | None = setting(None, """The constant that seq_mean_token_sum_norm divides each sequence's
        summed token loss by; null = max_new_tokens (Dr. GRPO).""", unit="tokens", at_least=1, typo_above=1 << 20)
    rollout_correction: str = setting("none", """Importance-sampling correction for the mismatch between the rollout
        engine's and the trainer's log-probabilities (truncated IS): none, token (per-token ratio, capped) or sequence
        (one ratio per completion, capped).""", choices=("none", "token", "sequence"))
    rollout_correction_cap: float = setting(2.0, "The truncation cap of rollout_correction's ratio.", above=1)
    min_lr_ratio: float = setting(0.0, "Where lr_schedule decays to, as a fraction of lr (0 = to zero).", at_least=0,
                                  at_most=1)
    critic: CriticConfig = field(default_factory=CriticConfig)
    entropy_coef: float = setting(0.0, "Entropy bonus coefficient.", at_least=0)
    temperature: float = setting(1.0, "Sampling temperature for rollouts (> 0).", above=0, typo_above=100.0)
    top_p: float = setting(1.0, "Nucleus sampling mass for rollouts, in (0, 1].", above=0, at_most=1)
    max_new_tokens: int = setting(512, "Maximum completion length.", unit="tokens", at_least=1, typo_above=1 << 20)


@dataclass
class RewardSpec:
    name: str = setting("math_answer", "A registered reward (see ``unirl rewards``).")
    weight: float = setting(1.0, "Weight in the total reward (the advantage is computed on the weighted sum).")
    kwargs: dict[str, Any] = field(default_factory=dict,
                                   metadata=documented("Keyword arguments passed to the reward function."))
    file: str | None = setting(None, """A local Python file that defines this reward with ``@unirl.reward`` (instead
        of an installed plugin).""")
    inline: bool | None = setting(None, """Score this reward in the trainer's thread, with no worker process and no
        timeout: true (at your risk: a hang stalls training), false (always in worker processes), null (only when
        the reward declares itself trusted, as the fast built-ins do).""")


@dataclass
class RolloutConfig:
    engine: str = setting(AUTO, "Generation engine: hf (transformers generate), vllm, sglang, or one a plugin "
                          "registers (``unirl plugins``).", choices_from="rollout_engines",
                          auto="the backend's own default engine: hf on TRL, sglang on slime, vllm elsewhere")
    colocated: bool = setting(True, "Rollout shares the training GPUs (true) or runs on its own (false).")
    gpus: int | None = setting(None, """With colocated=false: GPUs given to the rollout engine out of nodes x
        gpus_per_node (the rest train); null = half of them.""", unit="GPUs")
    tensor_parallel: int = setting(1, "Tensor-parallel degree of the rollout engine.", unit="GPUs per engine",
                                   at_least=1, typo_above=1024)
    gpu_memory_fraction: float = setting(0.5, "Fraction of GPU memory the rollout engine may take (vLLM / SGLang).",
                                         above=0, at_most=1)


@dataclass
class ResourcesConfig:
    device: str = setting("auto", "auto (CUDA when present, else CPU), cpu, or cuda.", choices=("auto", "cpu", "cuda"))
    nodes: int = setting(1, "Number of machines.", unit="nodes", at_least=1, typo_above=100_000)
    gpus_per_node: int | str = setting(AUTO, "GPUs per machine used by the run (0 on CPU).", unit="GPUs",
                                       at_least=0, typo_above=1024, auto="""the GPUs this machine has (nvidia-smi,
        narrowed by CUDA_VISIBLE_DEVICES) for a local run, TRL taking one of them; on a GPU-only backend with none
        found here, or for a cluster scheduler, 1 is assumed and the plan says so (a local run then stops before
        anything is written)""")
    cpu_threads: int | None = setting(1, """torch intra-op threads on CPU; 1 is fastest for tiny models on a shared
        box; null = torch default.""", unit="threads", at_least=1, typo_above=4096)
    gradient_checkpointing: bool = setting(False, "Recompute activations in the backward pass: less memory, about "
                                           "30% slower.")
    cpu_processes: int = setting(1, """Training processes per node when the run has no GPUs (gpus_per_node=0): above 1,
        TRL is launched with torchrun and trains data-parallel over torch.distributed's gloo backend on the CPU (each
        process takes an equal share of every update). GPU runs start one process per training GPU instead.""",
                                 unit="processes", at_least=1, typo_above=1024)
    sharding: str | None = setting(None, """How the training state (weights, gradients, optimizer) is split over the
        training GPUs: fsdp (PyTorch FSDP2), zero2 or zero3 (DeepSpeed ZeRO stages; DeepSpeed must be installed where
        the backend runs), none (every process holds all of it: plain data parallel); null = the backend's own
        default (TRL: none).""", choices=("none", "fsdp", "zero2", "zero3"))


@dataclass
class EvalConfig:
    every_steps: int = setting(0, "Held-out evaluation cadence; 0 = only before and after training.",
                               unit="training steps", at_least=0, typo_above=10**7)
    before_training: bool | str = setting(AUTO, "Evaluate once before the first update (the baseline).",
                                          auto="true, except on OpenRLHF (it cannot evaluate before training)")
    greedy: bool | str = setting(AUTO, "Greedy decoding for evaluation (else sampling at the rollout temperature).",
                                 auto="true, except on NeMo RL (it validates by sampling at the rollout temperature)")
    accuracy_reward: str | None = setting(None, "Reward whose score decides \"solved\"; null = the first reward of "
                                          "the recipe.")
    accuracy_threshold: float = setting(1.0, "A held-out prompt counts as solved when that reward scores >= this.")
    stop_after_plateau: int | str | None = setting(None, """Early stop: end training at a held-out evaluation (every
        ``eval.every_steps`` steps, the one before training included) when this many evaluations in a row have not
        raised the best held-out accuracy so far. The run is then completed at that step, with ``stopped_early:
        {reason, step, accuracy}`` in summary.json and the weights of that step (not of the best evaluation). null =
        never; needs data.eval and eval.every_steps > 0. TRL only: the native backends have no early stop and refuse
        a value.""", unit="evaluations", at_least=1, typo_above=10**6,
        auto="6 on TRL (150 steps at the embedded default's cadence of 25), null on the backends without early stop")
    stop_at_accuracy: float | str | None = setting(None, """Early stop: end training at the first held-out evaluation
        during training whose accuracy is >= this (1.0: every held-out prompt solved), recorded like
        ``stop_after_plateau``. null = never; needs data.eval and eval.every_steps > 0. TRL only (the native
        backends refuse a value).""", unit="fraction of held-out prompts", above=0.0, at_most=1.0,
        auto="1.0 on TRL (accuracy cannot rise further), null on the backends without early stop")
    keep_best: bool | str = setting(False, """End the run with the weights of its best held-out evaluation during
        training (the one before training included), as transformers' load_best_model_at_end: the final evaluation
        and the saved model are those weights, and summary.json names the step (``kept_best``). The evaluations that
        chose them are optimistic about them; with an environment the final evaluation runs on fresh seeds no earlier
        evaluation used, so it is not. Needs data.eval and eval.every_steps > 0. TRL only (the native backends
        refuse it).""", auto="true on TRL with held-out evaluations during training (one process, full fine-tuning), "
                             "false elsewhere")


TRACKERS = ("tensorboard", "wandb", "mlflow", "trackio")
"""The experiment trackers ``logging.trackers`` names; each is a unirl plugin (:mod:`unirl.plugins.trackers`) whose
package comes with ``pip install unirl[<name>]``, and ``TRACKER_MODULES`` is the module that extra installs."""
TRACKER_MODULES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow", "trackio": "trackio"}


@dataclass
class TensorBoardOptions:
    dir: str | None = setting(None, """Where the event files go (a relative path is taken from the run directory);
        null = <run dir>/tensorboard.""")


@dataclass
class WandbOptions:
    project: str = setting("unirl", "W&B project.")
    entity: str | None = setting(None, "W&B entity (user or team); null = the logged-in account's default.")
    mode: str = setting("offline", """offline (written under the run directory, uploaded later with ``wandb sync``),
        online (needs ``wandb login``) or disabled.""", choices=("offline", "online", "disabled"))
    name: str | None = setting(None, """Run display name; null = the run directory's last two
        parts (<run.name>-<time>).""")
    group: str | None = setting(None, "W&B run group (a sweep's members, say); null = none.")
    tags: list[str] = field(default_factory=list, metadata=documented("W&B run tags."))
    dir: str | None = setting(None, """Where W&B writes its wandb/ folder (a relative path is taken from the run
        directory); null = the run directory.""")


@dataclass
class MlflowOptions:
    tracking_uri: str | None = setting(None, """MLflow tracking URI (a server's http://..., a database); null = a store
        inside the run directory, sqlite:///<run dir>/mlflow.db.""")
    experiment: str = setting("unirl", "MLflow experiment name (created when missing).")
    run_name: str | None = setting(None, """MLflow run name; null = the run directory's last two
        parts (<run.name>-<time>).""")


@dataclass
class TrackioOptions:
    project: str = setting("unirl", "trackio project.")
    name: str | None = setting(None, """trackio run name; null = the run directory's last two
        parts (<run.name>-<time>).""")
    space_id: str | None = setting(None, """A Hugging Face Space to sync to; null = local only (trackio's own store:
        $TRACKIO_DIR, default ~/.cache/huggingface/trackio).""")


@dataclass
class TrackerOptions:
    tensorboard: TensorBoardOptions = field(default_factory=TensorBoardOptions)
    wandb: WandbOptions = field(default_factory=WandbOptions)
    mlflow: MlflowOptions = field(default_factory=MlflowOptions)
    trackio: TrackioOptions = field(default_factory=TrackioOptions)


@dataclass
class LoggingConfig:
    every_steps: int = setting(1, "Write metrics every this many steps.", unit="training steps", at_least=1,
                               typo_above=10**7)
    trajectories: bool = setting(True, """Write scored completions to trajectories.jsonl (every one whose reward call
        failed, always).""")
    trajectories_every: int = setting(1, """Keep the completions of step 1 and every this-many-th step (TRL; native
        backends keep every batch).""", unit="training steps", at_least=1)
    trajectories_per_group: int | None = setting(None, """Keep at most this many completions per prompt group and
        step; null = all.""", unit="completions", at_least=1)
    trajectories_compress: bool = setting(False, """Write trajectories.jsonl.gz (gzip) instead; every unirl reader
        reads either.""")
    plot: bool = setting(True, "Write curves.png (reward and held-out accuracy) at the end of the run.")
    progress: bool = setting(True, "Show a progress bar (steps, reward, time left) on the terminal.")
    parity: bool = setting(True, """Write parity.json at launch: the backend's own advantage and loss code on a
        frozen batch of this recipe against the recipe's meaning (``unirl parity``), where the backend's code is
        importable; cached per recipe and backend version, so only a new combination costs its ~10 s.""")
    trackers: list[str] = field(default_factory=list, metadata=documented(f"""Experiment trackers that get unirl's
        own record (metrics per step, held-out evaluations, the recipe, the summary) from the process that reports the
        run: any of {list(TRACKERS)}; [] = none. Each needs ``pip install unirl[<name>]`` there."""))
    tracker_options: TrackerOptions = field(default_factory=TrackerOptions)


@dataclass
class EnvironmentConfig:
    """A multi-turn environment (``@unirl.environment``) that runs every episode: its return is the reward, beside
    the recipe's rewards scored on the final transcript."""

    name: str | None = setting(None, "A registered environment (``unirl environments``); null = single-turn "
                               "completions scored by the recipe's rewards.")
    kwargs: dict[str, Any] = field(default_factory=dict, metadata=documented(
        "Keyword arguments for the environment's constructor (one instance per episode)."))
    file: str | None = setting(None, "A Python file defining the environment (loaded as a plugin, like a reward "
                               "file).")
    max_turns: int | None = setting(None, "At most this many assistant turns per episode; null = the environment's "
                                    "own max_turns (a larger value is capped by it).", unit="turns", at_least=1,
                                    typo_above=10_000)
    timeout_s: float = setting(30.0, "Per environment call (reset, step, final, close), in seconds; a call past it "
                               "ends its episode as a timeout error.", unit="seconds", above=0)


@dataclass
class RunSection:
    name: str = setting("run", "Run name, used in the run directory path (one folder name).")
    resume: bool = setting(False, "Continue from the last checkpoint in the run directory.")
    checkpoint_every: int = setting(0, """Save a checkpoint every this many steps (what ``run.resume`` continues
        from); 0 = no checkpoints.""", unit="training steps", at_least=0, typo_above=10**7)


@dataclass
class Recipe:
    """The whole run: what ``unirl`` composes from conf/, the recipe and the command line."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rewards: list[RewardSpec] = field(default_factory=lambda: [RewardSpec()])
    reward_policy: RewardPolicy = field(default_factory=RewardPolicy)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    environment: EnvironmentConfig = field(default_factory=EnvironmentConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    run: RunSection = field(default_factory=RunSection)
    seed: int = setting(0, "Seed for data order, model init (builtin models) and sampling.", at_least=0,
                        at_most=2**32 - 1, why="numpy and torch take 32-bit unsigned seeds")
    framework: dict[str, Any] = field(default_factory=dict, metadata=documented(
        "The backend and its own options (``name`` plus what its plugin declares)."))
    scheduler: dict[str, Any] = field(default_factory=dict, metadata=documented(
        "Where the run is launched (``name`` plus the scheduler's options)."))

    # --- the batch and placement arithmetic every backend converts from ------------------------------------------

    @property
    def completions_per_step(self) -> int:
        return self.algorithm.prompts_per_step * self.algorithm.samples_per_prompt

    @property
    def completions_per_update(self) -> int:
        """Completions per optimizer update: one mini-batch of the step's completions."""
        return self.completions_per_step // self.algorithm.mini_batches_per_step

    @property
    def prompts_per_run(self) -> int:
        """Prompts the whole run trains on: steps x prompts_per_step (a backend's exported train file holds these)."""
        return self.algorithm.steps * self.algorithm.prompts_per_step

    @property
    def gpus_per_node(self) -> int:
        """``resources.gpus_per_node`` once resolved (:mod:`unirl.backend.auto`); reading it earlier is a defect."""
        gpus = self.resources.gpus_per_node
        if not isinstance(gpus, int):
            raise UnirlError(f"resources.gpus_per_node={gpus!r} read before the backend resolved it")
        return gpus

    @property
    def total_gpus(self) -> int:
        """Every GPU of the run: nodes x gpus_per_node."""
        return self.resources.nodes * max(self.gpus_per_node, 0)

    @property
    def world_size(self) -> int:
        """Training processes: one per training GPU (rollout-only GPUs excluded), or nodes x cpu_processes on CPU."""
        if self.total_gpus == 0:
            return self.resources.nodes * max(self.resources.cpu_processes, 1)
        return max(1, self.total_gpus - self.rollout_gpus)

    @property
    def rollout_gpus(self) -> int:
        """GPUs reserved for the rollout engine alone (0 when rollouts are colocated with training)."""
        if self.rollout.colocated:
            return 0
        return self.rollout.gpus if self.rollout.gpus is not None else self.total_gpus // 2

    def micro_batch(self, training_gpus: int | None = None) -> int:
        """Completions per GPU per forward/backward pass: ``algorithm.micro_batch_size``, else one training GPU's
        share of an update. ``training_gpus`` defaults to :attr:`world_size`; a backend that places training on other
        GPUs than the recipe's split (NeMo RL's whole generation nodes, slime's actor) passes its own count."""
        gpus = self.world_size if training_gpus is None else training_gpus
        return self.algorithm.micro_batch_size or max(1, self.completions_per_update // max(1, gpus))


def recipe_from_dict(data: dict[str, Any]) -> Recipe:
    """A Recipe from its plain-dict form (a plan's ``recipe``), typed by the schema."""
    from omegaconf import OmegaConf

    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Recipe), data))  # type: ignore[return-value]


def split_source(source: str) -> tuple[str, str]:
    """``"hf:org/name@test"`` -> ("hf:org/name", "test"); a path whose last "@" is inside a folder name has no split."""
    base, sep, split = source.rpartition(SPLIT_SEP)
    if not sep or "/" in split or not base:
        return source, ""
    return base, split


def hub_source(base: str) -> tuple[str, str | None]:
    """``"hf:openai/gsm8k:main"`` -> ("openai/gsm8k", "main"); ``"hf:openai/gsm8k"`` -> ("openai/gsm8k", None).

    ``base`` is a source without its split (:func:`split_source`). The config is what follows the last ":" when it is
    a plain name (no "/"); a local dataset folder whose own name holds a ":" is taken whole when it exists."""
    name = base[len(HUB_PREFIX):] if base.startswith(HUB_PREFIX) else base
    head, sep, config = name.rpartition(CONFIG_SEP)
    if not sep or "/" in config or Path(name).expanduser().exists():
        return name, None
    return head, config


def is_local_path(value: str) -> bool:
    """A model or data location meant as a path on this machine (not a hub id or builtin)."""
    return value.startswith(("/", ".", "~")) or Path(value).expanduser().exists() or not HUB_ID.match(value)


def rollout_gpu_problems(recipe: Recipe) -> list[FieldError]:
    """``rollout.gpus`` only means something for disaggregated rollouts, and must leave GPUs to train on."""
    gpus, rollout = recipe.rollout.gpus, recipe.rollout
    if gpus is None:
        return []
    if rollout.colocated:
        return [FieldError("rollout.gpus", gpus,
                           "only with rollout.colocated=false (colocated rollouts share every GPU)")]
    total = recipe.total_gpus
    if not 0 < gpus < total or (rollout.tensor_parallel >= 1 and gpus % rollout.tensor_parallel):
        return [FieldError("rollout.gpus", gpus,
                           f"must be between 1 and {max(total - 1, 0)} (nodes x gpus_per_node, leaving GPUs to train) "
                           f"and a multiple of rollout.tensor_parallel={rollout.tensor_parallel}")]
    return []


def process_problems(recipe: Recipe) -> list[FieldError]:
    """``resources.cpu_processes`` counts CPU training processes: with GPUs, there is one process per GPU."""
    res = recipe.resources
    if res.cpu_processes > 1 and (recipe.gpus_per_node > 0 or res.device == "cuda"):
        return [FieldError("resources.cpu_processes", res.cpu_processes,
                           f"only for CPU runs (gpus_per_node=0, device cpu or auto; here gpus_per_node="
                           f"{res.gpus_per_node}, device={res.device}): a GPU run starts one process per GPU")]
    return []


def batch_problems(recipe: Recipe) -> list[FieldError]:
    """Completions per step split into mini-batches, each evenly over the training devices, each into micro-batches.

    Checked only once the sizes themselves are in range (the generic pass reports those)."""
    a = recipe.algorithm
    if a.prompts_per_step < 1 or a.samples_per_prompt < 1 or a.mini_batches_per_step < 1:
        return []
    per_step = recipe.completions_per_step
    if per_step % a.mini_batches_per_step:
        return [FieldError("algorithm.mini_batches_per_step", a.mini_batches_per_step,
                           f"must divide prompts_per_step x samples_per_prompt = {a.prompts_per_step} x "
                           f"{a.samples_per_prompt} = {per_step} completions")]
    per_update = recipe.completions_per_update
    per_device, rest = divmod(per_update, recipe.world_size)
    if rest:
        return [FieldError("algorithm.prompts_per_step", a.prompts_per_step,
                           f"{per_update} completions per update do not split evenly over {recipe.world_size} "
                           "devices")]
    if a.micro_batch_size is not None and a.micro_batch_size >= 1 and per_device % a.micro_batch_size:
        return [FieldError("algorithm.micro_batch_size", a.micro_batch_size,
                           f"must divide the {per_device} completions each device gets per update ({per_step} per "
                           f"step / {a.mini_batches_per_step} mini-batches / {recipe.world_size} devices)")]
    rows = recipe.data.train_rows
    if rows is not None and rows >= 1 and rows < a.prompts_per_step:
        # every backend drops an incomplete last batch: fewer rows than one step's prompts train nothing
        return [FieldError("data.train_rows", rows, f">= algorithm.prompts_per_step={a.prompts_per_step}: one step "
                                                    "takes that many prompts, and a smaller set makes no step")]
    return []


def algorithm_problems(recipe: Recipe) -> list[FieldError]:
    """A field that only one choice of another reads must not be set beside a choice that ignores it: the backends
    would drop it silently, and the run would not be the experiment the recipe states."""
    a = recipe.algorithm
    if a.samples_per_prompt == 1 and a.advantage_baseline in ("group_mean", "leave_one_out"):
        return [FieldError("algorithm.samples_per_prompt", 1, f">= 2 with advantage_baseline={a.advantage_baseline!r} "
                           "(a group baseline compares completions of one prompt); 1 only with critic or none")]
    if a.loss_normalizer is not None and a.loss_aggregation != "seq_mean_token_sum_norm":
        return [FieldError("algorithm.loss_normalizer", a.loss_normalizer,
                           f"null with loss_aggregation={a.loss_aggregation!r}: only seq_mean_token_sum_norm "
                           "(Dr. GRPO) divides by a constant")]
    return []


def lora_problems(recipe: Recipe) -> list[FieldError]:
    """``model.lora.target_modules``: the shorthand alone, or module names (checked only when LoRA is on);
    ``model.lora.modules_to_save``: module names, only with LoRA on, none of them also adapted."""
    lora = recipe.model.lora
    names = list(lora.target_modules)
    if lora.rank and (not names or (ALL_LINEAR in names and len(names) > 1)
                      or any(not isinstance(m, str) or not m.strip() or m != m.strip() for m in names)):
        return [FieldError("model.lora.target_modules", names,
                           f"[{ALL_LINEAR}] alone, or a non-empty list of module names (e.g. [q_proj, v_proj])")]
    saved = list(lora.modules_to_save)
    if saved and not lora.rank:
        return [FieldError("model.lora.modules_to_save", saved,
                           "only with LoRA on (model.lora.rank > 0): without adapters every module trains already")]
    if any(not isinstance(m, str) or not m.strip() or m != m.strip() or m == ALL_LINEAR for m in saved):
        return [FieldError("model.lora.modules_to_save", saved, "module names (e.g. [embed_tokens])")]
    if overlap := sorted(set(saved) & set(names)):
        return [FieldError("model.lora.modules_to_save", saved,
                           f"modules that do not also get adapters (model.lora.target_modules names {overlap})")]
    return []


def reward_problems(recipe: Recipe, known_rewards: list[str]) -> list[FieldError]:
    """At least one reward, each registered and named once; ``eval.accuracy_reward`` one of them."""
    problems: list[FieldError] = []
    if not recipe.rewards and not recipe.environment.name:
        problems.append(FieldError("rewards", [], "at least one reward is required (or an environment.name, whose "
                                   "return is the reward)"))
    for i, spec in enumerate(recipe.rewards):
        if spec.name not in known_rewards:
            problems.append(FieldError(f"rewards[{i}].name", spec.name,
                                       f"registered rewards are {sorted(known_rewards)}"))
    names = [s.name for s in recipe.rewards]
    if len(set(names)) != len(names):
        problems.append(FieldError("rewards", names, "each reward may appear once"))
    if recipe.eval.accuracy_reward is not None and recipe.eval.accuracy_reward not in names:
        problems.append(FieldError("eval.accuracy_reward", recipe.eval.accuracy_reward,
                                   f"must be one of the recipe's rewards {names}"))
    return problems


def early_stop_problems(recipe: Recipe) -> list[FieldError]:
    """``eval.stop_after_plateau`` / ``eval.stop_at_accuracy`` decide at held-out evaluations during training: they
    need held-out data and a cadence."""
    problems = []
    for name in ("stop_after_plateau", "stop_at_accuracy", "keep_best"):
        value = getattr(recipe.eval, name)
        if value not in (None, False, AUTO) and (not recipe.data.eval or recipe.eval.every_steps < 1):
            problems.append(FieldError(f"eval.{name}", value, "needs data.eval and eval.every_steps >= 1 (it decides "
                                       f"at held-out evaluations during training; here data.eval={recipe.data.eval!r},"
                                       f" eval.every_steps={recipe.eval.every_steps})"))
    return problems


def tracker_problems(recipe: Recipe) -> list[FieldError]:
    """``logging.trackers``: each one of :data:`TRACKERS`, named once."""
    problems = [FieldError(f"logging.trackers[{i}]", name, f"one of {list(TRACKERS)}")
                for i, name in enumerate(recipe.logging.trackers) if name not in TRACKERS]
    if len(set(recipe.logging.trackers)) != len(recipe.logging.trackers):
        problems.append(FieldError("logging.trackers", list(recipe.logging.trackers), "each tracker may appear once"))
    return problems


def uninstalled_tracker_problems(recipe: Recipe, missing: Sequence[str], where: str) -> list[FieldError]:
    """The recipe's trackers whose module (:data:`TRACKER_MODULES`) the caller found ``missing`` ``where`` the run
    reports (an interpreter), each naming the extra that installs it."""
    return [FieldError(f"logging.trackers[{i}]", name, f"a tracker installed where the run reports ({where}), which "
                       f"has no module {TRACKER_MODULES[name]!r}: pip install 'unirl[{name}]' there")
            for i, name in enumerate(recipe.logging.trackers) if name in missing]


def validate(recipe: Recipe, known_rewards: list[str], known_engines: Sequence[str] = BUILTIN_ROLLOUT_ENGINES,
             more: Sequence[FieldError] = (), fields_only: bool = False) -> None:
    """Raise :class:`RecipeInvalid` listing every problem; cheap, imports nothing heavy.

    One generic pass checks each field against its own declaration (finite, choices, range, typo bound; see
    :mod:`unirl.recipe.fields`); the functions above check what involves several fields. ``more``: problems found
    by others, reported in the same error (the data sources and the model, :func:`unirl.data.checks.data_problems`:
    the schema knows no data). ``fields_only``: the per-field pass alone, for a recipe whose ``auto`` fields are not
    resolved yet (the cross-field arithmetic needs the GPU count)."""
    from unirl.recipe import run_name

    problems = field_problems(recipe, {"rollout_engines": tuple(known_engines)})
    if fields_only or any(value_at(recipe, f) == AUTO for f in AUTO_ARITHMETIC):
        if problems:  # the cross-field checks need the fields well-formed and resolved
            raise RecipeInvalid(problems)
        return
    problems += run_name.problems(recipe.run.name)  # one plain folder name: it becomes part of the run directory
    problems += rollout_gpu_problems(recipe)
    problems += process_problems(recipe)
    problems += batch_problems(recipe)
    problems += algorithm_problems(recipe)
    problems += lora_problems(recipe)
    problems += reward_problems(recipe, known_rewards)
    problems += tracker_problems(recipe)
    problems += early_stop_problems(recipe)
    problems += list(more)
    if problems:
        raise RecipeInvalid(problems)
