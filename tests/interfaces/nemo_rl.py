"""NeMo RL's environment interfaces, written from upstream for tests: NeMo RL is not on the package index.

Each definition mirrors NVIDIA-NeMo/RL at commit 7ea279abfbeb698b092856d0dab61e7cf39bc909 (2026-08-22):
- EnvironmentReturn, EnvironmentInterface: nemo_rl/environments/interfaces.py:26-51, :54-89
- ENV_REGISTRY, register_env: nemo_rl/environments/utils.py:31-56, :135-139
- ACTOR_ENVIRONMENT_REGISTRY, get_actor_python_env: nemo_rl/distributed/ray_actor_environment_registry.py:32-85
- PY_EXECUTABLES.SYSTEM = sys.executable: nemo_rl/distributed/virtual_cluster.py:55-56
- BatchedDataDict is a collections.UserDict: nemo_rl/distributed/batched_data_dict.py:125
Only the contract is reproduced (names, fields, order, abstract methods, registry behaviour), nothing else.
"""

from __future__ import annotations

import abc
import sys
import types
from collections import UserDict
from typing import Any, NamedTuple

import pytest


class EnvironmentReturn(NamedTuple):
    observations: list[dict[str, str]]
    metadata: list[Any]
    next_stop_strings: list[list[str] | None] | list[None]
    rewards: Any  # Tensor[B], or dict[str, Tensor[B]] for multi-reward
    terminateds: Any
    answers: list[str | None] | None


class EnvironmentInterface(abc.ABC):
    @abc.abstractmethod
    def step(self, message_log_batch: list[list[dict[str, Any]]], metadata: list[Any]) -> EnvironmentReturn: ...

    @abc.abstractmethod
    def global_post_process_and_metrics(self, batch: Any) -> tuple[Any, dict]: ...


class BatchedDataDict(UserDict):
    pass


def install(monkeypatch: pytest.MonkeyPatch) -> dict[str, types.ModuleType]:
    """Put the interface modules where ``import nemo_rl...`` finds them, for one test."""
    env_registry: dict[str, dict[str, str]] = {
        "math": {"actor_class_fqn": "nemo_rl.environments.math_environment.MathEnvironment"}}
    actor_registry: dict[str, str] = {"nemo_rl.environments.math_environment.MathEnvironment": sys.executable}

    def register_env(env_name: str, actor_class_fqn: str) -> None:
        if env_name in env_registry:
            raise ValueError(f"Env name {env_name} already registered")
        env_registry[env_name] = {"actor_class_fqn": actor_class_fqn}

    def get_actor_python_env(actor_class_fqn: str) -> str:
        if actor_class_fqn not in actor_registry:
            raise ValueError(f"No actor environment registered for {actor_class_fqn}.")
        return actor_registry[actor_class_fqn]

    class PY_EXECUTABLES:
        SYSTEM = sys.executable

    modules = {
        "nemo_rl": types.ModuleType("nemo_rl"),
        "nemo_rl.environments": types.ModuleType("nemo_rl.environments"),
        "nemo_rl.environments.interfaces": types.ModuleType("nemo_rl.environments.interfaces"),
        "nemo_rl.environments.utils": types.ModuleType("nemo_rl.environments.utils"),
        "nemo_rl.distributed": types.ModuleType("nemo_rl.distributed"),
        "nemo_rl.distributed.ray_actor_environment_registry":
            types.ModuleType("nemo_rl.distributed.ray_actor_environment_registry"),
        "nemo_rl.distributed.virtual_cluster": types.ModuleType("nemo_rl.distributed.virtual_cluster"),
        "nemo_rl.distributed.batched_data_dict": types.ModuleType("nemo_rl.distributed.batched_data_dict"),
    }
    interfaces = modules["nemo_rl.environments.interfaces"]
    interfaces.EnvironmentReturn, interfaces.EnvironmentInterface = EnvironmentReturn, EnvironmentInterface
    utils = modules["nemo_rl.environments.utils"]
    utils.ENV_REGISTRY, utils.register_env = env_registry, register_env
    registry = modules["nemo_rl.distributed.ray_actor_environment_registry"]
    registry.ACTOR_ENVIRONMENT_REGISTRY, registry.get_actor_python_env = actor_registry, get_actor_python_env
    modules["nemo_rl.distributed.virtual_cluster"].PY_EXECUTABLES = PY_EXECUTABLES
    modules["nemo_rl.distributed.batched_data_dict"].BatchedDataDict = BatchedDataDict
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delitem(sys.modules, "unirl.adapters.nemo_rl", raising=False)
    return modules
