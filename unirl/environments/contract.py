"""The environment contract: a multi-turn task written once, run by every backend's rollout engine.

```python
import unirl

@unirl.environment("lookup", metrics=("called",))
class Lookup(unirl.Environment):
    max_turns = 4

    def reset(self, task: unirl.Task) -> str | list[dict]: ...   # the opening user message(s); task = the data row
    def step(self, action: str) -> unirl.Step: ...               # action = the assistant's text for this turn
    def final(self) -> float | unirl.RewardResult | None: ...    # optional outcome reward, after the last turn
    def close(self) -> None: ...                                 # always called, also after errors

    @unirl.tool
    def get(self, key: str) -> str:
        \"\"\"Return the value stored under key.\"\"\"
```

One instance per episode, made with the recipe's ``environment.kwargs``; ``reset``, ``step`` and ``final`` may be
``async def``. An episode ends when ``step`` says ``done``, after ``max_turns`` assistant turns, or when the token
budget runs out (that turn is marked truncated and ends the episode). Its return is the sum of the turn rewards
plus ``final()``, plus the recipe's rewards scored on the final transcript. ``metrics`` is the fixed set of keys
every ``Step.metrics`` may carry (a missing key is absent, an undeclared one is an error): verl and NeMo RL need the
same keys on every sample. Without an own ``step``, an action is parsed for a tool call (Hermes style:
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) and dispatched to the ``@unirl.tool`` method it names;
an action with no call ends the episode.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import sys
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from unirl.errors import InfrastructureError, UnirlError
from unirl.rewards.contract import RewardResult, as_number

Message = dict[str, Any]
"""An OpenAI-style chat message: ``role`` (system, user, assistant, tool) and ``content``."""
Observation = str | list[Message] | None
TOOL_MARK = "__unirl_tool__"
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


TOOL_METRICS = ("tool_calls", "tool_malformed", "tool_unknown", "tool_bad_arguments", "tool_failed", "tool_raised")
"""What the default ``step`` counts per turn; declared for every environment that has tools: calls, and the calls
that could not run or failed, by kind (a malformed call, an unknown tool, wrong arguments, a tool that raised
:class:`ToolError`, a tool that raised anything else)."""


class ToolError(Exception):
    """Raised by a tool to report a failure the model should see (its message becomes the tool's answer), counted
    as ``tool_failed``; any other exception from a tool is shown the same way and counted as ``tool_raised``."""


class ContractViolation(ValueError):
    """An environment returned something the contract does not allow (a wrong type, a non-finite reward, an
    undeclared metric): counted as an ``invalid`` episode error, apart from the environment's own exceptions."""


@dataclass(frozen=True)
class Task:
    """One dataset row, as every backend hands it to ``reset``."""

    prompt: str | tuple[Mapping[str, Any], ...]
    """The row's prompt: text, or chat messages."""
    reference: str | None = None
    """The row's reference answer, when the data has one."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """The row's other columns."""
    seed: int = 0
    """This episode's seed: different for every episode (the samples of one prompt included), so an environment
    that draws hidden state draws it afresh; the same across reruns of the same run."""


@dataclass
class Step:
    """What the environment answers to one assistant turn."""

    observation: Observation = None
    """What the model sees next (text becomes a user message; messages are appended as given); None when done."""
    reward: float = 0.0
    """This turn's reward (backends that keep only an episode's return get the sum)."""
    done: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    """Numbers to log for this turn, keys from the environment's declared ``metrics``."""


class Environment:
    """Base class of a unirl environment (see the module's docstring). Subclasses set ``max_turns`` and implement
    ``reset``; ``step`` defaults to dispatching tool calls to the ``@unirl.tool`` methods."""

    max_turns: ClassVar[int] = 4
    """At most this many assistant turns per episode."""
    name: ClassVar[str] = ""
    metrics: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def reset(self, task: Task) -> str | list[Message]:
        raise NotImplementedError(f"{type(self).__name__}.reset(task) must return the opening message(s)")

    def step(self, action: str) -> Step:
        """The default: run the tool call in ``action``; an action without one ends the episode. A call that cannot
        run (malformed, an unknown tool, wrong arguments) or whose tool fails becomes a tool message the model sees,
        and is counted in the step's metrics by kind (:data:`TOOL_METRICS`)."""
        call = parse_tool_call(action)
        if call is None:
            return Step(done=True)

        def failed(kind: str, text: str, name: str | None = None) -> Step:
            return Step(observation=[tool_message(f"error: {text}", name)], metrics={"tool_calls": 1.0, kind: 1.0})

        if isinstance(call, ToolCallError):
            return failed("tool_malformed", call.reason)
        fn = tools_of(type(self)).get(call.name)
        if fn is None:
            return failed("tool_unknown", f"no tool named {call.name!r}; tools are {sorted(tools_of(type(self)))}")
        problem = argument_problem(fn, call.arguments)
        if problem:
            return failed("tool_bad_arguments", f"{call.name}: {problem}", call.name)
        try:
            result = getattr(self, fn.__name__)(**call.arguments)
        except ToolError as exc:
            return failed("tool_failed", f"{call.name}: {exc}", call.name)
        except InfrastructureError:  # what the tool needs is broken (its sandbox): the episode's error, not the model's
            raise
        except Exception as exc:  # the tool's bug is the model's observation and a counted error, as in TRL's loop
            return failed("tool_raised", f"{call.name} raised {type(exc).__name__}: {exc}", call.name)
        return Step(observation=[tool_message(str(result), call.name)], metrics={"tool_calls": 1.0})

    def final(self) -> float | RewardResult | None:
        return None

    def close(self) -> None:
        return None


E = TypeVar("E", bound=type[Environment])
F = TypeVar("F", bound=Callable[..., Any])


def tool(fn: F) -> F:
    """Mark an environment method as a tool offered to the model: typed parameters and a docstring (its first line
    says what the tool does; the model sees it)."""
    if not inspect.getdoc(fn):
        raise UnirlError(f"tool {fn.__qualname__}: a docstring is required (the model is told what the tool does)")
    hints = typing.get_type_hints(fn)
    for param in list(inspect.signature(fn).parameters.values())[1:]:
        if param.name not in hints:
            raise UnirlError(f"tool {fn.__qualname__}: parameter {param.name!r} needs a type hint "
                             "(the call's arguments are checked against it)")
    setattr(fn, TOOL_MARK, True)
    return fn


def tools_of(cls: type[Environment]) -> dict[str, Callable[..., Any]]:
    """The class's ``@unirl.tool`` methods by name."""
    return {name: fn for name, fn in inspect.getmembers(cls, inspect.isfunction) if getattr(fn, TOOL_MARK, False)}


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The tool as a chat template's ``tools=`` entry (OpenAI function schema) from its hints and docstring."""
    kinds = {str: "string", int: "integer", float: "number", bool: "boolean"}
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())[1:]
    return {"type": "function", "function": {
        "name": fn.__name__, "description": (inspect.getdoc(fn) or "").split("\n")[0],
        "parameters": {"type": "object",
                       "properties": {p.name: {"type": kinds.get(hints[p.name], "string")} for p in params},
                       "required": [p.name for p in params if p.default is inspect.Parameter.empty]}}}


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolCallError:
    """A tool call the model wrote that cannot be run: the reason becomes the observation the model sees."""

    reason: str


