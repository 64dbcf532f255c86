"""Recipe keys into a data row: a column by name, or a dotted path into nested columns.

Datasets ship nested columns: verl's preprocessed GSM8K parquet keeps the reference in
``reward_model.ground_truth`` (a struct column, which pyarrow and ``datasets`` give as a dict), SQuAD keeps
``answers.text`` (a list). ``data.answer_key=reward_model.ground_truth`` reaches it; a column whose literal name
holds the dots (a flattened table) wins over the path. A list is indexed by a number (``answers.text.0``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MISSING = object()


def lookup(row: Mapping[str, Any], key: str) -> Any:
    """``row[key]``, else the value at the dotted path ``key``; :data:`MISSING` when neither exists."""
    if key in row:
        return row[key]
    if "." not in key:
        return MISSING
    value: Any = row
    for part in key.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list | tuple) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return MISSING
    return value


def resolve(rows: list[dict[str, Any]], keys: Iterable[str | None]) -> list[dict[str, Any]]:
    """Each row with every dotted ``key`` it reaches also under its literal name, so that ``row[key]`` and
    ``row.get(key)`` read the nested value everywhere a row goes (the TRL runner, the exporters, templates)."""
    dotted = [k for k in keys if k and "." in k]
    if not dotted:
        return rows
    out = []
    for row in rows:
        found = {k: v for k in dotted if k not in row and (v := lookup(row, k)) is not MISSING}
        out.append({**row, **found} if found else row)
    return out


def describe(value: Any) -> str:
    """What a column holds, for a message: its type and, for an object, its keys."""
    if isinstance(value, Mapping):
        return f"an object with keys {sorted(map(str, value))}"
    return f"a {type(value).__name__}"
