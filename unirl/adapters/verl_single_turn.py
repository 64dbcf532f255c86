"""verl's single-turn agent loop for unirl's builtin models: the same completions verl samples, with the builtin
model's special tokens (pad, bos, unk) never sampled, as on TRL (``suppress_tokens`` for transformers' generate,
``allowed_token_ids`` for vLLM). verl's rollout config has no key for it: the sampling parameters an agent loop
passes to ``server_manager.generate`` reach vLLM's ``SamplingParams`` as they are
(verl/workers/rollout/vllm_rollout/vllm_async_server.py:617-634 @ 0.9.1), so the plan registers this loop through
verl's agent-loop registry (``agent_loop_config_path``, as for environments: :mod:`unirl.adapters.verl_agent_loop`)
and makes it the default. Training and validation rollouts both go through it.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

SINGLE_TURN_NAME = "unirl_single_turn"


class UnirlSingleTurnAgentLoop(SingleTurnAgentLoop):  # type: ignore[misc]  # verl ships no type information
    def __init__(self, *args: Any, allowed_token_ids: list[int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed_token_ids = [int(i) for i in allowed_token_ids]

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        return await super().run({**sampling_params, "allowed_token_ids": self.allowed_token_ids}, **kwargs)
