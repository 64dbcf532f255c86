"""Data export: the recipe's prompts as one canonical sample schema, written in each backend's format.

Every backend reads its data from files it understands (verl parquet, OpenRLHF / slime / NeMo RL JSONL).
unirl loads the recipe's source once (builtin, local file or hub), renders prompts with the recipe's
template, and turns each row into a :class:`CanonicalRow`; an exporter then writes the backend's row shape.

The training file holds exactly ``steps x prompts_per_step`` prompts in the order they will be used (a
seeded reshuffle per pass over the data), and the backends are told not to shuffle again: every backend
sees the same prompts in the same order, which is what makes two backends' runs comparable.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirl.backend.plan import DataExport, in_run_dir
from unirl.data.builtin.tiny_model import warn_unknown_characters
from unirl.data.loading import limit, load_rows, reference_of, render_prompt, row_metadata
from unirl.errors import FieldError, UnirlError
from unirl.recipe.schema import Recipe, split_source
from unirl.rewards.row_origin import tag_reference

# The key under which a row's prompt text travels to the reward adapter when the backend keeps only messages.
PROMPT_TEXT_KEY = "unirl_prompt"


@dataclass
class CanonicalRow:
    """One prompt as every backend's exporter sees it."""

    index: int
    prompt: str | list[dict[str, str]]
    reference: str | None
    data_source: str
    split: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def messages(self) -> list[dict[str, str]]:
        return self.prompt if isinstance(self.prompt, list) else [{"role": "user", "content": self.prompt}]

    @property
    def text(self) -> str:
        """The prompt as plain text (message contents joined) for rewards that read ``sample.prompt``."""
        return self.prompt if isinstance(self.prompt, str) else "".join(str(m.get("content", "")) for m in self.prompt)


def canonical_rows(recipe: Recipe, export: DataExport) -> list[CanonicalRow]:
    """The recipe's rows for ``export.split``, rendered, limited, and cycled to ``export.rows`` if set."""
    data = recipe.data
    key = f"data.{export.split}"
    default_split = "train" if export.split == "train" else "test"
    raw = load_rows(export.source, data, recipe.seed, default_split, key)
    raw = limit(raw, data.train_rows if export.split == "train" else data.eval_rows, recipe.seed)
    if export.rows is not None:
        raw = list(_cycle(raw, export.rows, recipe.seed, export.pass_rows))
    source_name = split_source(export.source)[0] if isinstance(export.source, str) else "data"
    out = []
    for i, row in enumerate(raw):
        out.append(CanonicalRow(
            index=i, prompt=render_prompt(row, data), reference=reference_of(row, data),
            data_source=str(row.get("data_source") or source_name), split=export.split,
            metadata=row_metadata(row, data)))
    # A builtin model's character tokenizer turns what it does not know into <unk>: said once, for the whole file.
    warn_unknown_characters(recipe.model.path, f"{key}={export.source}", (r.prompt for r in out))
    return out


def _cycle(rows: list[dict[str, Any]], n: int, seed: int, pass_rows: int | None = None) -> Iterator[dict[str, Any]]:
    """``n`` rows: whole passes over ``rows``, each pass in a fresh seeded order (cut to ``pass_rows`` when set)."""
    rng = random.Random(seed)
    produced = 0
    while produced < n:
        order = list(rows)
        rng.shuffle(order)
        if pass_rows is not None:
            order = order[:pass_rows]
        yield from order[: n - produced]
        produced += min(len(order), n - produced)


# --- one row shape per backend --------------------------------------------------------------------------


def verl_row(row: CanonicalRow) -> dict[str, Any]:
    """verl's RL dataset row (examples/data_preprocess/gsm8k.py): chat prompt, reward_model.ground_truth."""
    return {
        "data_source": row.data_source,
        "prompt": row.messages,
        "ability": str(row.metadata.get("ability", "math")),
        "reward_model": {"style": "rule", "ground_truth": row.reference or ""},
        # split and index last: the row's place in unirl's file, which the reward adapter turns into its step
        # (unirl/adapters/common.py row_tags); a column of the user's with the same name cannot move it
        "extra_info": {PROMPT_TEXT_KEY: row.text, **{k: v for k, v in row.metadata.items() if k != "ability"},
                       "split": row.split, "index": row.index},
    }


