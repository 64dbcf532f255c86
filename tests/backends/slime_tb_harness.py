"""slime's TensorBoard logging path, as it writes, for the metrics bridge: two processes, two step axes, one directory.

slime is not installable here (Megatron-LM, SGLang on CUDA), so this reproduces its logging path from its source:
``logging_utils.log(args, metrics, step_key)`` takes ``step = metrics[step_key]`` and hands every key of the dict,
the step key included, to ``_TensorboardAdapter.log(data, step)``, which calls ``SummaryWriter.add_scalar(key,
data[key], step)`` for each (slime/utils/logging_utils.py:45-51 and slime/utils/tensorboard_utils.py:30-47 at
624b824; the same lines in THUDM/slime logging_utils.py@3906ba1 and tensorboard_utils.py@51354f3). The adapter is a
per-process singleton writing into ``$TENSORBOARD_DIR`` with torch's ``SummaryWriter``, so the Megatron actor and the
rollout manager each write their own event file into the same directory.

- ``--role actor``: per optimizer update, ``train/*`` with ``train/step = rollout_id x num_steps_per_rollout +
  step_id`` (slime/backends/megatron_utils/model.py:873-898, loss.py:1142-1173 at 624b824);
- ``--role rollout``: per rollout, ``rollout/*`` and ``perf/*`` with ``rollout/step = rollout_id`` (0-based,
  slime/utils/metric_utils.py:120-123, train_metric_utils.py:141-221, 358-405 at 624b824), and ``eval/<name>`` with
  ``eval/step`` every ``--eval-every`` rollouts.

Runs in any interpreter with torch (the main venv).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


class TensorboardAdapter:
    """slime's ``_TensorboardAdapter`` (tensorboard_utils.py), its logic as written there."""

    _instance: TensorboardAdapter | None = None

    def __new__(cls) -> TensorboardAdapter:
        if cls._instance is None:
            from torch.utils.tensorboard import SummaryWriter

            cls._instance = super().__new__(cls)
            directory = os.environ["TENSORBOARD_DIR"]
            os.makedirs(directory, exist_ok=True)
            cls._instance.writer = SummaryWriter(directory)
        return cls._instance

    def log(self, data: dict[str, float], step: int) -> None:
        for key in data:
            self.writer.add_scalar(key, data[key], step)

    def finish(self) -> None:
        self.writer.close()


def log(metrics: dict[str, float], step_key: str) -> None:
    """slime's ``logging_utils.log``: the step is the dict's own step key."""
    TensorboardAdapter().log(metrics, step=int(metrics[step_key]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="slime_tb_harness")
    p.add_argument("--role", choices=["actor", "rollout"], required=True)
    p.add_argument("--rollouts", type=int, default=3)
    p.add_argument("--steps-per-rollout", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    ns = p.parse_args(argv)
    for rollout_id in range(ns.rollouts):
        if ns.role == "rollout":
            log({"rollout/raw_reward": 0.1 * (rollout_id + 1), "rollout/rewards": 0.0,
                 "rollout/response_len/mean": 10.0 + rollout_id, "rollout/truncated_ratio": 0.0,
                 "rollout/step": rollout_id}, "rollout/step")
            log({"perf/step_time": 2.0 + rollout_id, "perf/rollout_time": 1.0, "rollout/step": rollout_id},
                "rollout/step")
            if ns.eval_every and rollout_id % ns.eval_every == 0:
                log({"eval/arith": 0.25 * (rollout_id + 1), "eval/step": rollout_id}, "eval/step")
        else:
            for step_id in range(ns.steps_per_rollout):
                step = rollout_id * ns.steps_per_rollout + step_id
                log({"train/loss": float(step), "train/pg_loss": 0.5 * step, "train/grad_norm": 1.0 + step,
                     "train/lr-pg_0": 1e-6, "train/entropy_loss": 2.0, "train/step": step}, "train/step")
        print(f"harness: {ns.role} rollout {rollout_id}", flush=True)
        if ns.sleep:
            time.sleep(ns.sleep)
    TensorboardAdapter().finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
