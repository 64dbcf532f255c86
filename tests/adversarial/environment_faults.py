"""Environment faults: what a buggy or hostile environment does to the episode loop every rollout engine drives.

Each case plays one episode of a misbehaving environment through :func:`unirl.environments.episode.play`, the loop
TRL's rollout function, verl's agent loop, OpenRLHF's agent and ``unirl env test`` share. Contained means: the call
returns within its deadline, the episode fails with the right error kind and a message saying what was wrong (never
a silent zero, a forged return or an exit of the process), and ``close()`` still runs.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.adversarial import Case
from unirl.environments.contract import Environment, Step, Task, environment, spec_of, tool
from unirl.environments.episode import play

AREA = "environment faults (buggy or hostile environments)"
DEADLINE_S = 2.0
CLOSED: list[str] = []


class _Base(Environment):
    max_turns = 3

    def reset(self, task: Task) -> str:
        return "go"

    def close(self) -> None:
        CLOSED.append(type(self).__name__)


def _env(name: str, step: Callable[..., Any] | None = None, **members: Any) -> type[Environment]:
    cls = type(name, (_Base,), {**({"step": step} if step else {}), **members})
    return environment(f"adversarial_{name}")(cls)


def _tool_that(action: Callable[[], Any]) -> type[Environment]:
    def use(self: Any) -> str:
        """Use it."""
        return str(action())

    use.__annotations__ = {"return": str}
    return _env(f"tool_{action.__name__}", use=tool(use))


def _sys_exit() -> Any:
    sys.exit(0)


def _keyboard_interrupt() -> Any:
    raise KeyboardInterrupt


def _generator_exit() -> Any:
    raise GeneratorExit


async def _sleep_forever(self: Any, action: str) -> Step:
    await asyncio.sleep(3600)
    return Step()


def _busy_forever(self: Any, action: str) -> Step:
    end = time.monotonic() + 3600
    while time.monotonic() < end:
        time.sleep(0.01)
    return Step()


CALL = '<tool_call>{"name": "use", "arguments": {}}</tool_call>'


def fails(cls: type[Environment], kind: str, says: str, actions: tuple[str, ...] = ("a", "b", "c"),
          where: str = "step") -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        CLOSED.clear()
        start = time.monotonic()
        episode = play(spec_of(cls), {}, Task(prompt="p", seed=1), list(actions), timeout_s=DEADLINE_S)
        took = time.monotonic() - start
        assert took < 10 * DEADLINE_S, f"the episode took {took:.1f} s against a {DEADLINE_S} s deadline"
        assert episode.error_kind == kind, f"error kind {episode.error_kind!r} ({episode.error}); expected {kind!r}"
        assert says in (episode.error or ""), f"{says!r} not in {episode.error!r}"
        assert math.isfinite(episode.return_) and episode.termination == "error"
        if where != "reset":
            assert [cls.__name__] == CLOSED, f"close() ran {CLOSED}"
    return check


CASES = [
    Case("step() calls sys.exit(0)", fails(_env("exits", lambda self, a: sys.exit(0)), "exit", "SystemExit(0)")),
    Case("a tool calls sys.exit(0)", fails(_tool_that(_sys_exit), "exit", "SystemExit(0)", (CALL,))),
    Case("a tool raises KeyboardInterrupt", fails(_tool_that(_keyboard_interrupt), "exit", "KeyboardInterrupt()",
                                                  (CALL,))),
    Case("a tool raises GeneratorExit", fails(_tool_that(_generator_exit), "exit", "GeneratorExit()", (CALL,))),
    Case("reset() calls sys.exit(3)", fails(_env("reset_exits", reset=lambda self, t: sys.exit(3)), "exit",
                                            "SystemExit(3)", where="reset")),
    Case("step() awaits forever", fails(_env("sleeps", _sleep_forever), "timeout", "did not return within")),
    Case("step() loops forever", fails(_env("busy", _busy_forever), "timeout", "did not return within")),
    Case("turn rewards of 1e308 that sum to inf", fails(_env("huge", lambda self, a: Step("more", 1e308)),
                                                        "invalid", "turn rewards sum to a non-finite number")),
    Case("a metric of 1e308 a turn", fails(_env("huge_metric", lambda self, a: Step("more", metrics={"m": 1e308})),
                                           "invalid", "metrics ['m'] sum to a non-finite number")),
    Case("final() of 1e308 after turns of 1e308", fails(_env(
        "huge_final", lambda self, a: Step(reward=1e308, done=True), final=lambda self: 1e308), "invalid",
        "plus the turn rewards is not a finite number")),
    Case("a NaN reward", fails(_env("nan", lambda self, a: Step(reward=math.nan)), "invalid", "not a finite number")),
    Case("an infinite metric", fails(_env("inf_metric", lambda self, a: Step(metrics={"m": math.inf})), "invalid",
                                     "expected a finite number")),
    Case("a 50 MB observation", fails(_env("flood", lambda self, a: Step("x" * (50 << 20))), "invalid",
                                      "52,428,800 characters")),
    Case("a 50 MB opening", fails(_env("flood_open", reset=lambda self, t: "x" * (50 << 20)), "invalid",
                                  "reset() is 52,428,800 characters", where="reset")),
    Case("image content in an observation", fails(_env("image", lambda self, a: Step(
        [{"role": "user", "content": [{"type": "image_url", "image_url": "x.png"}]}])), "invalid", "content is list")),
    Case("None content in an observation", fails(_env("none_content", lambda self, a: Step(
        [{"role": "tool", "content": None}])), "invalid", "content is NoneType")),
    Case("a message without a role", fails(_env("no_role", lambda self, a: Step([{"content": "x"}])), "invalid",
                                           "has role None")),
    Case("a message with a made-up role", fails(_env("bad_role", lambda self, a: Step(
        [{"role": "root", "content": "x"}])), "invalid", "has role 'root'")),
    Case("an observation that is a dict", fails(_env("dict_obs", lambda self, a: Step({"role": "user"})), "invalid",
                                                "is dict")),
    Case("done=1 (an int)", fails(_env("int_done", lambda self, a: Step(done=1)), "invalid", "done=1 (int)")),
    Case("done='yes' (a string)", fails(_env("str_done", lambda self, a: Step(done="yes")), "invalid",
                                        "done='yes' (str)")),
    Case("metrics that are a list", fails(_env("list_metrics", lambda self, a: Step(metrics=[1.0])), "invalid",
                                          "metrics is list")),
    Case("a metric name with a slash", fails(_env("slash_metric", lambda self, a: Step(metrics={"a/b": 1.0})),
                                             "invalid", "metric name 'a/b'")),
    Case("step() returns a float", fails(_env("float_step", lambda self, a: 1.0), "invalid", "returned float")),
    Case("reset() returns nothing", fails(_env("empty_reset", reset=lambda self, t: None), "invalid",
                                          "reset() returned None", where="reset")),
]
