"""Named registries that plugins fill through the registrar hooks.

An entry may be the object itself or a lazy ``"module:attr"`` placeholder (as lm-eval does), so
that registering a heavy component costs nothing until it is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from unirl.errors import UnirlError, UnknownName

T = TypeVar("T")


def load_dotted(path: str) -> Any:
    """Import ``"package.module:attr"`` (or ``"package.module.attr"``) and return the attribute."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise UnirlError(f"{path!r} is not a 'module:attribute' path")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass
class Entry(Generic[T]):
    name: str
    target: T | str
    source: str  # the plugin that registered it

    @property
    def loaded(self) -> bool:
        return not isinstance(self.target, str)


class Registry(Generic[T]):
    """Name -> component, with the plugin each came from, for one kind of component."""

    def __init__(self, kind: str, name_of: Callable[[T], str] = lambda obj: obj.name) -> None:
        self.kind = kind
        self._name_of = name_of
        self._entries: dict[str, Entry[T]] = {}
        self.current_source = "unknown"

    def add(self, component: T | str, *, name: str | None = None, replace: bool = False) -> None:
        """Register ``component`` (or a lazy ``"module:attr"`` path, which then needs ``name``)."""
        if isinstance(component, str):
            if name is None:
                raise UnirlError(f"a lazy {self.kind} {component!r} must be registered with a name")
        else:
            name = name or self._name_of(component)
        if name in self._entries and not replace:
            other = self._entries[name].source
            raise UnirlError(
                f"{self.kind} {name!r} is registered twice: by {other!r} and by {self.current_source!r}; "
                "pass replace=True to override on purpose, or block one plugin with UNIRL_PLUGINS_BLOCK"
            )
        self._entries[name] = Entry(name, component, self.current_source)

    def get(self, name: str) -> T:
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownName(self.kind, name, self._entries)
        if isinstance(entry.target, str):
            entry.target = load_dotted(entry.target)
        return entry.target  # type: ignore[return-value]

    def entry(self, name: str) -> Entry[T]:
        if name not in self._entries:
            raise UnknownName(self.kind, name, self._entries)
        return self._entries[name]

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(sorted(self._entries.values(), key=lambda e: e.name))

    def __len__(self) -> int:
        return len(self._entries)
