"""The recipe: one typed, framework-neutral schema, and its validation.

Every field says its unit. The schema is registered in Hydra's ConfigStore (``unirl_schema``) so
that composition itself rejects unknown keys and wrong types; :func:`validate` then checks ranges
and arithmetic across fields, all before any model or backend is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirl.data.builtin.tiny_model import SHAPES
from unirl.errors import FieldError, RecipeInvalid
from unirl.rewards.spec import RewardPolicy

BUILTIN_PREFIX = "builtin:"
HUB_PREFIX = "hf:"
SPLIT_SEP = "@"  # source@split; "#" would need quoting in Hydra's override grammar
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
BUILTIN_DATASETS = ("arith",)
HUB_ID = re.compile(r"^([A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")  # "gpt2" or "org/name"


@dataclass
class ModelConfig:
    path: str = "builtin:tiny-arith"
    """Hub id (``Qwen/Qwen2.5-0.5B``), local directory with config.json, or ``builtin:<name>``."""
    revision: str | None = None
    """Hub revision (branch, tag or commit); ignored for local and builtin models."""
    dtype: str = "auto"
    """Weights and compute dtype: auto (bf16 on CUDA, fp32 on CPU), float32, bfloat16, float16."""
    init_seed: int | None = None
    """Seed for a builtin model's random init; null = the run's seed."""


@dataclass
class DataConfig:
    train: str = "builtin:arith@train"
    """Training prompts: ``builtin:<name>@<split>``, a .jsonl/.json/.parquet file, or ``hf:<dataset>@<split>``."""
    eval: str | None = "builtin:arith@heldout"
    """Held-out prompts, same forms as ``train``; null = no held-out evaluation."""
    prompt_key: str = "prompt"
    """Column holding the prompt (text, or chat messages)."""
    answer_key: str | None = "answer"
    """Column holding the reference answer passed to rewards as ``sample.reference``; null = no references."""
    prompt_template: str = "{prompt}"
    """Python format string applied to text prompts; other columns are available by name."""
    chat_template: bool = False
    """Render prompts with the model's chat template: a text prompt becomes one user message. Prompts that
    are already message lists are always rendered with it."""
    max_prompt_tokens: int | None = None
    """Prompts longer than this (in tokens) are truncated from the left; null = no limit."""
    train_rows: int | None = None
    """Use at most this many training rows (after shuffling with the seed); null = all."""
    eval_rows: int | None = None
    """Use at most this many held-out rows; null = all."""
    options: dict[str, Any] = field(default_factory=dict)
    """Options for a builtin dataset (e.g. ``max_sum`` for arith)."""


@dataclass
class AlgorithmConfig:
    name: str = "grpo"
    """Algorithm: grpo (group-relative advantages, no critic)."""
    steps: int = 200
    """Training steps; one step = generate for ``prompts_per_step`` prompts, score, update."""
    prompts_per_step: int = 8
    """Distinct prompts per training step (verl's train_batch_size, OpenRLHF's rollout batch)."""
    samples_per_prompt: int = 8
    """Completions sampled per prompt: the GRPO group size (>= 2)."""
    mini_batches_per_step: int = 1
    """Optimizer updates per step: the step's completions are split into this many mini-batches."""
    micro_batch_size: int | None = None
    """Completions per forward/backward pass on one device; null = a whole mini-batch at once."""
    epochs_per_batch: int = 1
    """Passes over each step's rollouts (PPO epochs; TRL's num_iterations)."""
    lr: float = 1e-6
    """Learning rate, per optimizer update."""
    lr_schedule: str = "constant"
    """Learning-rate schedule: constant, linear, cosine."""
    warmup_steps: int = 0
    """Linear warm-up length, in optimizer updates."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables clipping."""
    kl_coef: float = 0.0
    """KL penalty coefficient against the reference policy (0 = no reference model)."""
    kl_estimator: str = "k3"
    """KL estimator: k1, k2, k3 (a.k.a. low_var_kl)."""
    clip_low: float = 0.2
    """Lower PPO ratio clip: the ratio is kept >= 1 - clip_low."""
    clip_high: float | None = None
    """Upper PPO ratio clip (DAPO clip-higher): ratio <= 1 + clip_high; null = clip_low."""
    loss_aggregation: str = "token_mean"
    """How per-token losses become one number: token_mean (all tokens of the batch),
    seq_mean_token_mean (mean per sequence, then over sequences), seq_mean_token_sum_norm
    (sum per sequence divided by max_new_tokens; Dr. GRPO)."""
    advantage_norm: str = "group"
    """Divide advantages by the reward std of the group, of the batch, or none."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    temperature: float = 1.0
    """Sampling temperature for rollouts (> 0)."""
    top_p: float = 1.0
    """Nucleus sampling mass for rollouts, in (0, 1]."""
    max_new_tokens: int = 512
    """Maximum completion length, in tokens."""


@dataclass
class RewardSpec:
    name: str = "math_answer"
    """A registered reward (see ``unirl rewards``)."""
    weight: float = 1.0
    """Weight in the total reward (the advantage is computed on the weighted sum)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments passed to the reward function."""
    file: str | None = None
    """A local Python file that defines this reward with ``@unirl.reward`` (instead of an installed plugin)."""
    inline: bool | None = None
    """Score this reward in the trainer's thread, with no worker process and no timeout: true (at your risk: a
    hang stalls training), false (always in worker processes), null (only when the reward declares itself
    trusted, as the fast built-ins do)."""


@dataclass
class RolloutConfig:
    engine: str = "hf"
    """Generation engine: hf (transformers generate), vllm, sglang."""
    colocated: bool = True
    """Rollout shares the training GPUs (true) or runs on its own (false)."""
    gpus: int | None = None
    """With colocated=false: GPUs given to the rollout engine out of nodes x gpus_per_node (the rest train);
    null = half of them."""
    tensor_parallel: int = 1
    """Tensor-parallel degree of the rollout engine."""
    gpu_memory_fraction: float = 0.5
    """Fraction of GPU memory the rollout engine may take (vLLM / SGLang)."""


@dataclass
class ResourcesConfig:
    device: str = "auto"
    """auto (CUDA when present, else CPU), cpu, or cuda."""
    nodes: int = 1
    """Number of machines."""
    gpus_per_node: int = 0
    """GPUs per machine used by the run (0 on CPU)."""
    cpu_threads: int | None = 1
    """torch intra-op threads on CPU; 1 is fastest for tiny models on a shared box; null = torch default."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: less memory, about 30% slower."""


