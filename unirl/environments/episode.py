"""One episode of an environment, driven turn by turn by whoever generates the actions (a backend's rollout engine,
``unirl env test``'s scripted turns), with the contract's guarantees in one place: a fresh instance per episode, a
deadline on every environment call, ``close()`` always, turn rewards summed with ``final()``, and every failure
counted by kind with its traceback instead of passing as a zero reward."""

from __future__ import annotations

import asyncio
import inspect
import math
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from unirl.environments.contract import (
    ContractViolation,
    Environment,
    EnvironmentSpec,
    Message,
    Observation,
    Step,
    Task,
    check_final,
    check_messages,
    check_step,
)
from unirl.errors import InfrastructureError

Termination = Literal["done", "max_turns", "truncated", "error", "unfinished"]
ErrorKind = Literal["exception", "timeout", "invalid", "infrastructure", "exit"]
"""How an episode failed: the environment raised, ran past its deadline, broke the contract, what it needs (its
sandbox, a service) was broken (:class:`unirl.errors.InfrastructureError`: the machine's fault, not the model's), or
its code tried to end the process (``sys.exit``, ``KeyboardInterrupt`` raised by a library)."""


class EnvironmentTimeout(Exception):
    """An environment call ran past its deadline."""


class EnvironmentExit(Exception):
    """An environment call raised ``SystemExit``, ``KeyboardInterrupt`` or another exception that is not an
    ``Exception``: a library's ``sys.exit`` must fail the episode, not end (or silently stop) the training process
    that runs it."""


def call_with_deadline(fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float) -> Any:
    """``fn(*args)`` (awaited when it is a coroutine function) in a daemon thread, waited for at most ``timeout_s``.

    A call past its deadline raises EnvironmentTimeout; its thread is left to finish on its own (Python cannot stop
    a thread), which is why code an environment runs for the model belongs in unirl's sandbox, whose processes can
    be killed. What the call raises is raised here, except ``SystemExit`` and its kin (not an ``Exception``), which
    arrive as :class:`EnvironmentExit`: they came from the environment's code (the user's Ctrl-C reaches the main
    thread, never this one)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            value = fn(*args)
            outcome["value"] = asyncio.run(value) if inspect.iscoroutine(value) else value
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=target, daemon=True, name=f"unirl-env-{getattr(fn, '__name__', 'call')}")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise EnvironmentTimeout(f"{getattr(fn, '__qualname__', fn)} did not return within {timeout_s:g} s")
    error = outcome.get("error")
    if error is not None and not isinstance(error, Exception):
        raise EnvironmentExit(f"{type(error).__name__}({', '.join(map(repr, error.args))}) raised in "
                              f"{_raised_in(error)}, called as {getattr(fn, '__qualname__', fn)}") from error
    if error is not None:
        raise error
    return outcome.get("value")


def _raised_in(error: BaseException) -> str:
    """The function that raised ``error`` (the innermost frame of its traceback)."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "?" if tb is None else tb.tb_frame.f_code.co_qualname


@dataclass
class Turn:
    """One assistant turn and the environment's answer."""

    action: str
    truncated: bool = False
    observation: Observation = None
    reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Episode:
    """A finished (or failed) episode, as ``trajectories.jsonl`` and ``unirl env test`` show it."""

    environment: str
    task: dict[str, Any]
    opening: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    final_reward: float = 0.0
    termination: Termination = "unfinished"
    error_kind: ErrorKind | None = None
    error: str | None = None
    traceback: str | None = None
    close_error: str | None = None

    @property
    def turn_rewards(self) -> float:
        return sum(t.reward for t in self.turns)

    @property
    def return_(self) -> float:
        """Sum of the turn rewards plus ``final()``'s outcome reward."""
        return self.turn_rewards + self.final_reward

    @property
    def failed(self) -> bool:
        return self.error_kind is not None or self.close_error is not None

    def metrics(self) -> dict[str, float]:
        """The episode's metrics: each declared key summed over its turns, plus turns and truncation."""
        out: dict[str, float] = {"turns": float(len(self.turns)), "truncated": float(self.termination == "truncated")}
        for turn in self.turns:
            for key, value in turn.metrics.items():
                out[key] = out.get(key, 0.0) + value
        return out

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        row.update(turn_rewards=self.turn_rewards, **{"return": self.return_}, metrics=self.metrics())
        return row


def messages_of(observation: Observation, role: str = "user") -> list[Message]:
    """An observation as messages: text becomes one message of ``role``; None is nothing."""
    if observation is None:
        return []
    if isinstance(observation, str):
        return [{"role": role, "content": observation}]
    return [dict(m) for m in observation]


