"""A stand-in OpenRLHF run for the metrics bridge: OpenRLHF 0.11.2's own ``TensorboardLogger`` logging N steps.

Runs under the OpenRLHF venv (``.venvs/openrlhf/bin/python tests/backends/openrlhf_tb_harness.py --dir D``). Each
step logs the status dict ``PPOTrainer.fit`` hands to ``save_logs_and_checkpoints`` (openrlhf/trainer/
ppo_trainer.py:541-560), keyed as OpenRLHF keys it: the actor's ``policy_loss``, ``kl``, ``ppo_clip_ratio``,
``ppo_kl``, ``actor_lr``, ``actor_grad_norm`` (openrlhf/trainer/ray/ppo_actor.py:225-250, 312, 370), the rollout
statistics ``rollout/reward_mean``, ``rollout/reward_std``, ``rollout/response_length_mean``,
``rollout/truncated_rate``, ``rollout/num_samples`` (ppo_trainer.py:416-431) and the ``timing/*`` phases with
``timing/step_total`` (ppo_trainer.py:255-258, 544-545); with ``--eval-steps K``, ``log_eval`` every K steps with
``eval_<dataset>_pass1`` (ppo_trainer.py:83-131). The writer is OpenRLHF's (openrlhf/utils/logging_utils.py:
112-137): ``train/<key>`` / ``eval/<key>`` at ``global_step`` into ``<dir>/<run_name>/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from types import SimpleNamespace


def status(step: int) -> dict[str, float]:
    return {
        "policy_loss": 0.1 / step, "kl": 0.001 * step, "ppo_clip_ratio": 0.01 * step, "ppo_kl": 0.0005 * step,
        "actor_lr": 1e-6 * step, "actor_grad_norm": 1.0 + step,
        "rollout/reward_mean": 0.1 * step, "rollout/reward_std": 0.05, "rollout/response_length_mean": 10.0 + step,
        "rollout/truncated_rate": 0.0, "rollout/num_samples": 32.0,
        "timing/make_experience": 0.5, "timing/ppo_train": 0.25, "timing/broadcast": 0.0, "timing/generation": 1.0,
        "timing/step_total": 1.75,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="openrlhf_tb_harness")
    p.add_argument("--dir", required=True, help="--logger.tensorboard_dir")
    p.add_argument("--run-name", default="ppo_0101T00:00")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--eval-steps", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--flush", action="store_true")
    ns = p.parse_args(argv)
    from openrlhf.utils.logging_utils import TensorboardLogger

    args = SimpleNamespace(logger=SimpleNamespace(tensorboard_dir=ns.dir, wandb=SimpleNamespace(run_name=ns.run_name)))
    logger = TensorboardLogger(args)
    for step in range(1, ns.steps + 1):
        logger.log_train(step, {**status(step), "generated_samples": [f"sample {step}", 0.5]})
        if ns.eval_steps and step % ns.eval_steps == 0:
            logger.log_eval(step, {"eval_arith_pass1": min(1.0, 0.2 * step), "eval_arith_pass4": 1.0})
        if ns.flush:  # OpenRLHF itself leaves flushing to SummaryWriter (a queue of 10 events, or every 120 s)
            logger.writer.flush()
        print(f"harness: logged step {step}", flush=True)
        if ns.sleep:
            time.sleep(ns.sleep)
    logger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
