"""OpenRLHF's own advantage and loss code on unirl's frozen batch: ``python -m unirl.plugins.openrlhf.parity_harness``.

Run in OpenRLHF's interpreter (see :mod:`unirl.backend.parity.harness` for the protocol). The arguments are the ones
the plan gives ``train_ppo_ray``: its argv through OpenRLHF's own parser and ``__main__`` rewrites
(:func:`unirl.plugins.openrlhf.parser_schema.validate`, as ``native_check`` runs it); then:

- **advantages** by ``RemoteExperienceMaker.compute_advantages_and_returns``
  (``openrlhf/trainer/ppo_utils/experience_maker.py:238-341``: length penalties, the estimator's baseline and
  normalisation, ``compute_reward`` with the KL controller, returns, the global whitening) on one ``Experience`` of
  the batch, whose ``kl`` is what ``make_experience`` puts there (experience_maker.py:205-215). The method needs only
  the maker's arguments and KL controller, so the maker is made without its Ray actor groups;
- **the loss** as ``PPOActor.training_step`` composes it (``openrlhf/trainer/ray/ppo_actor.py:293-353``): the
  ``PolicyLoss`` the actor builds from the arguments (ppo_actor.py:76-86), the KL loss through ``compute_approx_kl``
  and ``aggregate_loss``, the entropy term, with ``get_loss_batch_info``'s global counts of one data-parallel rank.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from unirl.backend.parity.batch import FrozenBatch
from unirl.backend.parity.harness import gradient, leaf, main, number


def compute(payload: dict[str, Any], batch: FrozenBatch) -> dict[str, Any]:
    import importlib.metadata as md

    import torch

    from unirl.plugins.openrlhf import import_stubs

    stubbed = import_stubs.install()
    from openrlhf.models import PolicyLoss, aggregate_loss
    from openrlhf.models.utils import compute_approx_kl
    from openrlhf.trainer.ppo_utils.experience import Experience
    from openrlhf.trainer.ppo_utils.experience_maker import RemoteExperienceMaker
    from openrlhf.trainer.ppo_utils.kl_controller import AdaptiveKLController, FixedKLController
    from openrlhf.utils.loss_utils import get_loss_batch_info

    from unirl.plugins.openrlhf.parser_schema import validate

    plan = payload["plan"]
    args, _ = validate([a.replace("{run_dir}", "/nonexistent-run-dir") for a in plan["command"][3:]])
    if args.rollout.n_samples_per_prompt != batch.group_size:
        args.rollout.n_samples_per_prompt = batch.group_size  # the batch's groups (at most 8)
    t = leaf(batch)
    mask = t.mask.bool()

    # -- advantages --------------------------------------------------------------------------------------------
    controller = (AdaptiveKLController(args.algo.kl.init_coef, args.algo.kl.target, args.algo.kl.horizon)
                  if args.algo.kl.target else FixedKLController(args.algo.kl.init_coef))
    if args.algo.kl.init_coef > 0 and not args.algo.kl.use_loss:
        kl = compute_approx_kl(t.old_logp, t.ref_logp, kl_estimator=args.algo.kl.estimator)
    else:
        kl = torch.zeros_like(t.old_logp)
    lengths = t.mask.sum(-1)
    experience = Experience(rewards=t.rewards.clone(), index=list(range(len(batch.rewards))), action_mask=mask,
                            kl=kl, response_length=lengths, values=t.values * t.mask,
                            truncated=torch.tensor(batch.truncated or [False] * len(batch.rewards)),
                            info={})
    maker = RemoteExperienceMaker.__new__(RemoteExperienceMaker)
    maker.strategy = SimpleNamespace(args=args)
    maker.args = args
    maker.advantage_estimator = args.algo.advantage.estimator
    maker.kl_ctl = controller
    [done] = maker.compute_advantages_and_returns([experience])
    advantages = done.advantages.float()

    # -- the loss ----------------------------------------------------------------------------------------------
    loss_fn = PolicyLoss(
        clip_eps_low=args.actor.eps_clip_low_high[0], clip_eps_high=args.actor.eps_clip_low_high[1],
        dual_clip=args.actor.dual_clip, token_level_loss=args.actor.loss_agg_mode == "token-mean",
        policy_loss_type=args.actor.policy_loss_type, is_correction_level=args.algo.advantage.is_correction_level,
        is_correction_mode=args.algo.advantage.is_correction_mode,
        is_correction_gating=args.algo.advantage.is_correction_gating,
        is_correction_threshold=args.algo.advantage.is_correction_threshold)
    info = get_loss_batch_info(SimpleNamespace(), mask)
    reference_advantages = torch.tensor(payload["advantages"], dtype=torch.float32)
    actor_loss, clip_ratio, _, _, _ = loss_fn(t.logp, t.old_logp, reference_advantages, action_mask=mask,
                                              rollout_log_probs=None, **info)
    kl_term = None
    if args.algo.kl.use_loss:
        if args.algo.kl.init_coef > 0:
            kl_loss_values = compute_approx_kl(t.logp, t.ref_logp, log_probs_old=t.old_logp,
                                               kl_estimator=args.algo.kl.estimator,
                                               unbiased_gradient=args.algo.kl.unbiased_gradient)
        else:
            kl_loss_values = torch.zeros_like(t.logp)
        kl_loss = aggregate_loss(kl_loss_values, mask, **info)
        loss = actor_loss + kl_loss * controller.value
        kl_term = float(kl_loss.detach()) * controller.value
    else:
        loss = actor_loss
    if args.actor.entropy_coef is not None:
        entropy_loss = aggregate_loss(t.entropy, mask, **info)
        if args.actor.entropy_coef != 0:
            loss = loss - entropy_loss * args.actor.entropy_coef
    loss.backward()
    return {"version": md.version("openrlhf"), "advantages": (advantages * t.mask).tolist(),
            "loss": float(loss.detach()), "grad": gradient(t), "kl_term": kl_term,
            "clip_fraction": number(clip_ratio), "dual_clip_fraction": None,
            "notes": [f"estimator={args.algo.advantage.estimator}, kl.use_loss={args.algo.kl.use_loss}, "
                      f"kl.init_coef={args.algo.kl.init_coef}, kl.estimator={args.algo.kl.estimator}, "
                      f"policy_loss_type={args.actor.policy_loss_type}, loss_agg_mode={args.actor.loss_agg_mode}, "
                      f"reward.clip_range={args.reward.clip_range}",
                      *([f"import stubs for {', '.join(stubbed)} (not installed here; never called)"] if stubbed
                        else [])]}


if __name__ == "__main__":
    main(compute)
