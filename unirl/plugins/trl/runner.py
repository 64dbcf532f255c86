"""Runs a TRL plan: build or load the model, load data, evaluate, train with GRPOTrainer, evaluate.

This is the only module of the TRL plugin that imports torch, transformers and TRL. It runs in the
backend's interpreter: in-process for the embedded default, or ``python -m unirl.plugins.trl.runner``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from unirl.adapters.trl import TrlRewardAdapter, finite_mean, text_of
from unirl.backend.plan import LaunchPlan
from unirl.data.loading import fingerprint, limit, load_rows, render_prompt
from unirl.errors import UnirlError
from unirl.host.manager import Host, get_host
from unirl.host.planning import spec_from_recipe
from unirl.launch.resume import require_trainer_checkpoint, take_checkpoint
from unirl.plugins.trl.framework import BUILTIN_SUPPRESS, CHECKPOINTS, launch_args
from unirl.recipe.schema import BUILTIN_PREFIX, DataConfig, Recipe, recipe_from_dict, split_source
from unirl.record.layout import (
    EVAL,
    MANIFEST,
    METRICS,
    NATIVE_CONFIG,
    PLAN,
    TRAJECTORIES,
    RunInfo,
    read_jsonl,
    truncate_after,
    write_json,
)
from unirl.record.manifest import build_manifest, keep_reward_files, reward_sources
from unirl.record.run_recorder import RunRecorder
from unirl.rewards.contract import Sample
from unirl.rewards.executor import RewardExecutor

log = logging.getLogger("unirl.plugins.trl.runner")  # by name: run as a script or with -m, __name__ is "__main__"

# TRL log keys -> unirl's metric names (the same names on every backend).
METRIC_NAMES = {
    "reward": "reward/total/mean",
    "reward_std": "reward/total/std",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "lr",
    "entropy": "entropy",
    "kl": "kl",
    "completions/mean_length": "completion_len/mean",
    "completions/clipped_ratio": "completion_truncated/frac",
    "frac_reward_zero_std": "group_zero_std/frac",
    "clip_ratio/region_mean": "clip_ratio",
    "step_time": "step_time_s",
    "num_tokens": "tokens/total",
}


def status(recipe: Recipe, message: str) -> None:
    """What the run is doing while nothing else shows (start-up takes seconds): one line on stderr (and cli.log)."""
    if recipe.logging.progress:
        log.info("%s", message)


class FoldedWarning(logging.Filter):
    """Swallows one repeated log message of a library, counting it, so the run can say it once with the count.

    TRL warns once per affected batch, with a whole sample, whenever every reward of a sample is None, which is
    exactly how unirl's ``on_error=exclude`` leaves a failed sample out of the update: 77 warnings in a 100-step run.
    """

    def __init__(self, logger: str, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.count = 0
        self.logger = logging.getLogger(logger)
        self.logger.addFilter(self)

    def close(self) -> None:
        self.logger.removeFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        if self.prefix in str(record.msg):  # accelerate prefixes "[RANK 0] "
            self.count += 1
            return False
        return True


def load_model(recipe: Recipe) -> tuple[Any, Any, dict[str, Any]]:
    """The policy and tokenizer, plus the manifest's model entry (id, revision or weights hash)."""
    from unirl.data.builtin import tiny_model

    path = recipe.model.path
    if path.startswith(BUILTIN_PREFIX):
        name = path[len(BUILTIN_PREFIX):]
        init_seed = recipe.seed if recipe.model.init_seed is None else recipe.model.init_seed
        model, tok = tiny_model.build(name, init_seed)
        info = {"id": path, "init_seed": init_seed, "weights_sha256": tiny_model.weights_hash(model),
                "parameters": sum(p.numel() for p in model.parameters())}
        return model, tok, info
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    model = AutoModelForCausalLM.from_pretrained(path, revision=recipe.model.revision, dtype=dtype[recipe.model.dtype])
    tok = AutoTokenizer.from_pretrained(path, revision=recipe.model.revision)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    info = {"id": path, "revision": recipe.model.revision or getattr(model.config, "_commit_hash", None),
            "weights_sha256": tiny_model.weights_hash(model) if Path(path).is_dir() else None,
            "parameters": sum(p.numel() for p in model.parameters())}
    return model, tok, info


