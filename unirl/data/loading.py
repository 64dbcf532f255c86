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
from unirl.data.columns import MISSING, lookup, resolve
from unirl.errors import FieldError
from unirl.recipe.schema import BUILTIN_PREFIX, HUB_PREFIX, DataConfig, hub_source, split_source


def load_rows(source: str | list[str], data: DataConfig, seed: int, default_split: str, key: str
              ) -> list[dict[str, Any]]:
    """Every row of ``source``, or of each source of a list one after the other (a row without a ``data_source``
    column gets its file's or dataset's name there, so a reward can tell them apart); a dotted
    ``data.prompt_key`` / ``data.answer_key`` is also set under its own name in each row it reaches
    (:func:`unirl.data.columns.resolve`), so ``row[data.prompt_key]`` reads nested columns."""
    if not isinstance(source, str):
        if len(source) == 1:
            return load_rows(source[0], data, seed, default_split, key)
        rows: list[dict[str, Any]] = []
        for one in source:
            name = split_source(one)[0]
            rows += [row if row.get("data_source") else {**row, "data_source": name}
                     for row in load_rows(one, data, seed, default_split, key)]
        return rows
    base, split = split_source(source)
    split = split or default_split
    if base.startswith(BUILTIN_PREFIX):
        name = base[len(BUILTIN_PREFIX):]
        if name == "arith":
            from unirl.data.builtin import arith

            rows = arith.rows(split, dict(data.options), seed)
        elif name == "lookup":
            from unirl.data.builtin import lookup as lookup_rows

            rows = lookup_rows.rows(split, seed)
        else:
            raise FieldError(key, source, f"builtin datasets are {list(BUILTIN_DATASETS)}")
    elif base.startswith(HUB_PREFIX):
        rows = _hub_rows(key, source, split)
    else:
        rows = _read_file(Path(base).expanduser(), key)
    if not rows:
        raise FieldError(key, source, "holds no rows")
    rows = resolve(rows, (data.prompt_key, data.answer_key))
    if data.prompt_key not in rows[0]:
        raise FieldError("data.prompt_key", data.prompt_key,
                         f"row 0 of {source} has columns {sorted(rows[0])}; choose one of them")
    return rows


def _hub_rows(key: str, source: str, split: str) -> list[dict[str, Any]]:
    """``datasets.load_dataset(name, config, split=split)``: a hub id, or a local dataset folder laid out like one
    (data files, or a README.md whose YAML header lists ``configs:``). A dataset with several configs and none named
    is the user's choice to make, reported as such."""
    import datasets

    name, config = hub_source(split_source(source)[0])
    try:
        loaded = datasets.load_dataset(name, config, split=split)
    except ValueError as exc:  # datasets' own words for a missing or unknown config or split
        text = str(exc)
        if "Config name is missing" in text or "BuilderConfig" in text or "Unknown split" in text:
            raise FieldError(key, source, hub_hint(name, config, split, text)) from None
        raise
    return [dict(r) for r in loaded]


def hub_hint(name: str, config: str | None, split: str, reason: str) -> str:
    """datasets' reason for refusing a config or split, and the source syntax that names one."""
    message = " ".join(line.strip() for line in reason.strip().splitlines()[:2])
    if "split" in message.split(".")[0].lower():
        return f"{message}; name one as hf:{name}{':' + config if config else ''}@<split>"
    return f"{message}; name one as hf:{name}:<config>@{split}"


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


def reference_of(row: dict[str, Any], data: DataConfig) -> str | None:
    """The row's reference answer as text (``data.answer_key``, dotted for nested columns); None when it has none."""
    if data.answer_key is None:
        return None
    value = lookup(row, data.answer_key)
    return None if value is MISSING or value is None else str(value)


def row_metadata(row: dict[str, Any], data: DataConfig) -> dict[str, Any]:
    """A row's other columns, as every backend hands them to rewards and environments (``Sample.metadata``,
    ``Task.metadata``): all but the prompt, the answer and ``data_source``, and only what JSON can carry."""
    used = {data.prompt_key, data.answer_key, "data_source"}
    return {k: v for k, v in row.items() if k not in used and _jsonable(v)}


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def render_prompt(row: dict[str, Any], data: DataConfig) -> str | list[dict[str, str]]:
    """The prompt as the backend receives it: text through the template, or chat messages."""
    prompt = lookup(row, data.prompt_key)
    if prompt is MISSING:
        raise FieldError("data.prompt_key", data.prompt_key, f"a row has no such column (its columns: {sorted(row)})")
    if isinstance(prompt, list):  # chat messages pass through unchanged
        return prompt
    text = data.prompt_template.format(**{**row, "prompt": prompt})
    return [{"role": "user", "content": text}] if data.chat_template else text
