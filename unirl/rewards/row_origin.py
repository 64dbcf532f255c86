"""A row's origin carried inside its reference, for backends that pass a scorer nothing but the reference.

OpenRLHF hands ``reward_func`` the dataset's ``label_key`` column and nothing else of the row
(openrlhf/datasets/prompts_dataset.py ``preprocess_data``; samples_generator.py:196-232 @ 0.11.2); NeMo RL's
ResponseDataset keeps only ``input`` and ``output`` and its math processor hands ``output`` to the environment as
``ground_truth`` (nemo_rl/data/datasets/response_datasets/response_dataset.py:54-85,
nemo_rl/data/processors.py:389-392 @ v0.7.0). So unirl's exporter writes those columns as
``unirl-row:{"index": i, "reference": "...", "split": "train"}`` (plus ``"metadata": {...}``, the row's other
columns, when it has any), and unirl's adapters read the reference, the row's place and its metadata back
(:func:`untag_row`): rewards and environments see the same row on these backends as on the others. Neither backend
reads the column for anything but the scorer.

A label that merely starts with the prefix but does not decode to exactly that shape is a plain reference: a user's
data cannot forge a row's place by accident, and a malformed tag is never half-trusted.
"""

from __future__ import annotations

import json
import numbers
from typing import Any

ROW_TAG = "unirl-row:"
SPLITS = ("train", "eval")
_KEYS = {"index", "reference", "split"}
_KEYS_WITH_METADATA = {*_KEYS, "metadata"}


def tag_reference(reference: str | None, split: str, index: int, metadata: dict[str, Any] | None = None) -> str:
    """The reference column's text for row ``index`` of unirl's ``split`` file, with its ``metadata``."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}: one of {list(SPLITS)}")
    tag: dict[str, Any] = {"index": int(index), "reference": reference, "split": split}
    if metadata:
        tag["metadata"] = metadata
    return ROW_TAG + json.dumps(tag, sort_keys=True, ensure_ascii=False)


def untag_row(label: Any) -> tuple[Any, dict[str, Any] | None, dict[str, Any]]:
    """``(reference, origin, metadata)``: for a tagged label, the reference it wraps, ``{"split", "index"}`` and the
    row's metadata; for anything else, the label unchanged, None and no metadata."""
    if not isinstance(label, str) or not label.startswith(ROW_TAG):
        return label, None, {}
    try:
        data = json.loads(label[len(ROW_TAG):])
    except ValueError:
        return label, None, {}
    if not isinstance(data, dict) or set(data) not in (_KEYS, _KEYS_WITH_METADATA):
        return label, None, {}
    reference, split, index, metadata = data["reference"], data["split"], data["index"], data.get("metadata", {})
    if (split not in SPLITS or not isinstance(index, numbers.Integral) or isinstance(index, bool) or index < 0
            or not (reference is None or isinstance(reference, str)) or not isinstance(metadata, dict)):
        return label, None, {}
    return reference, {"split": split, "index": int(index)}, metadata


def untag_reference(label: Any) -> tuple[Any, dict[str, Any] | None]:
    """``(reference, origin)`` of :func:`untag_row`."""
    reference, origin, _ = untag_row(label)
    return reference, origin
