"""slime and vime as unirl backends: one family, two rollout engines.

vime is slime's trainer (Megatron-LM, the same Data Buffer and flags) with vLLM + vllm-router rollouts instead of
SGLang; only the engine rows of the mapping table, the engine's flag prefix, the reward adapter's module and the
image differ, so both backends share :class:`SlimeFamily` and one table of common rows.

Both are launched as ``python3 train.py <flags>`` from the backend's checkout inside its image (slime's scripts do
``ray job submit ... python3 train.py``; train.py starts or joins Ray itself). The flags are slime's argparse flags,
rendered as full names, valueless ``store_true`` flags bare. Batch semantics, converted honestly:
``--rollout-batch-size`` counts prompts, ``--global-batch-size`` counts completions per optimizer update, and
``--num-steps-per-rollout`` is the number of updates per rollout (slime asserts the three agree).

Megatron cannot read a Hugging Face config, so the model's architecture flags are passed as flags: from
``framework.model_args`` (a list, e.g. the contents of slime's scripts/models/qwen2.5-0.5B.sh), from
``framework.model_args_script`` (one of those scripts inside the image, sourced at launch), or, when neither is set,
derived from the model's config.json by the rules of those scripts (:mod:`unirl.plugins.slime.model_args`: dense
Qwen2/Qwen2.5, Qwen3 and Llama; a local directory, a builtin model, or a hub id in the local Hugging Face cache).
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any, ClassVar

from unirl.backend.advantage_rows import advantage_rows, pair
from unirl.backend.contract import OMIT, Capabilities, Mapping, store_true
from unirl.backend.export import export_path
from unirl.backend.native import (
    CHECKPOINTS,
    GPU_ON_RAY,
    MICRO_BATCH_NOTE,
    NativeFramework,
    micro_batch_note,
    model_location,
    prompt_budget_note,
)
from unirl.backend.native import micro_batch as native_micro_batch
from unirl.backend.parity.certificate import ParityHarness
from unirl.backend.plan import LaunchPlan, MappedField, in_run_dir
from unirl.data.run_length import counted_at_launch
from unirl.errors import FieldError, Unsupported
from unirl.plugins.slime.model_args import ModelArgsError, megatron_model_args, model_config
from unirl.recipe.schema import BUILTIN_PREFIX, Recipe, is_local_path
from unirl.record.metrics_bridge import TB_DIR

MEGATRON_PATH = "/root/Megatron-LM"
"""Where both images keep Megatron-LM: its pip package installs only ``megatron.core``, so ``megatron.training``
comes from the checkout on PYTHONPATH, as slime's own scripts do (scripts/run-qwen3-4B.sh:138-161)."""
EXPORT_FORMAT = "slime_jsonl"
TRAIN_FILE = export_path("train", EXPORT_FORMAT)
EVAL_FILE = export_path("eval", EXPORT_FORMAT)
KL_TYPE = {"k1": "k1", "k2": "k2", "k3": "k3", "low_var_kl": "low_var_kl"}
MODEL_ARGS_HINT = ("the model's Megatron architecture flags, derived from its config.json for dense Qwen2/Qwen2.5, "
                   "Qwen3 and Llama models; otherwise set framework.model_args to a list (copy slime's "
                   "scripts/models/<model>.sh, e.g. qwen2.5-0.5B.sh) or framework.model_args_script to such a script "
                   "inside the image")


# --- shared helpers (recipe -> numbers slime wants) ------------------------------------------------------------------


