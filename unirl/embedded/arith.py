"""Single-digit addition with a held-out split of operand pairs never seen in training.

Task family: prompts ``"a+b="`` with a, b in 0..max_operand and a + b <= max_sum (default 9, so
every answer is one digit and 55 pairs exist). A fixed fraction of the *pairs* (not rows) is held
out, with a split seed independent of the run seed, so held-out prompts never appear in training
and every seed is evaluated on the same prompts. A tiny transformer can generalise here because
the answer is a smooth function of two digit embeddings it sees in other pairs.
"""

from __future__ import annotations

import random
from typing import Any

DEFAULTS: dict[str, Any] = {
    "max_operand": 9,
    "max_sum": 9,
    "holdout_fraction": 0.2,
    "split_seed": 1234,
    "train_rows": 4096,
}
SPLITS = ("train", "heldout")


def pairs(options: dict[str, Any]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(train pairs, held-out pairs): disjoint, deterministic for given options."""
    opts = {**DEFAULTS, **options}
    universe = [
        (a, b) for a in range(opts["max_operand"] + 1) for b in range(opts["max_operand"] + 1)
        if a + b <= opts["max_sum"]
    ]
    random.Random(opts["split_seed"]).shuffle(universe)
    n_held = round(len(universe) * float(opts["holdout_fraction"]))
    return universe[n_held:], universe[:n_held]


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
