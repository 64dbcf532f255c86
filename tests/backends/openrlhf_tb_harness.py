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

``--rows RUN_DIR`` scores a prepared run's own exported rows through the reward file unirl generated, as OpenRLHF
0.11.2 feeds it: the plan's argv through OpenRLHF's own ``__main__`` block (unirl's ``parser_schema.validate``), then
the data path of its ``prepare_datasets`` (openrlhf/trainer/ppo_trainer.py:26-79), which itself cannot be imported
without flash-attn and vLLM: its own ``blending_datasets`` and ``PromptDataset``, and the ``StatefulDataLoader``
``DeepspeedStrategy.setup_dataloader`` builds without a process group (utils/deepspeed/deepspeed.py:207-245: batch 1,
``drop_last``, the train loader shuffled, the eval loader not); step N takes the next ``rollout.batch_size`` prompts
(``_collect_prompt_batch``, ppo_utils/samples_generator.py:20-37), each ``n_samples_per_prompt`` times, and the reward
file is loaded by path and called with one sample, ``reward_func([query], [prompt], [label])``, the query being the
prompt, the completion and the tokenizer's EOS (vllm_engine.py / remote_rm_fn). At an eval step every held-out
prompt is scored once after the step's training rows and before ``log_eval`` (ppo_trainer.py:562-593), and the
eval's ``eval_<datasource>_pass1`` is the mean of those rewards (``compute_eval_metrics``, n = 1). What the reward
file returned goes to ``--scores-out`` (``{"train": {step: [...]}, "eval": {step: [...]}}``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def status(step: int) -> dict[str, float]:
    return {
        "policy_loss": 0.1 / step, "kl": 0.001 * step, "ppo_clip_ratio": 0.01 * step, "ppo_kl": 0.0005 * step,
        "actor_lr": 1e-6 * step, "actor_grad_norm": 1.0 + step,
        "rollout/reward_mean": 0.1 * step, "rollout/reward_std": 0.05, "rollout/response_length_mean": 10.0 + step,
        "rollout/truncated_rate": 0.0, "rollout/num_samples": 32.0,
        "timing/make_experience": 0.5, "timing/ppo_train": 0.25, "timing/broadcast": 0.0, "timing/generation": 1.0,
        "timing/step_total": 1.75,
    }


class RunRows:
    """A prepared run's exported prompts as OpenRLHF's own data code reads and orders them, scored by its reward
    file."""

    def __init__(self, run_dir: Path) -> None:
        from openrlhf.datasets import PromptDataset
        from openrlhf.datasets.utils import blending_datasets
        from torchdata.stateful_dataloader import StatefulDataLoader
        from transformers import AutoTokenizer

        from unirl.plugins.openrlhf.parser_schema import validate

        plan = json.loads((run_dir / "plan.json").read_text())
        argv = [a.replace("{run_dir}", str(run_dir)) for a in plan["command"][3:]]
        self.args = args = validate(argv)[0]
        strategy = SimpleNamespace(args=args, print=lambda *a, **k: None, is_rank_0=lambda: True)
        self.tokenizer = AutoTokenizer.from_pretrained(args.actor.model_name_or_path)

        def loader(files: str, shuffle: bool, **kw: Any) -> Any:  # ppo_trainer.py:30-69, deepspeed.py:234-245
            data = blending_datasets(files, strategy=strategy, **kw)
            data = data.select(range(min(args.data.max_samples, len(data))))
            dataset = PromptDataset(data, self.tokenizer, strategy, input_template=args.data.input_template)
            return StatefulDataLoader(dataset, batch_size=1, drop_last=True, shuffle=shuffle,
                                      collate_fn=dataset.collate_fn, pin_memory=True)

        self.train_iter = iter(loader(args.data.prompt_dataset, True, probabilities=args.data.prompt_probs,
                                      seed=args.train.seed, max_count=args.data.max_samples,
                                      dataset_split=args.data.prompt_split))
        self.eval_loader = loader(args.eval.dataset, False, probabilities=None, dataset_split=args.eval.split)
        [reward_file] = self.args.reward.remote_url
        spec = importlib.util.spec_from_file_location("reward_func", reward_file)  # as the engine actors load it
        assert spec is not None and spec.loader is not None
        self.module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.module)
        self.returned: dict[str, dict[str, list[dict[str, float]]]] = {"train": {}, "eval": {}}

    def _score(self, split: str, step: int, prompt: str, label: Any, right: bool) -> float:
        from unirl.rewards.row_origin import untag_reference

        reference, _ = untag_reference(label)
        completion = str(reference) if right else "no"
        out = self.module.reward_func([prompt + completion + self.tokenizer.eos_token], [prompt], [label])
        self.returned[split].setdefault(str(step), []).append(
            {"score": float(out["scores"]), **{k: float(v) for k, v in out["extra_logs"].items()}})
        return float(out["scores"])

    def train_step(self, step: int) -> None:
        """Step ``step``'s rollouts: the next batch of prompts, samples right for half of them at step 1, all later."""
        prompts: list[str] = []
        labels: list[Any] = []
        while len(prompts) < self.args.rollout.batch_size:  # _collect_prompt_batch, samples_generator.py:20-37
            _, batch_prompts, batch_labels, _ = next(self.train_iter)
            prompts.extend(batch_prompts)
            labels.extend(batch_labels)
        for position, (prompt, label) in enumerate(zip(prompts, labels, strict=True)):
            for k in range(self.args.rollout.n_samples_per_prompt):
                self._score("train", step, prompt, label, right=(position + k) % (step + 1) == 0)

    def evaluate(self, step: int) -> dict[str, float]:
        """Every held-out prompt once, in the eval loader's order; the first ``step`` of them answered right."""
        rewards: dict[str, list[float]] = {}
        position = 0
        for datasources, prompts, labels, _images in self.eval_loader:
            for datasource, prompt, label in zip(datasources, prompts, labels, strict=True):
                rewards.setdefault(datasource, []).append(
                    self._score("eval", step, prompt, label, right=position < step))
                position += 1
        return {f"eval_{ds}_pass1": sum(v) / len(v) for ds, v in rewards.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="openrlhf_tb_harness")
    p.add_argument("--dir", required=True, help="--logger.tensorboard_dir")
    p.add_argument("--run-name", default="ppo_0101T00:00")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--eval-steps", type=int, default=0)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--flush", action="store_true")
    p.add_argument("--rows", type=Path, help="a prepared run directory whose exported rows are scored each step")
    p.add_argument("--scores-out", type=Path)
    ns = p.parse_args(argv)
    from openrlhf.utils.logging_utils import TensorboardLogger

    rows = RunRows(ns.rows) if ns.rows else None

    args = SimpleNamespace(logger=SimpleNamespace(tensorboard_dir=ns.dir, wandb=SimpleNamespace(run_name=ns.run_name)))
    logger = TensorboardLogger(args)
    for step in range(1, ns.steps + 1):
        if rows:
            rows.train_step(step)
        logger.log_train(step, {**status(step), "generated_samples": [f"sample {step}", 0.5]})
        if ns.eval_steps and step % ns.eval_steps == 0:
            logger.log_eval(step, rows.evaluate(step) if rows else
                            {"eval_arith_pass1": min(1.0, 0.2 * step), "eval_arith_pass4": 1.0})
        if ns.flush:  # OpenRLHF itself leaves flushing to SummaryWriter (a queue of 10 events, or every 120 s)
            logger.writer.flush()
        print(f"harness: logged step {step}", flush=True)
        if ns.sleep:
            time.sleep(ns.sleep)
    logger.close()
    if rows and ns.scores_out:
        ns.scores_out.write_text(json.dumps(rows.returned))
    return 0


if __name__ == "__main__":
    sys.exit(main())
