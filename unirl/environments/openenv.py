"""OpenEnv environments as unirl environments (OpenEnv 0.10, the ``openenv`` distribution), in process or over
OpenEnv's own WebSocket server.

OpenEnv's server-side ``Environment`` (openenv/core/env_server/interfaces.py:223-330) is gym-like:
``reset(seed=, episode_id=) -> Observation`` and ``step(action) -> Observation``, its pydantic ``Observation`` carrying
``done`` and ``reward`` (types.py:67-86); its ``Action`` is a pydantic model (types.py:50-64). The same environment
runs behind ``create_app`` (http_server.py:1990-2010) and is reached with an ``EnvClient``, one WebSocket session per
client, whose ``reset``/``step`` return a ``StepResult(observation, reward, done, metadata)`` (env_client.py:981-1023,
client_types.py:11-30); ``GenericEnvClient`` speaks plain dicts (generic_client.py:58-107).

OpenEnv has no text contract: the environment author says how the model's text becomes an action and an observation
becomes text. :func:`from_openenv` builds one unirl environment class from that, either around an ``Environment``
factory (a fresh instance per episode, ``close()`` after it) or around a server's URL (a fresh session per episode,
closed after it)::

    Echo = from_openenv("echo", factory=EchoEnvironment, action=lambda text: EchoAction(message=text),
                        observe=lambda obs: obs.echoed_message)
    EchoRemote = from_openenv("echo_remote", url="http://127.0.0.1:8000", action=lambda text: {"message": text},
                              observe=lambda obs: obs["echoed_message"])

The step's reward is the observation's (``None`` is 0); ``done`` ends the episode. The opening message is the reset
observation's text, or the task's prompt where that text is empty.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from unirl.environments.contract import Environment, Step, Task, environment

DEFAULT_MAX_TURNS = 8


def _reward(value: Any) -> float:
    return 0.0 if value is None else float(value)


def _field(observation: Any, name: str, default: Any) -> Any:
    if isinstance(observation, dict):
        return observation.get(name, default)
    return getattr(observation, name, default)


def from_openenv(name: str, *, factory: Callable[[], Any] | None = None, url: str | None = None,
                 action: Callable[[str], Any], observe: Callable[[Any], str], max_turns: int = DEFAULT_MAX_TURNS,
                 metrics: tuple[str, ...] = (), message_timeout_s: float = 60.0) -> type[Environment]:
    """A unirl environment class named ``name`` (registered like ``@unirl.environment``) that runs an OpenEnv
    environment: ``factory`` makes an in-process ``openenv.core.env_server.interfaces.Environment``; ``url`` is the
    address of its OpenEnv server (``http://`` or ``ws://``). ``action`` turns the model's text into the action the
    environment takes (a pydantic ``Action`` in process, a dict over the wire); ``observe`` turns an observation
    (the pydantic model in process, a dict over the wire) into the text the model sees next."""
    if (factory is None) == (url is None):
        raise ValueError(f"from_openenv({name!r}): give exactly one of factory= (in process) or url= (a server)")

    class OpenEnvEnvironment(Environment):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.env: Any = None
            self.client: Any = None

        def _opening(self, observation: Any, task: Task) -> str:
            text = observe(observation)
            if text:
                return text
            prompt = task.prompt
            return prompt if isinstance(prompt, str) else str(prompt[-1].get("content", ""))

        def reset(self, task: Task) -> str:
            episode = f"unirl-{task.seed}"
            if factory is not None:
                self.env = factory()
                return self._opening(self.env.reset(seed=task.seed, episode_id=episode), task)
            from openenv.core.generic_client import GenericEnvClient

            self.client = GenericEnvClient(base_url=url, message_timeout_s=message_timeout_s).sync()
            result = self.client.reset(seed=task.seed, episode_id=episode)
            return self._opening(result.observation, task)

        def step(self, text: str) -> Step:
            if factory is not None:
                observation = self.env.step(action(text))
                reward, done = _field(observation, "reward", None), bool(_field(observation, "done", False))
            else:
                result = self.client.step(action(text))
                observation, reward, done = result.observation, result.reward, bool(result.done)
            return Step(observation=None if done else observe(observation), reward=_reward(reward), done=done)

        def close(self) -> None:
            if self.env is not None and hasattr(self.env, "close"):
                self.env.close()
            if self.client is not None:
                self.client.close()

    OpenEnvEnvironment.max_turns = max_turns
    OpenEnvEnvironment.__name__ = OpenEnvEnvironment.__qualname__ = f"OpenEnv_{name}"
    # The caller's module defines it, as far as loading goes: a backend's process imports that module (or its file)
    # and finds the class among the environments it registered (unirl.environments.runtime).
    OpenEnvEnvironment.__module__ = str(sys._getframe(1).f_globals.get("__name__", __name__))
    OpenEnvEnvironment.__doc__ = (f"OpenEnv environment {getattr(factory, '__name__', factory)!s} in process"
                                  if factory is not None else f"OpenEnv environment served at {url}")
    return environment(name, metrics=metrics)(OpenEnvEnvironment)