@dataclass
class EvalConfig:
    every_steps: int = 0
    """Held-out evaluation cadence, in training steps; 0 = only before and after training."""
    before_training: bool = True
    """Evaluate once before the first update (the baseline)."""
    greedy: bool = True
    """Greedy decoding for evaluation (else sampling at the rollout temperature)."""
    accuracy_reward: str | None = None
    """Reward whose score decides "solved"; null = the first reward of the recipe."""
    accuracy_threshold: float = 1.0
    """A held-out prompt counts as solved when that reward scores >= this."""


@dataclass
class LoggingConfig:
    every_steps: int = 1
    """Write metrics every this many steps."""
    trajectories: bool = True
    """Write scored completions to trajectories.jsonl (every one whose reward call failed, always)."""
    trajectories_every: int = 1
    """Keep the completions of step 1 and every this-many-th step (TRL; native backends keep every batch)."""
    trajectories_per_group: int | None = None
    """Keep at most this many completions per prompt group and step; null = all."""
    trajectories_compress: bool = False
    """Write trajectories.jsonl.gz (gzip) instead; every unirl reader reads either."""
    plot: bool = True
    """Write curves.png (reward and held-out accuracy) at the end of the run."""
    progress: bool = True
    """Show a progress bar (steps, reward, time left) on the terminal."""


@dataclass
class RunSection:
    name: str = "run"
    """Run name, used in the run directory path."""
    resume: bool = False
    """Continue from the last checkpoint in the run directory."""
    checkpoint_every: int = 0
    """Save a checkpoint every this many steps (what ``run.resume`` continues from); 0 = no checkpoints."""


