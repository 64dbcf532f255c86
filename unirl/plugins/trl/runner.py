"""Runs a TRL plan: build or load the model, load data, evaluate, train with GRPOTrainer, evaluate.

This is the only module of the TRL plugin that imports torch, transformers and TRL. It runs in the
backend's interpreter: in-process for the embedded default, or ``python -m unirl.plugins.trl.runner``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unirl.adapters.trl import TrlRewardAdapter, finite_mean, text_of
from unirl.adapters.trl_rows import rows_dataset
from unirl.backend.native import prompt_budget
from unirl.backend.plan import LaunchPlan
from unirl.data.builtin.tiny_model import never_sampled, warn_unknown_characters
from unirl.data.loading import fingerprint, limit, load_rows, render_prompt, row_metadata
from unirl.data.run_length import training_rows
from unirl.errors import FieldError, RecipeInvalid, UnirlError
from unirl.host.manager import Host, get_host
from unirl.host.planning import spec_from_recipe
from unirl.launch.resume import logged_after, measured_identity, resume_checkpoint, take_checkpoint
from unirl.plugins.trl.framework import (
    CHECKPOINTS,
    SOFT_OVERLONG,
    launch_args,
    trainer_classes,
    updates_per_step,
)
from unirl.plugins.trl.sampling import with_resumable_order
from unirl.recipe.schema import BUILTIN_PREFIX, DataConfig, Recipe, recipe_from_dict, source_text, split_source
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

if TYPE_CHECKING:
    from unirl.adapters.trl_environment import TrlEpisodes

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
    """What the run is doing while nothing else shows (start-up takes seconds): one line on stderr (and cli.log);
    from rank 0 alone when torchrun started several processes."""
    if recipe.logging.progress and Ranks.current().main:
        log.info("%s", message)


class Ranks:
    """This process's place among the run's training processes (torchrun's RANK and WORLD_SIZE; one when unset).

    With several, every process trains its share (TRL splits each generation batch over the processes and gathers
    the rewards, trl 1.16 grpo_trainer.py:1681 ``gather(rewards_per_func)``), and rank 0 alone writes the run record
    (metrics, trajectories gathered from every rank, held-out eval, summary) and runs the held-out evaluation."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world = rank, world

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def current(cls) -> Ranks:
        return cls(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))

    def start(self, use_cpu: bool) -> None:
        """The process group, before anything else talks to the other ranks: accelerate's own (gloo on CPU), the one
        transformers' TrainingArguments joins later (accelerate 1.15 state.py PartialState is a shared singleton)."""
        if self.world > 1:
            from accelerate import PartialState  # type: ignore[import-untyped]

            PartialState(cpu=use_cpu)

    def share(self, value: Any) -> Any:
        """Rank 0's ``value`` on every rank."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` on rank 0, in rank order (an empty list elsewhere)."""
        if self.world == 1:
            return [value]
        import torch.distributed as dist

        out: list[Any] | None = [None] * self.world if self.main else None
        dist.gather_object(value, out, dst=0)
        return out or []


class SilentHooks:
    """The lifecycle hooks of a rank other than 0: it reports nothing (rank 0 writes the run record)."""

    def fire(self, hook: str, **kwargs: object) -> None:
        return None

    def failures(self) -> dict[str, int]:
        return {}


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


def prepare_rows(rows: list[dict[str, Any]], data: DataConfig, tok: Any, source: str,
                 budget: int | None = None) -> list[dict[str, Any]]:
    """Rendered prompt, reference and data source per row; prompts cut to ``budget`` tokens from the left (the
    resolved ``data.max_prompt_tokens``, :func:`unirl.backend.native.prompt_budget`; None: no cut).

    TRL 1.16 has no prompt budget of its own (``max_prompt_length`` is gone from GRPOConfig), so the cut is made here,
    for text prompts and chat messages alike (:func:`fit_messages`)."""
    out = []
    for row in rows:
        prompt = render_prompt(row, data)
        if budget and isinstance(prompt, str):
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            if len(ids) > budget:
                prompt = tok.decode(ids[-budget:])
        elif budget and isinstance(prompt, list):
            prompt = fit_messages(prompt, budget, tok)
        reference = row.get(data.answer_key) if data.answer_key is not None else None
        out.append({"prompt": prompt, "reference": None if reference is None else str(reference),
                    "data_source": str(row.get("data_source", split_source(source)[0])),
                    "metadata": row_metadata(row, data)})
    return out


def chat_tokens(messages: list[dict[str, Any]], tok: Any) -> int:
    """Tokens of chat messages as the model sees them: the chat template rendered with the generation prompt, as TRL
    renders a conversational prompt (trl 1.16 grpo_trainer.py ``_tokenize_prompts``, apply_chat_template with
    ``add_generation_prompt=True``)."""
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    return len(ids)


