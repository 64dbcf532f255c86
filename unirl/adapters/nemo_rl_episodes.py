"""unirl's environments inside NeMo RL's environment actor (NeMo RL v0.7.0, nemo_rl/experience/rollouts.py).

NeMo RL drives the turns itself (``run_multi_turn_rollout``, rollouts.py:574-826) and calls the environment actor
once per turn with the whole batch still running: ``step(message_logs, metadata)``, each log reduced to
role/content (L482-485), each metadata the sample's ``extra_env_info``, which the metadata the step returns replaces
for a continuing sample (L783-789). The actor is one process for many episodes, so :class:`EpisodeTable` keeps
each episode's runner under an id it puts in that metadata (``unirl_episode``), starting an episode the first time a
sample comes without one and forgetting it when it ends.

What NeMo RL does and unirl adds:

- the observation is tokenized raw (``add_special_tokens=False``, L722-726, "TODO ... chat template"): the content
  returned is the chat template's text after the assistant turn, with the next turn's generation prompt;
- rewards are summed over turns into ``total_reward`` (L713, L795): each step returns its turn's reward, and the
  last adds the rest of the episode's score (``final()`` and the recipe's rewards on the transcript), so the sum is
  the episode's score as on every backend;
- a turn that hits the generation limit does not end the episode on this path (NVIDIA-NeMo/RL#3851), and
  ``policy.generation.max_new_tokens`` is per turn: the table ends an episode whose completion (turns and
  observations, counted with the tokenizer, since NeMo RL passes text) reaches the episode's budget
  (``algorithm.max_new_tokens``), and the environment's ``max_turns`` ends it at the same call (the plan sets
  ``grpo.max_rollout_turns`` at or above it, so NeMo RL never stops an episode the table still holds).

What it loses: the opening message is the row's prompt as NeMo RL's data processor renders it (an environment's
``reset`` text is not shown), and per-turn rewards reach the advantage as their sum.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from unirl.adapters.episodes import NativeEpisodes, episodes_for
from unirl.environments.episode import EpisodeRunner
from unirl.environments.tokens import ChatRendering, EpisodeTokens, add_observation
from unirl.rewards.contract import Sample
from unirl.rewards.row_origin import untag_row

EPISODE_KEY = "unirl_episode"
ANSWER_ROLE = "assistant"
OBSERVATION_ROLE = "environment"


@dataclass
class _Open:
    runner: EpisodeRunner
    item: EpisodeTokens
    prompt: str
    reference: str | None
    origin: dict[str, Any] | None
    sent: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnResult:
    observation: dict[str, str]
    metadata: dict[str, Any]
    reward: float
    done: bool
    answer: str | None


class EpisodeTable:
    """The episodes in flight in one environment actor."""

    def __init__(self, spec_path: str, tokenizer: Any) -> None:
        self.episodes: NativeEpisodes = episodes_for("nemo_rl", spec_path)
        self.tok = tokenizer
        self.rendering = ChatRendering(tokenizer, chat_template=self.episodes.settings.chat_template)
        self.open: dict[str, _Open] = {}
        self._lock = threading.Lock()

    def _start(self, log: list[dict[str, Any]], metadata: Mapping[str, Any]) -> tuple[str, _Open]:
        reference, origin, row_metadata = untag_row(metadata.get("ground_truth"))
        prompt_messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in log
                           if m.get("role") != ANSWER_ROLE]
        runner = self.episodes.runner(prompt_messages, None if reference in (None, "") else str(reference),
                                      row_metadata)
        runner.start()
        prompt = "".join(m["content"] for m in prompt_messages)
        ids = self.rendering.text_ids(prompt)
        state = _Open(runner, EpisodeTokens(ids), prompt, runner.task.reference, origin,
                      metadata={k: v for k, v in metadata.items() if k != EPISODE_KEY})
        episode_id = uuid.uuid4().hex
        with self._lock:
            self.open[episode_id] = state
        return episode_id, state

    def step(self, log: list[dict[str, Any]], metadata: Mapping[str, Any] | None) -> TurnResult:
        meta = dict(metadata or {})
        episode_id = meta.get(EPISODE_KEY)
        with self._lock:
            state = self.open.get(episode_id) if isinstance(episode_id, str) else None
        if state is None:
            episode_id, state = self._start(log, meta)
        answers = [m for m in log if m.get("role") == ANSWER_ROLE]
        action = str(answers[-1]["content"]) if answers else ""
        item, budget = state.item, self.episodes.settings.max_new_tokens
        turn_ids = self.rendering.text_ids(action)
        item.completion_ids += turn_ids
        item.env_mask += [1] * len(turn_ids)
        runner = state.runner
        observation = runner.act(action, truncated=len(item.completion_ids) >= budget)
        text = None if observation is None else add_observation(item, runner, self.rendering, observation,
                                                                budget=budget)
        if text is not None:
            reward = runner.episode.turns[-1].reward
            state.sent += reward
            return TurnResult({"role": OBSERVATION_ROLE, "content": text}, {**state.metadata, EPISODE_KEY: episode_id},
                              reward, False, None)
        with self._lock:
            self.open.pop(str(episode_id), None)
        item.episode = episode = runner.finish()
        transcript = self.tok.decode(item.completion_ids, skip_special_tokens=True)
        sample = Sample(prompt=state.prompt, completion=transcript, reference=state.reference,
                        truncated=episode.termination == "truncated", completion_tokens=sum(item.env_mask))
        score = self.episodes.score(item, sample, origin=state.origin)
        return TurnResult({"role": OBSERVATION_ROLE, "content": ""}, dict(state.metadata), score - state.sent, True,
                          action)
