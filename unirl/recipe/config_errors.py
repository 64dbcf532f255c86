"""Hydra's and OmegaConf's composition errors in the recipe's terms: the field, the value, what is allowed.

Hydra's own message for a typo (``algorithm.lrr=1e-6``) suggests ``+algorithm.lrr=1e-6``, which unirl refuses
(see :func:`unirl.recipe.compose.unknown_keys`); its message for a bad value (``algorithm.lr=abc``) keeps the reason
only in the exception's cause. This module walks the cause chain and says what went wrong once, plainly.
"""

from __future__ import annotations

import difflib
import re

from unirl.recipe.fields import normalise, schema_fields
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
    parent, _, last = dotted.rpartition(".")
    group = normalise(parent)
    inside = [f.name[len(group) + 1:] if group else f.name for f in schema_fields(Recipe)
              if not group or f.name.startswith(f"{group}.")]
    names = sorted({name.split(".")[0].removesuffix("[]") for name in inside})
    close = difflib.get_close_matches(last, names, n=1, cutoff=0.6)
    return f"{parent}.{close[0]}" if close and parent else (close[0] if close else None)


def _chain(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found