def fit_messages(messages: list[dict[str, Any]], budget: int, tok: Any) -> list[dict[str, Any]]:
    """Chat messages cut from the left to ``budget`` tokens of rendered template, like a text prompt: the oldest
    messages after the system ones go while the rest alone is still too long, then the start of the first remaining
    message's text; system messages and the last message's end stay. A template whose fixed part alone exceeds the
    budget is refused by field (``data.max_prompt_tokens``)."""
    if chat_tokens(messages, tok) <= budget:
        return messages
    fixed = [m for m in messages if m.get("role") == "system"]
    rest = [dict(m) for m in messages if m.get("role") != "system"]
    while len(rest) > 1 and chat_tokens([*fixed, *rest[1:]], tok) > budget:  # it would not fit without this one
        rest.pop(0)
    if not rest:
        rest = [{"role": "user", "content": ""}]
    first = rest[0]
    text = str(first.get("content") or "")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    low, high = 0, len(ids)  # the fewest leading tokens to drop so that the whole fits
    while low < high:
        mid = (low + high) // 2
        if chat_tokens([*fixed, {**first, "content": tok.decode(ids[mid:])}, *rest[1:]], tok) <= budget:
            high = mid
        else:
            low = mid + 1
    kept = [] if low >= len(ids) and len(rest) > 1 else [{**first, "content": tok.decode(ids[low:])}]  # none left
    fitted = [*fixed, *kept, *rest[1:]]
    if chat_tokens(fitted, tok) > budget:
        raise RecipeInvalid([FieldError("data.max_prompt_tokens", budget,
                                        f"the chat template alone renders {chat_tokens(fitted, tok)} tokens for these "
                                        "messages (system messages and the template's own tokens are never cut): "
                                        "raise the budget")])
    return fitted


def evaluate(model: Any, tok: Any, rows: list[dict[str, Any]], recipe: Recipe, rewards: RewardExecutor,
             suppress: list[int] | None, batch_size: int = 64) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Held-out evaluation: one completion per prompt (greedy by default), scored by the recipe's rewards."""
    import torch

    accuracy_reward = recipe.eval.accuracy_reward or recipe.rewards[0].name  # validation: one exists without an env
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
                                      data_source=row["data_source"], metadata=row["metadata"], truncated=not finished,
                                      completion_tokens=len(ids)))
            for sample, scored in zip(samples, rewards.score(samples), strict=True):
                hit = (scored.scores.get(accuracy_reward) or 0.0) >= recipe.eval.accuracy_threshold
                records.append({"prompt": sample.prompt, "completion": sample.completion,
                                "reference": sample.reference, "solved": hit, "total": scored.total,
                                "scores": scored.scores, "components": scored.components, "errors": scored.errors})
    finally:
        tok.padding_side = padding_side
        model.train(was_training)
    return eval_summary(records, accuracy_reward), records


def eval_summary(records: list[dict[str, Any]], accuracy_reward: str) -> dict[str, Any]:
    """A held-out evaluation's summary line (eval.jsonl) from its records, with or without an environment."""
    n = len(records)
    solved = sum(r["solved"] for r in records)
    return {"n": n, "solved": solved, "accuracy": solved / n if n else float("nan"),
            "reward_mean": finite_mean([r["total"] for r in records]) or 0.0,
            "distinct_completions": len({r["completion"] for r in records}), "accuracy_reward": accuracy_reward}


def environment_episodes(host: Host, recipe: Recipe, tok: Any, rows: list[dict[str, Any]], stop_ids: set[int],
                         suppress: list[int] | None) -> TrlEpisodes | None:
    """The recipe's environment as an episode loop over the training ``rows``, or None for single-turn training.
    TRL's rollout_func receives prompts alone (grpo_trainer.py:2210); each carries the index of its row
    (:mod:`unirl.adapters.trl_rows`), whose reference and metadata are its episode's task."""
    env = recipe.environment
    if env.name is None:
        return None
    from unirl.adapters.trl_environment import TrlEpisodes
    from unirl.host.planning import environment_problems

    problems = environment_problems(host, recipe)  # registers environment.file in this process too
    if problems:
        raise UnirlError(str(problems[0]))
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is experimental in TRL 1.16: the plan says so
    return TrlEpisodes(host.environments.get(env.name), env.kwargs, tok=tok, rows=rows,
                       chat_template=recipe.data.chat_template is True, max_new_tokens=recipe.algorithm.max_new_tokens,
                       temperature=recipe.algorithm.temperature, top_p=recipe.algorithm.top_p,
                       timeout_s=env.timeout_s, max_turns=env.max_turns, run_seed=recipe.seed, eos_ids=stop_ids,
                       suppress=suppress)


EVAL_SEED_OFFSET = 10**9
"""Held-out episodes draw their hidden state from seeds no training episode uses, the same at every evaluation."""
TEST_SEED_OFFSET = 2 * 10**9
"""The final evaluation of weights chosen by the evaluations (``eval.keep_best``): seeds none of them used."""


