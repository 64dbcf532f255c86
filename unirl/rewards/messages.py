"""What crosses from a reward worker process to the host: plain values only, checked on arrival.

A reward's ``info`` is whatever its author returned: a lambda, a lock, a generator, an object of a class that
lives in a local plugin file (imported under a different module name in the host) or a 50 MB string. Any of them
used to break the pipe or the host's unpickling, and with it the dispatcher. So the worker turns ``info`` into
JSON-plain data (``repr`` for the rest) under a size cap, and the host decodes worker messages with an unpickler
that resolves no global at all, then checks their shape: a corrupt or forged frame is an error about that worker,
never an exception in the dispatcher.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from typing import Any

INFO_MAX_BYTES = 64 * 1024
"""A reward's ``info`` for one sample, as JSON; more is cut to a preview (it lands in trajectories.jsonl)."""
STRING_MAX_CHARS = 16 * 1024
MAX_DEPTH = 16
REPR_MAX_CHARS = 200
ERROR_KINDS = ("exception", "invalid", "timeout", "crash", "memory", "infrastructure")
"""How a reward call can fail, as counted in every backend's metrics (``reward/errors/<kind>``)."""
OUTCOME_OK, OUTCOME_ERROR = "ok", "error"
_SCALARS = (str, int, float, bool, type(None))


class CorruptMessage(ValueError):
    """A worker's message that is not one the worker protocol defines."""


def plain_info(info: Any) -> dict[str, Any] | None:
    """``info`` as JSON-plain data (dict keys str, values str/number/bool/None/list/dict), capped in size."""
    if not info:
        return None
    if type(info) is dict and all(type(k) is str and type(v) in _SCALARS and (type(v) is not str or len(v) < 256)
                                  and (type(v) is not float or math.isfinite(v)) for k, v in info.items()):
        plain: Any = info  # the common case (a few short fields), without a copy
        # JSON escapes a character to at most 6 ("\u0000"), a number is at most 24: when that bound fits, the
        # size check needs no encoding (every sample of every step comes through here)
        bound = 2 + sum(6 * len(k) + 4 + (6 * len(v) + 2 if type(v) is str else 24) for k, v in info.items())
        if bound <= INFO_MAX_BYTES:
            return plain  # type: ignore[no-any-return]
    else:
        plain = _plain(info, 0)
        if not isinstance(plain, dict):
            plain = {"info": plain}
    try:
        size = len(json.dumps(plain, ensure_ascii=False))
    except (TypeError, ValueError):  # cannot happen for _plain's output; a defect here must not stop scoring
        return {"unirl_info_error": "info could not be encoded"}
    if size > INFO_MAX_BYTES:
        preview = json.dumps(plain, ensure_ascii=False)[:1000]
        return {"unirl_truncated": f"info of {size} bytes exceeds the {INFO_MAX_BYTES}-byte limit", "preview": preview}
    checked: dict[str, Any] = plain  # a dict: _plain keeps a dict a dict, and anything else was wrapped above
    return checked


def _plain(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else repr(float(value))
    if isinstance(value, str):
        return value if len(value) <= STRING_MAX_CHARS else value[:STRING_MAX_CHARS] + f"... [{len(value)} chars]"
    if depth >= MAX_DEPTH:
        return f"[nested deeper than {MAX_DEPTH} levels]"
    if isinstance(value, dict):
        pairs = list(value.items())[:1000]
        return {(k if isinstance(k, str) else _safe_repr(k)): _plain(v, depth + 1) for k, v in pairs}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value[:1000]]
    module = type(value).__module__.split(".")[0]
    if module in ("numpy", "torch") and getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        try:
            return _plain(value.item(), depth + 1)
        except Exception:  # a scalar whose item() fails is shown by its repr below
            pass
    return _safe_repr(value)


def _safe_repr(value: Any) -> str:
    """``repr`` of an author's object, which may itself raise: the trajectory log shows something either way."""
    try:
        text = repr(value)
    except Exception as exc:
        return f"<{type(value).__name__} object; repr raised {type(exc).__name__}>"
    return text if len(text) <= REPR_MAX_CHARS else text[:REPR_MAX_CHARS] + "..."


def encode(message: tuple[Any, ...]) -> bytes:
    """A worker message as bytes (plain values only, so the host needs no class to read it)."""
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise CorruptMessage(f"a reward worker message referenced {module}.{name}; only plain values may cross")


def decode(data: bytes) -> tuple[Any, ...]:
    """A worker message, checked: its shape is one the protocol defines, else :class:`CorruptMessage`."""
    try:
        message = _NoGlobals(io.BytesIO(data)).load()
    except CorruptMessage:
        raise
    except Exception as exc:  # any unpickling failure of a torn or foreign frame
        raise CorruptMessage(f"an undecodable message ({type(exc).__name__}: {exc})") from None
    if not isinstance(message, tuple) or not message:
        raise CorruptMessage(f"a message of type {type(message).__name__}")
    tag = message[0]
    if tag == "ready" and len(message) == 1:
        return message
    if tag == "load_error" and len(message) == 2 and isinstance(message[1], str):
        return message
    if tag == "recycle" and len(message) == 2 and isinstance(message[1], int | float):
        return message
    if isinstance(tag, int) and not isinstance(tag, bool) and len(message) == 3:
        _, results, busy = message
        if busy is not None and not isinstance(busy, int | float):
            raise CorruptMessage("a result message with a non-numeric busy time")
        if not isinstance(results, list):
            raise CorruptMessage("a result message without a result list")
        for entry in results:
            _check_result_entry(entry)
        return message
    raise CorruptMessage(f"an unknown message {str(tag)[:50]!r}")


def _check_result_entry(entry: Any) -> None:
    if not (isinstance(entry, tuple) and len(entry) == 2 and _is_index(entry[0]) and isinstance(entry[1], list)):
        raise CorruptMessage("a result entry that is not (sample index, outcomes)")
    for pair in entry[1]:
        if not (isinstance(pair, tuple) and len(pair) == 2 and _is_index(pair[0]) and is_outcome(pair[1])):
            raise CorruptMessage("an outcome that is not (reward index, outcome)")


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_outcome(outcome: Any) -> bool:
    """``("ok", score, components | None, info | None)`` or ``("error", kind, message)``."""
    if not isinstance(outcome, tuple) or not outcome:
        return False
    if outcome[0] == OUTCOME_OK and len(outcome) == 4:
        _, score, components, info = outcome
        return (isinstance(score, float) and math.isfinite(score)
                and (components is None or (isinstance(components, dict)
                                            and all(isinstance(v, float) for v in components.values())))
                and (info is None or isinstance(info, dict)))
    if outcome[0] == OUTCOME_ERROR and len(outcome) == 3:
        return outcome[1] in ERROR_KINDS and isinstance(outcome[2], str)
    return False