@dataclass
class Recipe:
    """The whole run: what ``unirl`` composes from conf/, the recipe and the command line."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rewards: list[RewardSpec] = field(default_factory=lambda: [RewardSpec()])
    reward_policy: RewardPolicy = field(default_factory=RewardPolicy)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    run: RunSection = field(default_factory=RunSection)
    seed: int = 0
    """Seed for data order, model init (builtin models) and sampling."""
    framework: dict[str, Any] = field(default_factory=dict)
    """The backend and its own options (``name`` plus what its plugin declares)."""
    scheduler: dict[str, Any] = field(default_factory=dict)
    """Where the run is launched (``name`` plus the scheduler's options)."""

    @property
    def completions_per_step(self) -> int:
        return self.algorithm.prompts_per_step * self.algorithm.samples_per_prompt

    @property
    def world_size(self) -> int:
        """Training processes: one per training GPU (rollout-only GPUs excluded), or one on CPU."""
        return max(1, self.resources.nodes * max(self.resources.gpus_per_node, 0) - self.rollout_gpus)

    @property
    def rollout_gpus(self) -> int:
        """GPUs reserved for the rollout engine alone (0 when rollouts are colocated with training)."""
        if self.rollout.colocated:
            return 0
        total = self.resources.nodes * max(self.resources.gpus_per_node, 0)
        return self.rollout.gpus if self.rollout.gpus is not None else total // 2


CHOICES: dict[str, tuple[str, ...]] = {
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
    "algorithm.name": ("grpo",),
    "algorithm.lr_schedule": ("constant", "linear", "cosine"),
    "algorithm.kl_estimator": ("k1", "k2", "k3", "low_var_kl"),
    "algorithm.loss_aggregation": ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"),
    "algorithm.advantage_norm": ("group", "batch", "none"),
    "rollout.engine": ("hf", "vllm", "sglang"),
    "resources.device": ("auto", "cpu", "cuda"),
}


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


def _get(recipe: Recipe, dotted: str) -> Any:
    obj: Any = recipe
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def is_local_path(value: str) -> bool:
    """A model or data location meant as a path on this machine (not a hub id or builtin)."""
    return value.startswith(("/", ".", "~")) or Path(value).expanduser().exists() or not HUB_ID.match(value)


def _check_model(path: str, problems: list[FieldError], builtin_models: tuple[str, ...]) -> None:
    if path.startswith(BUILTIN_PREFIX):
        name = path[len(BUILTIN_PREFIX):]
        if name not in builtin_models:
            problems.append(FieldError("model.path", path, f"builtin models are {list(builtin_models)}"))
        return
    if not is_local_path(path):
        return  # a hub id: resolved (and cached) by transformers when the backend loads it
    local = Path(path).expanduser()
    if not local.is_dir():
        problems.append(
            FieldError("model.path", path, "no such directory; give a hub id (org/name), a local model "
                       "directory, or builtin:<name>")
        )
    elif not (local / "config.json").is_file():
        problems.append(FieldError("model.path", path, "directory has no config.json; not a transformers model"))
    elif not any(local.glob("*.safetensors")) and not any(local.glob("*.bin")):
        problems.append(FieldError("model.path", path, "directory has no *.safetensors or *.bin weights"))


def _check_data(key: str, source: str | None, problems: list[FieldError], builtin_data: tuple[str, ...]) -> None:
    if source is None:
        return
    base, split = split_source(source)
    if base.startswith(BUILTIN_PREFIX):
        name = base[len(BUILTIN_PREFIX):]
        if name not in builtin_data:
            problems.append(FieldError(key, source, f"builtin datasets are {list(builtin_data)}"))
        elif name == "arith":
            from unirl.data.builtin import arith

            if split and split not in arith.SPLITS:
                problems.append(FieldError(key, source, f"builtin:arith splits are {list(arith.SPLITS)}"))
        return
    if base.startswith(HUB_PREFIX):
        return
    path = Path(base).expanduser()
    if path.suffix not in DATA_SUFFIXES:
        problems.append(FieldError(key, source, f"a data file must end in one of {list(DATA_SUFFIXES)}, or use "
                                   "hf:<dataset>@<split> or builtin:<name>@<split>"))
    elif not path.is_file():
        problems.append(FieldError(key, source, "no such file"))


# Values far beyond any real run: a typo or a unit mistake (steps=1e14), refused before anything is allocated.
UPPER_BOUNDS: dict[str, float] = {
    "algorithm.steps": 10**7, "algorithm.prompts_per_step": 10**6, "algorithm.samples_per_prompt": 4096,
    "algorithm.mini_batches_per_step": 10**6, "algorithm.micro_batch_size": 10**6, "algorithm.epochs_per_batch": 1000,
    "algorithm.max_new_tokens": 1 << 20, "algorithm.lr": 1.0, "algorithm.warmup_steps": 10**8,
    "algorithm.temperature": 100.0, "resources.nodes": 100_000, "resources.gpus_per_node": 1024,
    "resources.cpu_threads": 4096, "rollout.tensor_parallel": 1024, "eval.every_steps": 10**7,
    "run.checkpoint_every": 10**7, "logging.every_steps": 10**7, "data.train_rows": 10**9, "data.eval_rows": 10**9,
    "data.max_prompt_tokens": 1 << 20,
}


def _finite_and_bounded(recipe: Recipe) -> list[FieldError]:
    """Every float field is a finite number (NaN silently disables comparisons: a NaN reward weight drops that reward,
    ``max_grad_norm=nan`` disables clipping), and no field is absurdly large."""
    import dataclasses
    import math

    found: list[FieldError] = []

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            key = f"{prefix}{f.name}"
            if dataclasses.is_dataclass(value):
                walk(value, key + ".")
            elif isinstance(value, float) and not math.isfinite(value):
                found.append(FieldError(key, value, "must be a finite number (NaN and infinity are not allowed)"))
            elif key in UPPER_BOUNDS and isinstance(value, int | float) and value > UPPER_BOUNDS[key]:
                found.append(FieldError(key, value, f"must be at most {UPPER_BOUNDS[key]:g}; is this a typo?"))

    walk(recipe, "")
    for i, spec in enumerate(recipe.rewards):
        if not math.isfinite(spec.weight):
            found.append(FieldError(f"rewards[{i}].weight", spec.weight, "must be a finite number"))
    return [p for p in found if not p.field.startswith("reward_policy.")]  # RewardPolicy.problems reports those


def validate(recipe: Recipe, known_rewards: list[str], builtin_models: tuple[str, ...] = tuple(SHAPES),
             builtin_data: tuple[str, ...] = BUILTIN_DATASETS) -> None:
    """Raise :class:`RecipeInvalid` listing every problem; cheap, imports nothing heavy."""
    problems: list[FieldError] = []
    a = recipe.algorithm

    for key, allowed in CHOICES.items():
        value = _get(recipe, key)
        if value not in allowed:
            problems.append(FieldError(key, value, f"one of {list(allowed)}"))

    def positive(key: str, minimum: float = 1) -> None:
        value = _get(recipe, key)
        if value is None or value < minimum:
            problems.append(FieldError(key, value, f"must be >= {minimum}"))

    for key in ("algorithm.steps", "algorithm.prompts_per_step", "algorithm.mini_batches_per_step",
                "algorithm.epochs_per_batch", "algorithm.max_new_tokens", "resources.nodes",
                "logging.every_steps", "rollout.tensor_parallel"):
        positive(key)
    if a.samples_per_prompt < 2:
        problems.append(FieldError("algorithm.samples_per_prompt", a.samples_per_prompt,
                                   "must be >= 2: GRPO compares completions within a group"))
    if not a.lr > 0:
        problems.append(FieldError("algorithm.lr", a.lr, "must be > 0"))
    for key in ("algorithm.kl_coef", "algorithm.weight_decay", "algorithm.max_grad_norm", "algorithm.entropy_coef",
                "algorithm.warmup_steps", "eval.every_steps", "run.checkpoint_every", "resources.gpus_per_node"):
        if _get(recipe, key) < 0:
            problems.append(FieldError(key, _get(recipe, key), "must be >= 0"))
    if not 0 < a.clip_low < 1:
        problems.append(FieldError("algorithm.clip_low", a.clip_low, "must be in (0, 1)"))
    if a.clip_high is not None and not a.clip_high > 0:
        problems.append(FieldError("algorithm.clip_high", a.clip_high, "must be > 0, or null"))
    if not a.temperature > 0:
        problems.append(FieldError("algorithm.temperature", a.temperature, "must be > 0"))
    if not 0 < a.top_p <= 1:
        problems.append(FieldError("algorithm.top_p", a.top_p, "must be in (0, 1]"))
    if not 0 < recipe.rollout.gpu_memory_fraction <= 1:
        problems.append(FieldError("rollout.gpu_memory_fraction", recipe.rollout.gpu_memory_fraction,
                                   "must be in (0, 1]"))
    if recipe.resources.cpu_threads is not None and recipe.resources.cpu_threads < 1:
        problems.append(FieldError("resources.cpu_threads", recipe.resources.cpu_threads, "must be >= 1, or null"))
    problems += recipe.reward_policy.problems()
    problems += _finite_and_bounded(recipe)
    from unirl.recipe import run_name
    problems += run_name.problems(recipe.run.name)  # one plain folder name: it becomes part of the run directory
    total_gpus = recipe.resources.nodes * recipe.resources.gpus_per_node
    if recipe.rollout.gpus is not None:
        if recipe.rollout.colocated:
            problems.append(FieldError("rollout.gpus", recipe.rollout.gpus,
                                       "only with rollout.colocated=false (colocated rollouts share every GPU)"))
        elif not 0 < recipe.rollout.gpus < total_gpus or recipe.rollout.gpus % recipe.rollout.tensor_parallel:
            problems.append(FieldError(
                "rollout.gpus", recipe.rollout.gpus,
                f"must be between 1 and {max(total_gpus - 1, 0)} (nodes x gpus_per_node, leaving GPUs to train) "
                f"and a multiple of rollout.tensor_parallel={recipe.rollout.tensor_parallel}"))

    # Batch arithmetic: completions per step split into mini-batches, each into per-device micro-batches.
    if a.prompts_per_step >= 1 and a.samples_per_prompt >= 2 and a.mini_batches_per_step >= 1:
        per_step = recipe.completions_per_step
        if per_step % a.mini_batches_per_step:
            problems.append(FieldError(
                "algorithm.mini_batches_per_step", a.mini_batches_per_step,
                f"must divide prompts_per_step x samples_per_prompt = {a.prompts_per_step} x "
                f"{a.samples_per_prompt} = {per_step} completions"))
        else:
            per_update = per_step // a.mini_batches_per_step
            per_device, rest = divmod(per_update, recipe.world_size)
            if rest:
                problems.append(FieldError(
                    "algorithm.prompts_per_step", a.prompts_per_step,
                    f"{per_update} completions per update do not split evenly over {recipe.world_size} devices"))
            elif a.micro_batch_size is not None and (a.micro_batch_size < 1 or per_device % a.micro_batch_size):
                problems.append(FieldError(
                    "algorithm.micro_batch_size", a.micro_batch_size,
                    f"must be >= 1 and divide the {per_device} completions each device gets per update "
                    f"({per_step} per step / {a.mini_batches_per_step} mini-batches / {recipe.world_size} devices)"))

    if not recipe.rewards:
        problems.append(FieldError("rewards", [], "at least one reward is required"))
    for i, spec in enumerate(recipe.rewards):
        if spec.name not in known_rewards:
            allowed = f"registered rewards are {sorted(known_rewards)}"
            problems.append(FieldError(f"rewards[{i}].name", spec.name, allowed))
    names = [s.name for s in recipe.rewards]
    if len(set(names)) != len(names):
        problems.append(FieldError("rewards", names, "each reward may appear once"))
    if recipe.eval.accuracy_reward is not None and recipe.eval.accuracy_reward not in names:
        problems.append(FieldError("eval.accuracy_reward", recipe.eval.accuracy_reward,
                                   f"must be one of the recipe's rewards {names}"))

    _check_model(recipe.model.path, problems, builtin_models)
    _check_data("data.train", recipe.data.train, problems, builtin_data)
    _check_data("data.eval", recipe.data.eval, problems, builtin_data)
    if f"{BUILTIN_PREFIX}arith" in {split_source(s)[0] for s in (recipe.data.train, recipe.data.eval) if s}:
        from unirl.data.builtin import arith

        for option, value, allowed in arith.option_problems(recipe.data.options):
            problems.append(FieldError(f"data.options.{option}", value, allowed))
    for key in ("data.train_rows", "data.eval_rows", "data.max_prompt_tokens", "logging.trajectories_every",
                "logging.trajectories_per_group"):
        value = _get(recipe, key)
        if value is not None and value < 1:
            problems.append(FieldError(key, value, "must be >= 1, or null"))
    if problems:
        raise RecipeInvalid(problems)
