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
plus ``final()``, plus the recipe's rewards scored on the final transcript. ``metrics`` names the numbers a
``Step.metrics`` carries (an episode's metric is the sum over its turns; absent counts as 0). Declaring them is
optional: a name first seen in a step is logged from then on, with one warning. verl, OpenRLHF, NeMo RL and slime
need the same keys on every sample, so there only the declared names reach the backend's logger; every metric is
in ``trajectories.jsonl``. Without an own ``step``, an action is parsed for a tool call (Hermes style:
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) and dispatched to the ``@unirl.tool`` method it names;
an action with no call ends the episode.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import sys
import threading
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
log = logging.getLogger(__name__)
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
MAX_TOOL_CALL_CHARS = 65_536
"""The longest tool call body read (about 16k tokens): a longer one is ``tool_malformed``, never parsed."""


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
    """Numbers to log for this turn (declared in the environment's ``metrics``, or not)."""


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
    """The first Hermes-style tool call in ``action``; None when it has none.

    Model text is hostile, so this runs in time linear in ``action`` and never raises: two ``str.find`` scans (no
    backtracking pattern), a body cut at :data:`MAX_TOOL_CALL_CHARS` before JSON sees it, and every way JSON can
    refuse it (nesting past the recursion limit, integers past Python's digit limit, NaN and infinities) is a
    :class:`ToolCallError`."""
    start = action.find(TOOL_CALL_OPEN)
    if start < 0:
        return None
    start += len(TOOL_CALL_OPEN)
    end = action.find(TOOL_CALL_CLOSE, start)
    if end < 0:
        return None  # an opening tag alone is not a call: the turn is an answer
    if end - start > MAX_TOOL_CALL_CHARS:
        return ToolCallError(f"the tool call is over {MAX_TOOL_CALL_CHARS:,} characters")
    try:
        body = json.loads(action[start:end], parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        return ToolCallError(f"the tool call is not JSON ({exc.msg})")
    except RecursionError:
        return ToolCallError("the tool call is nested too deeply")
    except ValueError as exc:  # an integer past Python's digit limit, a NaN or an infinity
        return ToolCallError(f"the tool call has a number JSON cannot carry ({str(exc)[:80]})")
    if not isinstance(body, dict) or not isinstance(body.get("name"), str):
        return ToolCallError('a tool call is {"name": ..., "arguments": {...}}')
    arguments = body.get("arguments", {})
    if not isinstance(arguments, dict):
        return ToolCallError("the tool call's arguments must be an object")
    return ToolCall(body["name"], arguments)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number a tool takes")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} overflows a float")
    return value


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


MAX_OBSERVATION_CHARS = 1 << 20
"""The most text one observation (or opening) may carry, all its messages together: about 250k tokens, past any
context, so more is an environment's bug (a whole file or page returned), refused before it is tokenized."""
ROLES = ("system", "user", "assistant", "tool")


def check_messages(value: Any, env: type[Environment], where: str) -> Observation:
    """``value`` when it is text, a list of text messages with a role, or None; else a ContractViolation."""
    if value is None or isinstance(value, str):
        size = 0 if value is None else len(value)
    elif isinstance(value, list):
        size = 0
        for i, message in enumerate(value):
            if not isinstance(message, dict):
                raise ContractViolation(f"environment {env.name!r}: {where} message {i} is "
                                        f"{type(message).__name__}; expected a dict with 'role' and 'content'")
            role, content = message.get("role"), message.get("content")
            if role not in ROLES:
                raise ContractViolation(f"environment {env.name!r}: {where} message {i} has role {role!r}; "
                                        f"allowed: {list(ROLES)}")
            if not isinstance(content, str):
                raise ContractViolation(f"environment {env.name!r}: {where} message {i} content is "
                                        f"{type(content).__name__}; only text reaches the model (no images, "
                                        "no content parts, no None)")
            size += len(content)
    else:
        raise ContractViolation(f"environment {env.name!r}: {where} is {type(value).__name__}; expected text, a "
                                "list of messages or None")
    if size > MAX_OBSERVATION_CHARS:
        raise ContractViolation(f"environment {env.name!r}: {where} is {size:,} characters; at most "
                                f"{MAX_OBSERVATION_CHARS:,} (return less, or cut it yourself)")
    observation: Observation = value
    return observation


def check_step(value: Any, env: type[Environment]) -> Step:
    """Normalise what ``step`` returned; a wrong type, a non-finite reward or metric, a ``done`` that is not a bool
    or an observation the model cannot read is an error. A metric the environment did not declare is logged too
    (declared from then on, with one warning), as Gymnasium's ``info`` or OpenEnv's metadata would be."""
    if not isinstance(value, Step):
        raise ContractViolation(f"environment {env.name!r}: step() returned {type(value).__name__}; "
                                "expected unirl.Step")
    reward = as_number(value.reward)
    if reward is None or not math.isfinite(reward):
        raise ContractViolation(f"environment {env.name!r}: step() reward {value.reward!r} is not a finite number")
    if not isinstance(value.done, bool):
        raise ContractViolation(f"environment {env.name!r}: step() done={value.done!r} "
                                f"({type(value.done).__name__}); expected True or False")
    if not isinstance(value.metrics, Mapping):
        raise ContractViolation(f"environment {env.name!r}: step() metrics is {type(value.metrics).__name__}; "
                                "expected a dict of names to numbers")
    metrics: dict[str, float] = {}
    for key, number in value.metrics.items():
        if not isinstance(key, str) or not key or "/" in key:
            raise ContractViolation(f"environment {env.name!r}: metric name {key!r}; names are non-empty text "
                                    "without '/'")
        checked = as_number(number)
        if checked is None or not math.isfinite(checked):
            raise ContractViolation(f"environment {env.name!r}: metric {key!r} is {number!r}; expected a finite number")
        metrics[key] = checked
    undeclared = [key for key in metrics if key not in env.metrics]
    if undeclared:
        declare_metrics(env, undeclared)
    observation = check_messages(value.observation, env, "step() observation")
    return Step(observation, reward, value.done, metrics)


_METRICS_LOCK = threading.Lock()


def declare_metrics(env: type[Environment], keys: list[str]) -> None:
    """Add metric names an environment returned without declaring them, warning once per name.

    An episode's metric is the sum of its turns' values, so a name first seen mid-run counted 0 in the episodes
    before it, which is what they had. The native backends' loggers keep the names declared at plan time."""
    with _METRICS_LOCK:
        new = [key for key in keys if key not in env.metrics]
        if not new:
            return
        env.metrics = (*env.metrics, *new)
        registered = _DECORATED.get(env.name)
        if registered is not None and registered.cls is env:
            _DECORATED[env.name] = dataclasses.replace(registered, metrics=env.metrics)
    log.warning("environment %r returned metrics it did not declare: %s; logging them too, in trajectories.jsonl "
                "and on TRL in the run's metrics (declare them in @unirl.environment(metrics=...) for the native "
                "backends' loggers, which need every name before the first step)", env.name, new)


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