def prepare_rows(rows: list[dict[str, Any]], data: DataConfig, tok: Any, source: str) -> list[dict[str, Any]]:
    """Rendered prompt, reference and data source per row; prompts cut to data.max_prompt_tokens (from the left)."""
    out = []
    for row in rows:
        prompt = render_prompt(row, data)
        if data.max_prompt_tokens and isinstance(prompt, str):
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            if len(ids) > data.max_prompt_tokens:
                prompt = tok.decode(ids[-data.max_prompt_tokens:])
        reference = row.get(data.answer_key) if data.answer_key is not None else None
        out.append({"prompt": prompt, "reference": None if reference is None else str(reference),
                    "data_source": str(row.get("data_source", split_source(source)[0]))})
    return out


def evaluate(model: Any, tok: Any, rows: list[dict[str, Any]], recipe: Recipe, rewards: RewardExecutor,
             suppress: list[int] | None, batch_size: int = 64) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Held-out evaluation: one completion per prompt (greedy by default), scored by the recipe's rewards."""
    import torch

    accuracy_reward = recipe.eval.accuracy_reward or recipe.rewards[0].name
    was_training = model.training
    model.eval()
    padding_side, tok.padding_side = tok.padding_side, "left"
    stop_ids = eos_ids(model, tok)
    records: list[dict[str, Any]] = []
    try:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start:start + batch_size]
            texts = [p if isinstance(p, str) else tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                     for p in (r["prompt"] for r in chunk)]
            enc = tok(texts, return_tensors="pt", padding=True).to(model.device)
            with torch.no_grad():
                out = model.generate(
                    **enc, max_new_tokens=recipe.algorithm.max_new_tokens, do_sample=not recipe.eval.greedy,
                    temperature=None if recipe.eval.greedy else recipe.algorithm.temperature,
                    top_p=None if recipe.eval.greedy else recipe.algorithm.top_p, top_k=None,
                    suppress_tokens=suppress, pad_token_id=tok.pad_token_id, eos_token_id=sorted(stop_ids))
            samples = []
            for row, ids in zip(chunk, out[:, enc["input_ids"].shape[1]:].tolist(), strict=True):
                finished = any(t in stop_ids for t in ids)
                if finished:
                    ids = ids[:next(i for i, t in enumerate(ids) if t in stop_ids)]
                completion = tok.decode(ids, skip_special_tokens=True)
                samples.append(Sample(prompt=text_of(row["prompt"]), completion=completion, reference=row["reference"],
                                      data_source=row["data_source"], truncated=not finished,
                                      completion_tokens=len(ids)))
            for sample, scored in zip(samples, rewards.score(samples), strict=True):
                hit = (scored.scores.get(accuracy_reward) or 0.0) >= recipe.eval.accuracy_threshold
                records.append({"prompt": sample.prompt, "completion": sample.completion,
                                "reference": sample.reference, "solved": hit, "total": scored.total,
                                "scores": scored.scores, "components": scored.components, "errors": scored.errors})
    finally:
        tok.padding_side = padding_side
        model.train(was_training)
    n = len(records)
    solved = sum(r["solved"] for r in records)
    summary = {"n": n, "solved": solved, "accuracy": solved / n if n else float("nan"),
               "reward_mean": finite_mean([r["total"] for r in records]) or 0.0,
               "distinct_completions": len({r["completion"] for r in records}), "accuracy_reward": accuracy_reward}
    return summary, records


def eos_ids(model: Any, tok: Any) -> set[int]:
    """Every token that ends a completion: the tokenizer's EOS and the model's generation EOS ids."""
    extra = getattr(model.generation_config, "eos_token_id", None)
    extra = [] if extra is None else list(extra) if isinstance(extra, list | tuple) else [extra]
    return {tok.eos_token_id, *extra}


