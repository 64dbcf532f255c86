"""The reward contract: one function of one sample, written once, run on every backend.

```python
import unirl

@unirl.reward("boxed_math", components=("has_answer",))
def boxed_math(sample: unirl.Sample) -> unirl.RewardResult | float:
    ...

@unirl.reward("judge", batched=True)          # one call per batch of samples
def judge(samples: list[unirl.Sample]) -> list[float]: ...

@unirl.reward("api_judge")                    # async rewards are awaited concurrently
async def api_judge(sample: unirl.Sample) -> float: ...
```

A reward returns a float or a :class:`RewardResult`. Its named ``components`` are declared in the
decorator: the component set is fixed per recipe, so every sample carries the same keys on every
backend (verl KeyErrors or silently drops keys that differ between samples). Registration: the
``unirl_add_rewards`` hook of a plugin (an installed package's entry point ``unirl``, a ``unirlfile.py``, or a file
named in the recipe's ``rewards[].file``, which is registered as a plugin too), or this decorator alone in one of
those modules (the host adds decorated rewards no hook registered, attributed to the plugin that defined them).
"""

from __future__ import annotations

import inspect
import math
import numbers
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from unirl.errors import UnirlError

RewardKind = Literal["sample", "batched", "async"]
Trust = bool | Callable[[Mapping[str, Any]], bool]
"""Whether a reward may score in the trainer's thread: a bool, or a function of the recipe's kwargs."""


@dataclass(frozen=True)
class Sample:
    """One completion to score, in backend-neutral terms."""

    prompt: str
    """The prompt as text (after the chat template, when the backend applied one)."""
    completion: str
    """The generated text, without the end-of-sequence token."""
    reference: str | None = None
    """The reference answer (ground truth), when the data has one."""
    data_source: str = ""
    """Which dataset the prompt came from (verl routes built-in scorers by it)."""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    """Free-form per-row data from the dataset (tests for code, ids, difficulty...)."""
    prompt_messages: tuple[Mapping[str, str], ...] = ()
    """The prompt as chat messages, when it was chat."""
    truncated: bool = False
    """Generation hit the token limit instead of ending on its own."""
    completion_tokens: int | None = None
    """Length of the completion in tokens, when the backend knows it."""

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row["metadata"] = dict(self.metadata)
        row["prompt_messages"] = [dict(m) for m in self.prompt_messages]
        return row

    @classmethod
    def from_dict(cls, row: Mapping[str, Any]) -> Sample:
        reference = row.get("reference")
        tokens = row.get("completion_tokens")
        return cls(
            prompt=str(row.get("prompt", "")), completion=str(row.get("completion", "")),
            reference=None if reference is None else str(reference), data_source=str(row.get("data_source") or ""),
            metadata=dict(row.get("metadata") or {}),
            prompt_messages=tuple(dict(m) for m in row.get("prompt_messages") or ()),
            truncated=bool(row.get("truncated", False)), completion_tokens=None if tokens is None else int(tokens),
        )


@dataclass
class RewardResult:
    """A score plus named components (format, correctness, ...) and free-form info for the trajectory log."""

    score: float
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardFunction:
    """A registered reward: the author's function plus its name and metadata."""

    name: str
    fn: Callable[..., Any]
    components: tuple[str, ...] = ()
    kind: RewardKind = "sample"
    description: str = ""
    module: str = ""
    qualname: str = ""
    file: str | None = None  # the defining file, for rewards whose module is not importable by name
    trusted: Trust = False
    """Declared by the author: pure, fast and bounded (no I/O, no untrusted code run, no pathological input
    cost), so it may score in the trainer's thread without a worker process or a timeout."""

    def is_trusted(self, kwargs: Mapping[str, Any]) -> bool:
        """Whether this reward, with these recipe arguments, declared itself safe to score in-thread."""
        if callable(self.trusted):
            return bool(self.trusted(kwargs))
        return bool(self.trusted)

    @property
    def ref(self) -> str:
        """Where a worker process or a backend finds this reward again: ``module:qualname``."""
        return f"{self.module}:{self.qualname}"

    def __call__(self, sample: Sample, **kwargs: Any) -> RewardResult:
        """Score one sample in this thread (no timeout, no isolation): for tests and notebooks."""
        if self.kind == "batched":
            return check_result(self.fn([sample], **kwargs)[0], self)
        if self.kind == "async":
            import asyncio

            return check_result(asyncio.run(self.fn(sample, **kwargs)), self)
        return check_result(self.fn(sample, **kwargs), self)


_DECORATED: dict[str, RewardFunction] = {}


