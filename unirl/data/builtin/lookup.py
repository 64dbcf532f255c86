"""``builtin:lookup``: the prompts of the ``lookup`` environment, ``k?`` for each key k in 0-9. The hidden values
live in the environment and are drawn afresh every episode, so the held-out split asks the same keys on episodes
training never saw (each of its rows is evaluated on a seed of its own)."""

from __future__ import annotations

from typing import Any

SPLITS = ("train", "heldout")
HELDOUT_REPEATS = 5  # 50 held-out episodes: accuracy in steps of 0.02
TRAIN_ROWS = 8000  # enough for 500 steps of 16 prompts without repeating the data order


def rows(split: str, seed: int) -> list[dict[str, Any]]:
    if split not in SPLITS:
        raise ValueError(f"builtin:lookup has splits {list(SPLITS)}, not {split!r}")
    import random

    def row(key: int) -> dict[str, Any]:
        return {"prompt": f"{key}?", "answer": None, "data_source": "unirl/lookup"}

    if split == "heldout":
        return [row(k) for _ in range(HELDOUT_REPEATS) for k in range(10)]
    rng = random.Random(seed)
    return [row(rng.randrange(10)) for _ in range(TRAIN_ROWS)]
