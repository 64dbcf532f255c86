"""Load prompt rows from a builtin task, a local JSONL/JSON/parquet file, or a hub dataset.

Every loader yields plain dicts; the recipe's prompt/answer keys pick the columns. Heavy readers
(pyarrow, datasets) are imported only when that source type is used.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from unirl.data.checks import BUILTIN_DATASETS
from unirl.errors import FieldError
from unirl.recipe.schema import BUILTIN_PREFIX, HUB_PREFIX, DataConfig, split_source


def load_rows(source: str, data: DataConfig, seed: int, default_split: str, key: str) -> list[dict[str, Any]]:
    base, split = split_source(source)
    split = split or default_split
    if base.startswith(BUILTIN_PREFIX):
        name = base[len(BUILTIN_PREFIX):]
        if name == "arith":
            from unirl.data.builtin import arith

            rows = arith.rows(split, dict(data.options), seed)
        else:
            raise FieldError(key, source, f"builtin datasets are {list(BUILTIN_DATASETS)}")
    elif base.startswith(HUB_PREFIX):
        import datasets

        rows = [dict(r) for r in datasets.load_dataset(base[len(HUB_PREFIX):], split=split)]
    else:
        rows = _read_file(Path(base).expanduser(), key)
    if not rows:
        raise FieldError(key, source, "holds no rows")
    if data.prompt_key not in rows[0]:
        raise FieldError("data.prompt_key", data.prompt_key,
                         f"row 0 of {source} has columns {sorted(rows[0])}; choose one of them")
    return rows


def _read_file(path: Path, key: str) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
        return rows
    if path.suffix == ".json":
        loaded = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(loaded, list):
            raise FieldError(key, str(path), "a .json data file must hold a list of objects")
        return loaded
    from unirl.jsonl import JsonlError, objects

    try:
        return [row for _, row in objects(path)]
    except JsonlError as exc:
        raise FieldError(key, str(path), exc.reason if not exc.lineno else f"line {exc.lineno}: {exc.reason}") \
            from None


def limit(rows: list[dict[str, Any]], n: int | None, seed: int) -> list[dict[str, Any]]:
    if n is None or n >= len(rows):
        return rows
    picked = list(rows)
    random.Random(seed).shuffle(picked)
    return picked[:n]


def fingerprint(rows: list[dict[str, Any]]) -> str:
    """sha256 of the rows in order, as canonical JSON: identical data gives an identical print."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(json.dumps(row, sort_keys=True, default=str).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def render_prompt(row: dict[str, Any], data: DataConfig) -> str | list[dict[str, str]]:
    """The prompt as the backend receives it: text through the template, or chat messages."""
    prompt = row[data.prompt_key]
    if isinstance(prompt, list):  # chat messages pass through unchanged
        return prompt
    text = data.prompt_template.format(**{**row, "prompt": prompt})
    return [{"role": "user", "content": text}] if data.chat_template else text
