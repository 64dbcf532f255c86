"""The checker side of assert-style ``code_tests``: runs the tests, with every name of the solution a stand-in.

Shipped into the *checker's* sandbox as ``main.py`` (standard library only), next to ``tests.json``. The program
runs in a different sandbox; this process never executes a line of it. Each function or class the solution
defined is replaced here by a stand-in whose calls travel, as plain values, through the host to the program and
come back as plain values (see ``unirl_protocol``), so an assert compares the checker's own objects with the
checker's own ``==``. Objects the solution creates stay in the program; here they are opaque handles that equal
only themselves, refuse a truth value, and relay attribute reads, method calls, ``len``, ``str``, iteration and
indexing (each answered with plain values again).

Names of the solution that are builtins or stdlib modules are never stood in for: a test always gets the real
``sorted`` or ``math``. The test code itself is data, and as untrusted as the program: it runs in this sandbox.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import json
import os
import sys
from typing import Any

import unirl_protocol as protocol  # type: ignore[import-not-found]


class SolutionError(Exception):
    """The solution raised an exception this checker has no built-in type for."""


class ProgramEnded(Exception):
    """The program is not running any more (it crashed, exited, timed out or was killed)."""


class Channel:
    def __init__(self, incoming: int, outgoing: int) -> None:
        self.incoming = os.fdopen(incoming, "rb")
        self.outgoing = outgoing
        self.next_id = 0
        self.handles: dict[int, Handle] = {}

    def send(self, message: dict[str, Any]) -> None:
        view = memoryview(protocol.dumps(message))
        while view:
            view = view[os.write(self.outgoing, view):]

    def receive(self) -> dict[str, Any]:
        line = self.incoming.readline(protocol.MAX_LINE + 1)
        if not line:
            raise ProgramEnded("the host closed the channel")
        return dict(protocol.loads(line))

    def handle(self, number: int) -> Handle:
        if number not in self.handles:
            self.handles[number] = Handle(self, number)
        return self.handles[number]

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        message["id"] = self.next_id
        self.send(message)
        reply = self.receive()
        if reply.get("id") != self.next_id:
            raise ProgramEnded("the program answered out of turn")
        error = reply.get("error")
        if error is not None:
            name, text = (str(part) for part in error) if isinstance(error, list) and len(error) == 2 else (
                "SolutionError", repr(error))
            if name == "ProgramEnded":
                raise ProgramEnded(text)
            if name == "NotPlain":
                raise TypeError(text)
            kind = getattr(builtins, name, None)
            if isinstance(kind, type) and issubclass(kind, Exception) and kind.__module__ == "builtins":
                raise kind(text)
            raise SolutionError(f"{name}: {text}")
        return reply

    def encode(self, value: Any) -> Any:
        return protocol.encode(value, lambda obj: obj._number if isinstance(obj, Handle) and obj._channel is self
                               else None)

    def decode(self, data: Any) -> Any:
        return protocol.decode(data, self.handle)

    def call(self, target: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # By value: the solution works on copies, and nothing it does to them comes back.
        reply = self.request({"op": "call", **target, "args": [self.encode(a) for a in args],
                              "kwargs": [[str(k), self.encode(v)] for k, v in kwargs.items()]})
        return self.decode(reply.get("value"))


class RemoteFunction:
    """Stands in for a function of the solution."""

    def __init__(self, channel: Channel, name: str) -> None:
        self._channel, self._name = channel, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._channel.call({"name": self._name}, args, kwargs)

    def __repr__(self) -> str:
        return f"<solution function {self._name}>"


class RemoteClass(RemoteFunction):
    """Stands in for a class of the solution: calling it makes an instance in the program, returns a handle."""

    def __repr__(self) -> str:
        return f"<solution class {self._name}>"


class Handle:
    """An object that lives in the program. Equal only to itself; it has no truth value of its own."""

    __slots__ = ("_channel", "_number")

    def __init__(self, channel: Channel, number: int) -> None:
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_number", number)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        reply = self._channel.request({"op": "getattr", "handle": self._number, "attr": attr})
        if reply.get("method"):
            return Method(self, attr)
        return self._channel.decode(reply.get("value"))

    def __setattr__(self, attr: str, value: Any) -> None:
        raise TypeError("tests cannot set attributes of the solution's objects")

    def _special(self, method: str, *args: Any) -> Any:
        reply = self._channel.request({"op": "special", "handle": self._number, "method": method,
                                       "args": [self._channel.encode(a) for a in args]})
        return self._channel.decode(reply.get("value"))

    def __eq__(self, other: object) -> bool:
        return self is other  # never asked of the program: it would decide the comparison

    def __ne__(self, other: object) -> bool:
        return self is not other

    def __hash__(self) -> int:
        return object.__hash__(self)

    def __bool__(self) -> bool:
        raise TypeError("an object of the solution has no truth value in tests; compare an attribute or a result")

    def __len__(self) -> int:
        value = self._special("len")
        if type(value) is not int:
            raise TypeError("len() of the solution's object is not an int")
        return value

    def __iter__(self) -> Any:
        return iter(self._special("iter"))

    def __getitem__(self, key: Any) -> Any:
        return self._special("getitem", key)

    def __contains__(self, item: Any) -> bool:
        value = self._special("contains", item)
        if type(value) is not bool:
            raise TypeError("'in' on the solution's object did not give a bool")
        return value

    def __str__(self) -> str:
        value = self._special("str")
        if type(value) is not str:
            raise TypeError("str() of the solution's object is not a str")
        return value

    def __repr__(self) -> str:
        value = self._special("repr")
        if type(value) is not str:
            raise TypeError("repr() of the solution's object is not a str")
        return value


class Method:
    """A bound method of an object that lives in the program."""

    def __init__(self, owner: Handle, attr: str) -> None:
        self._owner, self._attr = owner, attr

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        owner = self._owner
        return owner._channel.call({"handle": owner._number, "attr": self._attr}, args, kwargs)


def stand_ins(channel: Channel, names: list[Any]) -> dict[str, Any]:
    """The test namespace's view of what the solution defined."""
    namespace: dict[str, Any] = {}
    for entry in names:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
            continue
        name, kind, payload = entry
        if name.startswith("__") or hasattr(builtins, name):
            continue  # a test's `sorted` or `len` is always the real one
        if kind == "module" or (kind in ("value", "object") and name in sys.stdlib_module_names):
            # A module the solution imported is imported here, for tests that lean on it; so is a stdlib name the
            # solution rebound to a value: `math` in a test is the real module, never the program's.
            module = payload if kind == "module" and isinstance(payload, str) else name
            if module.split(".")[0] in sys.stdlib_module_names:
                with contextlib.suppress(Exception):
                    namespace[name] = importlib.import_module(module)
            continue
        if kind == "function":
            namespace[name] = RemoteFunction(channel, name)
        elif kind == "class":
            namespace[name] = RemoteClass(channel, name)
        elif kind == "object" and type(payload) is int:
            namespace[name] = channel.handle(payload)
        elif kind == "value":
            with contextlib.suppress(protocol.NotPlain):
                namespace[name] = channel.decode(payload)
    return namespace


def main() -> None:
    incoming, outgoing = (int(fd) for fd in os.environ["UNIRL_SANDBOX_CHANNEL"].split())
    channel = Channel(incoming, outgoing)
    with open("tests.json", encoding="utf-8") as handle:
        units = json.load(handle)["units"]
    try:
        hello = channel.receive()
    except (ProgramEnded, ValueError):
        hello = {}
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    namespace.update(stand_ins(channel, hello.get("ready") or []))
    ordinal = 0
    broken: str | None = None  # a setup statement that failed fails every test after it
    for unit in units:
        error = broken
        if error is None:
            try:
                exec(compile(unit["code"], f"<test {ordinal}>" if unit["test"] else "<setup>", "exec"), namespace)
            except BaseException as exc:
                error = (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)[:1000]
        if unit["test"]:
            channel.send({"op": "result", "test": ordinal, "passed": error is None, "error": error})
            ordinal += 1
        elif error is not None:
            broken = f"setup failed: {error}"
    channel.send({"op": "done"})


if __name__ == "__main__":
    main()
