"""The run a backend would execute for a native configuration, in one vocabulary: the yardstick of ``unirl import``.

Two configurations of one backend are the same experiment when their effective runs are equal, whatever keys they
spell it with: an imported recipe's plan against the command it came from. Each backend's plugin reads its own
configuration, with its own defaults for what is left out (``effective_run`` on the framework). The step count of a
run given in passes over its data needs the number of rows, which only the data knows: without it, ``steps`` is
None and the runs compare by ``epochs`` (and ``step_cap``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

EXPERIMENT_FIELDS = ("epochs", "steps", "step_cap", "prompts_per_step", "samples_per_prompt", "updates_per_step",
                     "max_new_tokens", "max_total_tokens", "lr", "lr_schedule", "min_lr_ratio", "warmup_updates",
                     "lr_horizon_updates")


@dataclass(frozen=True)
class EffectiveRun:
    epochs: int | None
    """Passes over the training data (None: the run is a step count)."""
    steps: int | None
    """Training steps (one generation and update round), where known: a step count, or epochs over counted rows."""
    step_cap: int | None
    """A step count that caps a run of epochs (verl's total_training_steps beside total_epochs)."""
    prompts_per_step: int
    samples_per_prompt: int
    updates_per_step: int | float
    """Policy optimizer updates per step."""
    max_new_tokens: int | None
    """A completion's token cap (None: what its prompt leaves of max_total_tokens)."""
    max_total_tokens: int | None
    """A cap on prompt + completion tokens, where the backend has one that binds."""
    lr: float
    lr_schedule: str
    min_lr_ratio: float
    warmup_updates: int | None
    """Warm-up in optimizer updates (None: a fraction of a horizon not known here)."""
    lr_horizon_updates: int | None
    """The optimizer updates the schedule spans (None: not known without the rows)."""
    algorithm: dict[str, Any] = field(default_factory=dict)
    """The update's semantics in the recipe's vocabulary: advantage_baseline, advantage_norm, kl_coef,
    kl_placement, kl_estimator, clip_low, clip_high, dual_clip, loss_aggregation, importance_sampling_level,
    entropy_coef, weight_decay, critic."""

    @property
    def completions_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "completions_per_step": self.completions_per_step}

    def differences(self, other: EffectiveRun) -> list[tuple[str, Any, Any]]:
        """(what, this run's, the other's) for everything that makes them different experiments."""
        found = []
        # runs whose steps are both known compare by them: 15 passes over 7 batches and one pass over 105 batches
        # of the same rows unrolled (what a plan that counted the rows exports) are the same 105 steps
        known = self.steps is not None and other.steps is not None
        for name in EXPERIMENT_FIELDS:
            if known and name in ("epochs", "step_cap"):
                continue
            mine, theirs = getattr(self, name), getattr(other, name)
            if not same_value(mine, theirs):
                found.append((name, mine, theirs))
        for name in sorted(set(self.algorithm) | set(other.algorithm)):
            mine, theirs = self.algorithm.get(name), other.algorithm.get(name)
            if not same_value(mine, theirs):
                found.append((f"algorithm.{name}", mine, theirs))
        return found


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def warmup_of(ratio_or_steps: float | int | None, horizon: int | None, *, ceil: bool) -> int | None:
    """A warm-up given as a fraction of the horizon (``ceil``: rounded up, as OpenRLHF does; else down, as verl
    and transformers do), in updates; None when the horizon is not known."""
    if ratio_or_steps is None:
        return 0
    if horizon is None:
        return None if ratio_or_steps else 0
    value = ratio_or_steps * horizon
    return math.ceil(value) if ceil else int(value)


def steps_of(epochs: int | None, rows: int | None, prompts_per_step: int, *, partial_last: bool = False) -> int | None:
    """Steps of ``epochs`` passes over ``rows`` prompts (``partial_last``: a pass's incomplete last batch is trained
    as a smaller step, as OpenRLHF does; else dropped)."""
    if epochs is None or rows is None:
        return None
    per_pass = -(-rows // prompts_per_step) if partial_last else rows // prompts_per_step
    return epochs * per_pass
