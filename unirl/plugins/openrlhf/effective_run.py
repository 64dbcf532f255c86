"""The run OpenRLHF 0.11.2 executes for a set of ``train_ppo_ray`` flags, with its parser's defaults for every flag
left out (the snapshot in schema_<version>.json).

- steps: ``train.num_episodes`` passes over the first ``min(rows, data.max_samples)`` prompts, each pass in batches
  of ``rollout.batch_size`` with its incomplete last batch trained as a smaller step (ppo_trainer.py:26-83,
  520-560; samples_generator.py:89-137); with dynamic filtering a step consumes a reward-dependent number of
  prompts, so the count is not known;
- updates a step: ``rollout.batch_size x n_samples_per_prompt / train.batch_size x train.max_epochs``;
- the LR schedule spans ``rows x n // train.batch_size x num_episodes x max_epochs`` updates (ppo_trainer.py:72-78)
  with ``ceil(lr_warmup_ratio x that)`` warm-up updates (utils/deepspeed/deepspeed.py:367-383);
- a completion's cap is ``rollout.max_new_tokens``, else what its prompt leaves of ``data.max_len``
  (train_ppo_ray.py:398-403).
"""

from __future__ import annotations

import functools
import math
from typing import Any

from unirl.backend.effective_run import EffectiveRun, steps_of

DEFAULT_MAX_SAMPLES = 100_000_000  # --data.max_samples's default: every row


@functools.cache
def _defaults(version: str) -> dict[str, Any]:
    from unirl.plugins.openrlhf.framework import option_schema

    return {dest: option.get("default") for dest, option in option_schema(version).items()}


def effective_run(flags: dict[str, Any], rows: int | None, version: str = "0.11.2") -> EffectiveRun:
    defaults = _defaults(version)

    def get(key: str) -> Any:
        return flags[key] if key in flags else defaults.get(key)

    prompts, n = int(get("rollout.batch_size")), int(get("rollout.n_samples_per_prompt"))
    train_batch, max_epochs = int(get("train.batch_size")), int(get("train.max_epochs"))
    updates = prompts * n / train_batch * max_epochs
    updates = int(updates) if float(updates).is_integer() else updates
    episodes = int(get("train.num_episodes"))
    max_samples = int(get("data.max_samples"))
    # rows unknown: a cap below the default is taken as the rows used (the data holds at least that many)
    used = min(rows, max_samples) if rows is not None else (max_samples if max_samples < DEFAULT_MAX_SAMPLES else None)
    dynamic = bool(get("algo.dynamic_filtering_enable"))
    steps = None if dynamic else steps_of(episodes, used, prompts, partial_last=True)
    horizon = used * n // train_batch * episodes * max_epochs if used is not None else None
    ratio = float(get("actor.lr_warmup_ratio") or 0.0)
    low, high = get("actor.eps_clip_low_high") or (get("actor.eps_clip"), get("actor.eps_clip"))
    coef = float(get("algo.kl.init_coef") or 0.0)
    estimator = str(get("algo.advantage.estimator"))
    max_new = get("rollout.max_new_tokens")
    return EffectiveRun(
        epochs=episodes, steps=steps, step_cap=None, prompts_per_step=prompts, samples_per_prompt=n,
        updates_per_step=updates, max_new_tokens=None if max_new is None else int(max_new),
        max_total_tokens=int(get("data.max_len")), lr=float(get("actor.adam.lr")),
        lr_schedule=str(get("actor.lr_scheduler")), min_lr_ratio=float(get("actor.min_lr_ratio") or 0.0),
        warmup_updates=(math.ceil(ratio * horizon) if horizon is not None else (0 if not ratio else None)),
        lr_horizon_updates=horizon,
        algorithm={"advantage_estimator": estimator,
                   "kl_placement": "none" if not coef else "loss" if get("algo.kl.use_loss") else "reward",
                   "kl_coef": coef, "kl_estimator": str(get("algo.kl.estimator")) if coef else None,
                   "clip_low": float(low), "clip_high": float(high),
                   "dual_clip": None if get("actor.dual_clip") is None else float(get("actor.dual_clip")),
                   "policy_loss": str(get("actor.policy_loss_type")),
                   "loss_aggregation": str(get("actor.loss_agg_mode")),
                   "entropy_coef": float(get("actor.entropy_coef") or 0.0),
                   "weight_decay": float(get("actor.adam.weight_decay")), "critic": estimator == "gae",
                   "reward_clip": get("reward.clip_range"), "dynamic_filtering": dynamic})