def actor_placement(r: Recipe) -> tuple[int, int]:
    """(nodes, GPUs per node) of the Megatron actor: every GPU when colocated, the rest after rollout otherwise."""
    if r.rollout.colocated:
        return r.resources.nodes, r.gpus_per_node
    actor = max(0, r.total_gpus - r.rollout_gpus)
    per_node = max(1, min(r.gpus_per_node, actor))
    return max(1, actor // per_node), per_node


def actor_world(r: Recipe) -> int:
    nodes, per_node = actor_placement(r)
    return max(1, nodes * per_node)  # >= 1 so a GPU-less recipe reaches its refusal, not a division by zero


def micro_batch(r: Recipe) -> int:
    """Completions per GPU per forward/backward: the recipe's, else unirl's memory-safe default over the actor GPUs
    (:func:`unirl.backend.native.micro_batch`)."""
    return native_micro_batch(r, actor_world(r))


ESTIMATOR = {("group_mean", "group"): "grpo", ("group_mean", "none"): "grpo",
             ("group_mean", "batch_whiten"): "reinforce_plus_plus_baseline",
             ("none", "batch_whiten"): "reinforce_plus_plus"}
"""(advantage_baseline, advantage_norm) -> --advantage-estimator with token-level ratios."""
DYNAMIC_SAMPLING_FILTER = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"


def estimator(r: Recipe) -> str:
    """--advantage-estimator: :data:`ESTIMATOR`'s, gspo for GRPO's advantages with sequence-level ratios."""
    name = ESTIMATOR[pair(r)]
    return "gspo" if name == "grpo" and r.algorithm.importance_sampling_level == "sequence" else name


def _kl_in_loss(r: Recipe) -> bool:
    return r.algorithm.kl_placement == "loss"


def with_eval(r: Recipe, value: Any) -> Any:
    return value if r.data.eval else OMIT


# --- the mapping table: rows shared by slime and vime ---------------------------------------------------------------

NO_EARLY_STOP = ("null: slime trains --num-rollout rollouts and has no flag that stops on evaluation results (none "
                 "among its 902 flags); early stopping is TRL's (framework=trl)")
"""Why eval.stop_after_plateau and eval.stop_at_accuracy are refused: TRL's runner alone stops early."""

COMMON_MAPPING: tuple[Mapping, ...] = (
    *advantage_rows(
        ESTIMATOR, "--advantage-estimator", estimator,
        "grpo / gspo (group mean, / group std or not; gspo for sequence-level ratios), "
        "reinforce_plus_plus(_baseline) (no baseline / group mean, whitened by --normalize-advantages) "
        "(slime/ray/rollout.py:608-633, slime/utils/ppo_utils.py:371-460 @ 624b824)",
        "slime has no leave-one-out baseline (only through --custom-advantage-function-path) and unirl does not map "
        "its Megatron critic (ppo)", native_default="grpo"),
    Mapping("algorithm.importance_sampling_level", "(gspo estimator)", lambda r: r.algorithm.importance_sampling_level,
            supported=lambda r: r.algorithm.importance_sampling_level == "token" or ESTIMATOR.get(pair(r)) == "grpo",
            supported_text="token, or sequence with GRPO's advantages (--advantage-estimator gspo): slime's "
                           "REINFORCE++ estimators have token-level ratios only"),
    Mapping("algorithm.steps", "--num-rollout", lambda r: r.algorithm.steps,
            "one rollout = one unirl step; the exported train file holds exactly steps x prompts_per_step prompts",
            native_default=None),
    Mapping("algorithm.epochs", "(counted by unirl)", lambda r: OMIT, "epochs become steps where the plan counts the "
            "rows", supported=lambda r: not counted_at_launch(r),
            supported_text="epochs over rows the plan can count (a data file on this machine, a builtin dataset); "
                           "otherwise set algorithm.steps: unirl sends slime a rollout count"),
    Mapping("algorithm.prompts_per_step", "--rollout-batch-size", lambda r: r.algorithm.prompts_per_step,
            "counts prompts (required by slime)", native_default=None),
    Mapping("algorithm.samples_per_prompt", "--n-samples-per-prompt", lambda r: r.algorithm.samples_per_prompt,
            native_default=1),
    Mapping("algorithm.mini_batches_per_step", "--global-batch-size", lambda r: r.completions_per_update,
            "counts completions per optimizer update: prompts x samples / mini_batches_per_step",
            native_default=None),
    Mapping("algorithm.mini_batches_per_step", "--num-steps-per-rollout", lambda r: r.algorithm.mini_batches_per_step,
            "optimizer updates per rollout; slime asserts it agrees with --global-batch-size", native_default=None),
    Mapping("algorithm.micro_batch_size", "--micro-batch-size", micro_batch,
            f"{MICRO_BATCH_NOTE} (data parallel over every actor GPU); slime computes log-probs with it too",
            note_for=lambda r: micro_batch_note(r, actor_world(r)), native_default=1),
    Mapping("algorithm.logprob_micro_batch_size", "(--micro-batch-size)", lambda r: OMIT, allowed=(None,),
            supported_text="null only: slime computes log-probs with --micro-batch-size (or a token budget, "
                           "--log-probs-max-tokens-per-gpu, with dynamic batch sizes); it has no count of its own"),
    Mapping("algorithm.epochs_per_batch", "(one pass per rollout)", lambda r: 1, allowed=(1,),
            supported_text="1: each rollout's samples are used once (slime has no PPO-epochs flag; use "
                           "mini_batches_per_step for several updates per rollout)"),
    Mapping("algorithm.lr", "--lr", lambda r: r.algorithm.lr, native_default=1e-6),
    Mapping("algorithm.lr_schedule", "--lr-decay-style", lambda r: r.algorithm.lr_schedule,
            "decays over num_rollout x updates per rollout (slime/backends/megatron_utils/model.py:203-205) to "
            "--min-lr 0", native_default="linear"),
    Mapping("algorithm.warmup_steps", "--lr-warmup-iters", lambda r: r.algorithm.warmup_steps,
            "optimizer updates", native_default=0),
    Mapping("algorithm.weight_decay", "--weight-decay", lambda r: r.algorithm.weight_decay,
            "Megatron's default is 0.01", native_default=0.01),
    Mapping("algorithm.max_grad_norm", "--clip-grad", lambda r: r.algorithm.max_grad_norm,
            "0 disables clipping (megatron/core/optimizer/optimizer.py:606)", native_default=1.0),
    Mapping("algorithm.kl_coef", "--use-kl-loss", lambda r: store_true(r.algorithm.kl_coef > 0 and _kl_in_loss(r)),
            "KL as a loss term against the reference policy (--ref-load)", native_default=False),
    Mapping("algorithm.kl_coef", "--kl-loss-coef",
            lambda r: r.algorithm.kl_coef if r.algorithm.kl_coef > 0 and _kl_in_loss(r) else OMIT,
            native_default=0.0),
    Mapping("algorithm.kl_placement", "--kl-coef",
            lambda r: r.algorithm.kl_coef if r.algorithm.kl_coef > 0 and not _kl_in_loss(r) else OMIT,
            "KL in each token's reward, estimated with --kl-loss-type; read by the reinforce_plus_plus estimators "
            "only (slime/backends/megatron_utils/loss.py:743-802)",
            supported=lambda r: r.algorithm.kl_coef == 0 or _kl_in_loss(r)
            or ESTIMATOR.get(pair(r)) in ("reinforce_plus_plus", "reinforce_plus_plus_baseline"),
            supported_text="loss, or reward with the REINFORCE++ pairs: slime's grpo and gspo advantages ignore "
                           "--kl-coef (loss.py:743-802)", native_default=0.0),
    Mapping("algorithm.kl_estimator", "--kl-loss-type",
            lambda r: KL_TYPE[r.algorithm.kl_estimator] if r.algorithm.kl_coef > 0 else OMIT,
            "low_var_kl is k3 clamped to [-10, 10] (slime/utils/ppo_utils.py:46-48)", native_default="k1"),
    Mapping("algorithm.clip_low", "--eps-clip", lambda r: r.algorithm.clip_low, native_default=0.2),
    Mapping("algorithm.clip_high", "--eps-clip-high", lambda r: r.algorithm.clip_high or r.algorithm.clip_low,
            native_default=None),
    Mapping("algorithm.loss_aggregation", "--calculate-per-token-loss",
            lambda r: store_true(r.algorithm.loss_aggregation == "token_mean"),
            "off = slime's per-sample mean of token means (seq_mean_token_mean); on = one token mean over the batch "
            "(slime/backends/megatron_utils/cp_utils.py:47-124)",
            allowed=("token_mean", "seq_mean_token_mean"),
            supported_text="token_mean (--calculate-per-token-loss) and seq_mean_token_mean (its default); no "
                           "sum-then-divide-by-max-length aggregation", native_default=False),
    Mapping("algorithm.advantage_norm", "--disable-grpo-std-normalization",
            lambda r: store_true(r.algorithm.advantage_norm == "none"),
            "group: the reward minus the group mean, divided by the group std; none: mean-centred only "
            "(slime/ray/rollout.py:608-633)", native_default=False),
    Mapping("algorithm.advantage_norm", "--normalize-advantages",
            lambda r: store_true(r.algorithm.advantage_norm == "batch_whiten"),
            "batch_whiten: token advantages whitened over the whole data-parallel batch (slime/backends/"
            "megatron_utils/loss.py:810-830); slime's REINFORCE++ advantages are otherwise unwhitened",
            native_default=False),
    Mapping("algorithm.dual_clip", "--eps-clip-c", lambda r: r.algorithm.dual_clip or OMIT, native_default=None),
    Mapping("algorithm.reward_clip", "(no reward clipping)", lambda r: None, allowed=(None,),
            supported_text="null: slime has no reward clipping flag"),
    Mapping("algorithm.dynamic_sampling", "--dynamic-sampling-filter-path",
            lambda r: DYNAMIC_SAMPLING_FILTER if r.algorithm.dynamic_sampling else OMIT,
            "keeps a group when its rewards' std exceeds 1e-6 (slime/rollout/filter_hub/dynamic_sampling_filters.py"
            ":9-15)", native_default=None),
    Mapping("algorithm.dynamic_sampling", "--over-sampling-batch-size",
            lambda r: r.algorithm.prompts_per_step if r.algorithm.dynamic_sampling else OMIT,
            "prompts per sampling round; rounds repeat until prompts_per_step groups are kept", native_default=None),
    Mapping("algorithm.overlong_filter", "(no overlong filtering)", lambda r: False, allowed=(False,),
            supported_text="false: slime has no overlong filtering flag"),
    Mapping("algorithm.overlong_buffer", "(no overlong shaping)", lambda r: None, allowed=(None,),
            supported_text="null: slime has no overlong reward shaping (none among its flags), and unirl's reward "
                           "adapter does not add one"),
    Mapping("algorithm.rollout_correction", "--use-tis",
            lambda r: store_true(r.algorithm.rollout_correction == "token"),
            "truncated importance sampling per token against the rollout log-probs", allowed=("none", "token"),
            supported_text="none or token: slime's --use-tis is per token", native_default=False),
    Mapping("algorithm.rollout_correction", "--use-rollout-logprobs",
            lambda r: store_true(r.algorithm.rollout_correction == "token"), native_default=False),
    Mapping("algorithm.rollout_correction_cap", "--tis-clip",
            lambda r: r.algorithm.rollout_correction_cap if r.algorithm.rollout_correction == "token" else OMIT,
            native_default=2.0),
    Mapping("algorithm.min_lr_ratio", "--min-lr", lambda r: r.algorithm.lr * r.algorithm.min_lr_ratio,
            "Megatron decays lr_schedule to --min-lr = lr x min_lr_ratio", native_default=0.0,
            supported=lambda r: r.algorithm.min_lr_ratio == 0 or r.algorithm.lr_schedule != "constant",
            supported_text="0 with lr_schedule=constant"),
    Mapping("algorithm.entropy_coef", "--entropy-coef", lambda r: r.algorithm.entropy_coef, native_default=0.0),
    Mapping("algorithm.temperature", "--rollout-temperature", lambda r: r.algorithm.temperature, native_default=1.0),
    Mapping("algorithm.top_p", "--rollout-top-p", lambda r: r.algorithm.top_p, native_default=1.0),
    Mapping("algorithm.max_new_tokens", "--rollout-max-response-len", lambda r: r.algorithm.max_new_tokens,
            native_default=None),
    Mapping("data.max_prompt_tokens", "--rollout-max-prompt-len", lambda r: OMIT, allowed=(None,),
            note="not sent: slime drops a longer prompt instead of cutting it, which would break the step-aligned "
                 "train file; every prompt is kept whole",
            note_for=lambda r: prompt_budget_note(r, "not sent: slime drops a longer prompt instead of cutting it "
                                                     "(slime/utils/data.py:87-137), which would break the step-aligned "
                                                     "train file; every prompt is kept whole"),
            supported_text="null only: slime drops prompts longer than --rollout-max-prompt-len instead of cutting "
                           "them (slime/utils/data.py:87-137), which would break the step-aligned train file; pass "
                           "--rollout-max-prompt-len through framework.overrides to accept the drop",
            native_default=None),
    # With an environment, unirl's generate function renders the episode (the opening through the environment's
    # reset), so slime hands it the row's own prompt (slime/utils/data.py:248-257).
    Mapping("data.chat_template", "--apply-chat-template",
            lambda r: store_true(r.data.chat_template is True and not r.environment.name),
            "a text prompt becomes one user message (slime/utils/data.py:145-150); message-list prompts need it on",
            native_default=False),
    Mapping("data.train", "--prompt-data", lambda r: TRAIN_FILE, "exported by unirl as slime JSONL",
            native_default=None),
    Mapping("data.train", "--input-key", lambda r: "prompt", native_default="input"),
    Mapping("data.train", "--label-key", lambda r: "label", "the reference answer", native_default=None),
    Mapping("data.train", "--metadata-key", lambda r: "metadata", native_default="metadata"),
    Mapping("data.train", "--rollout-shuffle", lambda r: OMIT,
            "off: the exported order is already the seeded order every backend uses", native_default=False),
    Mapping("data.eval", "--eval-prompt-data", lambda r: with_eval(r, ["eval", EVAL_FILE]),
            "a name/path pair", native_default=None),
    Mapping("eval.every_steps", "--eval-interval",
            lambda r: with_eval(r, r.eval.every_steps or r.algorithm.steps),
            "0: evaluate at the end only (the train file is one epoch, and slime evaluates at its boundary)",
            native_default=None),
    Mapping("eval.before_training", "--skip-eval-before-train",
            lambda r: store_true(bool(r.data.eval) and not r.eval.before_training), native_default=False),
    Mapping("eval.greedy", "--eval-temperature", lambda r: with_eval(r, 0.0) if r.eval.greedy else OMIT,
            "greedy: temperature 0; else the rollout temperature", native_default=None),
    Mapping("eval.greedy", "--n-samples-per-eval-prompt", lambda r: with_eval(r, 1),
            "one completion per held-out prompt (slime defaults to --n-samples-per-prompt)", native_default=None),
    # eval.stop_after_plateau / eval.stop_at_accuracy: no early stop here (a value is refused, never dropped)
    Mapping("eval.stop_after_plateau", "(no early stop)", lambda r: None,
            supported=lambda r: r.eval.stop_after_plateau is None, supported_text=NO_EARLY_STOP, native_default=None),
    Mapping("eval.stop_at_accuracy", "(no early stop)", lambda r: None,
            supported=lambda r: r.eval.stop_at_accuracy is None, supported_text=NO_EARLY_STOP, native_default=None),
    Mapping("eval.keep_best", "(no best-checkpoint selection)", lambda r: None,
            supported=lambda r: not r.eval.keep_best,
            supported_text="false: the run ends with its last weights (unirl selects the best held-out "
                           "evaluation's weights on TRL only)", native_default=False),
    Mapping("seed", "--seed", lambda r: r.seed, native_default=1234),
    Mapping("seed", "--rollout-seed", lambda r: r.seed, "sampling seeds of the rollout engine", native_default=42),
    Mapping("model.path", "--hf-checkpoint", model_location,
            "tokenizer, rollout engine weights and the HF config slime checks the model args against",
            supported=lambda r: r.model.path.startswith(BUILTIN_PREFIX) or is_local_path(r.model.path),
            supported_text="a local Hugging Face directory (visible inside the image) or builtin:<name>; download a "
                           "hub model first (huggingface-cli download <id> --local-dir <dir>)", native_default=None),
    Mapping("model.path", "--ref-load", model_location,
            "the reference policy; an HF directory of a supported model type loads directly "
            "(slime/backends/megatron_utils/checkpoint.py:100-131)", native_default=None),
    Mapping("run.resume", "--load", lambda r: CHECKPOINTS if r.run.resume else model_location(r),
            "resume: the run's checkpoints (slime falls back to --ref-load when there are none, "
            "slime/utils/arguments.py:1829-1838)", native_default=None),
    Mapping("model.lora.rank", "(no LoRA)", lambda r: 0, allowed=(0,),
            supported_text="0: slime's arguments at 624b824a (slime/utils/arguments.py, every flag in unirl's table) "
                           "have no LoRA (THUDM/slime issue #416 open, Megatron-Bridge LoRA in the open PR #1865); "
                           "vime's at 035f98340b31 have none either (vime added --lora-rank later, vime PR #336)"),
    Mapping("model.dtype", "--bf16", lambda r: store_true(r.model.dtype in ("auto", "bfloat16")),
            "slime trains in bf16 unless --fp16 (slime/backends/megatron_utils/arguments.py:157)",
            allowed=("auto", "bfloat16", "float16"),
            supported_text="auto, bfloat16 or float16: slime forces bf16 = not fp16", native_default=False),
    Mapping("model.dtype", "--fp16", lambda r: store_true(r.model.dtype == "float16"), native_default=False),
    Mapping("resources.gradient_checkpointing", "--recompute-granularity",
            lambda r: "full" if r.resources.gradient_checkpointing else OMIT, native_default=None),
    Mapping("resources.gradient_checkpointing", "--recompute-method",
            lambda r: "uniform" if r.resources.gradient_checkpointing else OMIT, native_default=None),
    Mapping("resources.gradient_checkpointing", "--recompute-num-layers",
            lambda r: 1 if r.resources.gradient_checkpointing else OMIT, native_default=None),
    Mapping("resources.nodes", "--actor-num-nodes", lambda r: actor_placement(r)[0], native_default=1),
    Mapping("resources.gpus_per_node", "--actor-num-gpus-per-node", lambda r: actor_placement(r)[1],
            "disaggregated: the GPUs the rollout engines do not take", native_default=8),
    Mapping("resources.gpus_per_node", "--num-gpus-per-node", lambda r: r.gpus_per_node,
            "GPUs per node for placing rollout engines; slime assumes 8", native_default=8),
    Mapping("rollout.colocated", "--colocate", lambda r: store_true(r.rollout.colocated),
            "colocated: training and rollout share every GPU and offload in turn (slime/utils/arguments.py:"
            "1939-1954)", native_default=False),
    Mapping("rollout.colocated", "--rollout-num-gpus", lambda r: OMIT if r.rollout.colocated else r.rollout_gpus,
            "disaggregated: rollout.gpus, else half of the GPUs", native_default=None),
    Mapping("rollout.tensor_parallel", "--rollout-num-gpus-per-engine", lambda r: r.rollout.tensor_parallel,
            "GPUs per rollout engine = the engine's tensor-parallel size", native_default=1),
    Mapping("run.checkpoint_every", "--save", lambda r: CHECKPOINTS, native_default=None),
    Mapping("run.checkpoint_every", "--save-interval", lambda r: r.run.checkpoint_every or r.algorithm.steps,
            "0: save at the last step only (slime saves nothing without an interval)", native_default=None),
    Mapping("logging.every_steps", "--use-tensorboard", lambda r: store_true(True),
            "slime's TensorBoard events (TENSORBOARD_DIR, exported by the launch line), which unirl's follower reads "
            "into metrics.jsonl", native_default=False),
)


class SlimeFamily(NativeFramework):
    """What slime and vime share: the table above, the launch, the checks; subclasses name the engine."""

    plugin_package = "unirl.plugins.slime"
    parity = ParityHarness(None, why_not="slime and vime are not on the package index (they run in their CUDA "
                           "images with Megatron-LM): their loss code cannot run here, and no reproduction of it is "
                           "certified")
    check_module = None  # slime lives in an image: the plan is checked against the key schema in schema.py
    export_format = EXPORT_FORMAT
    engine_rows: ClassVar[tuple[Mapping, ...]]
    reward_module: ClassVar[str]
    generate_function: ClassVar[str]
    """unirl's ``--custom-generate-function-path`` for an environment (the engine client differs)."""
    default_workdir: ClassVar[str]
    schema_commit: ClassVar[str]

    @property
    def extra_options(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "image": self.capabilities.image,
            "workdir": self.default_workdir,
            "megatron_path": MEGATRON_PATH,
            "model_args": None,
            "model_args_script": None,
        }

    @property
    def mapping(self) -> tuple[Mapping, ...]:  # type: ignore[override]
        reward = (
            Mapping("rewards", "--custom-rm-path", lambda r: self.reward_module,
                    "a dotted path: slime imports everything before the last dot (slime/utils/misc.py:39-47) and "
                    "awaits reward(args, sample)", native_default=None),
            Mapping("rewards", "--reward-key", lambda r: "score",
                    "the adapter returns the total and every component; slime trains on 'score'",
                    native_default=None),
            Mapping("environment.name", "--custom-generate-function-path",
                    lambda r: self.generate_function if r.environment.name else OMIT,
                    "unirl's episode loop, awaited for every sample instead of slime's generate (sglang_rollout.py:"
                    "238-258); it sets the sample's reward, so --custom-rm-path is skipped for it (L283)",
                    native_default=None),
            Mapping("rewards", "--group-rm", lambda r: OMIT,
                    "per-sample scoring: slime asserts group RM off for evaluation (slime/rollout/sglang_rollout.py:"
                    "477, 499)", native_default=False),
        )
        return (*COMMON_MAPPING, *self.engine_rows, *reward)

    # --- plan steps ---------------------------------------------------------------------------------------------

    def with_defaults(self, recipe: Recipe) -> Recipe:
        """The plan reads workdir, megatron_path and the image from the options, also for recipes built in code."""
        return replace(recipe, framework={**self.options, **recipe.framework})

    def extra_problems(self, recipe: Recipe) -> list[FieldError]:
        return self.placement_problems(recipe) + self.model_args_problems(recipe) + self.override_problems(recipe)

    def override_problems(self, recipe: Recipe) -> list[FieldError]:
        """Raw flags that could not take effect under the flags unirl always sends."""
        problems: list[FieldError] = []
        for key, value in sorted((recipe.framework.get("overrides") or {}).items()):
            if flag_name(key) in IGNORED_UNDER_CUSTOM_RM:
                problems.append(FieldError(
                    f"framework.overrides.{key}", value,
                    f"not an override that can take effect: {self.name}'s async_rm calls the --custom-rm-path "
                    "function before it ever reads --rm-type (slime/rollout/rm_hub/__init__.py async_rm, L55-96), "
                    "and unirl always sends --custom-rm-path (its reward adapter scores every sample); choose the "
                    "scoring with the recipe's rewards instead"))
        return problems

    def apply_overrides(self, native: dict[str, Any], raw: list[MappedField]) -> dict[str, Any]:
        """An override flag moves to the end of the argv (argparse keeps the last occurrence); false or null
        removes a flag the table sent."""
        native = dict(native)
        for row in raw:
            native.pop(row.native_key, None)
            if row.value is not None and row.value is not False:
                native[row.native_key] = row.value
        return native

    def native_config(self, recipe: Recipe, native: dict[str, Any], version: str) -> dict[str, Any]:
        model_args, script = self.model_args(recipe)
        return {"args": [*model_args, *render_flags(native)], "entry": "train.py",
                "workdir": recipe.framework["workdir"], "model_args": model_args, "model_args_script": script,
                "model_args_source": self.model_args_source(recipe)}

    def command(self, recipe: Recipe, native: dict[str, Any], version: str) -> list[str]:
        model_args, script = self.model_args(recipe)
        python = self.environment(recipe).python
        return ["bash", "-c", launch_script(python, recipe.framework, [*model_args, *render_flags(native)], script)]

    def notes(self, recipe: Recipe) -> list[str]:
        options = recipe.framework
        script = self.model_args(recipe)[1]
        return [
            f"launched with bash -c: it changes into {self.name}'s checkout ({options['workdir']}), appends "
            f"Megatron-LM ({options['megatron_path']}) to the PYTHONPATH unirl sets"
            + (", and sources framework.model_args_script" if script else "") + "; train.py starts or joins Ray",
            "prompts are exported in the seeded order unirl uses for every backend; slime's own shuffle stays off",
            "held-out evaluation is slime's eval rollout (one greedy completion per prompt when eval.greedy), "
            "scored by the same reward adapter",
            self.model_args_note(recipe),
        ]

    def model_args(self, recipe: Recipe) -> tuple[list[str], str | None]:
        """Megatron's architecture flags: a list from framework.model_args, a script sourced at launch, or, with
        neither, the flags derived from the model's config.json (:func:`derived_model_args`)."""
        listed, script = recipe.framework.get("model_args"), recipe.framework.get("model_args_script")
        if listed:
            return ([str(a) for a in shlex.split(listed)] if isinstance(listed, str) else [str(a) for a in listed],
                    None)
        if script:
            return [], str(script)
        return derived_model_args(recipe)[0], None

    def model_args_source(self, recipe: Recipe) -> str:
        """Where the architecture flags come from, as the plan records it."""
        if recipe.framework.get("model_args"):
            return "framework.model_args"
        if recipe.framework.get("model_args_script"):
            return "framework.model_args_script"
        return f"derived from {derived_model_args(recipe)[1]}"

    def model_args_note(self, recipe: Recipe) -> str:
        check = "slime asserts it at start (slime/backends/megatron_utils/arguments.py:97-148)"
        source = self.model_args_source(recipe)
        if not source.startswith("derived"):
            return f"{source} must match the model's HF config: {check}"
        return (f"framework.model_args: {source}, by the rules of slime's scripts/models/*.sh "
                "(unirl/plugins/slime/model_args.py), so they match the HF config as slime asserts at start "
                "(slime/backends/megatron_utils/arguments.py:97-148); set framework.model_args to pass others")

    def model_args_problems(self, recipe: Recipe) -> list[FieldError]:
        listed, script = recipe.framework.get("model_args"), recipe.framework.get("model_args_script")
        if listed and script:
            return [FieldError("framework.model_args", listed,
                               "set framework.model_args or framework.model_args_script, not both")]
        if not listed and not script:
            try:
                derived_model_args(recipe)
            except ModelArgsError as exc:
                return [Unsupported("framework.model_args", listed, self.name,
                                    f"{MODEL_ARGS_HINT}; not derived for model.path={recipe.model.path!r}: {exc}")]
        return []

    def placement_problems(self, r: Recipe) -> list[FieldError]:
        """Disaggregated placement must leave whole GPUs to both sides and whole engines to rollout."""
        problems: list[FieldError] = []
        if r.rollout.colocated:
            engines_gpus = r.total_gpus
        else:
            engines_gpus = r.rollout_gpus
            actor = r.total_gpus - engines_gpus
            _, per_node = actor_placement(r)
            if engines_gpus < 1 or actor < 1:
                problems.append(FieldError("rollout.colocated", False,
                                           f"disaggregated needs GPUs for both sides: {r.total_gpus} GPU(s), "
                                           f"{engines_gpus} for rollout (rollout.gpus)"))
            elif actor % per_node:
                problems.append(FieldError("rollout.gpus", engines_gpus,
                                           f"leaves {actor} GPUs for training, not whole nodes of {per_node}"))
        if not r.rollout.colocated and r.completions_per_update % (micro_batch(r) * max(1, actor_world(r))):
            problems.append(FieldError("algorithm.micro_batch_size", r.algorithm.micro_batch_size,
                                       f"{r.completions_per_update} completions per update must split into "
                                       f"micro-batches over the {actor_world(r)} training GPUs"))
        return problems

    def overrides(self, recipe: Recipe) -> list[MappedField]:
        """``framework.overrides`` as raw flags, applied last: ``{"rollout-top-k": 5}`` or ``{"--rollout-top-k": 5}``
        sends ``--rollout-top-k 5``; true sends a bare flag; false or null removes a flag the table sent."""
        raw = recipe.framework.get("overrides") or {}
        return [MappedField(f"framework.overrides.{key}", flag_name(key), value, "raw flag, applied last")
                for key, value in sorted(raw.items())]

    # --- validate / prepare ---------------------------------------------------------------------------------------

    def schema_problems(self, plan: LaunchPlan) -> list[str]:
        from unirl.plugins.slime.schema import schema_problems

        config = plan.native_config
        return schema_problems(config["args"], self.name, model_args_known=not config.get("model_args_script"))


def derived_model_args(recipe: Recipe) -> tuple[list[str], str]:
    """(the Megatron flags, the config they come from) for ``recipe.model.path``; raises ModelArgsError."""
    path = recipe.model.path
    config, where = model_config(path, builtin_prefix=BUILTIN_PREFIX,
                                 local=not path.startswith(BUILTIN_PREFIX) and is_local_path(path))
    return megatron_model_args(config), where


IGNORED_UNDER_CUSTOM_RM = ("--rm-type",)
"""Flags slime never reads once ``--custom-rm-path`` is set (unirl always sets it)."""


def flag_name(key: str) -> str:
    """An override key as a flag: Hydra-friendly ``rollout_top_k`` and ``--rollout-top-k`` both become the latter."""
    return "--" + str(key).lstrip("-").replace("_", "-")


def render_flags(native: dict[str, Any]) -> list[str]:
    """Flags as argv: a bare flag for True, one token per item for lists, the value's text otherwise."""
    argv: list[str] = []
    for flag, value in native.items():
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *(str(v) for v in value)]
        elif value is not None and value is not False:
            argv += [flag, str(value)]
    return argv


