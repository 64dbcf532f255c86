"""verl's single-turn agent loop as unirl runs it: verl's own loop, plus what unirl's rewards and builtin models need
that verl's rollout config cannot say. The plan registers it through verl's agent-loop registry
(``agent_loop_config_path``, as for environments: :mod:`unirl.adapters.verl_agent_loop`) and makes it the default
for every run without an environment; training and validation rollouts both go through it.

- **Truncation.** A reward reads ``Sample.truncated`` (a completion cut at the token limit, not ended by the model:
  ``bare_number`` scores 0 for one), but verl's reward functions get no such flag
  (``compute_score(data_source, solution_str, ground_truth, extra_info)``). The loop marks each output
  (``extra_fields["unirl_truncated"]``: it did not end on an end-of-sequence token, as on TRL), which verl's reward
  manager merges into ``extra_info`` (reward_loop/reward_manager/naive.py:44-46 @ 0.9.1, from the agent loop's
  ``tool_extra_fields``, agent_loop.py:1016), where unirl's verl adapter reads it.
- **A builtin model's never-sampled tokens** (pad, bos, unk, ...): the sampling parameters an agent loop passes to
  ``server_manager.generate`` reach vLLM's ``SamplingParams`` as they are
  (verl/workers/rollout/vllm_rollout/vllm_async_server.py:617-634), so an ``allowed_token_ids`` list keeps them out,
  as TRL's ``suppress_tokens`` (hf) and ``allowed_token_ids`` (vLLM) do.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from unirl.adapters.verl import TRUNCATED_KEY
from unirl.environments.tokens import eos_ids_of

SINGLE_TURN_NAME = "unirl_single_turn"


class UnirlSingleTurnAgentLoop(SingleTurnAgentLoop):  # type: ignore[misc]  # verl ships no type information
    def __init__(self, *args: Any, allowed_token_ids: list[int] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed_token_ids = None if allowed_token_ids is None else [int(i) for i in allowed_token_ids]
        self.eos_ids = eos_ids_of(self.tokenizer)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        if self.allowed_token_ids is not None:
            sampling_params = {**sampling_params, "allowed_token_ids": self.allowed_token_ids}
        output = await super().run(sampling_params, **kwargs)
        response = list(output.response_ids)
        output.extra_fields[TRUNCATED_KEY] = not (response and int(response[-1]) in self.eos_ids)
        return output
