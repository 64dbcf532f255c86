"""A prompt TRL draws keeps the index of its data row through everything between the dataset and rollout_func."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import torch
from accelerate.utils import send_to_device

from unirl.adapters.trl_rows import ROW_COLUMN, row_of, rows_dataset

CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "2+3="}]


def rows(prompt: Any) -> list[dict[str, Any]]:
    # Two rows share a prompt and differ in hidden state: only the index tells them apart.
    return [{"prompt": prompt, "reference": ref, "data_source": "t", "metadata": {"secret": ref}} for ref in "56"]


@pytest.mark.parametrize("prompt", ["2+3=", CHAT], ids=["text", "chat"])
@pytest.mark.parametrize("index", [0, 1])
def test_the_row_index_survives_the_device_move_deep_copy_and_pickling(prompt: Any, index: int) -> None:
    """accelerate rebuilds every list and dict of a batch (send_to_device); TRL deep-copies prompts; gather pickles."""
    dataset = rows_dataset(rows(prompt))
    moved = send_to_device([dataset[index]], torch.device("cpu"))
    carried = moved[0]["prompt"]
    assert row_of(carried) == index
    assert row_of(copy.deepcopy([carried])[0]) == index
    assert row_of(pickle.loads(pickle.dumps(carried))) == index
    assert moved[0]["metadata"] == {"secret": "56"[index]}
    assert moved[0][ROW_COLUMN] == index


@pytest.mark.parametrize("prompt", ["2+3=", CHAT], ids=["text", "chat"])
def test_the_model_sees_the_prompt_unchanged(prompt: Any) -> None:
    carried = rows_dataset(rows(prompt))[1]["prompt"]
    assert carried == prompt
    assert pickle.loads(pickle.dumps(carried)) == prompt


def test_a_prompt_from_elsewhere_has_no_row() -> None:
    assert row_of("2+3=") is None
    assert row_of(list(CHAT)) is None
    assert row_of([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]) is None
