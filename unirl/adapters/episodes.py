"""The run's environment inside a native backend's rollout process (verl's agent-loop workers, OpenRLHF's vLLM
engine actors): the environment loaded from the spec the host wrote, fresh tasks, and each finished episode scored
the same way on every backend: its return (the turn rewards plus ``final()``) plus the recipe's rewards on the
episode's transcript, one record per episode in trajectories.jsonl. These backends need a number for every sample,
so a failed episode scores ``reward_policy.fallback_score``, is counted by kind, and aborts the run by policy.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from unirl.adapters.common import BackendRewards, EpisodeFailures, runtime_for
from unirl.environments.contract import EnvironmentSpec, Message, Task
from unirl.environments.episode import EpisodeRunner
from unirl.environments.runtime import ENVIRONMENT_SPEC_ENV, EnvironmentRuntimeSpec
from unirl.environments.tokens import EpisodeTokens, episode_record
from unirl.errors import UnirlError
from unirl.rewards.contract import Sample

__all__ = ["ENVIRONMENT_SPEC_ENV", "NativeEpisodes", "episodes_for", "episodes_from_env"]


class NativeEpisodes:
    def __init__(self, backend: str, spec_path: str | Path) -> None:
        self.backend = backend
        self.settings = EnvironmentRuntimeSpec.read(spec_path)
        self.spec: EnvironmentSpec = self.settings.load()
        if not self.settings.reward_spec:
            raise ValueError(f"environment specification {spec_path} names no reward specification")
        self.rewards: BackendRewards = runtime_for(backend, self.settings.reward_spec)
        self.failures = EpisodeFailures(self.rewards.spec.policy)
        self._seeds = random.SystemRandom()  # no backend tells its rollout which sample of a group it is
        self._lock = threading.Lock()

    def runner(self, prompt: str | list[Message], reference: str | None,
               metadata: Mapping[str, Any] | None) -> EpisodeRunner:
        """A fresh episode of the row: its own instance and its own seed (recorded in the episode, for a replay)."""
        task = Task(prompt=prompt if isinstance(prompt, str) else tuple(dict(m) for m in prompt),
                    reference=reference, metadata=dict(metadata or {}), seed=self._seeds.getrandbits(32))
        return self.settings.runner(self.spec, task)

    def score(self, item: EpisodeTokens, sample: Sample, origin: Mapping[str, Any] | None = None,
              in_order: bool = True) -> float:
        """The episode's score: return plus the recipe's rewards on ``sample`` (the transcript), recorded; a failed
        episode scores the fallback. Raises once failures pass the policy (the backend then stops the run)."""
        episode = item.episode
        value = None if episode is None or episode.failed else episode.return_
        scored = self.rewards.score([sample], origins=None if origin is None else [origin], in_order=in_order,
                                    episodes=[(value, episode_record(item))])[0]
        with self._lock:
            try:
                self.failures.check([value])
            except UnirlError as exc:
                self.rewards.end("failed", str(exc))  # the backend may die of it without running exit handlers
                raise
        if value is None:
            return self.rewards.spec.policy.fallback_score
        return value + (scored.total or 0.0)


_EPISODES: dict[tuple[str, str], NativeEpisodes] = {}
_LOCK = threading.Lock()


def episodes_from_env(backend: str) -> NativeEpisodes:
    """The run's environment for a rollout process that finds its spec in ``$UNIRL_ENVIRONMENT_SPEC`` (slime's
    generate function from the plan's environment, OpenRLHF's agent from the agent file unirl writes)."""
    path = os.environ.get(ENVIRONMENT_SPEC_ENV)
    if not path:
        raise RuntimeError(f"unirl's {backend} episode loop needs ${ENVIRONMENT_SPEC_ENV}, the run's environment "
                           "specification (the plan sets it)")
    return episodes_for(backend, path)


def episodes_for(backend: str, spec_path: str | Path) -> NativeEpisodes:
    """The process-wide environment of a run, built once per spec file."""
    key = (backend, str(Path(spec_path).resolve()))
    with _LOCK:
        found = _EPISODES.get(key)
        if found is None:
            found = _EPISODES[key] = NativeEpisodes(backend, spec_path)
        return found
