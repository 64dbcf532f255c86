"""NeMo RL's environment contract, fed by the run's reward specification.

NeMo RL scores rollouts with environments: Ray actor classes implementing ``EnvironmentInterface``
(nemo_rl/environments/interfaces.py:54-89 @7ea279a): ``step(message_log_batch, metadata)`` returns an
``EnvironmentReturn`` (observations, metadata, next_stop_strings, rewards, terminateds, answers;
interfaces.py:26-51). ``calculate_rewards`` passes each sample's message log reduced to role/content
(nemo_rl/experience/rollouts.py:724-727) and its ``extra_env_info`` as metadata (rollouts.py:749); the
math data processor puts the reference there as ``ground_truth`` (nemo_rl/data/processors.py:392).

Rewards come back as one tensor of totals (by the recipe's policy): a dict of tensors would be summed
into the total by NeMo RL (GDPO, rollouts.py:961-973), which is not unirl's weighted sum. Each reward's
score and components go to the sample's metadata under ``unirl`` (written back to extra_env_info,
rollouts.py:1050-1051) and to the run's trajectory log.

The launcher must register the environment before ``setup_response_data`` (examples/run_grpo.py:131):
:func:`register` adds it to ``ENV_REGISTRY`` (nemo_rl/environments/utils.py:135-139) AND to
``ACTOR_ENVIRONMENT_REGISTRY`` (nemo_rl/distributed/ray_actor_environment_registry.py:32-85), without
which ``create_env`` raises "No actor environment registered". The environment config
``env.<name>.unirl_spec`` names the spec file (else ``$UNIRL_REWARD_SPEC``).
"""

from __future__ import annotations

from typing import Any

from nemo_rl.environments.interfaces import EnvironmentInterface, EnvironmentReturn

from unirl.adapters.common import native_row, runtime_for
from unirl.rewards.contract import Sample
from unirl.rewards.row_origin import untag_row

ENV_NAME = "unirl"
ACTOR_FQN = "unirl.adapters.nemo_rl.UnirlEnvironmentActor"
ANSWER_ROLE = "assistant"


def sample_from_nemo(message_log: list[dict[str, Any]],
                     metadata: dict[str, Any] | None) -> tuple[Sample, dict[str, Any] | None]:
    """The sample, and the row's place where unirl's export carried it in ``ground_truth``
    (unirl/rewards/row_origin.py). The prompt is every non-assistant turn, the completion every assistant turn (as
    MathEnvironment does)."""
    meta = dict(metadata or {})
    reference, origin, row_metadata = untag_row(meta.pop("ground_truth", None))
    meta = {**row_metadata, **meta}  # NeMo RL's own keys win: they describe this sample
    meta.pop("unirl", None)  # our own write-back from an earlier turn
    prompt = "".join(str(m["content"]) for m in message_log if m.get("role") != ANSWER_ROLE)
    completion = "".join(str(m["content"]) for m in message_log if m.get("role") == ANSWER_ROLE)
    messages = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in message_log
                     if m.get("role") != ANSWER_ROLE)
    return Sample(prompt=prompt, completion=completion, reference=None if reference is None else str(reference),
                  data_source=str(meta.pop("data_source", "")), metadata=meta, prompt_messages=messages), origin


class UnirlEnvironment(EnvironmentInterface):  # type: ignore[misc]  # NeMo RL's class: Any where it is absent
    """Single-turn: scores the assistant's answer with the run's unirl rewards, then ends. With the recipe's
    environment (``env.unirl.unirl_environment``, the spec; ``env.unirl.tokenizer``, the policy's model): runs its
    episodes turn by turn (:mod:`unirl.adapters.nemo_rl_episodes`)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        config = config or {}
        self.spec_path = config.get("unirl_spec")
        self.table: Any = None
        if config.get("unirl_environment"):
            from transformers import AutoTokenizer

            from unirl.adapters.nemo_rl_episodes import EpisodeTable

            self.table = EpisodeTable(str(config["unirl_environment"]),
                                      AutoTokenizer.from_pretrained(str(config["tokenizer"])))

    def step(self, message_log_batch: list[list[dict[str, Any]]],
             metadata: list[dict[str, Any]]) -> EnvironmentReturn:
        import torch

        if self.table is not None:
            turns = [self.table.step(log, meta) for log, meta in zip(message_log_batch, metadata, strict=True)]
            return EnvironmentReturn(
                observations=[t.observation for t in turns], metadata=[t.metadata for t in turns],
                next_stop_strings=[None] * len(turns),
                rewards=torch.tensor([t.reward for t in turns], dtype=torch.float32),
                terminateds=torch.tensor([float(t.done) for t in turns]), answers=[t.answer for t in turns])

        runtime = runtime_for("nemo_rl", self.spec_path)
        pairs = [sample_from_nemo(log, meta) for log, meta in zip(message_log_batch, metadata, strict=True)]
        samples = [sample for sample, _ in pairs]
        # with NeMo RL's shuffle off (data.shuffle=false) a train row's place is its step
        rows = [native_row(s) for s in runtime.score(samples, [origin for _, origin in pairs])]
        out_metadata = [{**(meta or {}), "unirl": row} for meta, row in zip(metadata, rows, strict=True)]
        totals = torch.tensor([row["score"] for row in rows], dtype=torch.float32)
        return EnvironmentReturn(
            # NeMo RL appends an observation to every sample's log, even on the last turn (rollouts.py:979-1019).
            observations=[{"role": "environment", "content": f"Environment: reward {row['score']:g}"} for row in rows],
            metadata=out_metadata,
            next_stop_strings=[None] * len(rows),
            rewards=totals,
            terminateds=torch.ones(len(rows)),
            answers=[s.completion for s in samples],
        )

    def global_post_process_and_metrics(self, batch: Any) -> tuple[Any, dict[str, float]]:
        """Required by the interface; NeMo RL (up to 7ea279a) never calls it, so the batch passes unchanged."""
        return batch, {}


def __getattr__(name: str) -> Any:
    """``UnirlEnvironmentActor``: the Ray actor class ``create_env`` instantiates, built on first use."""
    if name == "UnirlEnvironmentActor":
        import ray

        # max_concurrency is an actor option Ray's overloads for ray.remote do not list
        actor = ray.remote(max_restarts=-1, max_task_retries=-1, max_concurrency=1000)(  # type: ignore[call-overload]
            UnirlEnvironment)
        globals()[name] = actor
        return actor
    raise AttributeError(name)


def register(env_name: str = ENV_NAME) -> str:
    """Make ``env_name`` usable in a NeMo RL config (``data.*.env_name``); call in the driver before setup."""
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES
    from nemo_rl.environments.utils import ENV_REGISTRY, register_env

    existing = ENV_REGISTRY.get(env_name)
    if existing is None:
        register_env(env_name, ACTOR_FQN)
    elif existing.get("actor_class_fqn") != ACTOR_FQN:
        other = existing.get("actor_class_fqn")
        raise ValueError(f"NeMo RL environment {env_name!r} is already registered for {other}")
    ACTOR_ENVIRONMENT_REGISTRY[ACTOR_FQN] = PY_EXECUTABLES.SYSTEM  # unirl's core runs in the driver's interpreter
    return env_name
