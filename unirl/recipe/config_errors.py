"""Hydra's and OmegaConf's composition errors in the recipe's terms: the field, the value, what is allowed.

Hydra's own message for a typo (``algorithm.lrr=1e-6``) suggests ``+algorithm.lrr=1e-6``, which unirl refuses
(see :func:`unirl.recipe.compose.unknown_keys`); its message for a bad value (``algorithm.lr=abc``) keeps the reason
only in the exception's cause. This module walks the cause chain and says what went wrong once, plainly.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from unirl.recipe.schema import Recipe

_KEY_NOT_IN = re.compile(r"Key '([^']+)' not in '(\w+)'")
_FULL_KEY = re.compile(r"full_key: (\S+)")
_NOT_CONVERTED = re.compile(r"Value '(.*)' of type '(\w+)' could not be converted to (\w+)")
_UNIT = {"Float": "a number, e.g. 3e-4", "Integer": "a whole number, e.g. 200", "Boolean": "true or false"}


def describe(exc: BaseException) -> str:
    """One message for a composition error, naming the field; falls back to Hydra's text (search path dropped)."""
    chain = _chain(exc)
    text = "\n".join(str(e) for e in chain)
    full_key = next((m.group(1) for m in map(_FULL_KEY.search, (str(e) for e in chain)) if m), None)
    missing = _KEY_NOT_IN.search(text)
    if missing and full_key:
        close = closest_field(full_key)
        hint = f"; did you mean {close}?" if close else ""
        return f"{full_key}: no such field{hint} (`unirl plan --json` shows every field)"
    converted = next((m for m in map(_NOT_CONVERTED.search, (str(e) for e in chain))
                      if m and "$VALUE" not in m.group(0)), None)
    if converted and full_key:
        value, kind, target = converted.groups()
        allowed = _UNIT.get(target, target)
        return f"{full_key}={value!r}: could not be converted to {target} (a {kind} was given; expected {allowed})"
    message = str(exc).split("\nConfig search path:")[0].strip()
    cause = chain[-1] if len(chain) > 1 else None
    if cause is not None and str(cause) and str(cause) not in message:
        message += f"\n  because: {type(cause).__name__}: {str(cause).splitlines()[0]}"
    return message


def closest_field(dotted: str) -> str | None:
    """The recipe field nearest to a misspelled dotted key (``algorithm.lrr`` -> ``algorithm.lr``)."""
    parts = dotted.split(".")
    node: Any = Recipe
    for part in parts[:-1]:
        fields = {f.name: f for f in dataclasses.fields(node)} if dataclasses.is_dataclass(node) else {}
        if part not in fields:
            return None
        node = _dataclass_of(fields[part])
        if node is None:
            return None
    names = [f.name for f in dataclasses.fields(node)] if dataclasses.is_dataclass(node) else []
    close = difflib.get_close_matches(parts[-1], names, n=1, cutoff=0.6)
    return ".".join([*parts[:-1], close[0]]) if close else None


def _dataclass_of(field: dataclasses.Field[Any]) -> Any:
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = field.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            return type(value)
        if isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            return type(value[0])
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found
