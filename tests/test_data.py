"""Data loaders on local files (JSONL, JSON, parquet) and the builtin arithmetic task's held-out split."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from unirl.data.builtin import arith
from unirl.data.loading import fingerprint, load_rows
from unirl.errors import FieldError
from unirl.recipe.schema import DataConfig

ROWS = [{"question": "2+2=", "solution": "4", "data_source": "toy"}, {"question": "3+3=", "solution": "6"}]


def test_arith_held_out_prompts_never_appear_in_training() -> None:
    train = {r["prompt"] for r in arith.rows("train", {}, seed=0)}
    held = {r["prompt"] for r in arith.rows("heldout", {}, seed=0)}
    assert len(held) == 11 and len(train) == 44
    assert not train & held
    swapped = {f"{p[2]}+{p[0]}=" for p in held}  # the default split keeps each held-out prompt's twin in training
    assert swapped <= train
    # the split does not depend on the run's seed: every seed is evaluated on the same prompts
    assert held == {r["prompt"] for r in arith.rows("heldout", {}, seed=5)}
    assert all(int(r["answer"]) == eval(r["prompt"][:-1]) for r in arith.rows("heldout", {}, seed=0))


def test_arith_options_change_the_task() -> None:
    rows = arith.rows("heldout", {"max_operand": 4, "max_sum": 8, "holdout_fraction": 0.4}, seed=0)
    assert len(rows) == 10 and all(int(r["answer"]) <= 8 for r in rows)
    train = {r["prompt"] for r in arith.rows("train", {"holdout": "random"}, seed=0)}
    held = {r["prompt"] for r in arith.rows("heldout", {"holdout": "random"}, seed=0)}
    assert len(held) == 11 and not train & held
    with pytest.raises(ValueError, match="holdout='odd'"):
        arith.rows("heldout", {"holdout": "odd"}, seed=0)


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".parquet"])
def test_local_files_load_with_recipe_keys(suffix: str, isolated: Path) -> None:
    path = isolated / f"train{suffix}"
    if suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    elif suffix == ".json":
        path.write_text(json.dumps(ROWS))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(ROWS), path)
    data = DataConfig(train=str(path), prompt_key="question", answer_key="solution")
    rows = load_rows(str(path), data, seed=0, default_split="train", key="data.train")
    assert [r["question"] for r in rows] == ["2+2=", "3+3="]
    assert fingerprint(rows) == fingerprint([dict(r) for r in rows])


def test_missing_prompt_column_names_the_columns(isolated: Path) -> None:
    path = isolated / "train.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n")
    with pytest.raises(FieldError, match=r"has columns \['data_source', 'question', 'solution'\]"):
        load_rows(str(path), DataConfig(train=str(path)), seed=0, default_split="train", key="data.train")


def test_bad_jsonl_line_is_reported_with_its_number(isolated: Path) -> None:
    path = isolated / "train.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(FieldError, match="line 2: not JSON"):
        load_rows(str(path), DataConfig(train=str(path)), seed=0, default_split="train", key="data.train")


def test_hub_source_goes_through_datasets_load_dataset(isolated: Path) -> None:
    """hf:<name>@<split> is datasets.load_dataset(name, split=split); no hub here, so a local dataset folder
    (which load_dataset accepts as a name) exercises the same code path."""
    folder = isolated / "gsm8k_copy"
    folder.mkdir()
    (folder / "test.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    rows = load_rows(f"hf:{folder}@test", DataConfig(prompt_key="question"), seed=0, default_split="train",
                     key="data.eval")
    assert [r["solution"] for r in rows] == ["4", "6"]
