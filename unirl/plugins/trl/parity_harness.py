"""TRL's own advantage and loss code on unirl's frozen batch: ``python -m unirl.plugins.trl.parity_harness``.

Run in TRL's interpreter (see :mod:`unirl.backend.parity.harness` for the protocol). The trainer is the plan's
(``GRPOTrainer`` or ``RLOOTrainer``) built from the plan's own config (``launch_args``: what a run passes
``GRPOConfig`` / ``RLOOConfig``), on the builtin tiny model; then, through TRL's extension points only:

- **advantages**: the trainer's own ``_generate_and_score_completions`` (grpo_trainer.py:2324, rloo_trainer.py:1458)
  on the batch's prompts, with a ``rollout_func`` (TRL's rollout hook) that returns the batch's token ids and a
  reward function that returns the batch's rewards: TRL groups, baselines and normalises them itself;
- **the loss**: the trainer's own ``_compute_loss`` (grpo_trainer.py:3020, rloo_trainer.py:1794) on those inputs with
  the batch's sampling and reference log-probabilities and the reference's advantages, the current log-probabilities
  handed in by replacing this instance's ``_get_per_token_logps_and_entropies`` (so no model forward is mixed in);
  its clip fractions from the metrics it logs; its KL term as the loss with the trainer's ``beta`` minus the loss
  with ``beta = 0``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from unirl.backend.parity.batch import PROBE_MODEL, FrozenBatch
from unirl.backend.parity.harness import gradient, leaf, main


def compute(payload: dict[str, Any], batch: FrozenBatch) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from unirl.backend.plan import LaunchPlan
    from unirl.data.builtin import tiny_model
    from unirl.plugins.trl.framework import launch_args, trainer_classes

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    plan = LaunchPlan.from_dict(payload["plan"])
    # the loss code runs on the CPU here, in float32, whatever device and precision the run will use
    plan.recipe["resources"]["device"] = "cpu"
    plan.recipe["model"]["dtype"] = "float32"
    trainer_class, config_class = trainer_classes(plan)
    args = launch_args(plan)
    args.update(report_to=[], logging_steps=1, save_strategy="no", use_cpu=True, bf16=False, fp16=False)
    if args.get("num_generations") not in (None, batch.group_size):
        args["num_generations"] = batch.group_size  # the batch's groups (at most 8): the group statistic is TRL's
    groups = len(set(batch.group))
    args["per_device_train_batch_size"] = batch.group_size * groups
    args["gradient_accumulation_steps"] = 1
    args.pop("steps_per_generation", None)
    args.pop("generation_batch_size", None)
    # one reward column for the recipe's rewards (the batch's total: the weighted sum they make), then TRL's own
    # reward functions the plan adds (the soft overlong punishment) with their weights from the plan
    from unirl.plugins.trl.runner import trl_reward_funcs

    own = trl_reward_funcs(plan)
    weights = list(args.pop("reward_weights", None) or [])
    if own:
        args["reward_weights"] = [1.0, *weights[len(weights) - len(own):]]
    rewards = list(batch.rewards)

    def reward(prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
        assert len(completions) == len(rewards), "TRL scored another batch than the one handed in"
        return rewards

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        return {"prompt_ids": [list(p) for p in batch.prompt_ids],
                "completion_ids": [list(c) for c in batch.completion_ids], "logprobs": None}

    grpo = trainer_class.__name__ == "GRPOTrainer"
    hooks = {"rollout_func": rollout} if grpo else {}
    with tempfile.TemporaryDirectory() as out, quiet_transformers():
        # saved and loaded by path, as a run loads its model: TRL loads the reference model (beta > 0) from it
        model_dir = tiny_model.save(PROBE_MODEL, batch.seed, Path(out) / "model")
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        tok = AutoTokenizer.from_pretrained(model_dir)
        config = config_class(output_dir=out, **args)
        prompts = [batch.prompts[i] for i in range(0, len(batch.prompts), batch.group_size)]
        trainer = trainer_class(model=model, reward_funcs=[reward, *own], args=config, processing_class=tok,
                                train_dataset=Dataset.from_list([{"prompt": p} for p in prompts]), **hooks)
        model.train()
        trainer.current_gradient_accumulation_steps = 1
        t = leaf(batch)
        phase = ["generation"]

        def batch_logps(used: Any, *_: Any, **__: Any) -> tuple[Any, Any, None]:
            """The batch's log-probabilities wherever the trainer would run a model: the sampling and the reference
            policy's while it scores completions (RLOOTrainer puts their KL in the reward), the current policy's in
            the loss."""
            if phase[0] == "loss":
                return t.logp, t.entropy, None
            return (t.ref_logp if used is trainer.ref_model else t.old_logp), t.entropy.detach(), None

        trainer._get_per_token_logps_and_entropies = batch_logps
        if not grpo:
            # RLOOTrainer has no rollout hook: its one generation call, on this instance, returns the batch's ids
            trainer._generate_single_turn = lambda *_: [list(c) for c in batch.completion_ids]
        generated = trainer._generate_and_score_completions([{"prompt": p} for p in batch.prompts])
        mask = generated["completion_mask"].float()
        expected = t.mask
        if getattr(config, "mask_truncated_completions", False) and t.truncated is not None:
            expected = t.mask * (~t.truncated).unsqueeze(-1)  # TRL leaves truncated completions out of the loss
        if mask.shape != expected.shape or not torch.equal(mask, expected):
            raise RuntimeError("TRL's completion mask differs from the batch's (end-of-sequence handling)")
        advantages = generated["advantages"]
        per_token_adv = (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages) * t.mask
        reference = torch.tensor(payload["advantages"], dtype=torch.float32)
        phase[0] = "loss"

        def loss_with(beta: float) -> Any:
            inputs = dict(generated)
            if grpo:
                inputs["advantages"] = reference
                inputs["old_per_token_logps"] = t.old_logp
                inputs["ref_per_token_logps"] = t.ref_logp
            else:  # one advantage and one summed log-probability per completion (rloo_trainer.py:1818-1822)
                inputs["advantages"] = reference[:, 0]
                inputs["old_logps"] = (t.old_logp * t.mask).sum(1)
            trainer.beta = beta
            return trainer._compute_loss(model, inputs)

        beta = float(trainer.beta)
        kl_term = None
        if beta and grpo:  # RLOOTrainer's KL is in the reward, not the loss
            kl_term = float(loss_with(beta).detach()) - float(loss_with(0.0).detach())
        trainer._metrics["train"].clear()
        loss = loss_with(beta)
        loss.backward()
        clipped = trainer._metrics["train"].get("clip_ratio/region_mean") or [None]
        return {"version": trl.__version__, "advantages": per_token_adv.tolist(), "loss": float(loss.detach()),
                "grad": gradient(t), "kl_term": kl_term, "clip_fraction": clipped[-1], "dual_clip_fraction": None,
                "notes": [f"{trainer_class.__name__}: loss_type={getattr(trainer, 'loss_type', None)}, "
                          f"scale_rewards={getattr(config, 'scale_rewards', None)}, beta={beta}, "
                          f"importance_sampling_level={getattr(config, 'importance_sampling_level', None)}"]}


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No progress bars or deprecation warnings from transformers on the user's terminal while the harness saves and
    loads its probe model: the certificate is what ``unirl parity`` prints."""
    import warnings

    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        if shown:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main(compute)
