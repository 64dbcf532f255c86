"""Built-in plugin: the rollout engines unirl knows how to name; backends declare which they drive."""

from __future__ import annotations

from unirl.backend.rollout import RolloutEngine
from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry


@hookimpl
def unirl_add_rollout_engines(registry: Registry[RolloutEngine]) -> None:
    registry.add(RolloutEngine("hf", "transformers model.generate in the trainer process", needs_gpu=False,
                               python_package="transformers"))
    registry.add(RolloutEngine("vllm", "vLLM, colocated or as a server", needs_gpu=True, python_package="vllm"))
    registry.add(RolloutEngine("sglang", "SGLang server", needs_gpu=True, python_package="sglang"))