def resume_point(recipe: Recipe, run_dir: Path) -> dict[str, Any]:
    """Where ``run.resume=true`` continues: the newest complete checkpoint, in TRL updates and in unirl steps.

    Also cuts the run's JSONL files back to that step (the resumed run writes the later steps again) and drops any
    line a kill tore. Cheap and before any model loads, so a resume with nothing to resume from fails at once.
    The checkpoint is verified before any line is dropped; newer broken ones are skipped and set aside, with why
    (see :func:`unirl.launch.resume.take_checkpoint`, which also says whether the resume is bit-identical).
    """
    checkpoint = require_trainer_checkpoint(run_dir, run_dir / CHECKPOINTS)
    taken = take_checkpoint(run_dir, checkpoint)
    # TRL's global_step counts optimizer updates, mini_batches_per_step of them per unirl step; a checkpoint saved
    # part-way through a step (a raw save_steps override) counts only the steps it completed.
    step = checkpoint.global_step // recipe.algorithm.mini_batches_per_step
    dropped = {name: truncate_after(run_dir / name, step) for name in (METRICS, TRAJECTORIES)}
    # The final held-out eval (step == steps) always runs again after train(); the mid-run ones never land on it.
    dropped[EVAL] = truncate_after(run_dir / EVAL, min(step, recipe.algorithm.steps - 1))
    return {"checkpoint": str(checkpoint.path), "global_step": checkpoint.global_step, "step": step,
            "dropped_lines": dropped, **taken}