def evaluate_episodes(model: Any, episodes: TrlEpisodes, rows: list[dict[str, Any]], recipe: Recipe,
                      rewards: RewardExecutor, seed_offset: int = EVAL_SEED_OFFSET) -> tuple[dict[str, Any],
                                                                                         list[dict[str, Any]]]:
    """Held-out evaluation with an environment: one episode per prompt (greedy by default) on fresh hidden state;
    solved when the return plus the recipe's rewards on the transcript reach ``eval.accuracy_threshold`` (or, with
    ``eval.accuracy_reward``, that reward does)."""
    from unirl.adapters.trl_environment import episode_seed

    seeds = [episode_seed(recipe.seed + seed_offset, 0, i) for i in range(len(rows))]
    items = episodes.run(model, rows, seeds, greedy=recipe.eval.greedy is not False)
    samples = [Sample(prompt=text_of(r["prompt"]), completion=episodes.tok.decode(item.completion_ids,
                                                                                    skip_special_tokens=True),
                      reference=r["reference"], data_source=r["data_source"], metadata=r["metadata"],
                      truncated=item.episode is not None and item.episode.termination == "truncated",
                      completion_tokens=sum(item.env_mask)) for r, item in zip(rows, items, strict=True)]
    records: list[dict[str, Any]] = []
    for sample, item, scored in zip(samples, items, rewards.score(samples), strict=True):
        episode = item.episode
        value = None if episode is None or episode.failed else episode.return_
        total = (scored.total or 0.0) + (value or 0.0)
        named = recipe.eval.accuracy_reward
        hit = ((scored.scores.get(named) or 0.0) if named else total) >= recipe.eval.accuracy_threshold
        records.append({"prompt": sample.prompt, "completion": sample.completion, "reference": sample.reference,
                        "solved": hit and value is not None, "total": total,
                        "scores": {"environment": value, **scored.scores}, "components": scored.components,
                        "errors": scored.errors, "episode": episode.to_dict() if episode else None})
    summary = eval_summary(records, recipe.eval.accuracy_reward or "environment")
    summary["episode_errors"] = sum(1 for r in records if r["episode"] is None or r["episode"]["error_kind"])
    return summary, records


def eos_ids(model: Any, tok: Any) -> set[int]:
    """Every token that ends a completion: the tokenizer's EOS and the model's generation EOS ids."""
    extra = getattr(model.generation_config, "eos_token_id", None)
    extra = [] if extra is None else list(extra) if isinstance(extra, list | tuple) else [extra]
    return {tok.eos_token_id, *extra}


def resume_point(recipe: Recipe, run_dir: Path) -> dict[str, Any]:
    """Where ``run.resume=true`` continues: the newest complete checkpoint, in TRL updates and in unirl steps, or step
    0 when the run was stopped before its first complete save (``checkpoint`` None).

    Also cuts the run's JSONL files back to that step (the resumed run writes the later steps again) and drops any
    line a kill tore, keeping what the dropped steps logged to compare the resumed run with (``replay``, popped by
    :func:`run`). Cheap and before any model loads. The checkpoint is verified before any line is dropped; newer
    broken ones are skipped and set aside, with why (:func:`unirl.launch.resume.take_checkpoint`).
    """
    checkpoint = resume_checkpoint(run_dir / CHECKPOINTS)
    taken = take_checkpoint(run_dir, checkpoint)
    # TRL's global_step counts optimizer updates, updates_per_step of them per unirl step; a checkpoint saved
    # part-way through a step (a raw save_steps override) counts only the steps it completed.
    step = checkpoint.global_step // updates_per_step(recipe)
    replay = logged_after(run_dir / METRICS, step)
    cut = step if checkpoint.path is not None else -1  # a restart keeps nothing, the evaluation before training too
    dropped = {name: truncate_after(run_dir / name, cut) for name in (METRICS, TRAJECTORIES)}
    # The final held-out eval (step == steps) always runs again after train(); the mid-run ones never land on it.
    dropped[EVAL] = truncate_after(run_dir / EVAL, min(cut, recipe.algorithm.steps - 1))
    return {"checkpoint": None if checkpoint.path is None else str(checkpoint.path),
            "global_step": checkpoint.global_step, "step": step, "dropped_lines": dropped, **taken,
            "replay": {str(k): v for k, v in replay.items()}}


