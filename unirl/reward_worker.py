"""Calling reward functions and catching everything they can do wrong; also the worker process loop.

An outcome is a plain tuple (cheap to pickle across the pipe):
``("ok", score, components, info)`` or ``("error", kind, message)`` with kind one of
``exception``, ``invalid`` (wrong type, NaN, undeclared component), ``timeout``, ``crash``.
"""

from __future__ import annotations

import asyncio
import math
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from unirl.reward_spec import RewardEntry, load_reward
from unirl.rewards import RewardFunction, RewardResult, Sample, check_result

Outcome = tuple[Any, ...]
FLUSH_S = 0.05
Item = tuple[int, Sample, tuple[int, ...]]  # sample index, sample, indices of the rewards still to compute
OnCall = Callable[[int, int], None]  # (sample index or -1 for a whole chunk, reward index): a call starts


def ok_outcome(value: Any, rf: RewardFunction) -> Outcome:
    if type(value) is float and math.isfinite(value) and not rf.components:
        return ("ok", value, None, None)  # the common case, without building a RewardResult
    try:
        result: RewardResult = check_result(value, rf)
    except (TypeError, ValueError) as exc:
        return ("error", "invalid", str(exc))
    return ("ok", float(result.score), dict(result.components) or None, result.info or None)


def error_outcome(exc: BaseException) -> Outcome:
    return ("error", "exception", "".join(traceback.format_exception(exc)).strip())


def call_rewards(rewards: list[tuple[RewardFunction, dict[str, Any]]], items: list[Item], async_timeout_s: float,
                 on_call: OnCall) -> Iterator[tuple[int, list[tuple[int, Outcome]]]]:
    """Score ``items``; yields ``(sample index, [(reward index, outcome), ...])`` as results become final."""
    pending: dict[int, list[tuple[int, Outcome]]] = {}
    chunk_kinds = {r for _, _, todo in items for r in todo if rewards[r][0].kind != "sample"}
    for idx, sample, todo in items:
        done: list[tuple[int, Outcome]] = []
        for r in todo:
            rf, kwargs = rewards[r]
            if rf.kind != "sample":
                continue
            on_call(idx, r)
            try:
                done.append((r, ok_outcome(rf.fn(sample, **kwargs), rf)))
            except Exception as exc:  # the author's code: any failure is an outcome, never a crash of the run
                done.append((r, error_outcome(exc)))
        if chunk_kinds:
            pending[idx] = done
        else:
            yield idx, done
    for r in sorted(chunk_kinds):
        rf, kwargs = rewards[r]
        members = [(idx, sample) for idx, sample, todo in items if r in todo]
        on_call(-1, r)
        outcomes = (_call_batched if rf.kind == "batched" else _call_async)(rf, kwargs, members, async_timeout_s)
        for (idx, _), outcome in zip(members, outcomes, strict=True):
            pending[idx].append((r, outcome))
    yield from pending.items()


def _call_batched(rf: RewardFunction, kwargs: dict[str, Any], members: list[tuple[int, Sample]],
                  timeout_s: float) -> list[Outcome]:
    try:
        values = rf.fn([s for _, s in members], **kwargs)
    except Exception as exc:
        return [error_outcome(exc)] * len(members)
    if not isinstance(values, list | tuple) or len(values) != len(members):
        got = f"{len(values)} values" if isinstance(values, list | tuple) else type(values).__name__
        message = f"batched reward {rf.name!r} returned {got} for {len(members)} samples; expected one per sample"
        return [("error", "invalid", message)] * len(members)
    return [ok_outcome(v, rf) for v in values]


def _call_async(rf: RewardFunction, kwargs: dict[str, Any], members: list[tuple[int, Sample]],
                timeout_s: float) -> list[Outcome]:
    async def one(sample: Sample) -> Outcome:
        try:
            return ok_outcome(await asyncio.wait_for(rf.fn(sample, **kwargs), timeout_s), rf)
        except TimeoutError:
            return ("error", "timeout", f"reward {rf.name!r} did not finish within {timeout_s:g} s")
        except Exception as exc:
            return error_outcome(exc)

    async def all_of() -> list[Outcome]:
        return list(await asyncio.gather(*(one(s) for _, s in members)))

    return asyncio.run(all_of())


def load_rewards(entries: tuple[RewardEntry, ...] | list[RewardEntry]) -> list[tuple[RewardFunction, dict[str, Any]]]:
    return [(load_reward(e), dict(e.kwargs)) for e in entries]


def worker_main(conn: Any, progress: Any, slot: int) -> None:
    """A worker process: load the rewards once, then score chunks until the host closes the connection.

    Before each call it stamps ``progress[slot]`` with (start time, sample index, reward index) in shared
    memory, so the host can kill exactly the call that overran its timeout and name it.
    """
    base = slot * 3
    _, entries, async_timeout_s = conn.recv()
    try:
        rewards = load_rewards(entries)
    except Exception as exc:
        conn.send(("load_error", "".join(traceback.format_exception(exc)).strip()))
        return
    conn.send(("ready",))

    def on_call(idx: int, r: int) -> None:
        progress[base + 1] = idx
        progress[base + 2] = r
        progress[base] = time.monotonic()

    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        task_id, items = message
        # Results go back in batches (at most FLUSH_S apart): one message per sample made the host's dispatcher
        # thread a tenth of a core on a 2-core machine. A killed worker loses at most FLUSH_S of finished work.
        results: list[tuple[int, list[tuple[int, Outcome]]]] = []
        started = last_flush = time.monotonic()
        for idx, outcomes in call_rewards(rewards, items, async_timeout_s, on_call):
            results.append((idx, outcomes))
            if time.monotonic() - last_flush > FLUSH_S:
                conn.send((task_id, results, None))
                results, last_flush = [], time.monotonic()
        progress[base] = 0.0
        conn.send((task_id, results, time.monotonic() - started))  # the time tells the host how to chunk


def _die_with_parent() -> None:
    """A worker stuck in a reward would otherwise outlive a host that was killed."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> None:
    """``python -m unirl.reward_worker FD PROGRESS_FILE SLOT``: started by the executor, never by hand."""
    import mmap
    from multiprocessing.connection import Connection

    _die_with_parent()
    fd, progress_path, slot = int(argv[0]), argv[1], int(argv[2])
    with open(progress_path, "r+b") as f:
        shared = mmap.mmap(f.fileno(), 0)
    worker_main(Connection(fd), memoryview(shared).cast("d"), slot)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