def check_updates(summary: dict[str, Any], recipe: Recipe, train_rows: int) -> None:
    """The run's state from what TRL did: ``completed`` only when it made every optimizer update the recipe asks for.

    TRL ends quietly with no update at all when the training set yields no full batch, and stops early when a raw
    ``max_steps`` override asks for fewer; either is a failed run, with what ran and why in the summary."""
    mini = recipe.algorithm.mini_batches_per_step
    expected = recipe.algorithm.steps * mini
    updates = int(summary.get("updates") or 0)
    summary.update(updates_expected=expected, steps_completed=updates // mini)
    if updates >= expected:
        summary["state"] = "completed"
        return
    summary["state"] = "failed"
    if updates == 0:
        summary["error"] = (
            f"TRL made 0 optimizer updates of the {expected} the recipe asks for (algorithm.steps="
            f"{recipe.algorithm.steps} x mini_batches_per_step={mini}): the training set has {train_rows} prompt(s) "
            f"and one step takes algorithm.prompts_per_step={recipe.algorithm.prompts_per_step}; nothing was trained")
        return
    overridden = (recipe.framework.get("overrides") or {}).get("max_steps")
    why = f" (framework.overrides.max_steps={overridden})" if overridden is not None else ""
    summary["error"] = (f"TRL stopped after {updates} of {expected} optimizer updates (step {updates // mini} of "
                        f"algorithm.steps={recipe.algorithm.steps}){why}: the run trained less than the recipe asks")


def run(plan: LaunchPlan, run_dir: Path) -> dict[str, Any]:
    """Train as the plan says and return the run summary (also written to summary.json)."""
    t_start = time.monotonic()
    recipe = recipe_from_dict(plan.recipe)
    resumed_from = resume_point(recipe, run_dir) if recipe.run.resume else None
    import torch

    # TRL 1.16 still calls transformers' deprecated is_gradient_checkpointing: noise for the user, not theirs to fix.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    host = get_host()
    run_dir.mkdir(parents=True, exist_ok=True)
    recorder = host.run_recorder(RunInfo(run_dir=run_dir, framework=plan.framework, recipe=plan.recipe))
    if recipe.resources.cpu_threads is not None:
        torch.set_num_threads(recipe.resources.cpu_threads)
    torch.manual_seed(recipe.seed)

    args = launch_args(plan)
    write_json(run_dir / PLAN, plan.to_dict())
    write_json(run_dir / NATIVE_CONFIG, {**plan.native_config, "grpo_config": args})
    status(recipe, f"loading rewards: {', '.join(r.name for r in recipe.rewards)}")
    can_exclude = host.frameworks.get(plan.framework).capabilities.can_exclude_rewards
    rewards = RewardExecutor(spec_from_recipe(recipe, host.rewards, can_exclude=can_exclude))
    all_failed = FoldedWarning("trl.trainer.grpo_trainer", "All reward functions returned None")
    summary: dict[str, Any] = {"framework": plan.framework, "run_dir": str(run_dir), "steps": recipe.algorithm.steps,
                               "seed": recipe.seed, "state": "failed"}
    if resumed_from is not None:
        summary["resumed_from"] = resumed_from
    try:
        _train(recipe, args, rewards, recorder, host, t_start, summary, resumed_from)
    except KeyboardInterrupt:
        summary["state"] = "interrupted"
        raise
    except Exception as exc:
        summary["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        rewards.close()
        all_failed.close()
        summary["reward_errors"] = rewards.stats.errors
        summary["reward_calls"] = rewards.stats.calls
        summary["reward_errors_by_kind"] = dict(rewards.stats.by_kind)
        if rewards.stats.first_error is not None:
            summary["first_reward_error"] = rewards.stats.first_error
        if rewards.stats.worker_restarts or rewards.stats.worker_recycles:
            summary["reward_worker_restarts"] = rewards.stats.worker_restarts
            summary["reward_worker_recycles"] = rewards.stats.worker_recycles
        if all_failed.count:
            summary["batches_with_unscored_samples"] = all_failed.count
            status(recipe, f"{all_failed.count} scoring batches had samples whose every reward failed: they were left "
                           "out of the update (TRL's per-sample warning is folded into this line)")
        summary["wall_time_s"] = time.monotonic() - t_start
        recorder.run_end(summary)
    return summary


def _train(recipe: Recipe, args: dict[str, Any], rewards: RewardExecutor, recorder: RunRecorder, host: Host,
           t_start: float, summary: dict[str, Any], resumed_from: dict[str, Any] | None = None) -> None:
    """Load model and data, evaluate, train, evaluate, filling ``summary`` as it goes (kept if a step fails).

    ``resumed_from`` (see :func:`resume_point`): TRL restores weights, optimizer, scheduler and RNG from the
    checkpoint, and the held-out eval before training is not run again (the first run's is in eval.jsonl).
    """
    import torch
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    info = recorder.run
    run_dir = info.run_dir
    status(recipe, f"loading the model {recipe.model.path}")
    model, tok, model_info = load_model(recipe)
    # A run killed after its last checkpoint (during the final eval) has no training left. It must not reach
    # trainer.train: resumed at max_steps, transformers 5.24 still takes one more generation and optimizer step.
    # Its final weights come from the checkpoint instead, on the device training would have used.
    training_done = resumed_from is not None and resumed_from["step"] >= recipe.algorithm.steps
    if training_done and resumed_from is not None:
        model = type(model).from_pretrained(resumed_from["checkpoint"], dtype=model.dtype)
        model.to("cpu" if args["use_cpu"] else "cuda")
    held_out = f", held out {recipe.data.eval}" if recipe.data.eval else ""
    status(recipe, f"loading data: {recipe.data.train}{held_out}")
    train_raw = limit(load_rows(recipe.data.train, recipe.data, recipe.seed, "train", "data.train"),
                      recipe.data.train_rows, recipe.seed)
    train_rows = prepare_rows(train_raw, recipe.data, tok, recipe.data.train)
    eval_rows: list[dict[str, Any]] = []
    if recipe.data.eval:
        eval_raw = limit(load_rows(recipe.data.eval, recipe.data, recipe.seed, "test", "data.eval"),
                         recipe.data.eval_rows, recipe.seed)
        eval_rows = prepare_rows(eval_raw, recipe.data, tok, recipe.data.eval)
    sources = reward_sources(host.rewards, rewards.spec.names)
    keep_reward_files(run_dir, sources)  # a reward file edited later must not make this run unreproducible
    manifest = build_manifest(
        framework=info.framework, seed=recipe.seed, reward_sources=sources, model=model_info, project_dir=Path.cwd(),
        data={"train": recipe.data.train, "train_rows": len(train_rows), "train_sha256": fingerprint(train_rows),
              "eval": recipe.data.eval, "eval_rows": len(eval_rows), "eval_sha256": fingerprint(eval_rows)})
    if resumed_from is not None:
        manifest["resumed_from"] = resumed_from
    write_json(run_dir / MANIFEST, manifest)

    suppress = BUILTIN_SUPPRESS if recipe.model.path.startswith(BUILTIN_PREFIX) else None
    mini = recipe.algorithm.mini_batches_per_step
    recorder.run_start()

    def run_eval(step: int) -> dict[str, Any]:
        result, records = evaluate(model, tok, eval_rows, recipe, rewards, suppress)
        recorder.eval_done(step, result, records)
        return result

    class UnirlCallback(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            if not logs or "reward" not in logs:
                return
            metrics = {METRIC_NAMES.get(k, k if k.startswith("reward/") else f"trl/{k}"): v for k, v in logs.items()
                       if isinstance(v, int | float)}
            for key, value in logs.items():
                if key.startswith("rewards/") and key.endswith("/mean"):
                    metrics[f"reward/{key.split('/')[1]}/mean"] = value
            metrics["wall_s"] = time.monotonic() - t_start
            if torch.cuda.is_available():
                metrics["gpu/peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
            recorder.metrics(math.ceil(state.global_step / mini), metrics)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            every = recipe.eval.every_steps
            if eval_rows and every and state.global_step % (every * mini) == 0 \
                    and state.global_step < args.max_steps:
                run_eval(state.global_step // mini)

    if resumed_from is not None:
        before = [e for e in read_jsonl(run_dir / EVAL) if e.get("kind") == "summary" and e.get("step") == 0]
        if before:
            summary["accuracy_before"] = before[-1]["accuracy"]
    elif eval_rows and recipe.eval.before_training:
        summary["accuracy_before"] = run_eval(0)["accuracy"]
    t_train = time.monotonic()
    if not training_done:
        adapter = TrlRewardAdapter(
            rewards, eos_ids=eos_ids(model, tok), mini_batches=mini,
            on_scored=recorder.rollouts_scored)
        trainer = GRPOTrainer(
            model=model, reward_funcs=list[Any](adapter.reward_funcs()),  # TRL's parameter: an invariant list
            args=GRPOConfig(output_dir=str(run_dir / CHECKPOINTS), **args),
            train_dataset=Dataset.from_list(train_rows), processing_class=tok, callbacks=[UnirlCallback()])
        trainer.remove_callback(PrinterCallback)  # it prints every log dict; unirl shows progress itself
        # TRL restores weights, optimizer, scheduler, RNG and the data order from the checkpoint
        trainer.train(resume_from_checkpoint=resumed_from["checkpoint"] if resumed_from else None)
        summary["updates"] = trainer.state.global_step  # every update of the run, a resumed run's earlier ones too
    else:
        summary["updates"] = (resumed_from or {}).get("global_step", 0)
    summary["train_time_s"] = time.monotonic() - t_train
    if eval_rows:
        final = run_eval(recipe.algorithm.steps)
        summary.update(accuracy_after=final["accuracy"], eval_n=final["n"],
                       distinct_completions=final["distinct_completions"])
    check_updates(summary, recipe, len(train_rows))  # completed, or failed with what ran (zero updates included)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a unirl TRL plan (written by `unirl plan --json`).")
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--run-dir", type=Path, default=Path.cwd())
    ns = parser.parse_args(argv)
    plan = LaunchPlan.from_dict(json.loads(ns.plan.read_text()))
    try:
        summary = run(plan, ns.run_dir)
    except UnirlError as exc:
        log.error("error: %s", exc)
        return 2
    print(json.dumps(summary, default=str))
    return 0 if summary.get("state") == "completed" else 1  # e.g. zero optimizer updates: a failed run


if __name__ == "__main__":
    sys.exit(main())
