"""Validation of one OpenRLHF reward request body, before any of it reaches scoring.

OpenRLHF 0.11.2 (``openrlhf/utils/agent.py``, ``SingleTurnAgentExecutor._fetch_rewards_via_http``) POSTs
``{"query": [str], "prompts": [str], "labels": [label]}`` with aiohttp's ``json=`` (``Content-Type:
application/json``, UTF-8), one sample per rollout, or a shard of a batch when several URLs are given. A label
is whatever the dataset's ``label_key`` column holds: usually a string, sometimes a number or null.

Everything else is refused with the field that is wrong, so a malformed request never becomes a reward call: a
reward error counts towards the run's error policy (``reward_policy.max_error_rate``, ``on_error=abort``),
and a client that is not OpenRLHF must not be able to abort the run by sending garbage. Standard library only:
this module runs inside the backend's interpreter.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unirl.adapters.openrlhf import split_query
from unirl.rewards.row_origin import untag_reference

__all__ = ["Batch", "RequestError", "RunRows", "parse_batch"]


class RequestError(Exception):
    """A request the server refuses: the HTTP status, the field at fault (None: the request as a whole)."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.field = field
        self.message = message

    def payload(self) -> dict[str, Any]:
        return {"error": self.message, "field": self.field}


@dataclass(frozen=True)
class Batch:
    """A validated request: equal-length lists; labels are str or None (a number label is its ``str``)."""

    queries: list[str]
    prompts: list[str]
    labels: list[str | None]


