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

A chat prompt's index also rides on its first text message's content: accelerate rebuilds every list and dict a
batch holds on its way to the device (``recursively_apply`` -> ``type(obj)(generator)``), which drops a list
subclass's attributes but hands strings through as the same objects.
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
        row = row_of(self)
        return (with_row, (list(self), row)) if row is not None else (list, (list(self),))


def with_row(prompt: Any, row: int) -> Any:
    """``prompt`` as the same text or messages, carrying ``row``."""
    if isinstance(prompt, str):
        text = RowPrompt(prompt)
        text.row = int(row)
        return text
    messages = RowMessages(_content_tagged(prompt, int(row)))
    messages.row = int(row)
    return messages


def _content_tagged(messages: Any, row: int) -> list[Any]:
    """``messages`` with the first text content carrying ``row`` (the copy that survives accelerate's rebuild)."""
    tagged = list(messages)
    first = _first_text(tagged)
    if first is not None:
        tagged[first] = {**tagged[first], "content": with_row(tagged[first]["content"], row)}
    return tagged


def _first_text(messages: list[Any]) -> int | None:
    """The index of the first message whose content is text (None: none is)."""
    return next((i for i, m in enumerate(messages) if isinstance(m, Mapping) and isinstance(m.get("content"), str)),
                None)


def row_of(prompt: Any) -> int | None:
    """The row index a prompt carries (None for a prompt that did not come from :func:`rows_dataset`)."""
    row = getattr(prompt, "row", None)
    if isinstance(row, int):
        return row
    if isinstance(prompt, list):  # a chat prompt rebuilt as another list: its first text content still knows
        first = _first_text(prompt)
        return None if first is None else row_of(prompt[first]["content"])
    return None


def rows_dataset(rows: Sequence[Mapping[str, Any]]) -> Any:
    """A ``datasets.Dataset`` of ``rows`` (each ``prompt``, ``reference``, ``data_source`` and ``metadata``) whose
    reads give each prompt its row index and each row its metadata."""
    from datasets import Dataset

    table = Dataset.from_list([{**{k: row[k] for k in PLAIN_COLUMNS}, ROW_COLUMN: i} for i, row in enumerate(rows)])
    return table.with_transform(CarryRows([dict(row.get("metadata") or {}) for row in rows]))


class CarryRows:
    """The read transform: each prompt carries its row's index and each row gets its metadata. A class, not a
    closure, so that ``datasets`` can fingerprint it (a closure gets a random hash and a warning on every run)."""

    def __init__(self, metadata: list[dict[str, Any]]) -> None:
        self.metadata = metadata

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        batch["prompt"] = [with_row(p, i) for p, i in zip(batch["prompt"], batch[ROW_COLUMN], strict=True)]
        batch["metadata"] = [self.metadata[i] for i in batch[ROW_COLUMN]]
        return batch