class EarlyStop:
    """``eval.stop_after_plateau`` and ``eval.stop_at_accuracy``, decided at each held-out evaluation during training.

    The evaluation before training (step 0) only sets the best accuracy the plateau is measured against; a stop is
    decided at the evaluations every ``eval.every_steps`` steps, never before the first update. The weights at the
    stop are those of that step (the run does not roll back to the best evaluation)."""

    def __init__(self, recipe: Recipe) -> None:
        # ``auto`` is resolved before a plan reaches the runner (unirl/backend/auto.py): a number or null here
        patience, target = recipe.eval.stop_after_plateau, recipe.eval.stop_at_accuracy
        self.patience = None if patience is None else int(patience)
        self.target = None if target is None else float(target)
        self.best: float | None = None
        self.stale = 0  # evaluations in a row since the best, none of them above it

    @property
    def active(self) -> bool:
        return self.patience is not None or self.target is not None

    def observe(self, step: int, accuracy: float) -> dict[str, Any] | None:
        """Take one evaluation's accuracy; ``{reason, step, accuracy}`` when training should stop here."""
        if self.best is None or accuracy > self.best:
            self.best, self.stale = accuracy, 0
        else:
            self.stale += 1
        if step == 0:
            return None
        if self.target is not None and accuracy >= self.target:
            reason = (f"held-out accuracy {accuracy:.3f} reached eval.stop_at_accuracy={self.target:g}")
        elif self.patience is not None and self.stale >= self.patience:
            reason = (f"held-out accuracy plateaued: {self.stale} evaluations in a row without rising above its best "
                      f"{self.best:.3f} (eval.stop_after_plateau={self.patience})")
        else:
            return None
        return {"reason": reason, "step": step, "accuracy": accuracy}


BEST_DIR = "best"
"""Inside the run directory: the weights ``eval.keep_best`` kept (save_pretrained), with the tokenizer."""


class BestWeights:
    """``eval.keep_best``: a copy, in host memory, of the weights at the best held-out evaluation so far (the one
    before training included; a later evaluation replaces it only by beating it), restored when training ends."""

    def __init__(self, model: Any, *, enabled: bool) -> None:
        self.model = model
        self.enabled = enabled
        self.kept: dict[str, Any] | None = None

    def observe(self, step: int, accuracy: float) -> None:
        if not self.enabled or (self.kept is not None and accuracy <= self.kept["accuracy"]):
            return
        state = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        self.kept = {"step": step, "accuracy": accuracy, "state": state}

    def restore(self) -> dict[str, Any]:
        """Load the kept weights into the model; the step and accuracy that chose them."""
        assert self.kept is not None
        self.model.load_state_dict(self.kept["state"])
        return {"step": self.kept["step"], "accuracy_when_chosen": self.kept["accuracy"]}

    def save(self, path: Path, tok: Any) -> None:
        self.model.save_pretrained(path)
        tok.save_pretrained(path)


