"""Version numbers and gates, without depending on ``packaging`` (the core stays light).

Backends rename keys between minor versions (OpenRLHF's flat flags became dotted in 0.10.2; verl 0.9 moved
the custom reward under ``reward.``), so a mapping row may carry a gate such as ``">=0.10.2"`` or
``">=0.9,<0.10"`` and applies only to the backend versions it names.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"\d+")


def version_tuple(version: str) -> tuple[int, ...]:
    """``"0.11.2"`` -> (0, 11, 2); ``"0.10.1.post2"`` -> (0, 10, 1); ``"0.9.0rc1"`` -> (0, 9, 0)."""
    parts: list[int] = []
    for piece in version.strip().lstrip("v").split("."):
        match = _NUMBER.match(piece)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.end() != len(piece):  # "0rc1", "1post2": the release number ends here
            break
    return tuple(parts)


def _compare(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    width = max(len(a), len(b))
    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
    return (a > b) - (a < b)


_OPS = {
    ">=": lambda c: c >= 0, ">": lambda c: c > 0, "<=": lambda c: c <= 0, "<": lambda c: c < 0,
    "==": lambda c: c == 0, "!=": lambda c: c != 0,
}


def matches(version: str, gate: str) -> bool:
    """Whether ``version`` satisfies every comma-separated clause of ``gate`` (empty gate: always)."""
    have = version_tuple(version)
    for clause in filter(None, (c.strip() for c in gate.split(","))):
        op = next((o for o in (">=", "<=", "==", "!=", ">", "<") if clause.startswith(o)), None)
        if op is None:
            raise ValueError(f"version gate clause {clause!r} must start with one of >=, <=, ==, !=, >, <")
        if not _OPS[op](_compare(have, version_tuple(clause[len(op):]))):
            return False
    return True
