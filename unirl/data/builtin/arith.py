"""Single-digit addition with a held-out split of prompts never seen in training.

Task family: prompts ``"a+b="`` with a, b in 0..max_operand and a + b <= max_sum (default 9, so
every answer is one digit and 55 prompts exist). A fixed fraction of the prompts is held out with a
split seed independent of the run seed, so held-out prompts never appear in training and every seed
is evaluated on the same prompts. Two ways to choose them (option ``holdout``):

- ``swapped`` (default): held-out prompts are taken among a != b, one order of each pair, so every
  held-out ``a+b=`` is unseen while its operand-swapped twin ``b+a=`` is in training. The model has
  to generalise over operand order, which a tiny transformer learns from RL in a few CPU minutes.
- ``random``: any pairs are held out; the model then has to infer sums it has never seen in either
  order, which this tiny model does only partly (see the README's measurements).
"""

from __future__ import annotations

import random
from typing import Any

DEFAULTS: dict[str, Any] = {
    "max_operand": 9,
    "max_sum": 9,
    "holdout": "swapped",
    "holdout_fraction": 0.2,
    "split_seed": 1234,
    "train_rows": 4096,
}
SPLITS = ("train", "heldout")
HOLDOUTS = ("swapped", "random")


def option_problems(options: dict[str, Any]) -> list[tuple[str, object, str]]:
    """(option, value, what is allowed) for each bad option; empty when all are fine."""
    problems: list[tuple[str, object, str]] = []
    for key in sorted(set(options) - set(DEFAULTS)):
        problems.append((key, options[key], f"builtin:arith options are {sorted(DEFAULTS)}"))
    opts = {**DEFAULTS, **options}
    if opts["holdout"] not in HOLDOUTS:
        problems.append(("holdout", opts["holdout"], f"one of {list(HOLDOUTS)}"))
    for key in ("max_operand", "max_sum", "train_rows"):
        if not isinstance(opts[key], int) or opts[key] < 1:
            problems.append((key, opts[key], "an integer >= 1"))
    if not 0 < float(opts["holdout_fraction"]) < 1:
        problems.append(("holdout_fraction", opts["holdout_fraction"], "in (0, 1)"))
    return problems


def pairs(options: dict[str, Any]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(train pairs, held-out pairs): disjoint, deterministic for given options."""
    opts = {**DEFAULTS, **options}
    if opts["holdout"] not in HOLDOUTS:
        raise ValueError(f"builtin:arith option holdout={opts['holdout']!r}; allowed: {list(HOLDOUTS)}")
    universe = [
        (a, b) for a in range(opts["max_operand"] + 1) for b in range(opts["max_operand"] + 1)
        if a + b <= opts["max_sum"]
    ]
    rng = random.Random(opts["split_seed"])
    n_held = round(len(universe) * float(opts["holdout_fraction"]))
    if opts["holdout"] == "random":
        shuffled = list(universe)
        rng.shuffle(shuffled)
        held = shuffled[:n_held]
    else:
        unordered = [(a, b) for a, b in universe if a < b]
        rng.shuffle(unordered)
        if n_held > len(unordered):
            raise ValueError(f"builtin:arith: holdout_fraction={opts['holdout_fraction']} asks for {n_held} swapped "
                             f"prompts; only {len(unordered)} exist")
        held = [(b, a) if rng.random() < 0.5 else (a, b) for a, b in unordered[:n_held]]
    held_set = set(held)
    return [p for p in universe if p not in held_set], held


def rows(split: str, options: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    if split not in SPLITS:
        raise ValueError(f"builtin:arith has splits {list(SPLITS)}, not {split!r}")
    opts = {**DEFAULTS, **options}
    train, held = pairs(opts)

    def row(a: int, b: int) -> dict[str, Any]:
        return {"prompt": f"{a}+{b}=", "answer": str(a + b), "data_source": "unirl/arith"}

    if split == "heldout":
        return [row(a, b) for a, b in held]
    rng = random.Random(seed)
    return [row(*train[rng.randrange(len(train))]) for _ in range(int(opts["train_rows"]))]
