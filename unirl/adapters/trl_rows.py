"""The data rows TRL's trainer draws, each prompt knowing which row it came from.

TRL 1.16 hands ``rollout_func`` the batch's prompts alone (grpo_trainer.py:2210), so an episode could only find its
row by the prompt's text, and two rows that share a prompt and differ in hidden state (a game's secret in the row's
metadata, a different reference) could not both be trained on. Here the dataset the trainer draws from is an Arrow
table of the rows' plain columns plus their index, with a formatting transform (``datasets.Dataset.with_transform``,
applied on every read) that hands each prompt out as a ``str`` or ``list`` that also carries its row's index, and
adds the row's ``metadata`` (kept in Python: metadata of many shapes does not fit one Arrow schema). TRL deep-copies
prompts before calling ``rollout_func``, which keeps both types and their index; every other reader sees a plain
string or list of messages, and reward functions receive ``metadata`` like any dataset column. The text the model
sees is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

ROW_COLUMN = "unirl_row"
"""The index column: which of the run's rows a dataset entry is."""
PLAIN_COLUMNS = ("prompt", "reference", "data_source")


class RowPrompt(str):
    """A text prompt that knows the index of its data row."""

    row: int

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by gather_object across ranks: the index goes too
        return (with_row, (str(self), self.row))


class RowMessages(list[Any]):
    """A chat prompt (a list of messages) that knows the index of its data row."""

    row: int

    def __reduce__(self) -> tuple[Any, ...]:
        return (with_row, (list(self), self.row))


def with_row(prompt: Any, row: int) -> Any:
    """``prompt`` as the same text or messages, carrying ``row``."""
    carried: RowPrompt | RowMessages = RowPrompt(prompt) if isinstance(prompt, str) else RowMessages(prompt)
    carried.row = int(row)
    return carried


def row_of(prompt: Any) -> int | None:
    """The row index a prompt carries (None for a prompt that did not come from :func:`rows_dataset`)."""
    row = getattr(prompt, "row", None)
    return row if isinstance(row, int) else None


def rows_dataset(rows: Sequence[Mapping[str, Any]]) -> Any:
    """A ``datasets.Dataset`` of ``rows`` (each ``prompt``, ``reference``, ``data_source`` and ``metadata``) whose
    reads give each prompt its row index and each row its metadata."""
    from datasets import Dataset

    table = Dataset.from_list([{**{k: row[k] for k in PLAIN_COLUMNS}, ROW_COLUMN: i} for i, row in enumerate(rows)])
    metadata = [dict(row.get("metadata") or {}) for row in rows]

    def carry(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        batch["prompt"] = [with_row(p, i) for p, i in zip(batch["prompt"], batch[ROW_COLUMN], strict=True)]
        batch["metadata"] = [metadata[i] for i in batch[ROW_COLUMN]]
        return batch

    return table.with_transform(carry)
