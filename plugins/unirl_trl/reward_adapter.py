"""unirl rewards as TRL ``reward_funcs``: one TRL function (and one logged column) per unirl reward.

TRL calls each reward function in turn on the same batch; the first call scores every reward of
the recipe once, writes the trajectory records, and the others read their column from that cache.
Components go to TRL's metrics through ``log_metric`` as ``reward/<reward>/<component>``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from unirl.errors import UnirlError
from unirl.rewards import RewardSet, Sample


def text_of(value: Any) -> str:
    """TRL passes text, or chat messages for conversational data."""
    if isinstance(value, list):
        return "".join(str(m.get("content", "")) for m in value)
    return str(value)


class RewardAbort(UnirlError):
    """The reward error policy stopped the run."""


class TrlRewardAdapter:
    def __init__(self, rewards: RewardSet, *, eos_ids: set[int], on_error: str, max_error_rate: float,
                 mini_batches: int, on_scored: Callable[[int, list[dict[str, Any]]], None]) -> None:
        self.rewards = rewards
        self.eos_ids = eos_ids
        self.on_error = on_error
        self.max_error_rate = max_error_rate
        self.mini_batches = mini_batches
        self.on_scored = on_scored
        self._key: tuple[int, int, int] | None = None
        self._columns: dict[str, list[float | None]] = {}

    def reward_funcs(self) -> list[Callable[..., list[float | None]]]:
        return [self._column_func(name) for name in self.rewards.names]

    def _column_func(self, name: str) -> Callable[..., list[float | None]]:
        def reward_column(prompts: list[Any], completions: list[Any], completion_ids: list[list[int]],
                          **kwargs: Any) -> list[float | None]:
            self._score(prompts, completions, completion_ids, kwargs)
            return self._columns[name]

        reward_column.__name__ = name  # TRL logs rewards/<__name__>/mean
        return reward_column

    def _score(self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]],
               kwargs: dict[str, Any]) -> None:
        state = kwargs.get("trainer_state")
        global_step = state.global_step if state is not None else 0
        key = (id(completions), len(completions), global_step)
        if key == self._key:
            return
        self._key = key
        step = global_step // self.mini_batches + 1  # the training step these rollouts belong to (1-based)
        references = kwargs.get("reference") or [None] * len(completions)
        sources = kwargs.get("data_source") or [""] * len(completions)
        columns: dict[str, list[float | None]] = {n: [] for n in self.rewards.names}
        component_values: dict[str, list[float]] = {}
        records = []
        errors_before = self.rewards.error_count
        for prompt, completion, ids, reference, source in zip(prompts, completions, completion_ids, references,
                                                              sources, strict=True):
            sample = Sample(
                prompt=text_of(prompt), completion=text_of(completion), reference=reference, data_source=source,
                messages=tuple(prompt) if isinstance(prompt, list) else (),
                truncated=not any(t in self.eos_ids for t in ids),
            )
            scored = self.rewards.score(sample)
            for name, score in scored.scores.items():
                if score is None and self.on_error == "zero":
                    score = 0.0
                columns[name].append(score)
            for key_, value in scored.components.items():
                if value is not None:
                    component_values.setdefault(key_, []).append(value)
            records.append({
                "step": step, "prompt": sample.prompt, "completion": sample.completion, "reference": reference,
                "data_source": source, "truncated": sample.truncated, "total": scored.total,
                "scores": scored.scores, "components": scored.components, "errors": scored.errors,
            })
        self._columns = columns
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for key_, values in component_values.items():
                log_metric(f"reward/{key_}", sum(values) / len(values))
            log_metric("reward/errors", float(self.rewards.error_count - errors_before))
        self.on_scored(step, records)
        self._check_error_policy(records)

    def _check_error_policy(self, records: list[dict[str, Any]]) -> None:
        failed = [r for r in records if r["errors"]]
        if failed and self.on_error == "abort":
            name, trace = next(iter(failed[0]["errors"].items()))
            raise RewardAbort(f"reward {name!r} failed and reward_policy.on_error=abort:\n{trace}")
        calls, errors = self.rewards.calls, self.rewards.error_count
        if calls >= 100 and errors / calls > self.max_error_rate:
            raise RewardAbort(
                f"{errors} of {calls} reward calls failed ({errors / calls:.1%}), above "
                f"reward_policy.max_error_rate={self.max_error_rate}; see 'errors' in trajectories.jsonl")


def finite_mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return sum(kept) / len(kept) if kept else None