def parse_tool_call(action: str) -> ToolCall | ToolCallError | None:
    """The first Hermes-style tool call in ``action``; None when it has none."""
    found = TOOL_CALL.search(action)
    if found is None:
        return None
    try:
        body = json.loads(found.group(1))
    except json.JSONDecodeError as exc:
        return ToolCallError(f"the tool call is not JSON ({exc.msg})")
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return ToolCallError('a tool call is {"name": ..., "arguments": {...}}')
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict):
        return ToolCallError("the tool call's arguments must be an object")
    return ToolCall(body["name"], arguments)


def argument_problem(fn: Callable[..., Any], arguments: Mapping[str, Any]) -> str | None:
    """Why ``arguments`` do not fit ``fn``'s typed parameters, or None."""
    hints = typing.get_type_hints(fn)
    params = {p.name: p for p in list(inspect.signature(fn).parameters.values())[1:]}
    unknown = sorted(set(arguments) - set(params))
    if unknown:
        return f"unknown arguments {unknown}; it takes {sorted(params)}"
    missing = sorted(n for n, p in params.items() if p.default is inspect.Parameter.empty and n not in arguments)
    if missing:
        return f"missing arguments {missing}"
    for name, value in arguments.items():
        kind = hints.get(name)
        if kind in (str, int, float, bool) and not _fits(value, kind):
            return f"{name}={value!r} is not {kind.__name__}"
    return None


