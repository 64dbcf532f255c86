"""The run verl 0.9.1 executes for a set of Hydra overrides, with its own defaults for every key left out.

verl's defaults come from the snapshot of its composed ``ppo_trainer`` config (:func:`unirl.plugins.verl.schema.
default_values`). The arithmetic is verl 0.9.1's V1 trainer's (the default, ``trainer.use_v1=true``):

- steps: ``len(train dataloader) = rows // train_batch_size`` (``drop_last=True``, v1/trainer_base.py:747,765) times
  ``total_epochs``, capped by ``total_training_steps`` when that is set (:467, 768-771);
- updates a step: ``train_batch_size / ppo_mini_batch_size x ppo_epochs`` (:1829-1853);
- the LR scheduler steps once a training step (workers/engine_workers.py:308,374-376) over the run's total steps
  (:777-782); a warm-up of ``lr_warmup_steps`` scheduler steps, else ``int(lr_warmup_steps_ratio x total)``
  (workers/engine/fsdp/transformer_impl.py:509-522);
- the dual clip ``clip_ratio_c`` acts in the vanilla policy loss only (trainer/ppo/core_algos.py).
"""

from __future__ import annotations

import re
from typing import Any

from unirl.backend.effective_run import EffectiveRun

A = "actor_rollout_ref.actor."
NO_DUAL_CLIP = 1e8  # unirl sends clip_ratio_c=1e9 for a recipe without a dual clip (plugins/verl/framework.py)
INTERPOLATION = re.compile(r"^\$\{(\.*)([\w.]+)\}$")


def effective_run(overrides: dict[str, Any], rows: int | None) -> EffectiveRun:
    """The run of ``overrides`` (key -> value; a leading ``+`` allowed) over ``rows`` training rows (None: unknown)."""
    from unirl.plugins.verl.schema import default_values

    given = {k.lstrip("+"): v for k, v in overrides.items()}
    defaults = default_values()

    def get(key: str, depth: int = 0) -> Any:
        value = given[key] if key in given else defaults.get(key)
        match = INTERPOLATION.match(value) if isinstance(value, str) else None
        if match and depth < 8:  # ${a.b} from the root, ${.x} beside the key, ${..x} one level up
            dots, path = match.groups()
            base = key.split(".")[: -len(dots)] if dots else []
            return get(".".join([*base, path]), depth + 1)
        return value

    prompts = int(get("data.train_batch_size"))
    updates = prompts / int(get(A + "ppo_mini_batch_size")) * int(get(A + "ppo_epochs"))
    updates = int(updates) if float(updates).is_integer() else updates
    epochs = int(get("trainer.total_epochs"))
    cap = get("trainer.total_training_steps")
    cap = int(cap) if cap is not None else None
    by_epochs = epochs * (rows // prompts) if rows is not None else None
    steps: int | None
    if by_epochs is not None:
        steps = by_epochs if cap is None else min(cap, by_epochs)
    else:  # rows unknown: a cap beside verl's default 30 epochs is taken as the run (the data covers it)
        steps = cap if cap is not None and "trainer.total_epochs" not in given else None
    scheduled = cap if cap is not None else by_epochs  # the total the scheduler is built for
    warmup = int(get(A + "optim.lr_warmup_steps"))
    if warmup <= 0:
        ratio = float(get(A + "optim.lr_warmup_steps_ratio") or 0.0)
        warmup = int(ratio * scheduled) if scheduled is not None else (0 if not ratio else -1)
    loss_mode = str(get(A + "policy_loss.loss_mode"))
    dual = get(A + "clip_ratio_c")
    return EffectiveRun(
        epochs=epochs, steps=steps, step_cap=cap,
        prompts_per_step=prompts, samples_per_prompt=int(get("actor_rollout_ref.rollout.n")),
        updates_per_step=updates, max_new_tokens=int(get("data.max_response_length")), max_total_tokens=None,
        lr=float(get(A + "optim.lr")), lr_schedule=str(get(A + "optim.lr_scheduler_type")),
        min_lr_ratio=float(get(A + "optim.min_lr_ratio") or 0.0),
        warmup_updates=None if warmup < 0 else int(warmup * updates),
        lr_horizon_updates=None if scheduled is None else int(scheduled * updates),
        algorithm={**_kl(get), "advantage_estimator": str(get("algorithm.adv_estimator")),
                   "norm_adv_by_std_in_grpo": bool(get("algorithm.norm_adv_by_std_in_grpo")),
                   "clip_low": float(get(A + "clip_ratio_low") or get(A + "clip_ratio")),
                   "clip_high": float(get(A + "clip_ratio_high") or get(A + "clip_ratio")),
                   "dual_clip": float(dual) if loss_mode == "vanilla" and dual and float(dual) < NO_DUAL_CLIP
                   else None,
                   "policy_loss": loss_mode, "loss_aggregation": str(get(A + "loss_agg_mode")),
                   "entropy_coef": float(get(A + "entropy_coeff") or 0.0),
                   "weight_decay": float(get(A + "optim.weight_decay")),
                   "critic": str(get("algorithm.adv_estimator")) == "gae"})


KL_NAMES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}
"""verl's estimator names, several for one estimator (trainer/ppo/core_algos.py kl_penalty_forward)."""


def _kl(get: Any) -> dict[str, Any]:
    if get(A + "use_kl_loss"):
        estimator = str(get(A + "kl_loss_type"))
        return {"kl_placement": "loss", "kl_coef": float(get(A + "kl_loss_coef")),
                "kl_estimator": KL_NAMES.get(estimator, estimator)}
    if get("algorithm.use_kl_in_reward"):
        estimator = str(get("algorithm.kl_penalty"))
        return {"kl_placement": "reward", "kl_coef": float(get("algorithm.kl_ctrl.kl_coef")),
                "kl_estimator": KL_NAMES.get(estimator, estimator)}
    return {"kl_placement": "none", "kl_coef": 0.0, "kl_estimator": None}
