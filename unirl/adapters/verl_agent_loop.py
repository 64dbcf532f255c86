"""unirl's environments as a verl agent loop (verl 0.9.1, verl/experimental/agent_loop/agent_loop.py).

unirl's verl plan writes ``agent_loops.yaml`` (``[{name: unirl_environment, _target_: <this class>,
unirl_environment: <the run's environment spec>}]``), which every ``AgentLoopWorker`` loads through
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (agent_loop.py:535-539), and makes it the
``default_agent_loop`` for rows without an ``agent_name`` column (L610-612). The worker instantiates one loop per
trajectory with Hydra, passing the extra keys of the YAML entry as keyword arguments (L682-693), and awaits
``run(sampling_params, **row)`` (L449-459), where the row holds ``raw_prompt``, ``reward_model`` and
``extra_info``.

Each turn goes to verl's rollout server through ``server_manager.generate(request_id, prompt_ids=,
sampling_params=)`` (verl/workers/rollout/llm_server.py:99-120), capped at what is left of the episode's budget
through ``max_tokens``, which the vLLM server takes over ``response_length`` (vllm_async_server.py:601-617). The
opening prompt is verl's own rendering (``ct_build_initial_tokens``, L389-430); the loop itself and the observation
tokens are unirl's (:func:`unirl.environments.tokens.drive_episode`). The output's ``response_mask`` is 0 under
every observation token and ``reward_score`` is the episode's score (return plus the recipe's rewards on the
transcript), which verl puts on the last response token as ``rm_scores`` (L143-147) and uses instead of its
reward loop (``_compute_score`` skips a trajectory that has one, L967-973). What verl loses: per-turn rewards reach
the advantage only as their sum (verl's advantage is outcome-level); the turn rewards stay in trajectories.jsonl.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from unirl.adapters.episodes import episodes_for
from unirl.adapters.verl import PROMPT_KEY, sample_from_verl
from unirl.environments.tokens import ChatRendering, Generated, drive_episode, eos_ids_of

AGENT_NAME = "unirl_environment"


class UnirlAgentLoop(AgentLoopBase):  # type: ignore[misc]  # verl ships no type information
    def __init__(self, *args: Any, unirl_environment: str, tools: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.episodes = episodes_for("verl", unirl_environment)
        self.rendering = ChatRendering(self.tokenizer, chat_template=True,
                                       template_kwargs=dict(self.apply_chat_template_kwargs or {}))
        self.eos_ids = eos_ids_of(self.tokenizer)
        self.budget = min(int(self.rollout_config.response_length), self.episodes.settings.max_new_tokens)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        extra_info = dict(kwargs.get("extra_info") or {})
        reference = (kwargs.get("reward_model") or {}).get("ground_truth")
        base = sample_from_verl(str(kwargs.get("data_source") or ""), "", reference, extra_info)
        runner = self.episodes.runner(messages, base.reference, base.metadata)
        request_id = uuid.uuid4().hex  # one id per episode: verl keeps its turns on one server (sticky session)
        versions: list[int] = []

        async def generate(context: list[int], left: int) -> Generated:
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=context,
                                                     sampling_params={**sampling_params, "max_tokens": left})
            # the policy versions (training steps) the engine generated this turn with: verl's V1 trainer reads each
            # trajectory's first and last (trainer_base.py:1897 @ 0.9.1; llm_server.py:160-162 sets them per turn)
            versions.extend(int(v) for v in (out.extra_fields.get("min_global_steps"),
                                             out.extra_fields.get("max_global_steps")) if v is not None)
            return Generated(list(out.token_ids), None if out.log_probs is None else list(out.log_probs))

        async def opening(first: list[dict[str, Any]]) -> list[int]:
            return list(await self.ct_build_initial_tokens(first))

        context = int(self.rollout_config.prompt_length) + int(self.rollout_config.response_length)
        item = await drive_episode(runner, self.rendering, generate, budget=self.budget, eos_ids=self.eos_ids,
                                   context=context, prompt_ids=opening)
        ends = bool(item.completion_ids) and item.completion_ids[-1] in self.eos_ids
        sample = sample_from_verl(base.data_source, self.tokenizer.decode(item.completion_ids,
                                                                          skip_special_tokens=True),
                                  reference, extra_info)
        sample = replace(sample, truncated=not ends, completion_tokens=sum(item.env_mask))
        # as the reward adapter does: only a row of unirl's own files identifies its step
        score = self.episodes.score(item, sample, origin=extra_info if PROMPT_KEY in extra_info else {})
        episode = item.episode
        assert episode is not None
        metrics = episode.metrics()
        extra_fields = {"unirl_env_return": float(episode.return_), "unirl_env_failed": float(episode.failed),
                        **{f"unirl_env_{k}": float(metrics.get(k, 0.0))
                           for k in ("turns", "truncated", *self.episodes.spec.metrics)},
                        "turn_scores": [t.reward for t in episode.turns], "tool_rewards": [],
                        "min_global_steps": min(versions, default=None),
                        "max_global_steps": max(versions, default=None)}
        completion = item.completion_ids or [next(iter(self.eos_ids))]
        mask = item.env_mask or [0]
        return AgentLoopOutput(
            prompt_ids=item.prompt_ids, response_ids=completion[:self.budget], response_mask=mask[:self.budget],
            response_logprobs=item.logprobs[:self.budget] if item.logprobs else None, reward_score=score,
            num_turns=1 + 2 * len(episode.turns), metrics=AgentLoopMetrics(), extra_fields=extra_fields)
