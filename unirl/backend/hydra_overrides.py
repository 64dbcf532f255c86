"""Rendering native key/value pairs as Hydra override strings (verl, NeMo RL)."""

from __future__ import annotations

import re
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_./\-]+$")


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar: null/true/false, numbers, lists, quoted strings where needed."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _BARE.match(text) and text not in ("null", "true", "false") and not _is_number(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def to_overrides(native: dict[str, Any]) -> list[str]:
    """``{"a.b": 1, "+c.d": "x"}`` -> ``["a.b=1", "+c.d=x"]`` (keys keep their ``+``/``++`` prefix)."""
    return [f"{key}={hydra_value(value)}" for key, value in native.items()]
