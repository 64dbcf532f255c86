"""unirl's environments as OpenRLHF's agent (OpenRLHF 0.11.2, openrlhf/utils/agent.py).

``--train.agent_func_path`` names a ``.py`` file that each vLLM engine actor imports, taking its ``AgentExecutor``
class and constructing it with no arguments (openrlhf/trainer/ray/vllm_engine.py:19-30). unirl writes that file per
run (:func:`unirl.adapters.openrlhf.write_agent_file`): it sets the run's environment spec and re-exports
:class:`AgentExecutor` from here.

OpenRLHF's own ``MultiTurnAgentExecutor.execute`` runs the turn loop (agent.py:36-185): a fresh ``AgentInstance()``
per sample, ``reset({"observation": prompt, "label": label})``, then per turn a generation of at most ``max_length``
minus the tokens so far, and ``step({"action_text", ...})`` returning ``rewards`` (a tensor), the
``environment_feedback`` text it tokenizes as is (no chat template, ``add_special_tokens=False``) and masks, and
``done``. What it does not do, unirl's instance does:

- **the episode's budget and ``max_turns``**: OpenRLHF has no turn limit and budgets ``--data.max_len`` (prompt plus
  completion); the instance ends the episode at the environment's ``max_turns`` and caps each turn at what is left of
  ``algorithm.max_new_tokens`` through the ``sampling_params`` a step may return (agent.py:172-174).
- **token in, token out, truncation**: the step sees only the decoded text; :class:`AgentExecutor` hands OpenRLHF's
  loop an engine that keeps each turn's token ids and finish reason where the step can read them, so an action cut by
  the budget ends the episode as truncated and the trajectory record counts tokens exactly.
- **the chat template's glue**: the feedback is the template's text after the assistant turn (the turn's own
  end-of-sequence token is generated), with the next turn's generation prompt.
- **what OpenRLHF drops**: it sums the step rewards into the reward and keeps the *last* step's ``scores`` and
  ``extra_logs`` only (agent.py:122-127); the last step therefore carries the episode's whole score (return plus the
  recipe's rewards on the transcript) and metrics, and every turn is in trajectories.jsonl.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from unirl.adapters.episodes import episodes_from_env
from unirl.environments.episode import EpisodeRunner
from unirl.environments.tokens import ChatRendering, EpisodeTokens, add_observation, cut_turn, eos_ids_of
from unirl.rewards.contract import Sample
from unirl.rewards.row_origin import untag_row


@dataclass
class _Turns:
    """This sample's generations, as the engine returned them (token ids and finish reasons), for its instance."""

    tokenizer: Any
    remaining: int
    """What is left of the episode's completion budget (turns and observations so far subtracted)."""
    turns: list[tuple[list[int], str | None]] = field(default_factory=list)


_CURRENT: contextvars.ContextVar[_Turns] = contextvars.ContextVar("unirl_openrlhf_turns")


