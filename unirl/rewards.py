"""The reward contract: one function of one sample, written once, run on every backend.

```python
import unirl

@unirl.reward("boxed_math")
def boxed_math(sample: unirl.Sample) -> unirl.RewardResult | float:
    ...
```

A reward returns a float or a :class:`RewardResult` with named ``components``. The set of
components is fixed per reward (declared or learned from its first result), so every record of a
run carries the same keys on every backend.
"""

from __future__ import annotations

import inspect
import math
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from unirl.errors import UnirlError


@dataclass(frozen=True)
class Sample:
    """One completion to score, in backend-neutral terms."""

    prompt: str
    completion: str
    reference: str | None = None
    data_source: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    messages: tuple[Mapping[str, str], ...] = ()  # the prompt as chat messages, when it was chat
    truncated: bool = False  # generation hit the token limit instead of ending on its own


@dataclass
class RewardResult:
    """A score plus named components (format, correctness, ...) and free-form info."""

    score: float
    components: dict[str, float] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardFunction:
    """A registered reward: the author's function plus its name and metadata."""

    name: str
    fn: Callable[..., RewardResult | float]
    components: tuple[str, ...] = ()
    description: str = ""
    module: str = ""

    def __call__(self, sample: Sample, **kwargs: Any) -> RewardResult:
        return as_result(self.fn(sample, **kwargs), self.name)


_DECORATED: dict[str, RewardFunction] = {}


def reward(
    name: str | None = None, *, components: tuple[str, ...] = ()
) -> Callable[[Callable[..., Any]], RewardFunction]:
    """Register a reward function of one :class:`Sample` (extra keyword arguments come from the recipe)."""

    def decorate(fn: Callable[..., Any]) -> RewardFunction:
        if inspect.iscoroutinefunction(fn):
            raise UnirlError(f"reward {fn.__name__!r}: async rewards are not supported yet; write a plain def")
        rf = RewardFunction(
            name=name or fn.__name__,
            fn=fn,
            components=tuple(components),
            description=(inspect.getdoc(fn) or "").split("\n")[0],
            module=fn.__module__,
        )
        _DECORATED[rf.name] = rf
        return rf

    return decorate


def drain_decorated() -> list[RewardFunction]:
    """Rewards defined with the decorator so far (the host adds them to its registry)."""
    return list(_DECORATED.values())


def as_result(value: Any, name: str) -> RewardResult:
    """Normalise what a reward returned; a wrong type or a non-finite score is an error, not a zero."""
    if isinstance(value, RewardResult):
        result = value
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"reward {name!r} returned {type(value).__name__}; expected float or RewardResult")
    else:
        result = RewardResult(float(value))
    if not math.isfinite(result.score):
        raise ValueError(f"reward {name!r} returned a non-finite score {result.score!r}")
    for key, comp in result.components.items():
        if not isinstance(comp, int | float) or not math.isfinite(comp):
            raise ValueError(f"reward {name!r} component {key!r} is {comp!r}; expected a finite number")
    return result


@dataclass
class ScoredSample:
    """Every reward's score and components for one sample, plus the weighted total."""

    scores: dict[str, float | None]
    components: dict[str, float | None]
    total: float | None
    errors: dict[str, str]


@dataclass
class WeightedReward:
    fn: RewardFunction
    weight: float
    kwargs: dict[str, Any]


class RewardSet:
    """The recipe's rewards with weights and arguments; scores samples with a fixed key set.

    Component keys are ``<reward>/<component>``; a failing reward yields ``None`` for its score and
    components (never a silent zero), its traceback in ``errors`` and one count in ``error_count``.
    """

    def __init__(self, rewards: list[WeightedReward]) -> None:
        self.rewards = rewards
        self.calls = 0
        self.error_count = 0
        self._component_names: dict[str, tuple[str, ...]] = {
            w.fn.name: tuple(w.fn.components) for w in rewards if w.fn.components
        }

    @property
    def names(self) -> list[str]:
        return [w.fn.name for w in self.rewards]

    def score(self, sample: Sample) -> ScoredSample:
        scores: dict[str, float | None] = {}
        components: dict[str, float | None] = {}
        errors: dict[str, str] = {}
        for w in self.rewards:
            name = w.fn.name
            self.calls += 1
            try:
                value = w.fn.fn(sample, **w.kwargs)
                if type(value) is float and math.isfinite(value):  # the common case, without a RewardResult
                    scores[name] = value
                    for c in self._component_names.get(name, ()):
                        components[f"{name}/{c}"] = None  # a plain float carries no components
                    continue
                result = as_result(value, name)
            except Exception as exc:  # the author's code: any failure is counted and logged
                self.error_count += 1
                errors[name] = "".join(traceback.format_exception(exc)).strip()
                scores[name] = None
                for c in self._component_names.get(name, ()):
                    components[f"{name}/{c}"] = None
                continue
            scores[name] = result.score
            known = self._component_names.setdefault(name, tuple(sorted(result.components)))
            extra = sorted(result.components.keys() - set(known)) if result.components else []
            if extra:
                self.error_count += 1
                errors[name] = f"reward {name!r} returned components {extra} not in its set {list(known)}"
            for c in known:
                value = result.components.get(c)
                components[f"{name}/{c}"] = None if value is None else float(value)
        total: float | None = 0.0
        for w in self.rewards:
            score = scores[w.fn.name]
            if score is None:
                total = None  # a sample with a failed reward has no total, not a partial one
                break
            total += w.weight * score
        return ScoredSample(scores, components, total, errors)


def build_reward_set(registry: Any, specs: list[Any]) -> RewardSet:
    """The recipe's ``rewards`` (name, weight, kwargs) resolved through the host's reward registry."""
    return RewardSet([WeightedReward(registry.get(s.name), float(s.weight), dict(s.kwargs)) for s in specs])


def reward_sources(registry: Any, names: list[str]) -> dict[str, dict[str, str]]:
    """For the manifest: which plugin and package version each reward came from."""
    import importlib.metadata as md

    sources = {}
    for name in names:
        entry = registry.entry(name)
        fn = registry.get(name)
        top = (fn.module or "").split(".")[0]
        try:
            dist = md.packages_distributions().get(top, [top])[0]
            version = md.version(dist)
        except (md.PackageNotFoundError, IndexError):
            dist, version = top, "unknown"
        sources[name] = {"plugin": entry.source, "module": fn.module, "distribution": dist, "version": version}
    return sources
