"""One vocabulary for every backend's metrics: unirl's name <- each backend's native name, what differs, and how
each backend's step axes become unirl steps (one unirl step = one rollout batch).

A native metric the table names becomes the unirl name; every other scalar is kept as ``native/<name>``, so nothing
a backend logs is lost. Held-out evaluation metrics (verl's ``val-core/``/``val-aux/``, OpenRLHF's ``eval/``, NeMo
RL's ``validation/``, slime's ``eval/``) go to ``eval.jsonl`` instead of ``metrics.jsonl``. Where one name means
different things on two backends the table's :attr:`Vocabulary.notes` say so (the README's vocabulary table is
written from them); each fact cites the backend's source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NATIVE_PREFIX = "native/"

TRAIN_AXIS = "train"
ROLLOUT_AXIS = "rollout"


@dataclass(frozen=True)
class Vocabulary:
    backend: str
    names: dict[str, str]
    """native name -> unirl name."""
    eval_prefixes: tuple[str, ...] = ()
    """Native names under these prefixes are held-out evaluation metrics (eval.jsonl)."""
    eval_accuracy: Callable[[str, dict[str, Any]], bool] | None = None
    """Whether a native eval name is the accuracy of ``eval.accuracy_reward`` (given the recipe)."""
    eval_mean_reward: Callable[[str], bool] | None = None
    """Whether a native eval name is the mean total reward of the held-out prompts."""
    skip: tuple[str, ...] = ()
    """Native names that are step counters, not metrics (the step is the row's own)."""
    axes: dict[str, str] = field(default_factory=dict)
    """native name prefix -> step axis, for backends with more than one (slime: optimizer updates, rollouts)."""
    expected_axes: tuple[str, ...] = (ROLLOUT_AXIS,)
    """The axes a live step waits for: a step's row is written once every one of them has moved past it (slime's
    two writers run at their own pace, so a step the rollout manager has passed may still lack its updates)."""
    notes: dict[str, str] = field(default_factory=dict)
    """unirl name -> what this backend's number means where it differs from the others'."""

    def unirl_name(self, native: str) -> str:
        return self.names.get(native) or NATIVE_PREFIX + native

    def is_eval(self, native: str) -> bool:
        return native.startswith(self.eval_prefixes) if self.eval_prefixes else False

    def axis(self, native: str) -> str:
        for prefix, axis in self.axes.items():
            if native.startswith(prefix):
                return axis
        return ROLLOUT_AXIS

    def unirl_step(self, native: str, step: int, recipe: dict[str, Any]) -> int:
        """The unirl step (1-based rollout batch) a native metric's step counts in."""
        if self.backend in ("slime", "vime") and self.axis(native) == TRAIN_AXIS:
            # train/step = rollout_id x num_steps_per_rollout + step_id (slime backends/megatron_utils/model.py:
            # L873-898 @624b824); unirl sends --num-steps-per-rollout = mini_batches_per_step.
            updates = max(1, int((recipe.get("algorithm") or {}).get("mini_batches_per_step") or 1))
            return step // updates + 1
        if self.backend in ("slime", "vime"):
            return step + 1  # rollout/step = rollout_id, 0-based (slime utils/metric_utils.py:L120-123 @624b824)
        return step  # verl, OpenRLHF, NeMo RL count steps from 1 (val-before-train at 0)


def _verl_accuracy(native: str, recipe: dict[str, Any]) -> bool:
    # verl's validation metrics: val-core/<data_source>/<var>/mean@N for the core variable ("acc" if the reward
    # returns one, else "reward"), val-aux/<data_source>/<var>/mean@N for every other returned key
    # (verl/trainer/ppo/ray_trainer.py:725-736, 0.9.1). unirl's adapter returns each reward by name.
    reward = accuracy_reward(recipe)
    parts = native.split("/")
    return (len(parts) == 4 and parts[0] in ("val-core", "val-aux") and parts[2] == reward
            and parts[3] == "mean@1")


def _verl_mean_reward(native: str) -> bool:
    parts = native.split("/")
    return len(parts) == 4 and parts[0] in ("val-core", "val-aux") and parts[2] == "reward" and parts[3] == "mean@1"


def accuracy_reward(recipe: dict[str, Any]) -> str | None:
    """``eval.accuracy_reward``, else the recipe's first reward (the schema's rule)."""
    chosen = (recipe.get("eval") or {}).get("accuracy_reward")
    if chosen:
        return str(chosen)
    rewards = recipe.get("rewards") or []
    return str(rewards[0].get("name")) if rewards and isinstance(rewards[0], dict) else None


# verl 0.9.1: one Tracking.log(metrics, step=global_steps) per step (verl/trainer/ppo/ray_trainer.py fit); names from
# verl/trainer/ppo/metric_utils.py compute_data_metrics / compute_timing_metrics / compute_throughout_metrics and the
# actor's update_policy (verl/workers/actor/dp_actor.py).
VERL = Vocabulary(
    backend="verl",
    names={
        "actor/loss": "loss", "actor/pg_loss": "policy_loss", "actor/kl_loss": "kl", "actor/entropy": "entropy",
        "actor/pg_clipfrac": "clip_ratio", "actor/grad_norm": "grad_norm", "actor/lr": "lr",
        "actor/ppo_kl": "policy_kl", "critic/score/mean": "reward/total/mean",
        "response_length/mean": "completion_len/mean", "response_length/clip_ratio": "completion_truncated/frac",
        "timing_s/step": "step_time_s", "perf/throughput": "tokens_per_s",
    },
    eval_prefixes=("val-core/", "val-aux/"),
    eval_accuracy=_verl_accuracy,
    eval_mean_reward=_verl_mean_reward,
    skip=("training/global_step",),
    notes={
        "tokens_per_s": "per GPU: (prompt + response tokens) / (step time x GPUs) (verl/trainer/ppo/metric_utils.py "
                        "compute_throughout_metrics)",
        "reward/total/mean": "unirl's reward log where the rows are unirl's exported files (their extra_info says "
                             "the step); else critic/score/mean: the sequence score of the step's batch, after dynamic "
                             "filtering when it is on (kept as native/critic/score/mean when the log gives the column)",
        "entropy": "old-policy forward, aggregated with loss_agg_mode",
        "clip_ratio": "actor/pg_clipfrac; verl's actor/pg_clipfrac_lower is the dual-clip fraction (native/...)",
        "completion_truncated/frac": "response length equal to the padded width",
    },
)

# OpenRLHF 0.11.2: TensorboardLogger.log_train writes train/<key> at global_step (openrlhf/utils/logging_utils.py:
# 121-129), log_eval eval/<key> (L131-134); the status keys: openrlhf/trainer/ppo_trainer.py:241-264, 416-431,
# 544-545 and openrlhf/trainer/ray/ppo_actor.py:225-250, 312, 370.
OPENRLHF = Vocabulary(
    backend="openrlhf",
    names={
        "train/policy_loss": "policy_loss", "train/kl": "kl", "train/entropy_loss": "entropy",
        "train/ppo_clip_ratio": "clip_ratio", "train/actor_grad_norm": "grad_norm", "train/actor_lr": "lr",
        "train/ppo_kl": "policy_kl", "train/rollout/reward_mean": "reward/total/mean",
        "train/rollout/reward_std": "reward/total/std",
        "train/rollout/response_length_mean": "completion_len/mean",
        "train/rollout/truncated_rate": "completion_truncated/frac", "train/timing/step_total": "step_time_s",
    },
    eval_prefixes=("eval/",),
    eval_accuracy=lambda native, recipe: native.startswith("eval/eval_") and native.endswith("_pass1"),
    eval_mean_reward=lambda native: native.startswith("eval/eval_") and native.endswith("_pass1"),
    skip=("eval/global_step",),
    notes={
        "loss": "not logged: OpenRLHF reports the policy loss only (policy_loss)",
        "tokens_per_s": "not logged by OpenRLHF",
        "reward/total/mean": "rollout/reward_mean: the accepted groups' rewards (after dynamic filtering and the "
                             "overlong penalty when on)",
        "eval accuracy": "eval_<dataset>_pass1: the mean reward of the held-out samples (openrlhf/trainer/"
                         "ppo_trainer.py:83-131), equal to accuracy for a 0/1 reward",
    },
)

# NeMo RL v0.7.0: logger.log_metrics(metrics, step + 1, prefix="train" | "performance" | "timing/train"), validation
# with prefix="validation" (nemo_rl/algorithms/grpo.py:3092-3101); the TensorBoard logger writes <prefix>/<name>.
NEMO_RL = Vocabulary(
    backend="nemo_rl",
    names={
        "train/loss": "loss", "train/kl_penalty": "kl", "train/approx_entropy": "entropy",
        "train/grad_norm": "grad_norm", "train/lr": "lr", "train/reward": "reward/total/mean",
        "train/mean_gen_tokens_per_sample": "completion_len/mean", "train/truncation_rate": "completion_truncated/frac",
        "timing/train/total_step_time": "step_time_s", "performance/tokens_per_sec": "tokens_per_s",
    },
    eval_prefixes=("validation/",),
    eval_accuracy=lambda native, recipe: native == "validation/accuracy",
    eval_mean_reward=lambda native: native == "validation/accuracy",
    notes={
        "entropy": "train/approx_entropy: an importance-sampling approximation (nemo_rl/algorithms/loss_functions.py)",
        "kl": "train/kl_penalty: the raw estimator, not multiplied by the coefficient",
        "clip_ratio": "not logged by NeMo RL",
        "reward/total/mean": "train/reward: after reward shaping and scaling",
        "eval accuracy": "validation/accuracy: the mean total reward of the validation samples",
    },
)

# slime 624b824 (and vime, the same code under vime.utils): the Megatron actor logs train/* per optimizer update
# with train/step (slime/backends/megatron_utils/loss.py:1142-1173, model.py:873-898), the rollout manager
# rollout/*, perf/* and eval/* per rollout with rollout/step (slime/utils/train_metric_utils.py:141-221, 358-405);
# each through _TensorboardAdapter.log(data, step=data[step_key]) (slime/utils/logging_utils.py:45-51,
# tensorboard_utils.py:30-47), one writer per process into TENSORBOARD_DIR.
SLIME = Vocabulary(
    backend="slime",
    names={
        "train/loss": "loss", "train/pg_loss": "policy_loss", "train/kl_loss": "kl", "train/entropy_loss": "entropy",
        "train/pg_clipfrac": "clip_ratio", "train/grad_norm": "grad_norm", "train/lr-pg_0": "lr",
        "train/ppo_kl": "policy_kl", "rollout/raw_reward": "reward/total/mean",
        "rollout/response_len/mean": "completion_len/mean", "rollout/truncated_ratio": "completion_truncated/frac",
        "perf/step_time": "step_time_s",
    },
    eval_prefixes=("eval/",),
    eval_accuracy=lambda native, recipe: native.startswith("eval/") and native.count("/") == 1,
    eval_mean_reward=lambda native: native.startswith("eval/") and native.count("/") == 1,
    skip=("train/step", "rollout/step", "eval/step"),
    axes={"train/": TRAIN_AXIS},
    expected_axes=(TRAIN_AXIS, ROLLOUT_AXIS),
    notes={
        "train/*": "logged per optimizer update; the updates of one rollout are averaged into its unirl step",
        "step_time_s": "perf/step_time: waiting for and running training only, not generation",
        "reward/total/mean": "unirl's reward log where the rows are unirl's exported files (their metadata says the "
                             "step); else rollout/raw_reward (kept as native/rollout/raw_reward when the log gives it; "
                             "rollout/rewards is the normalised advantage input, about 0)",
        "entropy": "train/entropy_loss: the mean entropy, a positive number",
    },
)

VOCABULARIES = {v.backend: v for v in (VERL, OPENRLHF, NEMO_RL, SLIME)}
VOCABULARIES["vime"] = Vocabulary(**{**SLIME.__dict__, "backend": "vime"})


def vocabulary(backend: str) -> Vocabulary:
    """The backend's table; a backend without one keeps every metric as ``native/<name>`` on its own steps."""
    return VOCABULARIES.get(backend) or Vocabulary(backend=backend, names={})