class _RecordingEngine:
    """OpenRLHF's engine, with each turn's ids and finish reason kept for the sample's instance (``execute`` runs in
    one asyncio task per sample, so a context variable set there is the sample's own)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    async def generate(self, prompt_token_ids: Any, sampling_params: Any, **kwargs: Any) -> Any:
        turns = _CURRENT.get()
        # OpenRLHF sets max_tokens to what --data.max_len leaves before every turn (agent.py:92-94), overriding
        # anything a step returns: the episode's own budget is applied here, on the copy this turn gets.
        sampling_params.max_tokens = max(1, min(int(sampling_params.max_tokens), turns.remaining))
        output = await self.engine.generate(prompt_token_ids, sampling_params, **kwargs)
        first = output.outputs[0]
        turns.turns.append((list(first.token_ids), getattr(first, "finish_reason", None)))
        return output


class AgentInstance(AgentInstanceBase):  # type: ignore[misc]  # OpenRLHF ships no type information
    """One episode: OpenRLHF makes a fresh instance per sample (agent.py:39)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.episodes = episodes_from_env("openrlhf")
        self.turns = _CURRENT.get()
        self.rendering = ChatRendering(self.turns.tokenizer, chat_template=self.episodes.settings.chat_template)
        self.eos_ids = eos_ids_of(self.turns.tokenizer)
        self.runner: EpisodeRunner | None = None
        self.item = EpisodeTokens([])
        self.prompt = ""
        self.reference: str | None = None
        self.origin: dict[str, Any] | None = None
        self.metadata: dict[str, Any] = {}
        self.sent = 0.0
        """The turn rewards the steps so far returned (OpenRLHF sums them into the sample's reward)."""
        self.failed_at_start = False

    async def reset(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        import asyncio

        prompt = states["observation"]
        label, origin, metadata = untag_row(states.get("label"))
        self.reference = None if label is None or label == "" else str(label)
        self.origin = origin
        self.metadata = metadata
        self.runner = runner = self.episodes.runner(prompt, self.reference, metadata)
        self.prompt = prompt if isinstance(prompt, str) else str(prompt[-1].get("content", ""))
        opening = await asyncio.to_thread(runner.start)
        messages = opening if opening is not None else [{"role": "user", "content": self.prompt}]
        text = self.rendering.prompt_text(messages)
        self.item = EpisodeTokens(self.rendering.text_ids(text))
        self.failed_at_start = opening is None
        return {"observation": text}

    async def step(self, states: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        import asyncio

        import torch

        runner, item, budget = self.runner, self.item, self.episodes.settings.max_new_tokens
        assert runner is not None
        tokens, finish = self.turns.turns[-1] if self.turns.turns else ([], None)
        item.completion_ids += tokens  # as OpenRLHF keeps them (its engine stops at the end-of-sequence token)
        item.env_mask += [1] * len(tokens)
        kept, no_end = cut_turn(tokens, len(tokens), self.eos_ids)
        truncated = no_end or finish == "length"
        feedback = None
        if not self.failed_at_start:
            answer = await asyncio.to_thread(runner.act, self.rendering.action_text(kept, no_end), truncated)
            if answer is not None:
                feedback = add_observation(item, runner, self.rendering, answer, budget=budget)
        if feedback is not None:
            turn_reward = runner.episode.turns[-1].reward
            self.sent += turn_reward
            self.turns.remaining = budget - len(item.completion_ids)
            return {"rewards": torch.tensor(turn_reward), "environment_feedback": feedback, "done": False}
        return self._last_step(runner, item)

    def _last_step(self, runner: EpisodeRunner, item: EpisodeTokens) -> dict[str, Any]:
        """The episode's end: its whole score, as the step rewards OpenRLHF sums (the turn rewards sent so far plus
        the rest), and the episode's metrics as the last step's extra_logs, the only ones OpenRLHF keeps."""
        import torch

        item.episode = episode = runner.finish()
        ends = bool(item.completion_ids) and item.completion_ids[-1] in self.eos_ids
        transcript = self.turns.tokenizer.decode(item.completion_ids, skip_special_tokens=True)
        sample = Sample(prompt=self.prompt, completion=transcript, reference=self.reference, truncated=not ends,
                        completion_tokens=sum(item.env_mask), metadata=self.metadata)
        score = self.episodes.score(item, sample, origin=self.origin, in_order=False)
        metrics = episode.metrics()
        extra_logs = {"env/return": float(episode.return_), "env/failed": float(episode.failed),
                      **{f"env/{k}": float(metrics.get(k, 0.0))
                         for k in ("turns", "truncated", *self.episodes.spec.metrics)}}
        return {"rewards": torch.tensor(score - self.sent), "scores": torch.tensor(score), "environment_feedback": "",
                "done": True, "extra_logs": {k: torch.tensor(v) for k, v in extra_logs.items()}}


class AgentExecutor(MultiTurnAgentExecutor):  # type: ignore[misc]
    """OpenRLHF's multi-turn executor over unirl's instance; constructed with no arguments (vllm_engine.py:30)."""

    def __init__(self) -> None:
        super().__init__(AgentInstance)

    async def execute(self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any,
                      llm_engine: Any, images: Any = None) -> dict[str, Any]:
        _CURRENT.set(_Turns(hf_tokenizer, episodes_from_env("openrlhf").settings.max_new_tokens))
        return dict(await super().execute(prompt, label, sampling_params, max_length, hf_tokenizer,
                                          _RecordingEngine(llm_engine), images=images))
