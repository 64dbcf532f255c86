"""The program side of assert-style ``code_tests``: runs the solution and answers calls into it, nothing more.

Shipped into the *program's* sandbox as ``main.py`` (standard library only). It executes ``solution.py``, reports
the names it defined, then serves one request per line on the session channel ($UNIRL_SANDBOX_CHANNEL): call a
function or class of the solution, read an attribute of or call a method on an object the solution made. Every
answer is a plain value (see ``unirl_protocol``) or a reference to an object that stays here. The solution shares
this interpreter and may rewrite all of it: that changes nothing for the grade, because the tests, the expected
values and the comparisons live in another sandbox, and all that process ever accepts from here is plain data.
"""

from __future__ import annotations

import builtins
import os
import sys
import traceback
import types
from collections.abc import Callable
from typing import Any

import unirl_protocol as protocol  # type: ignore[import-not-found]

NOT_COMPILED = 97


class Server:
    def __init__(self, namespace: dict[str, Any], replies: int) -> None:
        self.namespace = namespace
        self.replies = replies
        self.classes: tuple[type, ...] = ()
        self.objects: dict[int, Any] = {}  # handle -> object
        self.numbers: dict[int, int] = {}  # id(object) -> handle, so one object is always one handle

    def send(self, message: dict[str, Any]) -> None:
        view = memoryview(protocol.dumps(message))
        while view:
            view = view[os.write(self.replies, view):]

    def reference(self, value: Any) -> int | None:
        """A handle for an instance of a class the solution defined; None for anything else."""
        if not isinstance(value, self.classes):
            return None
        number = self.numbers.get(id(value))
        if number is None:
            number = len(self.objects) + 1
            self.objects[number] = value
            self.numbers[id(value)] = number
        return number

    def names(self) -> list[list[Any]]:
        """What the solution defined, for the checker to stand in for."""
        self.classes = tuple(v for v in self.namespace.values()
                             if isinstance(v, type) and getattr(v, "__module__", None) == "__main__")
        described: list[list[Any]] = []
        for name, value in list(self.namespace.items()):
            if name.startswith("__"):
                continue
            if isinstance(value, types.ModuleType):
                described.append([name, "module", value.__name__])
            elif isinstance(value, type):
                described.append([name, "class", None])
            elif callable(value):
                described.append([name, "function", None])
            else:
                try:
                    described.append([name, "value", protocol.encode(value)])
                except protocol.NotPlain:
                    number = self.reference(value)
                    if number is not None:
                        described.append([name, "object", number])
        return described

    def resolve(self, number: int) -> Any:
        if number not in self.objects:
            raise protocol.NotPlain(f"no object #{number} in this program")
        return self.objects[number]

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        handle = request.get("handle")
        target: Any = self.resolve(handle) if isinstance(handle, int) else None
        if op == "getattr":
            value = getattr(target, str(request.get("attr")))
            if callable(value) and not isinstance(value, self.classes):
                return {"method": True}
            return {"value": protocol.encode(value, self.reference)}
        args = [protocol.decode(a, self.resolve) for a in request.get("args", [])]
        kwargs = {str(k): protocol.decode(v, self.resolve) for k, v in request.get("kwargs", [])}
        if op == "special":
            method = str(request.get("method"))
            specials: dict[str, Callable[..., Any]] = {
                "len": len, "str": str, "repr": repr, "iter": list,
                "getitem": lambda obj, key: obj[key], "contains": lambda obj, item: item in obj}
            if method not in specials:
                raise protocol.NotPlain(f"unknown special method {method!r}")
            special = specials[method]
            return {"value": protocol.encode(special(target, *args), self.reference)}
        if op != "call":
            raise protocol.NotPlain(f"unknown request {op!r}")
        if target is None:
            function = self.namespace[str(request.get("name"))]
        else:
            attr = request.get("attr")
            function = getattr(target, str(attr)) if attr else target
        result = function(*args, **kwargs)
        if isinstance(function, type):
            encoded = protocol.encode(result, self.reference)  # a constructor: its instance stays here
        elif target is None:
            encoded = protocol.encode(result)  # a function of the solution: plain values only
        else:
            encoded = protocol.encode(result, self.reference)  # a method: plain, or an object of the solution
        # Arguments travel by value: what the solution does to its copies stays here. Sending changes back would
        # let it rewrite a test's variables, expected values included (``assert f(xs) == sum(xs)``).
        return {"value": encoded}

    def serve(self, requests: int) -> None:
        with os.fdopen(requests, "rb") as stream:
            for line in stream:
                try:
                    request = protocol.loads(line)
                except ValueError:
                    continue
                try:
                    reply = self.answer(request)
                except protocol.NotPlain as exc:
                    reply = {"error": ["NotPlain", str(exc)]}
                except BaseException as exc:  # the solution's own exceptions (SystemExit included) are answers
                    reply = {"error": [type(exc).__name__, str(exc)[:2000]]}
                    traceback.print_exc(limit=5, file=sys.stderr)
                reply["id"] = request.get("id")
                self.send(reply)


def main() -> None:
    requests, replies = (int(fd) for fd in os.environ["UNIRL_SANDBOX_CHANNEL"].split())
    with open("solution.py", encoding="utf-8") as handle:
        source = handle.read()
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": builtins}
    server = Server(namespace, replies)
    try:
        program = compile(source, "solution.py", "exec")
    except (SyntaxError, ValueError) as exc:
        message = f"solution.py does not compile: {type(exc).__name__}: {exc}"
        print(message, file=sys.stderr, flush=True)
        server.send({"compile_error": message})
        os._exit(NOT_COMPILED)
    try:
        exec(program, namespace)
    except SystemExit:
        pass  # an explicit exit ends the solution's top level, not the tests
    except BaseException as exc:
        print(f"solution.py raised {type(exc).__name__}: {exc}", file=sys.stderr)
    server.send({"ready": server.names()})
    server.serve(requests)


if __name__ == "__main__":
    main()
