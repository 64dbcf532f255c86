"""NeMo RL's TensorBoard logging path, as it writes, for the metrics bridge.

NeMo RL is not on the package index, so this reproduces its logging path from its source: ``TensorboardLogger``
opens one ``SummaryWriter(log_dir=<logger.log_dir>/exp_NNN/tensorboard)`` (``get_next_experiment_dir``,
examples/run_grpo.py; nemo_rl/utils/logger.py ``Logger.__init__``) and ``log_metrics(metrics, step, prefix)`` calls
``writer.add_scalar(f"{prefix}/{name}", value, step)`` for every scalar, skipping what is not one
(nemo_rl/utils/logger.py ``TensorboardLogger.log_metrics`` @ NVIDIA-NeMo/RL 0275e75, the same code at v0.7.0).
``grpo_train`` logs a step's metrics with ``step + 1`` under ``train``, ``performance`` and ``timing/train``, and a
validation with prefix ``validation`` (nemo_rl/algorithms/grpo.py:3092-3101 @ v0.7.0), the validation's samples
having been scored by the environment before.

``--val-steps 2,4``: steps whose validation is logged (``validation/accuracy`` = the value given by ``--accuracy``
for that step, as ``step:value``). Runs in any interpreter with torch and tensorboard (the main venv).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


class TensorboardLogger:
    """NeMo RL's ``TensorboardLogger`` (nemo_rl/utils/logger.py), its logic as written there."""

    def __init__(self, log_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=log_dir)

    def log_metrics(self, metrics: dict[str, Any], step: int, prefix: str = "") -> None:
        for name, value in metrics.items():
            if prefix:
                name = f"{prefix}/{name}"
            if not isinstance(value, int | float | bool | str):
                continue  # NeMo RL prints a warning and skips a non-scalar
            self.writer.add_scalar(name, value, step)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="nemo_rl_tb_harness")
    p.add_argument("--log-dir", required=True, help="logger.log_dir")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--val-steps", default="")
    p.add_argument("--accuracy", default="", help="step:value,... for validation/accuracy")
    ns = p.parse_args(argv)
    logger = TensorboardLogger(os.path.join(ns.log_dir, "exp_001", "tensorboard"))
    val_steps = {int(s) for s in ns.val_steps.split(",") if s}
    accuracy = {int(k): float(v) for k, v in (item.split(":") for item in ns.accuracy.split(",") if item)}
    for step in range(ns.steps):  # grpo_train counts from 0 and logs step + 1
        logger.log_metrics({"loss": 0.5 / (step + 1), "reward": 0.1 * (step + 1), "kl_penalty": 0.01,
                            "approx_entropy": 1.5, "grad_norm": 2.0, "lr": 1e-6,
                            "mean_gen_tokens_per_sample": 12.0, "truncation_rate": 0.0}, step + 1, prefix="train")
        logger.log_metrics({"tokens_per_sec": 1000.0}, step + 1, prefix="performance")
        logger.log_metrics({"total_step_time": 2.5}, step + 1, prefix="timing/train")
        if step + 1 in val_steps:
            logger.log_metrics({"accuracy": accuracy.get(step + 1, 0.0)}, step + 1, prefix="validation")
        logger.writer.flush()
    logger.writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
