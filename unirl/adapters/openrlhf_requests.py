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

import json
import math
from dataclasses import dataclass
from typing import Any

from unirl.adapters.openrlhf import split_query

__all__ = ["Batch", "RequestError", "parse_batch"]


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