def _no_constants(name: str) -> Any:
    # NaN/Infinity are not JSON (RFC 8259); Python's parser accepts them unless told otherwise. A NaN label would
    # otherwise become the reference text "nan".
    raise ValueError(f"{name} is not a JSON value")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # {"query": [...], "query": [...]}: which one counts differs between parsers; refuse rather than guess.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _decode(body: bytes) -> Any:
    try:
        text = body.decode("utf-8")  # strictly: json.loads(bytes) would also take UTF-16/32, which JSON forbids
    except UnicodeDecodeError as exc:
        raise RequestError(400, f"the body is not UTF-8: {exc}") from None
    try:
        return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates)
    except RecursionError:
        # A 100,000-deep array: the C scanner stops at the recursion limit; the reply names the cause.
        raise RequestError(400, "the body is not valid JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, the hooks above, an integer past int's digit limit
        raise RequestError(400, f"the body is not valid JSON: {exc}") from None


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise RequestError(422, f"{field} must be a string, not {type(value).__name__}", field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (\\ud800) survives json.loads but breaks any reward or log that encodes the text,
        # which would be counted as a reward error; a real decoded rollout never holds one.
        raise RequestError(422, f"{field} holds a lone surrogate (\\ud800-\\udfff): not Unicode text", field) from None
    return value


def _label(value: Any, field: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return _text(value, field) or None  # "" means no reference, as OpenRLHF sends for a dataset without labels
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):  # 1e999 parses to inf without parse_constant
            raise RequestError(422, f"{field} is not a finite number", field)
        return str(value)  # a numeric answer column, compared as text by the rewards (as the in-process adapter)
    raise RequestError(422, f"{field} must be a string, a number or null, not {type(value).__name__}", field)


def _list(body: dict[str, Any], key: str, n: int | None) -> list[Any] | None:
    value = body.get(key)
    if value is None and key != "query":
        return None
    if not isinstance(value, list):
        what = "missing" if key not in body else f"a {type(value).__name__}"
        raise RequestError(422, f"{key} must be a list; it is {what}", key)
    if n is not None and len(value) != n:
        raise RequestError(422, f"{key} has {len(value)} items but query has {n}", key)
    return value


def parse_batch(body: bytes, max_batch: int) -> Batch:
    """The validated batch in a request body, or :class:`RequestError` (400: not JSON; 413: too many samples;
    422: JSON of the wrong shape), naming the field."""
    data = _decode(body)
    if not isinstance(data, dict):
        raise RequestError(422, f"the body must be a JSON object with query, prompts, labels; it is a "
                                f"{type(data).__name__}")
    raw_queries = _list(data, "query", None)
    assert raw_queries is not None
    if not raw_queries:
        raise RequestError(422, "query is empty: send at least one sample", "query")
    n = len(raw_queries)
    if n > max_batch:
        raise RequestError(413, f"query has {n} samples, more than this server's --max-batch {max_batch}", "query")
    queries = [_text(q, f"query[{i}]") for i, q in enumerate(raw_queries)]
    raw_prompts = _list(data, "prompts", n)
    prompts = [""] * n if raw_prompts is None else [_text(p, f"prompts[{i}]") for i, p in enumerate(raw_prompts)]
    raw_labels = _list(data, "labels", n)
    labels: list[str | None] = ([None] * n if raw_labels is None else
                                [_label(x, f"labels[{i}]") for i, x in enumerate(raw_labels)])
    for i, (query, prompt) in enumerate(zip(queries, prompts, strict=True)):
        try:
            split_query(query, prompt, ())  # the adapter's own check: the completion is what follows the prompt
        except ValueError as exc:
            raise RequestError(422, f"query[{i}] does not contain prompts[{i}]: {exc}", f"query[{i}]") from None
    return Batch(queries, prompts, labels)


RUN_DATA_FILES = {"train": "data/train.jsonl", "eval": "data/eval.jsonl"}
"""Where a launch writes the run's rows in OpenRLHF's format, relative to its run directory (the reward spec's
directory): ``unirl.backend.export.export_path(split, "openrlhf_jsonl")``, checked by a test."""


class RunRows:
    """The labels of the run's own rows, to tell the training run's requests from anyone else's.

    The run's error policy may stop the server (and so the run), so only failures on the run's own rows may count
    towards it: a local client that posts made-up labels (a number where the reward wants one, a reference the
    reward cannot read) must get a 4xx, never push the run's error rate. unirl's export tags every label with its
    row's place (``unirl-row:...``, :mod:`unirl.rewards.row_origin`); a label is the run's when it is exactly the
    label of that row in the exported file. Without exported files beside the spec (a server started by hand for
    data unirl did not export), every well-formed request is scored and counts: protect such a server with its
    secret. Holds a digest per row, read once, at the first request."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._digests: dict[tuple[str, int], bytes] | None = None
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def digests(self) -> dict[tuple[str, int], bytes] | None:
        """(split, index) -> the label's SHA-256, or None when the run directory holds no exported rows."""
        with self._lock:
            if not self._loaded:
                self._digests = self._read()
                self._loaded = True
            return self._digests

    def _read(self) -> dict[tuple[str, int], bytes] | None:
        found: dict[tuple[str, int], bytes] = {}
        present = False
        for split, name in RUN_DATA_FILES.items():
            path = self.run_dir / name
            if not path.is_file():
                continue
            present = True
            with path.open(encoding="utf-8") as handle:
                for index, line in enumerate(handle):
                    label = json.loads(line).get("label")
                    if isinstance(label, str):
                        found[(split, index)] = hashlib.sha256(label.encode()).digest()
        return found if present else None

    def problem(self, labels: list[str | None]) -> RequestError | None:
        """A 422 naming the first label that is not one of the run's rows; None when all are (or nothing is known)."""
        digests = self.digests
        if digests is None:
            return None
        for i, label in enumerate(labels):
            _, origin = untag_reference(label)
            if origin is None or label is None or digests.get((origin["split"], origin["index"])) != \
                    hashlib.sha256(label.encode()).digest():
                shown = repr(label) if label is None or len(label) <= 80 else repr(label[:80]) + "..."
                return RequestError(422, f"labels[{i}]={shown} is not the label of a row of this run's data "
                                         f"({self.run_dir / RUN_DATA_FILES['train']}); only the run's own rows are "
                                         "scored here", "labels")
        return None