def reward(
    name: str | None = None, *, components: tuple[str, ...] = (), batched: bool = False, trusted: Trust = False
) -> Callable[[Callable[..., Any]], RewardFunction]:
    """Register a reward function.

    ``fn(sample, **kwargs)`` by default; ``fn(samples, **kwargs) -> list`` with ``batched=True``; an
    ``async def`` is awaited (many samples concurrently). Extra keyword arguments come from the recipe.
    ``trusted=True`` (or a function of the recipe's kwargs) declares the reward pure, fast and bounded: it then
    scores in the trainer's thread, with no worker process and no timeout. Leave it False for anything that
    runs generated code, does I/O, or can take long on a hostile completion; such rewards get worker processes
    and ``reward_policy.timeout_s`` unless a recipe says ``rewards[i].inline=true`` for them.
    """
    for comp in components:
        if not isinstance(comp, str) or not comp or "/" in comp:
            raise UnirlError(f"reward {name!r}: component names must be non-empty strings without '/', got {comp!r}")

    def decorate(fn: Callable[..., Any]) -> RewardFunction:
        is_async = inspect.iscoroutinefunction(fn)
        if is_async and batched:
            raise UnirlError(f"reward {fn.__name__!r}: an async reward is already concurrent; drop batched=True")
        module = sys.modules.get(fn.__module__)
        rf = RewardFunction(
            name=name or fn.__name__,
            fn=fn,
            components=tuple(components),
            kind="async" if is_async else "batched" if batched else "sample",
            description=(inspect.getdoc(fn) or "").split("\n")[0],
            module=fn.__module__,
            qualname=fn.__qualname__,
            file=getattr(module, "__file__", None),
            trusted=trusted,
        )
        _DECORATED[rf.name] = rf
        return rf

    return decorate


def decorated_rewards() -> list[RewardFunction]:
    """Every reward defined with the decorator in this process so far, the latest per name (the host adds those no
    hook registered); nothing is removed, so a second host sees them too."""
    return list(_DECORATED.values())


def as_number(value: Any) -> float | None:
    """``value`` as a float when it is a real number (Python or NumPy/torch scalars, bools as 0/1), else None.

    NumPy's float32/int64/bool_ and 0-d tensors are what reward authors get from their libraries; they are numbers,
    not type errors. Only scalars with a one-element ``item()`` count: an array is never silently reduced.
    """
    if type(value) is float or type(value) is int:  # the common case, without the ABC check below
        return float(value)
    if isinstance(value, numbers.Real):  # int, float, bool, Fraction, numpy floating/integer
        return float(value)
    module = type(value).__module__.split(".")[0]
    if module in ("numpy", "torch") and hasattr(value, "item"):
        try:
            if getattr(value, "ndim", 0) == 0 or getattr(value, "size", None) == 1:
                item = value.item()
                return float(item) if isinstance(item, numbers.Real) else None
        except (TypeError, ValueError, RuntimeError):
            return None
    return None


def check_result(value: Any, rf: RewardFunction) -> RewardResult:
    """Normalise what a reward returned; a wrong type, a non-finite number or an undeclared component is an error."""
    if isinstance(value, RewardResult):
        result = value
    else:
        number = as_number(value)
        if number is None:
            raise TypeError(f"reward {rf.name!r} returned {type(value).__name__}; expected a number or RewardResult")
        result = RewardResult(number)
    score = as_number(result.score)
    if score is None or not math.isfinite(score):
        raise ValueError(f"reward {rf.name!r} returned a non-finite or non-numeric score {result.score!r}")
    if not isinstance(result.components, Mapping):
        raise TypeError(f"reward {rf.name!r}: components must be a dict of numbers, got "
                        f"{type(result.components).__name__}")
    undeclared = sorted(str(k) for k in set(result.components) - set(rf.components))
    if undeclared:
        raise ValueError(
            f"reward {rf.name!r} returned components {undeclared} it did not declare (declared: {list(rf.components)});"
            f" declare them with @unirl.reward({rf.name!r}, components=(...)) so every sample carries the same keys")
    components: dict[str, float] = {}
    for key, comp in result.components.items():
        if comp is None:
            continue
        number = as_number(comp)
        if number is None or not math.isfinite(number):
            raise ValueError(f"reward {rf.name!r} component {key!r} is {comp!r}; expected a finite number")
        components[key] = number
    if not isinstance(result.info, Mapping):
        result_info: dict[str, Any] = {"info": result.info}
    else:
        result_info = dict(result.info)
    return RewardResult(score, components, result_info)