def launch_script(python: str, options: dict[str, Any], args: list[str], script: str | None) -> str:
    """The shell line: cd into the checkout, put Megatron-LM after unirl's PYTHONPATH, optionally source the
    model-args script, then exec train.py (exec keeps signals going to the trainer)."""
    steps = [f"cd {shlex.quote(str(options['workdir']))}",
             f'export PYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{options["megatron_path"]}"',
             # _TensorboardAdapter writes into $TENSORBOARD_DIR from each logging process (slime/utils/
             # tensorboard_utils.py:30-47 @624b824); train.py's Ray cluster passes the driver's environment on, as
             # for UNIRL_REWARD_SPEC. unirl's follower reads every event file there.
             f"export TENSORBOARD_DIR={shlex.quote(in_run_dir(TB_DIR))}"]
    tail = ""
    if script:
        steps.append(f"source {shlex.quote(script)}")
        tail = ' "${MODEL_ARGS[@]}"'
    steps.append(f"exec {shlex.quote(python)} train.py {shlex.join(args)}{tail}")
    return " && ".join(steps)


# --- slime ------------------------------------------------------------------------------------------------------------

SLIME_CAPABILITIES = Capabilities(
    **GPU_ON_RAY,
    native_algorithms=("GRPO", "GSPO", "CISPO", "REINFORCE++", "REINFORCE++-baseline", "PPO (critic)",
                       "on-policy distillation", "SFT loss"),
    algorithms=("grpo", "dapo", "gspo", "reinforce_pp", "reinforce_pp_baseline"),
    rollout_engines=("sglang",),
    placement=("colocated (--colocate, offloading in turn)", "disaggregated (--rollout-num-gpus)"),
    modes=("sync (train.py)",),
    training_backends=("Megatron-LM",),
    multi_node="Ray cluster (ray start on every node; train.py on the head joins it)",
    custom_reward="--custom-rm-path <dotted.module.function>: async def f(args, sample) -> float | dict "
                  "(--reward-key picks the trained value)",
    launcher="container",
    model_parallel=True,
    distribution=None,  # not on PyPI: the PyPI project named slime is an unrelated statistics package
    tested_version="624b824a898a",
    install="docker pull slimerl/slime:nightly-dev-20260810a-cu129 (slime preinstalled at /root/slime)",
    image="slimerl/slime:nightly-dev-20260810a-cu129",
)