def openrlhf_row(row: CanonicalRow) -> dict[str, Any]:
    """OpenRLHF's prompt dataset: ``--data.input_key input --data.label_key label``, ``datasource`` for eval.

    The label is the only column OpenRLHF hands the reward function and the agent, so it carries the row's place
    and metadata with the reference (unirl/rewards/row_origin.py), which unirl's OpenRLHF adapters read back."""
    return {"input": row.prompt, "label": tag_reference(row.reference, row.split, row.index, row.metadata),
            "datasource": row.data_source}


def slime_row(row: CanonicalRow) -> dict[str, Any]:
    """slime/vime: ``--input-key prompt --label-key label --metadata-key metadata``; ``split`` and ``index`` tell the
    reward adapter the row's step (unirl/adapters/common.py ``row_tags``). The user's metadata cannot replace them."""
    return {"prompt": row.prompt, "label": row.reference or "",
            "metadata": {"data_source": row.data_source, **row.metadata, "split": row.split, "index": row.index}}


def nemo_rl_row(row: CanonicalRow) -> dict[str, Any]:
    """NeMo RL's ResponseDataset row (``input_key: input``, ``output_key: output``), both plain text.

    ResponseDataset makes each row ``[user: input, assistant: output]`` and drops every other column (the task
    name comes from the file's path; response_dataset.py:54-85 @ v0.7.0); math_hf_data_processor then renders
    ``input`` with the chat template and hands ``output`` to the environment as ``ground_truth``
    (processors.py:389-392). A chat prompt therefore has to be one user message, whose content is the input.
    ``data_source`` stays in the file for people reading it; NeMo RL does not pass it on. ``output`` is the only
    column that reaches the environment, so it carries the row's place and metadata with the reference
    (unirl/rewards/row_origin.py), which unirl's NeMo RL environment reads back.
    """
    if isinstance(row.prompt, str):
        text = row.prompt
    elif len(row.prompt) == 1 and row.prompt[0].get("role") == "user":
        text = str(row.prompt[0].get("content", ""))
    else:
        roles = [m.get("role") for m in row.prompt]
        raise FieldError(f"data.{row.split}", f"row {row.index} with messages {roles}",
                         "NeMo RL's math_hf_data_processor takes one user message per prompt (a system prompt only "
                         "from a file for the whole dataset)")
    return {"input": text, "output": tag_reference(row.reference, row.split, row.index, row.metadata),
            "data_source": row.data_source}


FORMATS: dict[str, tuple[Callable[[CanonicalRow], dict[str, Any]], str]] = {
    "verl_parquet": (verl_row, "parquet"),
    "openrlhf_jsonl": (openrlhf_row, "jsonl"),
    "slime_jsonl": (slime_row, "jsonl"),
    "nemo_rl_jsonl": (nemo_rl_row, "jsonl"),
}
DATA_DIR = "data"


def export_path(split: str, format: str) -> str:
    """Where a launch writes one split in one format: ``{run_dir}/data/<split>.<parquet|jsonl>``."""
    return in_run_dir(DATA_DIR, f"{split}.{FORMATS[format][1]}")


def write_export(recipe: Recipe, export: DataExport) -> int:
    """Write one export to ``export.path`` (already resolved); returns the number of rows written."""
    if export.format not in FORMATS:
        raise UnirlError(f"unknown data export format {export.format!r}; known: {sorted(FORMATS)}")
    to_row, kind = FORMATS[export.format]
    rows = [to_row(r) for r in canonical_rows(recipe, export)]
    if not rows:
        raise FieldError(f"data.{export.split}", export.source, "gives no rows to export")
    path = Path(export.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    if kind == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise UnirlError("writing parquet for this backend needs pyarrow in unirl's environment: "
                             "pip install pyarrow") from exc
        pq.write_table(pa.Table.from_pylist(rows), tmp)
    else:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)
    return len(rows)
