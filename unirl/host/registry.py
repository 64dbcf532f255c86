"""Named registries that plugins fill through the registrar hooks.

An entry may be the object itself or a lazy ``"module:attr"`` placeholder (as lm-eval does), so
that registering a heavy component costs nothing until it is used.

A registry knows the protocol its components satisfy (a framework, a scheduler, a reward, a rollout engine):
registering something else fails at once with the plugin named, and a lazy entry is checked the same way when it is
loaded. Each plugin's registrar hook receives a view of the registry bound to that plugin (:meth:`Registry.for_plugin`),
so every entry remembers which plugin added it without any shared "current plugin" state.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Generic, Protocol, TypeVar

from unirl.errors import UnirlError, UnknownName

T = TypeVar("T")
RUNTIME_SOURCE = "runtime"
"""The source of an entry added outside any plugin's registrar hook (a test, a notebook)."""


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


def protocol_members(protocol: type) -> list[str]:
    """The attributes and methods a (runtime-checkable) protocol class declares, its protocol bases' included."""
    members: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or not getattr(klass, "_is_protocol", False) or klass.__name__ in ("Protocol", "Generic"):
            continue
        members.update(name for name in vars(klass) if not name.startswith("_"))
        members.update(getattr(klass, "__annotations__", {}))
    return sorted(members)


def mismatch(component: object, protocol: type) -> str | None:
    """Why ``component`` does not satisfy ``protocol`` (a runtime-checkable Protocol or a class), or None."""
    if isinstance(component, protocol):
        return None
    if getattr(protocol, "_is_protocol", False):
        missing = [name for name in protocol_members(protocol) if not hasattr(component, name)]
        if missing:
            return f"it lacks {', '.join(missing)}"
    return f"it is a {type(component).__name__}, not a {protocol.__name__}"


class PluginFileHost(Protocol):
    """What fills a registry from a Python file that is not an installed plugin (a recipe's reward file)."""

    def add_plugin_file(self, module: ModuleType, path: Path) -> str:
        """Register the imported ``module`` as a plugin and call its registrar hooks; returns the plugin's name."""
        ...


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

    def __init__(self, kind: str, protocol: type | None = None, *,
                 name_of: Callable[[T], str] = lambda obj: obj.name,  # type: ignore[attr-defined]
                 hint: str = "") -> None:
        self.kind = kind
        self.protocol = protocol
        """What every component must satisfy (None: anything); checked on ``add`` and when a lazy entry loads."""
        self.hint = hint
        """Where a plugin author reads what the protocol asks (shown when a component does not satisfy it)."""
        self._name_of = name_of
        self._entries: dict[str, Entry[T]] = {}
        self.source = RUNTIME_SOURCE
        """The plugin that ``add`` attributes entries to: set on the views :meth:`for_plugin` hands out."""
        self.host: PluginFileHost | None = None
        """The host filling this registry, which registers a recipe's reward files as plugins (None: a bare
        registry, where a file's decorated rewards are added directly)."""

    def for_plugin(self, plugin: str) -> Registry[T]:
        """The same entries, with everything added through the view attributed to ``plugin``."""
        view = copy.copy(self)  # shallow: the view shares the entries dict, so what it adds lands here
        view.source = plugin
        return view

    def add(self, component: T | str, *, name: str | None = None, replace: bool = False) -> None:
        """Register ``component`` (or a lazy ``"module:attr"`` path, which then needs ``name``)."""
        if isinstance(component, str):
            if name is None:
                raise UnirlError(f"a lazy {self.kind} {component!r} must be registered with a name")
        else:
            self._check(component, name or _shown_name(component), self.source)
            name = name or self._name_of(component)
        if name in self._entries and not replace:
            other = self._entries[name].source
            raise UnirlError(
                f"{self.kind} {name!r} is registered twice: by {other!r} and by {self.source!r}; "
                "pass replace=True to override on purpose, or block one plugin with UNIRL_PLUGINS_BLOCK"
            )
        self._entries[name] = Entry(name, component, self.source)

    def get(self, name: str) -> T:
        entry = self._entries.get(name)
        if entry is None:
            raise UnknownName(self.kind, name, self._entries)
        if isinstance(entry.target, str):
            loaded = load_dotted(entry.target)
            self._check(loaded, name, entry.source, lazy=entry.target)
            entry.target = loaded
        return entry.target  # type: ignore[return-value]

    def find(self, name: str) -> T | None:
        """The component registered as ``name``, or None when nothing is."""
        return self.get(name) if name in self._entries else None

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

    def _check(self, component: object, name: str, source: str, lazy: str | None = None) -> None:
        if self.protocol is None:
            return
        why = mismatch(component, self.protocol)
        if why is None:
            return
        what = f"the lazy {self.kind} {name!r} ({lazy})" if lazy else f"{self.kind} {name!r}"
        raise UnirlError(f"plugin {source!r} registered {what}, which is not a {self.kind}: {why}"
                         + (f" ({self.hint})" if self.hint else ""))


def _shown_name(component: object) -> str:
    """A name for an error message about a component that may not even have one."""
    name = getattr(component, "name", None)
    return name if isinstance(name, str) else type(component).__name__
