"""Plain values between the checker and the program of ``code_tests``: tagged JSON lines, never pickle.

This module runs inside both sandboxes (shipped as ``unirl_protocol.py``), so it uses the standard library only.
A value crosses as JSON: ``null``, booleans, numbers (NaN and infinities as JSON's usual extensions) and strings
stand for themselves; every container is an array whose first element is a tag:

``["l", ...]`` list, ``["t", ...]`` tuple, ``["s", ...]`` set, ``["f", ...]`` frozenset, ``["d", [k, v], ...]``
dict, ``["b", hex]`` bytes, ``["y", hex]`` bytearray, ``["c", real, imag]`` complex, ``["h", n]`` a reference
to an object that stays in the program's process (an instance of a class the solution defines).

:func:`decode` is the guard: it builds nothing but those exact built-in types (and handles, through a factory the
caller provides), within a depth and size budget, and rejects everything else. Whatever the program sends, the
checker ends up comparing its own ints, strs and lists with its own ``==``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 100
MAX_ITEMS = 200_000  # values in one message, containers and scalars alike
MAX_LINE = 4 << 20  # bytes in one message
_MAX_EQUAL_HASHES = 64

_SCALARS = (int, float, str)
_SEQUENCE_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "s", frozenset: "f"}


class NotPlain(TypeError):
    """A value that is not one of the plain types (or is too big or too deep to send)."""


class Budget:
    def __init__(self, items: int = MAX_ITEMS) -> None:
        self.left = items

    def take(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise NotPlain(f"more than {MAX_ITEMS} values in one message")


def encode(value: Any, reference: Callable[[Any], int | None] | None = None, *, depth: int = 0,
           budget: Budget | None = None) -> Any:
    """``value`` as JSON-ready data; ``reference(obj)`` may return a handle number for an object sent by reference."""
    budget = budget or Budget()
    budget.take()
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if type(value) in _SCALARS:
        return value
    kind = type(value)
    tag = _SEQUENCE_TAGS.get(kind)
    if tag is not None:
        return [tag, *(encode(item, reference, depth=depth + 1, budget=budget) for item in value)]
    if kind is dict:
        return ["d", *([encode(k, reference, depth=depth + 1, budget=budget),
                        encode(v, reference, depth=depth + 1, budget=budget)] for k, v in value.items())]
    if kind is bytes:
        return ["b", value.hex()]
    if kind is bytearray:
        return ["y", value.hex()]
    if kind is complex:
        return ["c", value.real, value.imag]
    if reference is not None:
        number = reference(value)
        if number is not None:
            return ["h", number]
    raise NotPlain(f"a {kind.__module__}.{kind.__qualname__} is not a plain value (numbers, str, bytes, bool, None, "
                   "and lists, tuples, dicts and sets of them)")


def decode(data: Any, handle: Callable[[int], Any] | None = None, *, depth: int = 0,
           budget: Budget | None = None) -> Any:
    """The value ``data`` (from :func:`json.loads`) stands for; NotPlain for anything else."""
    budget = budget or Budget()
    budget.take()
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels")
    if data is None or isinstance(data, bool) or type(data) in _SCALARS:
        return data
    if type(data) is not list or not data or type(data[0]) is not str:
        raise NotPlain(f"not a tagged value: {type(data).__name__}")
    tag, items = data[0], data[1:]

    def each() -> list[Any]:
        return [decode(item, handle, depth=depth + 1, budget=budget) for item in items]

    if tag == "l":
        return each()
    if tag == "t":
        return tuple(each())
    if tag in ("s", "f"):
        elements = each()
        _check_hashes(elements)
        return set(elements) if tag == "s" else frozenset(elements)
    if tag == "d":
        pairs = []
        for pair in items:
            if type(pair) is not list or len(pair) != 2:
                raise NotPlain("a dict entry must be [key, value]")
            pairs.append((decode(pair[0], handle, depth=depth + 1, budget=budget),
                          decode(pair[1], handle, depth=depth + 1, budget=budget)))
        _check_hashes([key for key, _ in pairs])
        return dict(pairs)
    if tag in ("b", "y") and len(items) == 1 and type(items[0]) is str:
        try:
            raw = bytes.fromhex(items[0])
        except ValueError as exc:
            raise NotPlain(str(exc)) from exc
        return raw if tag == "b" else bytearray(raw)
    if tag == "c" and len(items) == 2 and all(type(i) in (int, float) for i in items):
        return complex(items[0], items[1])
    if tag == "h" and len(items) == 1 and type(items[0]) is int and handle is not None:
        return handle(items[0])
    raise NotPlain(f"unknown or malformed tag {tag!r}")


def _check_hashes(keys: list[Any]) -> None:
    """Refuse keys that are unhashable, or that share one hash by the thousand (ints n * (2**61 - 1), say).

    Building a set or dict of keys with equal hashes is quadratic: a few hundred thousand of them would keep the
    checker busy for hours. Distinct hashes are fine however they collide in the table (CPython perturbs probes
    with all the hash's bits), and str hashes are randomised per process.
    """
    counts: dict[int, int] = {}
    for key in keys:
        try:
            value = hash(key)
        except TypeError as exc:
            raise NotPlain(str(exc)) from exc
        counts[value] = counts.get(value, 0) + 1
        if counts[value] > _MAX_EQUAL_HASHES:
            raise NotPlain(f"more than {_MAX_EQUAL_HASHES} keys with one hash")


def dumps(message: dict[str, Any]) -> bytes:
    """One message as one line (JSON escapes every newline inside strings)."""
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def loads(line: bytes | str) -> Any:
    """One message; ValueError for anything that is not a JSON object (too deep counts)."""
    if len(line) > MAX_LINE:
        raise ValueError(f"message longer than {MAX_LINE} bytes")
    try:
        message = json.loads(line)
    except RecursionError as exc:
        raise ValueError("message nested too deeply") from exc
    if type(message) is not dict:
        raise ValueError("a message must be a JSON object")
    return message
