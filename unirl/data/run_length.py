"""A run counted in passes over its data (``algorithm.epochs``): how many steps that is, where the rows can be counted.

Every backend drops a pass's incomplete last batch (verl's ``drop_last=True`` dataloader, OpenRLHF's prompt
dataloader, TRL's ``RepeatSampler``), so ``epochs`` passes over ``rows`` prompts are
``epochs x floor(rows / prompts_per_step)`` steps. The rows are counted without loading them where that is cheap
and exact (a builtin dataset, a local .jsonl/.json/.parquet file: its lines, its list, its parquet metadata); a hub
dataset or a file that is not on this machine cannot be counted here, and the backend then counts them at launch.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from unirl.recipe.schema import BUILTIN_PREFIX, HUB_PREFIX, DataConfig, Recipe, split_source


@dataclass(frozen=True)
class EpochSteps:
    steps: int
    rows: int
    per_pass: int
    """Steps in one pass: floor(rows / prompts_per_step)."""

    def arithmetic(self, epochs: int, prompts_per_step: int) -> str:
        return (f"{epochs} epochs x floor({self.rows} rows / {prompts_per_step} prompts a step) = {epochs} x "
                f"{self.per_pass} = {self.steps} steps (a pass's incomplete last batch is dropped)")


def count_rows(source: str, data: DataConfig, seed: int) -> int | None:
    """The rows of one training source, or None where they cannot be counted here."""
    base = split_source(source)[0]
    if base.startswith(BUILTIN_PREFIX):
        from unirl.data.loading import load_rows

        try:
            return len(load_rows(source, data, seed, "train", "data.train"))
        except Exception:  # a wrong name or option: validation reports it
            return None
    if base.startswith(HUB_PREFIX):
        return None  # asks the hub, or reads a folder only the datasets library resolves
    path = Path(base).expanduser()
    try:
        stat = path.stat()
    except OSError:
        return None
    return _file_rows(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _file_rows(path: str, mtime_ns: int, size: int) -> int | None:
    """Rows of a local data file (cached by path, modification time and size)."""
    try:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        if path.endswith(".json"):
            loaded = json.loads(Path(path).read_text(encoding="utf-8"))
            return len(loaded) if isinstance(loaded, list) else None
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    except Exception:  # unreadable: the preflight reports it with its reason
        return None


def training_rows(recipe: Recipe) -> int | None:
    """The rows a run trains on (every source, at most ``data.train_rows``), or None where one cannot be counted."""
    total = 0
    for source in recipe.data.train_sources:
        rows = count_rows(source, recipe.data, recipe.seed)
        if rows is None:
            return None
        total += rows
    return min(total, recipe.data.train_rows) if recipe.data.train_rows else total


def epoch_steps(recipe: Recipe) -> EpochSteps | None:
    """``algorithm.epochs`` as steps, or None when the recipe has no epochs or its rows cannot be counted here."""
    epochs = recipe.algorithm.epochs
    if epochs is None:
        return None
    rows = training_rows(recipe)
    if rows is None:
        return None
    per_pass = rows // recipe.algorithm.prompts_per_step
    return EpochSteps(epochs * per_pass, rows, per_pass)


def counted_at_launch(recipe: Recipe) -> bool:
    """``algorithm.epochs`` whose rows cannot be counted here: the backend counts the steps itself at launch."""
    return recipe.algorithm.epochs is not None and epoch_steps(recipe) is None
