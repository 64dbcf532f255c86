"""The frozen batch every backend's loss code is run on: built from the recipe, seeded, saved as plain data.

- **Prompts** from the recipe's training data (its first rows, after the run's own shuffle), ``samples_per_prompt``
  completions each (at most 8 per group, at most 4 groups): enough for every group statistic, small enough to read.
- **Completions** sampled from the builtin tiny model (random weights from the seed): their token ids, their text,
  and the per-token log-probabilities and entropies of that model, which stands for the current policy. The loss
  code a certificate checks takes log-probabilities, not a model; a small local model gives realistic ones.
  In every group one completion is the row's reference answer, so rewards differ within a group; the last group's
  completions are all the same, so one group has zero reward variance (the epsilon case).
- **Rewards** from the recipe's own rewards, through the reward runtime, on the completions' text.
- **The sampling policy and the reference policy**: the current log-probabilities shifted per token so that the
  importance ratios fall inside, at and beyond both clip bounds and past a dual clip of 3, and the reference
  shifted by noise, so that every KL estimator is non-zero.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unirl.errors import UnirlError

if TYPE_CHECKING:
    import torch

    from unirl.backend.parity.reference import Tensors
    from unirl.recipe.schema import Recipe
    from unirl.rewards.spec import RewardRuntimeSpec

FORMAT = 1
MAX_GROUPS = 4
MAX_GROUP_SIZE = 8
MAX_TOKENS = 8
RATIOS = (0.4, 0.7, 0.79, 0.85, 0.97, 1.0, 1.03, 1.15, 1.21, 1.35, 1.9, 4.5)
"""Importance ratios pi / pi_old the batch's tokens cycle through (shuffled): under and over both clip bounds of
every preset (0.2; DAPO's 0.28 above), and past a dual clip of 3."""
PROBE_MODEL = "tiny-arith"


@dataclass
class FrozenBatch:
    """B completions in G-sized groups, padded to T tokens; every list is plain data (JSON)."""

    seed: int
    prompts: list[str]
    completions: list[str]
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    group: list[int]
    rewards: list[float]
    mask: list[list[float]]
    logp: list[list[float]]
    old_logp: list[list[float]]
    ref_logp: list[list[float]]
    entropy: list[list[float]]
    group_size: int
    values: list[list[float]] = field(default_factory=list)
    """[B][T] a critic's value estimates (for PPO's GAE): the reward's scale, seeded."""
    truncated: list[bool] = field(default_factory=list)
    """Completions cut at the token limit (no end-of-sequence token)."""
    notes: list[str] = field(default_factory=list)
    format: int = FORMAT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FrozenBatch:
        return cls(**data)

    def tensors(self, dtype: Any = None) -> Tensors:
        """As :class:`unirl.backend.parity.reference.Tensors` (float32 by default: what the backends compute in)."""
        import torch

        from unirl.backend.parity.reference import Tensors

        dtype = dtype or torch.float32

        def t(x: list[Any]) -> torch.Tensor:
            return torch.tensor(x, dtype=dtype)

        return Tensors(rewards=t(self.rewards), group=torch.tensor(self.group, dtype=torch.long), mask=t(self.mask),
                       logp=t(self.logp), old_logp=t(self.old_logp), ref_logp=t(self.ref_logp),
                       entropy=t(self.entropy), values=t(self.values) if self.values else t(self.mask) * 0,
                       truncated=torch.tensor(self.truncated, dtype=torch.bool) if self.truncated else None)

    def save(self, path: Path) -> Path:
        import json

        path.write_text(json.dumps(self.to_dict()) + "\n", encoding="utf-8")
        return path


def training_rows(recipe: Recipe, groups: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The recipe's first training rows as prompt text and reference; notes say what could not be read. Nothing is
    asked of the hub: a hub dataset, or a file that is not on this machine (a cluster's path), gives builtin:arith's
    prompts instead (the loss code the certificate runs does not read prompts)."""
    from dataclasses import replace

    from unirl.data.builtin.tiny_model import prompt_text
    from unirl.data.loading import limit, load_rows, reference_of, render_prompt
    from unirl.recipe.schema import BUILTIN_PREFIX, DataConfig, is_local_path

    source, data, notes = recipe.data.train_sources[0], recipe.data, []
    if not (source.startswith(BUILTIN_PREFIX) or (is_local_path(source) and Path(source).expanduser().exists())):
        notes.append(f"data.train={source} is not read for the certificate (a hub dataset, or not on this "
                     "machine): the batch's prompts are builtin:arith's")
        source, data = "builtin:arith@train", replace(DataConfig(), train="builtin:arith@train")
    try:
        raw = limit(load_rows(source, data, recipe.seed, "train", "data.train"), data.train_rows, recipe.seed)
    except Exception as exc:
        raise UnirlError(f"data.train={source}: the certificate's prompts could not be read: {exc}") from exc
    rows = [{"prompt": prompt_text(render_prompt(r, data)), "reference": reference_of(r, data)} for r in raw[:groups]]
    return rows, notes


def build(recipe: Recipe, rewards: RewardRuntimeSpec, *, seed: int | None = None) -> FrozenBatch:
    """The recipe's frozen batch (deterministic for a recipe and seed)."""
    import torch

    from unirl.data.builtin import tiny_model
    from unirl.rewards.contract import Sample
    from unirl.rewards.executor import RewardExecutor

    seed = recipe.seed if seed is None else seed
    groups = max(2, min(MAX_GROUPS, recipe.algorithm.prompts_per_step))
    size = max(2, min(MAX_GROUP_SIZE, recipe.algorithm.samples_per_prompt))
    tokens = max(2, min(MAX_TOKENS, recipe.algorithm.max_new_tokens))
    rows, notes = training_rows(recipe, groups)
    model, tok = tiny_model.build(PROBE_MODEL, seed)
    model.eval()
    torch.manual_seed(seed)
    eos = int(tok.eos_token_id)
    prompts, completions, prompt_ids, completion_ids, group = [], [], [], [], []
    for g, row in enumerate(rows):
        ids = tok(row["prompt"])["input_ids"][-64:]
        with torch.no_grad():
            sampled = model.generate(torch.tensor([ids] * size), attention_mask=torch.ones(size, len(ids),
                                                                                            dtype=torch.long),
                                     do_sample=True, max_new_tokens=tokens, temperature=1.0, top_k=None, top_p=None,
                                     pad_token_id=tok.pad_token_id, eos_token_id=eos)
        outs = [cut_at_eos(s[len(ids):].tolist(), eos) for s in sampled]
        if row["reference"]:
            answer = [*tok(str(row["reference"]), add_special_tokens=False)["input_ids"][:tokens - 1], eos]
            outs[0] = answer  # one right answer a group: rewards differ within it
        if g == len(rows) - 1:
            outs = [list(outs[0])] * size  # one group of equal completions: zero reward variance
        for out in outs:
            prompts.append(row["prompt"])
            prompt_ids.append(ids)
            completion_ids.append(out)
            completions.append(tok.decode(out, skip_special_tokens=True))
            group.append(g)
    width = max(map(len, completion_ids))
    logp, entropy, mask = policy_numbers(model, prompt_ids, completion_ids, width)
    rng = random.Random(seed)
    ratios = [[rng.choice(RATIOS) for _ in range(width)] for _ in completion_ids]
    old_logp = [[lp - math.log(r) for lp, r in zip(row_lp, row_r, strict=True)] for row_lp, row_r in
                zip(logp, ratios, strict=True)]
    ref_logp = [[lp + rng.gauss(0.0, 0.3) for lp in row_lp] for row_lp in logp]
    values = [[rng.uniform(-0.5, 1.5) for _ in range(width)] for _ in completion_ids]
    with RewardExecutor(rewards) as executor:
        scored = executor.score([Sample(prompt=p, completion=c, reference=r, truncated=bool(ids and ids[-1] != eos),
                                        completion_tokens=len(ids))
                                 for p, c, r, ids in zip(prompts, completions,
                                                         [rows[g]["reference"] for g in group], completion_ids,
                                                         strict=True)])
    totals = []
    for s in scored:
        if s.total is None:
            notes.append(f"a reward call failed ({'; '.join(s.errors.values())[:160]}): that completion's reward "
                         "is 0 in the batch")
        totals.append(0.0 if s.total is None else float(s.total))
    return FrozenBatch(seed=seed, prompts=prompts, completions=completions, prompt_ids=prompt_ids,
                       completion_ids=completion_ids, group=group, rewards=totals, mask=mask,
                       logp=masked(logp, mask), old_logp=masked(old_logp, mask), ref_logp=masked(ref_logp, mask),
                       entropy=masked(entropy, mask), values=masked(values, mask), group_size=size,
                       truncated=[not ids or ids[-1] != eos for ids in completion_ids], notes=notes)


def cut_at_eos(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def masked(values: list[list[float]], mask: list[list[float]]) -> list[list[float]]:
    return [[v if m else 0.0 for v, m in zip(row, row_mask, strict=True)] for row, row_mask in
            zip(values, mask, strict=True)]


def policy_numbers(model: Any, prompt_ids: list[list[int]], completion_ids: list[list[int]],
                   width: int) -> tuple[list[list[float]], list[list[float]], list[list[float]]]:
    """Per completion token: the model's log-probability of it and its entropy, padded to ``width``; and the mask."""
    import torch

    logps, entropies, masks = [], [], []
    for prompt, completion in zip(prompt_ids, completion_ids, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1:-1].float()
        log_softmax = torch.log_softmax(logits, dim=-1)
        picked = log_softmax.gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)
        entropy = -(log_softmax.exp() * log_softmax).sum(-1)
        pad = width - len(completion)
        logps.append(picked.tolist() + [0.0] * pad)
        entropies.append(entropy.tolist() + [0.0] * pad)
        masks.append([1.0] * len(completion) + [0.0] * pad)
    return logps, entropies, masks
