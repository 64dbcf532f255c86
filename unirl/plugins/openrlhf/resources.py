"""The GPUs an OpenRLHF launch asks Ray for, compared with what the recipe provides.

OpenRLHF reserves placement groups only after Ray starts and then waits on them forever
(train_ppo_ray.py:51, vllm_engine.py:251): a launch that asks for more GPUs than the cluster has hangs
instead of failing. unirl computes the demand from the flags and refuses such a plan up front.
"""

from __future__ import annotations

from typing import Any

from unirl.backend.plan import BackendEnvironment


def gpu_demand(flags: dict[str, Any]) -> tuple[int, str]:
    """(GPUs Ray must place, how they add up), from the flag values train() reads (train_ppo_ray.py:41-113)."""

    def get(dest: str, default: Any) -> Any:
        value = flags.get(dest, default)
        return default if value is None else value

    actor = get("actor.num_nodes", 1) * get("actor.num_gpus_per_node", 8)
    engines = get("vllm.num_engines", 0) * get("vllm.tensor_parallel_size", 1)
    colocate_all = get("train.colocate_all", False) and not get("train.async_enable", False)
    if colocate_all:
        return actor, f"actor, reference and vLLM share {actor} GPU bundles (--train.colocate_all)"
    total, parts = actor + engines, [f"actor {actor}", f"vLLM engines x TP {engines}"]
    kl = get("algo.kl.init_coef", 0.01)
    if kl > 0 and not get("train.colocate_actor_ref", False):
        ref = get("ref.num_nodes", 1) * get("ref.num_gpus_per_node", 8)
        total += ref
        parts.append(f"reference {ref}")
    # gae has a critic (its model defaults to the reward model's or the actor's, train_ppo_ray.py:644-650), on GPUs
    # of its own outside colocate_all (train_ppo_ray.py:105-129)
    has_critic = get("algo.advantage.estimator", "gae") == "gae"
    if has_critic:
        critic = get("critic.num_nodes", 1) * get("critic.num_gpus_per_node", 8)
        total += critic
        parts.append(f"critic {critic}")
    # a reward model without a remote URL: GPUs of its own, or the critic's bundles with colocate_critic_reward
    shares_critics = has_critic and get("train.colocate_critic_reward", False)
    if not get("reward.remote_url", None) and not shares_critics:
        reward = get("reward.num_nodes", 1) * get("reward.num_gpus_per_node", 8)
        total += reward
        parts.append(f"reward model {reward}")
    return total, " + ".join(parts)


def demand_problems(flags: dict[str, Any], env: BackendEnvironment) -> list[str]:
    have = env.nodes * env.gpus_per_node
    need, how = gpu_demand(flags)
    if need > have:
        return [f"OpenRLHF would ask Ray for {need} GPUs ({how}) but the recipe has {have} "
                f"(resources.nodes x resources.gpus_per_node): the launch would wait forever for placement"]
    return []
