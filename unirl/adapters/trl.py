"""unirl rewards as TRL ``reward_funcs``: one TRL function (and one logged column) per unirl reward.

TRL calls each reward function in turn on the same batch; the first call scores every reward of the
recipe once through the executor, and the others read their column from that cache. Components go to
TRL's metrics through ``log_metric`` as ``reward/<reward>/<component>``, with the error counts.

With an environment, the first column is the episode's return (``environment``, weight 1), which the rollout
function hands over as ``env_return``; a failed episode counts as an error of its kind and scores like a failed reward
call under ``reward_policy.on_error`` (left out of the group, or the fallback score), never a silent zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, get_args

from unirl.adapters.common import ENVIRONMENT, EpisodeFailures, merge_episode, trajectory_record
from unirl.environments.episode import ErrorKind
from unirl.rewards.contract import Sample
from unirl.rewards.executor import RewardExecutor, error_metrics


def text_of(value: Any) -> str:
    """TRL passes text, or chat messages for conversational data."""
    if isinstance(value, list):
        return "".join(str(m.get("content", "")) for m in value)
    return str(value)


class TrlRewardAdapter:
    def __init__(self, executor: RewardExecutor, *, eos_ids: set[int], mini_batches: int,
                 on_scored: Callable[[int, list[dict[str, Any]]], None], environment: bool = False) -> None:
        self.executor = executor
        self.environment = environment
        self.names = [*([ENVIRONMENT] if environment else []), *executor.spec.names]
        self.failures = EpisodeFailures(executor.spec.policy)
        self.eos_ids = eos_ids
        self.mini_batches = mini_batches
        self.on_scored = on_scored
        self._key: tuple[int, int, int] | None = None
        self._columns: dict[str, list[float | None]] = {}

    def reward_funcs(self) -> list[Callable[..., list[float | None]]]:
        return [self._column_func(name) for name in self.names]

    def _column_func(self, name: str) -> Callable[..., list[float | None]]:
        def reward_column(prompts: list[Any], completions: list[Any], completion_ids: list[list[int]],
                          **kwargs: Any) -> list[float | None]:
            self._score(prompts, completions, completion_ids, kwargs)
            return self._columns[name]

        reward_column.__name__ = name  # TRL logs rewards/<__name__>/mean
        return reward_column

    def check_episode_policy(self, returns: list[float | None]) -> None:
        self.failures.check(returns)

    def samples(self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]],
                kwargs: dict[str, Any]) -> list[Sample]:
        """TRL's reward-function arguments as unirl samples (dataset columns arrive as keyword lists)."""
        references = kwargs.get("reference") or [None] * len(completions)
        sources = kwargs.get("data_source") or [""] * len(completions)
        metadata = kwargs.get("metadata") or [{}] * len(completions)
        out = []
        for prompt, completion, ids, reference, source, meta in zip(prompts, completions, completion_ids, references,
                                                                    sources, metadata, strict=True):
            end = next((i for i, t in enumerate(ids) if t in self.eos_ids), None)
            out.append(Sample(
                prompt=text_of(prompt), completion=text_of(completion), reference=reference, data_source=source,
                metadata=meta or {}, prompt_messages=tuple(prompt) if isinstance(prompt, list) else (),
                truncated=end is None, completion_tokens=len(ids) if end is None else end,
            ))
        return out

    def _score(self, prompts: list[Any], completions: list[Any], completion_ids: list[list[int]],
               kwargs: dict[str, Any]) -> None:
        state = kwargs.get("trainer_state")
        global_step = state.global_step if state is not None else 0
        key = (id(completions), len(completions), global_step)
        if key == self._key:
            return
        self._key = key
        step = global_step // self.mini_batches + 1  # the training step these rollouts belong to (1-based)
        samples = self.samples(prompts, completions, completion_ids, kwargs)
        scored = self.executor.score(samples)
        policy = self.executor.spec.policy
        returns: list[float | None] = list(kwargs.get("env_return") or [None] * len(samples))
        episodes: list[dict[str, Any] | None] = list(kwargs.get("env_episode") or [None] * len(samples))
        columns: dict[str, list[float | None]] = {n: [] for n in self.names}
        component_values: dict[str, list[float]] = {}
        for result, value in zip(scored, returns, strict=True):
            env_failed = self.environment and value is None
            # exclude: every column None, which TRL (>= 1.16) treats as unscorable: out of the group baseline and
            # advantage 0. One None among numbers would silently count the failed reward as 0 in TRL's nansum.
            excluded = (bool(result.errors) or env_failed) and policy.on_error == "exclude"
            if self.environment:
                columns[ENVIRONMENT].append(None if excluded else policy.fallback_score if value is None else value)
            for name, score in result.scores.items():
                if score is None and policy.on_error == "fallback":
                    score = policy.fallback_score
                columns[name].append(None if excluded else score)
            for key_, value_ in result.components.items():
                if value_ is not None:
                    component_values.setdefault(key_, []).append(value_)
        self._columns = columns
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            for key_, values in component_values.items():
                log_metric(f"reward/{key_}", sum(values) / len(values))
            for key_, value in error_metrics(scored).items():
                log_metric(key_, value)
            if self.environment:
                for key_, value in episode_metrics(episodes).items():
                    log_metric(key_, value)
        records = [trajectory_record(s, r, step=step) for s, r in zip(samples, scored, strict=True)]
        if self.environment:
            for record, value, episode in zip(records, returns, episodes, strict=True):
                merge_episode(record, value, episode)
        self.on_scored(step, records)
        if self.environment:
            self.check_episode_policy(returns)
        self.executor.check_policy(scored)


def episode_metrics(episodes: list[dict[str, Any] | None]) -> dict[str, float]:
    """A batch's episodes as metrics: mean return, turns and truncation, each declared metric's mean, and failures by
    kind (``env/errors/<kind>``, a fraction of the batch)."""
    done = [e for e in episodes if e is not None]
    if not done:
        return {}
    out = {"env/return": sum(e["return"] for e in done) / len(done),
           "env/errors": sum(1 for e in done if e["error_kind"]) / len(done)}
    for key in sorted({k for e in done for k in e["metrics"]}):
        out[f"env/{key}"] = sum(e["metrics"].get(key, 0.0) for e in done) / len(done)
    for kind in get_args(ErrorKind):
        out[f"env/errors/{kind}"] = sum(1 for e in done if e["error_kind"] == kind) / len(done)
    return out


def finite_mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None and math.isfinite(v)]
    return sum(kept) / len(kept) if kept else None
