"""Rewards that misbehave the way a buggy author's do, at module level so worker processes can import them.

The sample's ``completion`` picks the misbehaviour where one reward covers several; ``metadata`` carries paths.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import unirl


class LocalThing:
    """Stands for an object of a class from a local plugin file: the host could not unpickle it."""

    def __repr__(self) -> str:
        return "LocalThing()"


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


INFO_KINDS: dict[str, Any] = {
    "lambda": lambda: {"fn": lambda x: x},
    "lock": lambda: {"lock": threading.Lock()},
    "generator": lambda: {"gen": (i for i in range(3))},
    "local_class": lambda: {"thing": LocalThing()},
    "huge": lambda: {"text": "x" * (50 * 2**20)},
    "deep": lambda: {"deep": _nested(100_000)},
    "tuple_keys": lambda: {(1, 2): "a", 3: "b"},
    "repr_raises": lambda: {"bad": ReprRaises()},
    "not_a_dict": lambda: [1, 2, 3],
    "module": lambda: {"module": sys},
}


@unirl.reward("odd_info")
def odd_info(sample: unirl.Sample) -> unirl.RewardResult:
    """A fine score with an ``info`` that cannot cross a pipe as it is."""
    return unirl.RewardResult(0.5, info=INFO_KINDS[sample.completion]())


@unirl.reward("numpy_scores", components=("part",))
def numpy_scores(sample: unirl.Sample) -> unirl.RewardResult:
    import numpy as np

    value = {"float32": np.float32(0.5), "int64": np.int64(1), "bool_": np.bool_(True)}[sample.completion]
    return unirl.RewardResult(value, {"part": np.float32(0.25)})  # type: ignore[arg-type]


@unirl.reward("numpy_array")
def numpy_array(sample: unirl.Sample) -> Any:
    import numpy as np

    return np.array([1.0, 2.0, 3.0])


@unirl.reward("huge_score")
def huge_score(sample: unirl.Sample) -> float:
    return 1e308


@unirl.reward("calls_exit")
def calls_exit(sample: unirl.Sample) -> float:
    sys.exit(3)


@unirl.reward("kills_itself")
def kills_itself(sample: unirl.Sample) -> float:
    if sample.completion == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return 1.0


@unirl.reward("closes_connection")
def closes_connection(sample: unirl.Sample) -> float:
    """Closes every descriptor above stderr (its worker's connection among them), then returns normally."""
    if sample.completion == "close":
        os.closerange(3, 4096)
    return 1.0


@unirl.reward("writes_garbage")
def writes_garbage(sample: unirl.Sample) -> float:
    """Writes a length-prefixed frame of garbage into every socket it holds (its worker's connection)."""
    if sample.completion == "garbage":
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    os.write(fd, (12).to_bytes(4, "big") + b"not a pickle")
            except OSError:
                pass
    return 1.0


@unirl.reward("sleeps")
def sleeps(sample: unirl.Sample) -> float:
    time.sleep(600)
    return 0.0


@unirl.reward("stubborn_async")
async def stubborn_async(sample: unirl.Sample) -> float:
    """Blocks its event loop: cancellation never reaches it, only killing the worker does."""
    time.sleep(600)
    return 0.0


@unirl.reward("own_timeout")
async def own_timeout(sample: unirl.Sample) -> float:
    """Its own client timed out: the reward's exception, not a unirl timeout."""
    await asyncio.sleep(0)
    raise TimeoutError("the judge API did not answer")


@unirl.reward("batched_hangs", batched=True)
def batched_hangs(samples: list[unirl.Sample]) -> list[float]:
    while True:
        pass


@unirl.reward("leaks", trusted=False)
def leaks(sample: unirl.Sample) -> float:
    """Keeps 50 MB more on every call, like a cache that is never cleared."""
    _LEAK.append(bytearray(50 * 2**20))
    for block in _LEAK[-1:]:
        block[::4096] = b"x" * len(block[::4096])  # touch every page: resident, not just reserved
    return 1.0


_LEAK: list[bytearray] = []


@unirl.reward("balloons")
def balloons(sample: unirl.Sample) -> float:
    """Allocates far more than its worker may hold in one call."""
    block = bytearray(int(sample.metadata["mib"]) * 2**20)
    block[::4096] = b"x" * len(block[::4096])
    time.sleep(600)
    return 1.0


@unirl.reward("spawns_daemon")
def spawns_daemon(sample: unirl.Sample) -> float:
    """Starts a setsid double-forked daemon that holds stdout open, writes its pid, and returns at once."""
    code = ("import os, sys, time\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        open(sys.argv[1], 'w').write(str(os.getpid()))\n"
            "        time.sleep(600)\n"
            "    os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, sample.metadata["pid_file"]], check=True)
    deadline = time.monotonic() + 10
    while not os.path.exists(sample.metadata["pid_file"]) and time.monotonic() < deadline:
        time.sleep(0.01)
    return 1.0


@unirl.reward("prints")
def prints(sample: unirl.Sample) -> float:
    print("this is the reward talking, not JSON")
    os.write(1, b"and this too\n")
    return 1.0


@unirl.reward("fork_bomb")
def fork_bomb(sample: unirl.Sample) -> float:
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)


@unirl.reward("huge_error")
def huge_error(sample: unirl.Sample) -> float:
    raise ValueError("x" * (20 * 2**20))


@unirl.reward("bad_components", components=("a",))
def bad_components(sample: unirl.Sample) -> unirl.RewardResult:
    return unirl.RewardResult(1.0, components=[("a", 1.0)])  # type: ignore[arg-type]


@unirl.reward("many_components", components=("a",))
def many_components(sample: unirl.Sample) -> unirl.RewardResult:
    return unirl.RewardResult(1.0, components={f"c{i}": 1.0 for i in range(100_000)})


@unirl.reward("fine")
def fine(sample: unirl.Sample) -> float:
    return 1.0