def check_updates(summary: dict[str, Any], recipe: Recipe, train_rows: int) -> None:
    """The run's state from what TRL did: ``completed`` only when it generated every rollout batch and made every
    optimizer update the recipe asks for (``algorithm.steps`` rollout batches, each feeding
    mini_batches_per_step x epochs_per_batch updates).

    ``summary["rollout_batches"]`` and ``summary["updates"]`` are counted from what ran (the reward adapter's scored
    generations, TRL's ``state.global_step``); ``steps`` is the steps wholly done, ``steps_expected`` the recipe's.
    TRL ends quietly with no update at all when the training set yields no full batch, and stops early when a raw
    ``max_steps`` override asks for fewer; either is a failed run, with what ran and why in the summary."""
    per_step = updates_per_step(recipe)
    steps = recipe.algorithm.steps
    # an early stop (eval.stop_after_plateau / stop_at_accuracy) ends the run, completed, at the step it names
    until = int(summary["stopped_early"]["step"]) if summary.get("stopped_early") else steps
    expected = until * per_step
    updates = int(summary.get("updates") or 0)
    batches = int(summary.get("rollout_batches") or 0)
    done = min(updates // per_step, batches)
    summary.update(updates_expected=expected, steps_completed=done, steps=done, steps_expected=steps)
    if updates >= expected and batches >= until:
        summary["state"] = "completed"
        return
    summary["state"] = "failed"
    layout = (f"algorithm.steps={steps} x mini_batches_per_step={recipe.algorithm.mini_batches_per_step} x "
              f"epochs_per_batch={recipe.algorithm.epochs_per_batch}")
    if updates == 0:
        summary["error"] = (
            f"TRL made 0 optimizer updates of the {expected} the recipe asks for ({layout}): the training set has "
            f"{train_rows} prompt(s) and one step takes algorithm.prompts_per_step={recipe.algorithm.prompts_per_step}"
            "; nothing was trained")
        return
    overridden = (recipe.framework.get("overrides") or {}).get("max_steps")
    why = f" (framework.overrides.max_steps={overridden})" if overridden is not None else ""
    summary["error"] = (f"TRL stopped after {updates} of {expected} optimizer updates ({layout}) and {batches} of "
                        f"{steps} rollout batches{why}: the run trained less than the recipe asks")


def run(plan: LaunchPlan, run_dir: Path) -> dict[str, Any]:
    """Train as the plan says and return the run summary (also written to summary.json)."""
    t_start = time.monotonic()
    recipe = recipe_from_dict(plan.recipe)
    ranks = Ranks.current()
    if recipe.rollout.engine == "vllm":
        from unirl.plugins.trl.vllm_engine import private_rendezvous

        private_rendezvous(ranks.world)  # before TRL or accelerate pick a well-known port another run may hold
    if ranks.world == 1:
        resumed_from = resume_point(recipe, run_dir) if recipe.run.resume else None
    args = launch_args(plan)
    if recipe.algorithm.epochs is not None and int(args.get("max_steps", -1)) < 1:
        recipe, args = steps_at_launch(recipe, args)
    if ranks.world > 1:  # rank 0 alone cuts the record back to the checkpoint, then tells the others where it is
        # torchrun passes Ctrl-C / a stop on to its workers as SIGTERM (torch 2.13 elastic subprocess_handler.close,
        # default death signal): end like Ctrl-C, so that rank 0 still records the run as interrupted.
        signal.signal(signal.SIGTERM, _interrupted)
        ranks.start(args["use_cpu"])
        resumed_from = ranks.share(_resume_or_error(recipe, run_dir) if ranks.main else None)
        if isinstance(resumed_from, dict) and "error" in resumed_from and "checkpoint" not in resumed_from:
            raise UnirlError(resumed_from["error"])
    import torch

    # TRL 1.16 still calls transformers' deprecated is_gradient_checkpointing: noise for the user, not theirs to fix.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    host = get_host()
    run_dir.mkdir(parents=True, exist_ok=True)
    info = RunInfo(run_dir=run_dir, framework=plan.framework, recipe=plan.recipe)
    recorder = host.run_recorder(info) if ranks.main else RunRecorder(info, SilentHooks())
    if recipe.resources.cpu_threads is not None:
        torch.set_num_threads(recipe.resources.cpu_threads)
    torch.manual_seed(recipe.seed)

    if ranks.main:
        write_json(run_dir / PLAN, plan.to_dict())
        write_json(run_dir / NATIVE_CONFIG, {**plan.native_config, "trainer_config": args})
    status(recipe, f"loading rewards: {', '.join(r.name for r in recipe.rewards)}")
    can_exclude = host.frameworks.get(plan.framework).capabilities.can_exclude_rewards
    rewards = RewardExecutor(spec_from_recipe(recipe, host.rewards, can_exclude=can_exclude))
    all_failed = FoldedWarning("trl.trainer.grpo_trainer", "All reward functions returned None")
    summary: dict[str, Any] = {"framework": plan.framework, "run_dir": str(run_dir), "steps": 0,
                               "steps_expected": recipe.algorithm.steps, "seed": recipe.seed, "state": "failed"}
    if ranks.world > 1:
        summary["processes"] = ranks.world
    replay: dict[int, list[Any]] = {}
    if resumed_from is not None:
        replay = {int(k): v for k, v in resumed_from.pop("replay", {}).items()}
        summary["resumed_from"] = resumed_from
        if resumed_from["checkpoint"] is None:  # stopped before its first complete save: a fresh start, recorded
            resumed_from = None
    peers: list[dict[str, Any]] = []  # the other ranks' reward statistics, gathered once training is done
    try:
        _train(plan, recipe, args, rewards, recorder, host, t_start, summary, resumed_from, ranks, peers)
        if "resumed_from" in summary and ranks.main:
            summary["resumed_from"].update(measured_identity(replay, run_dir / METRICS))
    except KeyboardInterrupt:
        summary["state"] = "interrupted"
        raise
    except Exception as exc:
        summary["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        rewards.close()
        all_failed.close()
        stats = [asdict(rewards.stats), *peers]
        by_kind: dict[str, int] = {}
        for one in stats:
            for kind, count in one["by_kind"].items():
                by_kind[kind] = by_kind.get(kind, 0) + count
        summary["reward_errors"] = sum(one["errors"] for one in stats)
        summary["reward_calls"] = sum(one["calls"] for one in stats)
        summary["reward_errors_by_kind"] = by_kind
        first = next((one["first_error"] for one in stats if one["first_error"] is not None), None)
        if first is not None:
            summary["first_reward_error"] = first
        restarts = sum(one["worker_restarts"] for one in stats)
        recycles = sum(one["worker_recycles"] for one in stats)
        if restarts or recycles:
            summary["reward_worker_restarts"] = restarts
            summary["reward_worker_recycles"] = recycles
        if all_failed.count:
            summary["batches_with_unscored_samples"] = all_failed.count
            status(recipe, f"{all_failed.count} scoring batches had samples whose every reward failed: they were left "
                           "out of the update (TRL's per-sample warning is folded into this line)")
        summary["wall_time_s"] = time.monotonic() - t_start
        recorder.run_end(summary)
    return summary


def steps_at_launch(recipe: Recipe, args: dict[str, Any]) -> tuple[Recipe, dict[str, Any]]:
    """``algorithm.epochs`` over data the plan could not count (a hub dataset, a file that was elsewhere): counted now,
    as every backend counts a pass (its incomplete last batch dropped), and sent to TRL as ``max_steps``."""
    rows = training_rows(recipe)
    if rows is None:  # a hub dataset: loaded (and cached by datasets) to be counted
        rows = len(limit(load_rows(recipe.data.train, recipe.data, recipe.seed, "train", "data.train"),
                         recipe.data.train_rows, recipe.seed))
    epochs = int(recipe.algorithm.epochs or 1)
    steps = epochs * (rows // recipe.algorithm.prompts_per_step)
    if steps < 1:
        raise FieldError("algorithm.epochs", epochs, f"a pass over the {rows} training rows makes no step of "
                         f"algorithm.prompts_per_step={recipe.algorithm.prompts_per_step} prompts")
    status(recipe, f"algorithm.epochs={epochs}: {epochs} x floor({rows} rows / {recipe.algorithm.prompts_per_step}) "
                   f"= {steps} steps")
    recipe = replace(recipe, algorithm=replace(recipe.algorithm, steps=steps))
    return recipe, {**args, "max_steps": steps * updates_per_step(recipe)}


def _interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def _resume_or_error(recipe: Recipe, run_dir: Path) -> dict[str, Any] | None:
    """Rank 0's :func:`resume_point`, or its error as data: the other ranks wait for it and must not hang."""
    if not recipe.run.resume:
        return None
    try:
        return resume_point(recipe, run_dir)
    except UnirlError as exc:
        return {"error": str(exc)}


def _train(plan: LaunchPlan, recipe: Recipe, args: dict[str, Any], rewards: RewardExecutor, recorder: RunRecorder,
           host: Host, t_start: float, summary: dict[str, Any], resumed_from: dict[str, Any] | None = None,
           ranks: Ranks | None = None, peers: list[dict[str, Any]] | None = None) -> None:
    """Load model and data, evaluate, train, evaluate, filling ``summary`` as it goes (kept if a step fails).

    ``resumed_from`` (see :func:`resume_point`): TRL restores weights, optimizer, scheduler and RNG from the
    checkpoint, and the held-out eval before training is not run again (the first run's is in eval.jsonl).
    """
    import torch
    from transformers import PrinterCallback, TrainerCallback

    info = recorder.run
    run_dir = info.run_dir
    status(recipe, f"loading the model {recipe.model.path}")
    model, tok, model_info = load_model(recipe)
    # A run killed after its last checkpoint (during the final eval) has no training left. It must not reach
    # trainer.train: resumed at max_steps, transformers 5.24 still takes one more generation and optimizer step.
    # Its final weights come from the checkpoint instead, on the device training would have used.
    training_done = resumed_from is not None and resumed_from["step"] >= recipe.algorithm.steps
    if training_done and resumed_from is not None:
        if plan.native_config.get("peft_config"):  # a LoRA checkpoint holds the adapter alone, over the base model
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, resumed_from["checkpoint"])
        else:
            model = type(model).from_pretrained(resumed_from["checkpoint"], dtype=model.dtype)
        model.to("cpu" if args["use_cpu"] else f"cuda:{os.environ.get('LOCAL_RANK', '0')}")
    held_out = f", held out {source_text(recipe.data.eval)}" if recipe.data.eval else ""
    status(recipe, f"loading data: {source_text(recipe.data.train)}{held_out}")
    train_raw = limit(load_rows(recipe.data.train, recipe.data, recipe.seed, "train", "data.train"),
                      recipe.data.train_rows, recipe.seed)
    budget = prompt_budget(recipe)  # data.max_prompt_tokens, or unirl's default budget when it is null
    train_rows = prepare_rows(train_raw, recipe.data, tok, source_text(recipe.data.train), budget)
    # The builtin character tokenizer maps what it does not know to <unk>: said once, not trained on silently.
    warn_unknown_characters(recipe.model.path, f"data.train={source_text(recipe.data.train)}",
                            [r["prompt"] for r in train_rows])
    eval_rows: list[dict[str, Any]] = []
    if recipe.data.eval:
        eval_raw = limit(load_rows(recipe.data.eval, recipe.data, recipe.seed, "test", "data.eval"),
                         recipe.data.eval_rows, recipe.seed)
        eval_rows = prepare_rows(eval_raw, recipe.data, tok, source_text(recipe.data.eval), budget)
        warn_unknown_characters(recipe.model.path, f"data.eval={source_text(recipe.data.eval)}",
                                [r["prompt"] for r in eval_rows])
    ranks = ranks or Ranks(0, 1)
    if ranks.main:
        sources = reward_sources(host.rewards, rewards.spec.names)
        keep_reward_files(run_dir, sources)  # a reward file edited later must not make this run unreproducible
        manifest = build_manifest(
            framework=info.framework, seed=recipe.seed, reward_sources=sources, model=model_info,
            project_dir=Path.cwd(),
            data={"train": recipe.data.train, "train_rows": len(train_rows), "train_sha256": fingerprint(train_rows),
                  "eval": recipe.data.eval, "eval_rows": len(eval_rows), "eval_sha256": fingerprint(eval_rows)})
        if resumed_from is not None:
            manifest["resumed_from"] = resumed_from
        if ranks.world > 1:
            manifest["processes"] = ranks.world
        write_json(run_dir / MANIFEST, manifest)
    else:
        eval_rows = []  # the held-out eval is rank 0's alone

    suppress = never_sampled(recipe.model.path)
    per_step = updates_per_step(recipe)  # TRL optimizer updates per unirl step (one rollout batch)
    episodes = environment_episodes(host, recipe, tok, train_rows, eos_ids(model, tok), suppress)
    recorder.run_start()

    def run_eval(step: int, seed_offset: int = EVAL_SEED_OFFSET) -> dict[str, Any]:
        if episodes is not None:
            result, records = evaluate_episodes(model, episodes, eval_rows, recipe, rewards, seed_offset)
        else:
            result, records = evaluate(model, tok, eval_rows, recipe, rewards, suppress)
        recorder.eval_done(step, result, records)
        return result

    batches = {"n": 0, "completions": 0}  # what was generated and scored in this process's training, counted

    def scored(step: int, records: list[dict[str, Any]]) -> None:
        """One generation batch scored: every rank's records reach rank 0 (in rank order, the order of TRL's
        gathered batch, trl 1.16 grpo_trainer.py:2813 ``process_slice``), which records them once."""
        every = ranks.gather(records)
        batches["n"] += 1
        if ranks.main:
            joined = [r for part in every for r in part]
            batches["completions"] += len(joined)
            recorder.rollouts_scored(step, joined)

    class UnirlCallback(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **kw: Any) -> None:
            if not logs or "reward" not in logs:
                return
            metrics = {METRIC_NAMES.get(k, k if k.startswith(("reward/", "env/")) else f"trl/{k}"): v
                       for k, v in logs.items() if isinstance(v, int | float)}
            for key, value in logs.items():
                if key.startswith("rewards/") and key.endswith("/mean"):
                    metrics[f"reward/{key.split('/')[1]}/mean"] = value
            metrics["wall_s"] = time.monotonic() - t_start
            if torch.cuda.is_available():
                metrics["gpu/peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
            recorder.metrics(math.ceil(state.global_step / per_step), metrics)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            every = recipe.eval.every_steps
            # the same test on every rank (data.eval, not eval_rows: only rank 0 holds those), so that all take the
            # early-stop decision together
            if not (recipe.data.eval and every and state.global_step % (every * per_step) == 0
                    and state.global_step < args.max_steps):
                return
            step = state.global_step // per_step
            stop = None
            if eval_rows:
                result = run_eval(step)
                last_eval["step"], last_eval["result"] = step, result
                best.observe(step, result["accuracy"])
                stop = early.observe(step, result["accuracy"])
            if early.active:
                stop = group.share(stop)  # rank 0 decides; every rank must leave the loop at the same step
            if stop is not None:
                summary["stopped_early"] = stop
                status(recipe, f"stopping early at step {step}: {stop['reason']}")
                # transformers 5.24 trainer.py:1971-1973: the training loop breaks after on_step_end when set
                control.should_training_stop = True

    early = EarlyStop(recipe)
    best = BestWeights(model, enabled=bool(recipe.eval.keep_best) and bool(eval_rows))
    group: Ranks = ranks  # narrowed for the callback class below
    last_eval: dict[str, Any] = {}  # the latest held-out evaluation during training: the final one after an early stop
    if resumed_from is not None:
        earlier = [e for e in read_jsonl(run_dir / EVAL) if e.get("kind") == "summary"]
        before = [e for e in earlier if e.get("step") == 0]
        if before:
            summary["accuracy_before"] = before[-1]["accuracy"]
        for e in earlier:  # the evaluations the resumed run already made count towards a plateau
            early.observe(int(e["step"]), float(e["accuracy"]))
    elif eval_rows and recipe.eval.before_training:
        summary["accuracy_before"] = run_eval(0)["accuracy"]
        best.observe(0, summary["accuracy_before"])
        early.observe(0, summary["accuracy_before"])
    t_train = time.monotonic()
    if not training_done:
        # mini_batches: the adapter's step is global_step // it + 1, so it takes TRL's updates per unirl step
        adapter = TrlRewardAdapter(rewards, eos_ids=eos_ids(model, tok), mini_batches=per_step, on_scored=scored,
                                   environment=episodes is not None)
        trainer_class, config_class = trainer_classes(plan)
        trainer_class = with_resumable_order(trainer_class)
        # the episode loop as GRPOTrainer's rollout_func (only GRPOTrainer takes one; the plan refuses RLOO with it)
        loop = {} if episodes is None else {"rollout_func": episodes.rollout_func}
        if recipe.rollout.engine == "vllm":
            from unirl.plugins.trl.vllm_engine import engine_loadable, keep_weights_loadable

            engine_loadable(model, tok, run_dir)  # the engine loads the model from a directory
            if not torch.cuda.is_available():
                keep_weights_loadable()  # vLLM's CPU build: TRL's weight sync needs loadable parameters
        trainer = trainer_class(
            model=model, reward_funcs=[*adapter.reward_funcs(), *trl_reward_funcs(plan)],
            args=config_class(output_dir=str(run_dir / CHECKPOINTS), **args),
            train_dataset=rows_dataset(train_rows), processing_class=tok, callbacks=[UnirlCallback()],
            peft_config=lora_config(plan, model), **loop)
        trainer.remove_callback(PrinterCallback)  # it prints every log dict; unirl shows progress itself
        # PEFT injects the adapters into ``model``'s own modules (the trainer holds a PeftModel around it), so the
        # held-out evaluation of ``model`` below sees the trained adapters
        summary.update(parameter_counts(trainer.model))
        # TRL restores weights, optimizer, scheduler, RNG and the data order from the checkpoint
        trainer.train(resume_from_checkpoint=resumed_from["checkpoint"] if resumed_from else None)
        summary["updates"] = trainer.state.global_step  # every update of the run, a resumed run's earlier ones too
    else:
        summary["updates"] = (resumed_from or {}).get("global_step", 0)
    # rollout batches: those this run generated, plus the steps a resumed run's checkpoint had completed
    summary["rollout_batches"] = batches["n"] + int((resumed_from or {}).get("step", 0))
    summary["completions"] = batches["completions"]
    summary["train_time_s"] = time.monotonic() - t_train
    if peers is not None and ranks.world > 1:  # the other ranks' reward calls, counted once each
        peers.extend(p for p in ranks.gather(asdict(rewards.stats))[1:])
    if eval_rows and best.kept is not None:
        # the best evaluation's weights, evaluated again: on fresh seeds with an environment (an unbiased estimate),
        # on the same held-out rows without one (optimistic: those rows chose them)
        summary["kept_best"] = best.restore()
        final = run_eval(recipe.algorithm.steps, TEST_SEED_OFFSET)
        summary["kept_best"]["fresh_seeds"] = episodes is not None
        best.save(run_dir / BEST_DIR, tok)
    elif eval_rows:
        stopped = summary.get("stopped_early")
        # stopped early: that step's evaluation is the final one (no update since; evaluating again would only
        # repeat it in eval.jsonl)
        final = last_eval["result"] if stopped and last_eval.get("step") == stopped["step"] \
            else run_eval(recipe.algorithm.steps)
    if eval_rows:
        summary.update(accuracy_after=final["accuracy"], eval_n=final["n"],
                       distinct_completions=final["distinct_completions"])
    check_updates(summary, recipe, len(train_rows))  # completed, or failed with what ran (zero updates included)


def lora_config(plan: LaunchPlan, model: Any) -> Any:
    """PEFT's LoraConfig for ``model.lora`` (the plan's peft_config), None for full fine-tuning."""
    spec = plan.native_config.get("peft_config")
    if not spec:
        return None
    from peft import LoraConfig

    if spec.get("modules_to_save"):
        spec = {**spec, "modules_to_save": modules_matching(model, spec["modules_to_save"])}
    return LoraConfig(**spec)


def modules_matching(model: Any, names: list[str]) -> list[str]:
    """``model.lora.modules_to_save`` as the recipe defines it, each name matching every module whose path ends with
    it (``norm``: every RMSNorm, ``input_layernorm`` included), given to PEFT as the last path components it then
    matches whatever its rule: PEFT 0.21 matched a path's end, 0.22 matches whole components only, which would
    silently train one norm of five."""
    found: list[str] = []
    for path, _ in model.named_modules():
        last = path.rsplit(".", 1)[-1]
        if path and any(path.endswith(name) for name in names) and last not in found:
            found.append(last)
    return [*found, *(name for name in names if name not in found)]


def parameter_counts(model: Any) -> dict[str, int]:
    """The model's parameters and those the optimizer updates (all of them, or LoRA's adapters)."""
    params = list(model.parameters())
    return {"parameters": sum(p.numel() for p in params),
            "trainable_parameters": sum(p.numel() for p in params if p.requires_grad)}


def trl_reward_funcs(plan: LaunchPlan) -> list[Any]:
    """The reward functions the plan takes from TRL itself, after the recipe's (their weights close reward_weights):
    the soft overlong punishment of ``algorithm.overlong_buffer``."""
    from trl.rewards.other_rewards import get_soft_overlong_punishment

    return [get_soft_overlong_punishment(**spec["kwargs"]) for spec in plan.native_config["reward_funcs"]
            if spec.get("trl") == SOFT_OVERLONG]


def _leave_group() -> None:
    """Destroy the process group several ranks shared (torch warns at exit about one left open)."""
    if Ranks.current().world > 1:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


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
    finally:
        _leave_group()
    if Ranks.current().main:
        print(json.dumps(summary, default=str))
    return 0 if summary.get("state") == "completed" else 1  # e.g. zero optimizer updates: a failed run


if __name__ == "__main__":
    sys.exit(main())
