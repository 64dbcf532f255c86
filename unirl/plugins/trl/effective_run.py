"""The run TRL 1.16 executes for a ``GRPOConfig`` / ``RLOOConfig``'s keyword arguments, on one process, with the
config's own defaults for every argument left out.

- one step is one generation of ``per_device_train_batch_size x processes x steps_per_generation`` completions
  (``steps_per_generation`` defaulting to ``gradient_accumulation_steps``, or ``generation_batch_size`` over the
  global batch; grpo_config.py:1096-1116, rloo_config.py:658-676), ``num_generations`` per prompt;
- it feeds ``steps_per_generation / gradient_accumulation_steps x num_iterations`` optimizer updates;
- ``max_steps`` counts updates; at -1 the run is ``num_train_epochs`` passes, each over ``rows // prompts a step``
  generations (``RepeatSampler`` drops an incomplete last chunk, trainer/utils.py:937-955);
- transformers' schedule (``lr_scheduler_type``, linear by default) spans every update, after ``warmup_steps``
  (a fraction of the updates when below 1).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from unirl.backend.effective_run import EffectiveRun, steps_of


@functools.cache
def _defaults(config_class: str) -> dict[str, Any]:
    import trl

    return {f.name: f.default for f in dataclasses.fields(getattr(trl, config_class))
            if f.default is not dataclasses.MISSING}


def effective_run(kwargs: dict[str, Any], rows: int | None, config_class: str = "GRPOConfig",
                  processes: int = 1) -> EffectiveRun:
    defaults = _defaults(config_class)

    def get(key: str) -> Any:
        return kwargs[key] if key in kwargs else defaults.get(key)

    per_device, accumulation = int(get("per_device_train_batch_size")), int(get("gradient_accumulation_steps"))
    spread = get("steps_per_generation")
    if spread is None:
        generation = get("generation_batch_size")
        spread = int(generation) // (per_device * processes) if generation else accumulation
    completions = per_device * processes * int(spread)
    prompts = completions // int(get("num_generations"))
    updates = int(spread) / accumulation * int(get("num_iterations"))
    updates = int(updates) if float(updates).is_integer() else updates
    max_steps = int(get("max_steps"))
    epochs = None if max_steps > 0 else float(get("num_train_epochs"))
    whole_epochs = int(epochs) if epochs is not None and float(epochs).is_integer() else None
    counted = max_steps / updates if max_steps > 0 else steps_of(whole_epochs, rows, prompts)
    steps = None if counted is None else math.ceil(counted)  # a max_steps that ends mid-generation still runs it
    horizon = max_steps if max_steps > 0 else (int(steps * updates) if steps is not None else None)
    warmup = float(get("warmup_steps") or 0)
    fraction = 0 < warmup < 1  # transformers 5: a fraction of the updates
    warmup_updates = (math.ceil(warmup * horizon) if horizon is not None else None) if fraction else int(warmup)
    beta = float(get("beta") or 0.0)
    rloo = config_class == "RLOOConfig"
    high = get("epsilon_high")
    kwargs_lr = get("lr_scheduler_kwargs") or {}
    return EffectiveRun(
        epochs=whole_epochs if epochs is not None else None, steps=steps, step_cap=None, prompts_per_step=prompts,
        samples_per_prompt=int(get("num_generations")), updates_per_step=updates,
        max_new_tokens=int(get("max_completion_length")), max_total_tokens=None, lr=float(get("learning_rate")),
        lr_schedule=str(get("lr_scheduler_type")), min_lr_ratio=float(kwargs_lr.get("min_lr_rate", 0.0) or 0.0),
        warmup_updates=warmup_updates, lr_horizon_updates=horizon,
        algorithm={"advantage_estimator": "rloo" if rloo else "grpo",
                   "kl_placement": "none" if not beta else "reward" if rloo else "loss", "kl_coef": beta,
                   "clip_low": float(get("epsilon")), "clip_high": float(high if high is not None else get("epsilon")),
                   "dual_clip": None if rloo or get("delta") is None else float(get("delta")),
                   "loss_aggregation": "sequence" if rloo else str(get("loss_type")),
                   "importance_sampling_level": "sequence" if rloo else str(get("importance_sampling_level")),
                   "scale_rewards": None if rloo else str(get("scale_rewards")),
                   "normalize_advantages": bool(get("normalize_advantages")) if rloo else None,
                   "weight_decay": float(get("weight_decay")), "critic": False})