class SlimeFramework(SlimeFamily):
    name = "slime"
    description = "slime (THUDM): Megatron-LM training with SGLang rollouts under Ray; GPU only, runs in its image"
    capabilities = SLIME_CAPABILITIES
    reward_module = "unirl.adapters.slime.reward"
    generate_function = "unirl.adapters.slime_environment.generate"
    default_workdir = "/root/slime"
    engine_rows = (
        Mapping("rollout.engine", "(rollout engine)", lambda r: "sglang", "slime rolls out with SGLang only",
                native_default="sglang"),
        Mapping("rollout.gpu_memory_fraction", "--sglang-mem-fraction-static",
                lambda r: r.rollout.gpu_memory_fraction, "SGLang ServerArgs.mem_fraction_static behind slime's "
                "--sglang- prefix (slime/backends/sglang_utils/arguments.py:41-129)", native_default=None),
    )


# --- vime -------------------------------------------------------------------------------------------------------------

VIME_CAPABILITIES = replace(
    SLIME_CAPABILITIES,
    rollout_engines=("vllm",),
    native_algorithms=("GRPO", "GSPO", "REINFORCE++", "REINFORCE++-baseline", "PPO (critic)", "TIS"),
    tested_version="035f98340b31",
    install="docker pull inferactinc/public:vime-latest (vime preinstalled at /root/vime)",
    image="inferactinc/public:vime-latest",
)


class VimeFramework(SlimeFamily):
    name = "vime"
    description = "vime (vLLM project): slime's Megatron-LM trainer with vLLM + vllm-router rollouts; GPU only"
    capabilities = VIME_CAPABILITIES
    reward_module = "unirl.adapters.vime.reward"
    generate_function = "unirl.adapters.slime_environment.vime_generate"
    default_workdir = "/root/vime"
    engine_rows = (
        Mapping("rollout.engine", "(rollout engine)", lambda r: "vllm", "vime rolls out with vLLM (+ vllm-router)",
                native_default="vllm"),
        Mapping("rollout.gpu_memory_fraction", "--vllm-gpu-memory-utilization",
                lambda r: r.rollout.gpu_memory_fraction, "vLLM's gpu_memory_utilization behind vime's --vllm- "
                "prefix (vime/backends/vllm_utils/arguments.py:186-278)", native_default=0.92),
    )
