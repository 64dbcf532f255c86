"""A stand-in verl run for the metrics bridge: verl 0.9.1's own ``Tracking`` logging N steps of verl's own metrics.

Runs under the verl venv (``.venvs/verl/bin/python tests/backends/verl_tracking_harness.py --steps 5 ...``). What a
real ``main_ppo`` run logs once per step (verl/trainer/ppo/ray_trainer.py ``fit``: ``logger.log(data=metrics,
step=self.global_steps)``), computed on the CPU by verl's own functions from a synthetic GRPO batch:

- ``compute_data_metrics`` (``critic/score/*``, ``response_length/*``, ``prompt_length/*``...),
  ``compute_timing_metrics`` (``timing_s/*``) and ``compute_throughout_metrics`` (``perf/throughput`` per GPU)
  from verl/trainer/ppo/metric_utils.py;
- the actor's ``actor/pg_clipfrac``, ``actor/ppo_kl``, ``actor/pg_clipfrac_lower`` from ``compute_policy_loss_vanilla``
  (verl/trainer/ppo/core_algos.py:1286-1376) and ``actor/pg_loss`` from its loss; ``actor/lr``, ``actor/grad_norm``
  and ``actor/entropy`` are numbers of the harness under verl's names (verl/workers/engine_workers.py:195-216);
- with ``--val-steps``, the validation metrics of verl's own ``process_validation_metrics``, named as
  ``RayPPOTrainer._val_metrics_update`` names them (ray_trainer.py:721-740), for ``reward`` and each unirl reward
  by name, as unirl's verl adapter returns them; step 0 is verl's ``val_before_train`` (ray_trainer.py ``fit``,
  before the loop).

The loggers are verl's: ``--loggers file`` (VERL_FILE_LOGGER_PATH, set by the caller), ``file,tensorboard``
(TENSORBOARD_DIR). Prints ``harness: logged step N`` after each step; ``--sleep`` seconds between steps.

``--rows RUN_DIR`` scores a prepared run's own exported rows through unirl's verl adapter as verl 0.9.1 does: verl's
``RLHFDataset`` reads ``data.train_files`` / ``data.val_files`` with the plan's ``data.*`` settings and tokenizer
(verl/utils/dataset/rl_dataset.py:89-195, ``__getitem__`` 386-411); step N takes the rows at positions
``(N-1) x train_batch_size`` onwards (the sampler is sequential with ``data.shuffle=False``,
verl/trainer/ppo/utils.py:140-166 ``create_rl_sampler``), each ``rollout.n`` times (``batch.repeat(interleave=True)``);
every completion is scored with ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` as
NaiveRewardManager.run_single calls it, its ``extra_info`` with the manager's own ``num_turns`` and
``rollout_reward_scores`` added (verl/experimental/reward_loop/reward_manager/naive.py:34-83). At a ``--val-steps``
step every held-out row is scored once (``val_kwargs.n`` = 1) after the step's training rows and before ``logger.log``
(``_validate`` inside ``fit``, verl/trainer/ppo/ray_trainer.py). What ``compute_score`` returned goes to
``--scores-out`` as JSON (``{"train": {step: [row, ...]}, "eval": {step: [row, ...]}}``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time


def batch_metrics(step: int, n: int, response_width: int) -> dict[str, float]:
    import numpy as np
    import torch
    from omegaconf import OmegaConf
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
    from verl.workers.config import ActorConfig

    generator = torch.Generator().manual_seed(step)
    prompt_width = 6
    lengths = torch.randint(1, response_width + 1, (n,), generator=generator)
    response_mask = (torch.arange(response_width)[None, :] < lengths[:, None]).float()
    attention = torch.cat([torch.ones(n, prompt_width), response_mask], dim=1)
    scores = (torch.rand(n, generator=generator) < min(0.9, 0.2 + 0.1 * step)).float()
    token_scores = torch.zeros(n, response_width)
    token_scores[torch.arange(n), lengths - 1] = scores
    advantages = (scores - scores.mean())[:, None] * response_mask
    batch = DataProto.from_dict(tensors={
        "prompts": torch.ones(n, prompt_width, dtype=torch.long),
        "responses": torch.ones(n, response_width, dtype=torch.long),
        "attention_mask": attention, "response_mask": response_mask,
        "token_level_scores": token_scores, "token_level_rewards": token_scores,
        "advantages": advantages, "returns": advantages,
    }, meta_info={"global_token_num": attention.sum(-1).long().tolist()})
    timing = {"gen": 0.2, "adv": 0.01, "update_actor": 0.3, "step": 0.5 + 0.01 * step}
    metrics: dict[str, float] = {}
    metrics.update(compute_data_metrics(batch, use_critic=False))
    metrics.update(compute_timing_metrics(batch, timing))
    metrics.update(compute_throughout_metrics(batch, timing, n_gpus=2))
    old_log_prob = -torch.rand(n, response_width, generator=generator)
    log_prob = old_log_prob + 0.3 * (torch.rand(n, response_width, generator=generator) - 0.5)
    config = ActorConfig(**OmegaConf.to_container(OmegaConf.create(
        {"strategy": "fsdp", "ppo_mini_batch_size": 1, "ppo_micro_batch_size_per_gpu": 1, "rollout_n": 1,
         "clip_ratio": 0.2})))  # type: ignore[arg-type]
    pg_loss, pg_metrics = core_algos.compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, response_mask,
                                                                 "token-mean", config)
    metrics.update(pg_metrics)
    metrics["actor/pg_loss"] = float(pg_loss)
    metrics["actor/entropy"] = 1.0 / step
    metrics["actor/lr"] = 1e-6 * step
    metrics["actor/grad_norm"] = 0.5 + step
    metrics["training/global_step"] = step
    return {k: float(np.asarray(v)) for k, v in metrics.items()}


def val_metrics(step: int, prompts: int) -> dict[str, float]:
    import numpy as np
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    solved = [1.0 if i < min(prompts, step + 1) else 0.0 for i in range(prompts)]
    infos = {"reward": [s + 0.25 for s in solved], "math_answer": solved, "score": [s + 0.25 for s in solved]}
    sources = np.array(["arith"] * prompts, dtype=object)
    found = process_validation_metrics(sources, [f"p{i}" for i in range(prompts)], infos)
    # RayPPOTrainer._val_metrics_update's naming (verl/trainer/ppo/ray_trainer.py:721-740, 0.9.1), which cannot be
    # imported here: ray_trainer pulls the rollout router (cachetools) that the CPU venv lacks.
    metrics: dict[str, float] = {}
    for data_source, var2metric2val in found.items():
        core_var = "acc" if "acc" in var2metric2val else "reward"
        for var_name, metric2val in var2metric2val.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metric2val)
            for metric_name, metric_val in metric2val.items():
                core = var_name == core_var and metric_name.startswith(("mean", "maj", "best")) \
                    and f"@{n_max}" in metric_name
                metrics[f"{'val-core' if core else 'val-aux'}/{data_source}/{var_name}/{metric_name}"] = float(
                    metric_val)
    return metrics


class ExportedRows:
    """A prepared run's exported train and held-out files, read by verl's RLHFDataset with the plan's settings."""

    def __init__(self, run_dir: str) -> None:
        import json
        from pathlib import Path

        from omegaconf import OmegaConf
        from transformers import AutoTokenizer
        from verl.utils.dataset.rl_dataset import RLHFDataset

        overrides = json.loads((Path(run_dir) / "plan.json").read_text())["native_config"]["overrides"]
        data = OmegaConf.from_dotlist([f"{k[len('data.'):]}={v}" for k, v in overrides.items()
                                       if k.startswith("data.")])
        tok = AutoTokenizer.from_pretrained(str(overrides["actor_rollout_ref.model.path"]).strip("'"))
        self.batch = int(data.train_batch_size)
        self.n = int(overrides.get("actor_rollout_ref.rollout.n", 1))
        self.train = RLHFDataset(data_files=str(data.train_files), tokenizer=tok, config=data)
        self.val = RLHFDataset(data_files=str(data.val_files), tokenizer=tok, config=data)
        self.scores: dict[str, dict[int, list[dict[str, float]]]] = {"train": {}, "eval": {}}

    @staticmethod
    def call(item: dict, right: bool) -> dict[str, float]:
        """One completion of a dataset item scored as NaiveRewardManager.run_single calls compute_score."""
        from unirl.adapters.verl import compute_score  # the staged light core is on PYTHONPATH

        extra_info = item.get("extra_info", {})
        extra_info["num_turns"] = None  # naive.py:48-51: the manager's own keys, added before the call
        extra_info["rollout_reward_scores"] = {}
        ground_truth = item["reward_model"]["ground_truth"]
        return compute_score(data_source=item["data_source"], solution_str=str(ground_truth) if right else "no",
                             ground_truth=ground_truth, extra_info=extra_info)

    def score_step(self, step: int) -> None:
        rows = self.scores["train"].setdefault(step, [])
        for position in range((step - 1) * self.batch, step * self.batch):
            for k in range(self.n):  # repeat(interleave=True): a prompt's n completions side by side
                rows.append(self.call(self.train[position], right=(position + k) % (step + 1) == 0))

    def validate(self, step: int) -> None:
        rows = self.scores["eval"].setdefault(step, [])
        for position in range(len(self.val)):
            rows.append(self.call(self.val[position], right=position < min(len(self.val), step + 2)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="verl_tracking_harness")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--loggers", default="file")
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--val-steps", default="", help="comma-separated steps with validation (0 = before training)")
    p.add_argument("--val-prompts", type=int, default=4)
    p.add_argument("--fail-after", type=int, default=0, help="exit 3 after this many steps (a crash)")
    p.add_argument("--stamp", action="store_true", help="log bench/written_at = time.time() (benchmarks/bridge.py)")
    p.add_argument("--score", type=int, default=0,
                   help="score this many completions a step through unirl's verl adapter (as verl's reward loop "
                        "calls it), which appends them to the run's trajectory log")
    p.add_argument("--rows", default="", help="score this prepared run directory's exported rows (see above)")
    p.add_argument("--scores-out", default="", help="with --rows: where to write what compute_score returned")
    ns = p.parse_args(argv)
    from verl.utils.tracking import Tracking

    rows = ExportedRows(ns.rows) if ns.rows else None

    val_steps = {int(s) for s in ns.val_steps.split(",") if s.strip()}
    tracker = Tracking(project_name="unirl", experiment_name="bridge", default_backend=ns.loggers.split(","))
    if 0 in val_steps:
        if rows is not None:
            rows.validate(0)
        tracker.log(data=val_metrics(0, ns.val_prompts), step=0)
    for step in range(1, ns.steps + 1):
        if rows is not None:
            rows.score_step(step)
        if ns.score:
            from unirl.adapters.verl import compute_score  # the staged light core is on PYTHONPATH

            for i in range(ns.score):
                compute_score(data_source="arith", solution_str=str(i % 10), ground_truth="3",
                              extra_info={"unirl_prompt": "1+2="})
        metrics = batch_metrics(step, ns.batch, 8)
        if step in val_steps:
            if rows is not None:
                rows.validate(step)
            metrics.update(val_metrics(step, ns.val_prompts))
        metrics["actor/kl_loss"] = math.nan if step == 2 else 0.001 * step  # verl writes NaN as null
        if ns.stamp:
            metrics["bench/written_at"] = time.time()
        tracker.log(data=metrics, step=step)
        if not ns.stamp:
            print(f"harness: logged step {step}", flush=True)
        if ns.fail_after and step >= ns.fail_after:
            print("harness: failing on purpose", file=sys.stderr, flush=True)
            return 3
        if ns.sleep:
            time.sleep(ns.sleep)
    if "tensorboard" in tracker.logger:
        tracker.logger["tensorboard"].finish()
    if rows is not None and ns.scores_out:
        import json

        with open(ns.scores_out, "w", encoding="utf-8") as f:
            json.dump(rows.scores, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
