"""Errors a user sees: each names what was wrong, the value, and what is allowed."""

from __future__ import annotations

from collections.abc import Iterable


class UnirlError(Exception):
    """Base class for errors unirl reports to the user without a traceback."""


class FieldError(UnirlError):
    """One recipe field holds a value that is not allowed."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{field}={value!r}: {allowed}")


class RecipeInvalid(UnirlError):
    """A recipe failed validation; carries every problem found, not just the first."""

    def __init__(self, problems: Iterable[FieldError], context: str = "recipe") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid {context} ({len(self.problems)} problem(s)):\n{lines}")


class Unsupported(FieldError):
    """A backend cannot honour a recipe field; unirl refuses instead of dropping it."""

    def __init__(self, field: str, value: object, backend: str, supported: str) -> None:
        super().__init__(field, value, f"not supported by {backend}; {backend} supports {supported}")
        self.backend = backend


class UnknownName(UnirlError):
    """A name (framework, reward, scheduler, ...) that no loaded plugin provides."""

    def __init__(self, kind: str, name: str, available: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.available = sorted(available)
        shown = ", ".join(self.available) or "none"
        super().__init__(f"unknown {kind} {name!r}; installed {kind}s: {shown}")


class InfrastructureError(UnirlError):
    """The machine, not the sample, failed a reward call (an overloaded host, a sandbox that cannot start).

    The reward executor counts it as its own error kind (``infrastructure``), never as a score: a correct
    completion must not be scored 0 because the host was busy.
    """
