"""Misbehaving and well-behaved rewards at module level, so executor worker processes can import them."""

from __future__ import annotations

import asyncio
import math
import os
import signal
import time

import unirl


@unirl.reward("exact", components=("length",))
def exact(sample: unirl.Sample) -> unirl.RewardResult:
    return unirl.RewardResult(1.0 if sample.completion == sample.reference else 0.0,
                              {"length": float(len(sample.completion))}, {"pid": os.getpid()})


@unirl.reward("exact_slowly")
def exact_slowly(sample: unirl.Sample, seconds: float = 0.01) -> unirl.RewardResult:
    time.sleep(seconds)
    return unirl.RewardResult(1.0 if sample.completion == sample.reference else 0.0, info={"pid": os.getpid()})


@unirl.reward("explodes")
def explodes(sample: unirl.Sample) -> float:
    if "boom" in sample.completion:
        raise RuntimeError("grader crashed on purpose")
    return 0.5


@unirl.reward("nan_score")
def nan_score(sample: unirl.Sample) -> float:
    return math.nan


@unirl.reward("wrong_type")
def wrong_type(sample: unirl.Sample) -> str:
    return "1.0"


@unirl.reward("drifts", components=("a",))
def drifts(sample: unirl.Sample) -> unirl.RewardResult:
    return unirl.RewardResult(1.0, {"a": 1.0, "surprise": 1.0})


@unirl.reward("sometimes", components=("a", "b"))
def sometimes(sample: unirl.Sample) -> unirl.RewardResult:
    return unirl.RewardResult(1.0, {"a": 1.0} if sample.completion == "x" else {"a": 0.0, "b": 1.0})


@unirl.reward("hangs")
def hangs(sample: unirl.Sample) -> float:
    if sample.completion == "hang":
        while True:  # a CPU-bound hang: only killing the process stops it
            pass
    return 0.25


@unirl.reward("dies")
def dies(sample: unirl.Sample) -> float:
    if sample.completion == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if sample.completion == "exit":
        os._exit(3)
    return 0.75


@unirl.reward("spawns_and_hangs")
def spawns_and_hangs(sample: unirl.Sample) -> float:
    """Starts a child process and hangs: the child must die with the killed worker."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(sample.metadata["pid_file"], "w") as f:
        f.write(str(child.pid))
    time.sleep(600)
    return 0.0


@unirl.reward("scaled")
def scaled(sample: unirl.Sample, factor: float = 1.0) -> float:
    return float(factor)


@unirl.reward("char_count", batched=True)
def char_count(samples: list[unirl.Sample]) -> list[float]:
    return [float(len(s.completion)) for s in samples]


@unirl.reward("short_batch", batched=True)
def short_batch(samples: list[unirl.Sample]) -> list[float]:
    return [1.0] * (len(samples) - 1)


@unirl.reward("awaits", components=("waited",))
async def awaits(sample: unirl.Sample, delay_s: float = 0.0) -> unirl.RewardResult:
    if sample.completion == "slow":
        await asyncio.sleep(600)
    await asyncio.sleep(delay_s)
    return unirl.RewardResult(2.0, {"waited": delay_s})


@unirl.reward("main_thread_only")
def main_thread_only(sample: unirl.Sample) -> float:
    """Uses SIGALRM the way math-verify does by default: fails off the main thread of a process."""
    signal.signal(signal.SIGALRM, lambda *_: None)
    return 1.0
