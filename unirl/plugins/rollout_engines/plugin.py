"""Built-in plugin: the rollout engines unirl knows how to name; backends declare which they drive."""

from __future__ import annotations

from unirl.backend.rollout import RolloutEngine
from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry

VERL_LOOP = "unirl.adapters.verl_agent_loop:UnirlAgentLoop"
VERL_LOSES = "per-turn rewards reach the advantage as their sum (verl's reward_score is per trajectory)"
NEMO_RL_LOSES = ("per-turn rewards reach the advantage as their sum; the opening message is the row's prompt as NeMo "
                 "RL's data processor renders it (reset's text is not shown)")
SUMMED = "per-turn rewards reach the advantage as their sum (the sample's reward is per episode)"
OPENRLHF_AGENT = "unirl.adapters.openrlhf_agent:AgentExecutor"


@hookimpl
def unirl_add_rollout_engines(registry: Registry[RolloutEngine]) -> None:
    registry.add(RolloutEngine(
        "hf", "transformers model.generate in the trainer process", needs_gpu=False, python_package="transformers",
        episodes={"trl": "unirl.adapters.trl_environment:TrlEpisodes"},
        episodes_lose={"trl": "per-turn rewards reach the advantage as their sum (GRPO's advantage is per episode)"}))
    registry.add(RolloutEngine(
        "vllm", "vLLM, colocated or as a server", needs_gpu=True, python_package="vllm",
        episodes={"verl": VERL_LOOP, "openrlhf": OPENRLHF_AGENT,
                  "vime": "unirl.adapters.slime_environment:vime_generate",
                  "nemo_rl": "unirl.adapters.nemo_rl_episodes:EpisodeTable"},
        episodes_lose={"verl": VERL_LOSES, "openrlhf": "per-turn rewards reach the advantage as their sum; OpenRLHF "
                       "logs the last step's extra_logs only, so unirl puts the episode's metrics there",
                       "vime": SUMMED, "nemo_rl": NEMO_RL_LOSES}))
    registry.add(RolloutEngine("sglang", "SGLang server", needs_gpu=True, python_package="sglang",
                               episodes={"verl": VERL_LOOP, "slime": "unirl.adapters.slime_environment:generate"},
                               episodes_lose={"verl": VERL_LOSES, "slime": SUMMED}))