def _fits(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def tool_message(content: str, name: str | None = None) -> Message:
    message: Message = {"role": "tool", "content": content}
    if name:
        message["name"] = name
    return message


def check_step(value: Any, env: type[Environment]) -> Step:
    """Normalise what ``step`` returned; a wrong type, a non-finite reward or an undeclared metric is an error."""
    if not isinstance(value, Step):
        raise ContractViolation(f"environment {env.name!r}: step() returned {type(value).__name__}; "
                                "expected unirl.Step")
    reward = as_number(value.reward)
    if reward is None or not math.isfinite(reward):
        raise ContractViolation(f"environment {env.name!r}: step() reward {value.reward!r} is not a finite number")
    undeclared = sorted(str(k) for k in set(value.metrics) - set(env.metrics))
    if undeclared:
        raise ContractViolation(f"environment {env.name!r}: step() metrics {undeclared} were not declared "
                         f"(declared: {list(env.metrics)}); declare them in @unirl.environment(metrics=...)")
    metrics: dict[str, float] = {}
    for key, number in value.metrics.items():
        checked = as_number(number)
        if checked is None or not math.isfinite(checked):
            raise ContractViolation(f"environment {env.name!r}: metric {key!r} is {number!r}; expected a finite number")
        metrics[key] = checked
    if not (value.observation is None or isinstance(value.observation, str)
            or (isinstance(value.observation, list) and all(isinstance(m, dict) for m in value.observation))):
        raise ContractViolation(f"environment {env.name!r}: step() observation must be text, a list of messages "
                                "or None")
    return Step(value.observation, reward, bool(value.done), metrics)


def check_final(value: Any, env: type[Environment]) -> float:
    """``final()``'s outcome reward as a float (None = 0)."""
    if value is None:
        return 0.0
    number = as_number(value.score if isinstance(value, RewardResult) else value)
    if number is None or not math.isfinite(number):
        raise ContractViolation(f"environment {env.name!r}: final() returned {value!r}; expected a finite number")
    return number


# The module names unirl gives files it loads as plugins (unirl.rewards.spec.load_reward_file,
# unirl.host.loading): such a module cannot be imported by name in another process.
FILE_MODULE_PREFIXES = ("unirl_reward_file_", "unirl_local_plugin_")


@dataclass(frozen=True)
class EnvironmentSpec:
    """A registered environment: its class plus where it came from."""

    name: str
    cls: type[Environment]
    metrics: tuple[str, ...]
    description: str
    module: str
    qualname: str
    file: str | None

    @property
    def ref(self) -> str:
        return f"{self.module}:{self.qualname}"

    @property
    def file_only(self) -> bool:
        """Defined in a file loaded as a plugin (``environment.file``, a unirlfile.py): not importable by name."""
        return self.module.startswith(FILE_MODULE_PREFIXES) or self.module == "__main__"

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        return tools_of(self.cls)


_DECORATED: dict[str, EnvironmentSpec] = {}


def environment(name: str | None = None, *, metrics: tuple[str, ...] = ()) -> Callable[[E], E]:
    """Register an environment class (a subclass of :class:`Environment`) under ``name``; ``metrics`` are the keys
    its steps may log."""
    for key in metrics:
        if not isinstance(key, str) or not key or "/" in key:
            raise UnirlError(f"environment {name!r}: metric names must be non-empty strings without '/', got {key!r}")

    def decorate(cls: E) -> E:
        if not (isinstance(cls, type) and issubclass(cls, Environment)):
            raise UnirlError(f"@unirl.environment: {cls!r} is not a subclass of unirl.Environment")
        if not isinstance(cls.max_turns, int) or isinstance(cls.max_turns, bool) or cls.max_turns < 1:
            raise UnirlError(f"environment {cls.__qualname__}: max_turns={cls.max_turns!r}; a whole number >= 1")
        cls.name = name or cls.__name__
        # an environment with tools also logs what its tool calls did (the default step counts them)
        metrics_ = (*metrics, *(m for m in TOOL_METRICS if m not in metrics)) if tools_of(cls) else tuple(metrics)
        cls.metrics = metrics_
        module = sys.modules.get(cls.__module__)
        description = (inspect.getdoc(cls) or "").split("\n")[0]
        _DECORATED[cls.name] = EnvironmentSpec(cls.name, cls, metrics_, description, cls.__module__,
                                               cls.__qualname__, getattr(module, "__file__", None))
        return cls

    return decorate


def spec_of(cls: type[Environment]) -> EnvironmentSpec:
    """The registration of a class decorated with ``@unirl.environment``."""
    spec = _DECORATED.get(cls.name)
    if spec is None or spec.cls is not cls:
        raise UnirlError(f"{cls.__qualname__} is not decorated with @unirl.environment")
    return spec


def decorated_environments() -> list[EnvironmentSpec]:
    """Every environment defined with the decorator in this process so far, the latest per name."""
    return list(_DECORATED.values())
