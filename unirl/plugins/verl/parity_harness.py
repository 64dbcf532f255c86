"""verl's own advantage and loss code on unirl's frozen batch: ``python -m unirl.plugins.verl.parity_harness``.

Run in verl's interpreter (see :mod:`unirl.backend.parity.harness` for the protocol). The configuration is the one
the plan gives verl: its shipped ``ppo_trainer`` config composed with the plan's own overrides (as ``native_check``
composes it), then:

- **rewards** through the plan's reward manager from verl's registry (DAPO's adds the overlong punishment), with a
  ``compute_score`` that returns the batch's reward of each completion;
- **advantages** as verl 0.9.1's V1 trainer computes them (``verl/trainer/ppo/v1/trainer_base.py:1743-1790``
  ``_compute_advantage``): the reward on the last token as ``token_level_scores``, ``apply_kl_penalty`` with verl's
  KL controller when ``algorithm.use_kl_in_reward`` (``ray_trainer.py:78-118``), then ``compute_advantage``
  (``ray_trainer.py:187-288``) with the trainer's own arguments. The V1 trainer calls it through
  ``compute_advantage_for_multi_trajectories`` (``v1/utils.py:148-200``), which for single-turn rollouts (one output
  per session) hands it the whole batch unchanged; that module imports ``transfer_queue``, which verl does not
  declare, so the harness calls ``compute_advantage`` itself;
- **the loss** by verl's own ``ppo_loss`` (``verl/workers/utils/losses.py:57-144``: the configured policy-loss
  function, entropy and KL terms through ``agg_loss``) with the actor config built from the composed config by
  ``omega_conf_to_dataclass``; the log-probabilities go in the no-padding layout ``ppo_loss`` reads, so its own
  ``no_padding_2_padding`` unpacks them.
"""

from __future__ import annotations

from typing import Any

from unirl.backend.parity.batch import FrozenBatch
from unirl.backend.parity.harness import gradient, leaf, main, number

NO_DUAL_CLIP = 1e9  # unirl's plan sends clip_ratio_c=1e9 for a recipe without a dual clip (plugins/verl/framework.py)