class EpisodeRunner:
    """Drives one episode: ``start()`` gives the opening messages, ``act(text, truncated)`` each assistant turn's
    answer (None once the episode is over), ``finish()`` the Episode, with ``close()`` called exactly once."""

    def __init__(self, spec: EnvironmentSpec, kwargs: Mapping[str, Any], task: Task, *, timeout_s: float,
                 max_turns: int | None = None) -> None:
        self.spec = spec
        self.kwargs = dict(kwargs)
        self.task = task
        self.timeout_s = timeout_s
        self.max_turns = min(max_turns or spec.cls.max_turns, spec.cls.max_turns)
        self.env: Environment | None = None
        self.episode = Episode(spec.name, {"prompt": task.prompt if isinstance(task.prompt, str)
                                           else [dict(m) for m in task.prompt], "reference": task.reference,
                                           "metadata": dict(task.metadata), "seed": task.seed})
        self.over = False

    def _fail(self, kind: ErrorKind, exc: BaseException) -> None:
        self.episode.termination = "error"
        self.episode.error_kind = kind
        self.episode.error = f"{type(exc).__name__}: {exc}"
        self.episode.traceback = "".join(traceback.format_exception(exc))
        self.over = True

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return call_with_deadline(fn, args, self.timeout_s)

    def _guarded(self, what: Callable[[], Any]) -> Any:
        try:
            return what()
        except EnvironmentTimeout as exc:
            self._fail("timeout", exc)
        except ContractViolation as exc:
            self._fail("invalid", exc)
        except InfrastructureError as exc:
            self._fail("infrastructure", exc)
        except EnvironmentExit as exc:
            self._fail("exit", exc)
        except Exception as exc:
            self._fail("exception", exc)
        return None

    def start(self) -> list[Message] | None:
        def opening() -> list[Message]:
            self.env = env = self._call(lambda: self.spec.cls(**self.kwargs))
            opened = check_messages(self._call(env.reset, self.task), self.spec.cls, "reset()")
            if not opened:
                raise ContractViolation(f"environment {self.spec.name!r}: reset() returned {opened!r}; expected "
                                        "the opening text or messages")
            return messages_of(opened)

        found: list[Message] | None = self._guarded(opening)
        if found is not None:
            self.episode.opening = found
        return found

    def act(self, action: str, truncated: bool = False) -> list[Message] | None:
        """The environment's answer to one assistant turn as messages to append; None when the episode is over."""
        if self.over or self.env is None:
            return None
        turn = Turn(action, truncated)
        self.episode.turns.append(turn)
        env = self.env
        step: Step | None = self._guarded(lambda: self._totals_stay_finite(
            check_step(self._call(env.step, action), self.spec.cls)))
        if step is None:
            return None
        turn.observation, turn.reward, turn.metrics = step.observation, step.reward, step.metrics
        if step.done or truncated or len(self.episode.turns) >= self.max_turns:
            self.episode.termination = "truncated" if truncated else "done" if step.done else "max_turns"
            self.over = True
            return None
        return messages_of(step.observation)

    def _totals_stay_finite(self, step: Step) -> Step:
        """Every turn reward and metric is finite, but their sums over the episode could still overflow (1e308 a
        turn): the episode is then an error, not a return of inf that every comparison calls solved."""
        total = self.episode.turn_rewards + step.reward
        sums = self.episode.metrics()
        overflowed = [key for key, value in step.metrics.items() if not math.isfinite(sums.get(key, 0.0) + value)]
        if not math.isfinite(total) or overflowed:
            what = f"metrics {overflowed}" if overflowed else "turn rewards"
            raise ContractViolation(f"environment {self.spec.name!r}: the episode's {what} sum to a non-finite "
                                    "number; return rewards and metrics that add up")
        return step

    def truncate(self) -> None:
        """End the episode at its last turn because the token budget has no room for another one."""
        if not self.over:
            if self.episode.turns:
                self.episode.turns[-1].truncated = True
            self.episode.termination = "truncated"
            self.over = True

    def _return_stays_finite(self, final: float) -> float:
        if not math.isfinite(self.episode.turn_rewards + final):
            raise ContractViolation(f"environment {self.spec.name!r}: final() {final!r} plus the turn rewards is not "
                                    "a finite number")
        return final

    def finish(self) -> Episode:
        """Score ``final()`` (for an episode that did not fail) and close the environment, whatever happened."""
        if self.env is not None and self.episode.error_kind is None:
            if not self.over:
                self.episode.termination = "unfinished"
            env = self.env
            final = self._guarded(lambda: self._return_stays_finite(check_final(self._call(env.final),
                                                                                self.spec.cls)))
            if final is not None:
                self.episode.final_reward = final
        if self.env is not None:
            try:
                self._call(self.env.close)
            except Exception as exc:
                self.episode.close_error = f"{type(exc).__name__}: {exc}"
        self.over = True
        return self.episode


def play(spec: EnvironmentSpec, kwargs: Mapping[str, Any], task: Task, actions: list[str], *, timeout_s: float,
         max_turns: int | None = None) -> Episode:
    """An episode whose assistant turns are ``actions`` (scripted): the first one after the opening, and so on.
    Running out of actions before the episode ends leaves it ``unfinished``."""
    runner = EpisodeRunner(spec, kwargs, task, timeout_s=timeout_s, max_turns=max_turns)
    if runner.start() is not None:
        for action in actions:
            if runner.act(action) is None:
                break
    return runner.finish()
