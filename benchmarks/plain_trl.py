"""The embedded default as a plain TRL script: no unirl runtime, the identical GRPOConfig.

The GRPOConfig arguments are read from ``unirl plan --json`` (so the configuration is identical by
construction); the model, data, rewards and greedy held-out evaluation (before, every
``eval.every_steps``, after: the recipe's cadence) are written here in plain TRL terms.
Usage: python benchmarks/plain_trl.py PLAN.json OUTPUT_DIR
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

t0 = time.monotonic()
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from unirl.data.builtin import arith, tiny_model  # noqa: E402  (model and data builders only)

plan = json.loads(Path(sys.argv[1]).read_text())
out_dir = Path(sys.argv[2])
seed = plan["recipe"]["seed"]
args = dict(plan["native_config"]["trainer_config"])
args["use_cpu"] = True
args["activation_checkpointing"] = args.pop("gradient_checkpointing")
torch.set_num_threads(1)
torch.manual_seed(seed)
model, tok = tiny_model.build("tiny-arith", seed)
train = Dataset.from_list([{"prompt": r["prompt"], "answer": r["answer"]} for r in arith.rows("train", {}, seed)])
held = arith.rows("heldout", {}, seed)
NUMBER = re.compile(r"-?\d+")


def correct(prompts, completions, answer, **kw):
    found = [NUMBER.findall(c) for c in completions]
    return [1.0 if f and int(f[-1]) == int(a) else 0.0 for f, a in zip(found, answer, strict=True)]


def closeness(prompts, completions, answer, **kw):
    found = [NUMBER.findall(c) for c in completions]
    return [max(0.0, 1 - abs(int(f[-1]) - int(a)) / 10) if f else 0.0 for f, a in zip(found, answer, strict=True)]


def bare_number(completions, completion_ids, **kw):
    return [1.0 if re.fullmatch(r"\s*-?\d+\s*", c) and 2 in ids else 0.0
            for c, ids in zip(completions, completion_ids, strict=True)]


@torch.no_grad()
def greedy_accuracy() -> float:
    model.eval()
    enc = tok([r["prompt"] for r in held], return_tensors="pt", padding=True)
    gen = model.generate(**enc, max_new_tokens=args["max_completion_length"], do_sample=False,
                         suppress_tokens=[0, 1, 3], pad_token_id=0, eos_token_id=[2])
    texts = tok.batch_decode(gen[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    model.train()
    return sum(correct(None, texts, [r["answer"] for r in held])) / len(held)


class EvalCadence(TrainerCallback):
    """The recipe's evaluation cadence and its early stop (eval.stop_at_accuracy, eval.stop_after_plateau: stop at
    the target, or after that many evaluations in a row without a new best), so both sides train the same steps."""

    def __init__(self, before: float) -> None:
        self.best, self.stale = before, 0
        self.target = plan["recipe"]["eval"]["stop_at_accuracy"]
        self.patience = plan["recipe"]["eval"]["stop_after_plateau"]

    def on_step_end(self, args, state, control, **kw):
        every = plan["recipe"]["eval"]["every_steps"]
        if every and state.global_step % every == 0 and state.global_step < args.max_steps:
            accuracy = greedy_accuracy()
            self.best, self.stale = (accuracy, 0) if accuracy > self.best else (self.best, self.stale + 1)
            if ((self.target is not None and accuracy >= self.target)
                    or (self.patience is not None and self.stale >= self.patience)):
                control.should_training_stop = True


before = greedy_accuracy()
trainer = GRPOTrainer(model=model, reward_funcs=[correct, closeness, bare_number],
                      args=GRPOConfig(output_dir=str(out_dir), **args), train_dataset=train, processing_class=tok,
                      callbacks=[EvalCadence(before)])
trainer.remove_callback(PrinterCallback)
t_train = time.monotonic()
trainer.train()
train_s = time.monotonic() - t_train
after = greedy_accuracy()
print(json.dumps({"accuracy_before": before, "accuracy_after": after, "train_s": train_s,
                  "steps": trainer.state.global_step,
                  "wall_time_s": time.monotonic() - t0}))