def compute(payload: dict[str, Any], batch: FrozenBatch) -> dict[str, Any]:
    import numpy as np
    import torch
    import verl
    from tensordict import TensorDict
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage
    from verl.utils import tensordict_utils as tu
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.utils.losses import ppo_loss

    from unirl.plugins.verl.native_check import compose

    plan = payload["plan"]
    cfg = compose([a.replace("{run_dir}", "/nonexistent-run-dir") for a in plan["command"][3:]])
    t = leaf(batch)
    size, width = t.mask.shape
    lengths = t.mask.sum(-1).long()

    # -- rewards: the plan's reward manager (DAPO's adds the overlong punishment) on the batch's scores -----------
    rewards, manager = shaped_rewards(cfg, batch, t)

    # -- advantages: the V1 trainer's _compute_advantage ---------------------------------------------------------
    scores = torch.zeros(size, width)
    scores[torch.arange(size), lengths - 1] = rewards
    data = DataProto.from_dict(tensors={"response_mask": t.mask, "token_level_scores": scores,
                                        "old_log_probs": t.old_logp, "ref_log_prob": t.ref_logp,
                                        "values": t.values * t.mask},
                               non_tensors={"uid": np.array([f"p{g}" for g in batch.group], dtype=object)})
    algorithm = cfg.algorithm
    if algorithm.use_kl_in_reward:
        controller = core_algos.get_kl_controller(algorithm.kl_ctrl)
        data, _ = apply_kl_penalty(data, kl_ctrl=controller, kl_penalty=algorithm.kl_penalty)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    data = compute_advantage(
        data, adv_estimator=algorithm.adv_estimator, gamma=algorithm.gamma, lam=algorithm.lam,
        num_repeat=cfg.actor_rollout_ref.rollout.n,
        norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True), config=algorithm)
    advantages = data.batch["advantages"]

    # -- the loss: verl's ppo_loss on the no-padding layout (a one-token prompt per sequence) ---------------------
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    pieces = []
    for i in range(size):  # no_padding_2_padding reads response token j of sequence i at its offset + prompt + j - 1
        pieces += [t.logp[i, : lengths[i]], torch.zeros(1)]
    attention = torch.zeros(size, 1 + width, dtype=torch.long)
    attention[:, 0] = 1
    for i in range(size):
        attention[i, 1: 1 + lengths[i]] = 1
    entropy_pieces = []
    for i in range(size):
        entropy_pieces += [t.entropy[i, : lengths[i]], torch.zeros(1)]
    loss_data = TensorDict({"prompts": torch.ones(size, 1, dtype=torch.long),
                            "responses": torch.ones(size, width, dtype=torch.long), "attention_mask": attention,
                            "response_mask": t.mask, "old_log_probs": t.old_logp,
                            "advantages": torch.tensor(payload["advantages"], dtype=torch.float32),
                            "ref_log_prob": t.ref_logp}, batch_size=[size])
    # one mini-batch of one data-parallel rank: the global token and sequence counts the trainer passes
    tu.assign_non_tensor(loss_data, dp_size=1, batch_num_tokens=int(t.mask.sum()), global_batch_size=size)
    output = {"log_probs": torch.cat(pieces), "entropy": torch.cat(entropy_pieces) if actor.entropy_coeff else None}
    loss, metrics = ppo_loss(actor, output, loss_data)
    loss.backward()
    kl_term = None
    if actor.use_kl_loss:
        kl_term = number(metrics.get("kl_loss")) * float(actor.kl_loss_coef)  # type: ignore[operator]
    dual = float(actor.get("clip_ratio_c", 3.0)) < NO_DUAL_CLIP
    return {"version": verl.__version__, "advantages": (advantages * t.mask).tolist(), "loss": float(loss.detach()),
            "grad": gradient(t), "kl_term": kl_term, "clip_fraction": number(metrics.get("actor/pg_clipfrac")),
            "dual_clip_fraction": number(metrics.get("actor/pg_clipfrac_lower")) if dual else None,
            "notes": [f"reward manager {manager}, adv_estimator={algorithm.adv_estimator}, "
                      f"use_kl_in_reward={algorithm.use_kl_in_reward}, "
                      f"loss_mode={actor.policy_loss.get('loss_mode', 'vanilla')}, "
                      f"loss_agg_mode={actor.loss_agg_mode}, use_kl_loss={actor.use_kl_loss}"]}


def shaped_rewards(cfg: Any, batch: FrozenBatch, t: Any) -> tuple[Any, str]:
    """Each completion's reward as verl's reward loop hands it to the trainer: the plan's reward manager
    (``reward.reward_manager.name``, from verl's own registry, ``experimental/reward_loop/reward_manager``) runs on
    every completion with a ``compute_score`` that returns the batch's reward for it (the recipe's rewards, already
    applied by unirl's runtime), so whatever the manager adds (DAPO's overlong punishment, dapo.py:108-117) is
    verl's own arithmetic."""
    import asyncio

    import numpy as np
    import torch
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls

    from unirl.data.builtin.tiny_model import build_tokenizer

    settings = cfg.reward.reward_manager
    if settings.get("source", "register") != "register":
        raise RuntimeError(f"reward.reward_manager.source={settings.source!r}: the harness runs registered managers")
    rewards = list(batch.rewards)

    def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict[str, Any],
                      **_: Any) -> float:
        return rewards[int(extra_info["unirl_index"])]

    manager = get_reward_manager_cls(settings.name)(cfg, build_tokenizer(), compute_score)
    width = t.mask.shape[1]
    items = []
    for i, ids in enumerate(batch.completion_ids):
        attention = torch.cat([torch.ones(1, 1, dtype=torch.long), t.mask[i: i + 1].long()], dim=1)
        items.append(DataProto.from_dict(
            tensors={"prompts": torch.ones(1, 1, dtype=torch.long),
                     "responses": torch.tensor([ids + [0] * (width - len(ids))]),
                     "attention_mask": attention},
            non_tensors={"data_source": np.array(["unirl"], dtype=object),
                         "reward_model": np.array([{"ground_truth": ""}], dtype=object),
                         "extra_info": np.array([{"unirl_index": i}], dtype=object)}))

    async def score_all() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(manager.run_single(item) for item in items)))

    results = manager.loop.run_until_complete(score_all())
    return torch.tensor([float(r["reward_score"]) for r in results]), str(settings.name)


if __name__ == "__main__":
    main(compute)
