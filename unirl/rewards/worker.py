"""Calling reward functions and catching everything they can do wrong; also the worker process loop.

An outcome is a plain tuple (cheap to pickle, and nothing but plain values crosses to the host):
``("ok", score, components, info)`` or ``("error", kind, message)`` with kind one of
``exception``, ``invalid`` (wrong type, NaN, undeclared component), ``timeout``, ``crash``, ``memory``,
``infrastructure`` (the machine failed the call, e.g. an overloaded sandbox: :class:`unirl.errors.InfrastructureError`).
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from unirl.errors import InfrastructureError
from unirl.rewards.contract import RewardFunction, RewardResult, Sample, check_result
from unirl.rewards.messages import encode, plain_info
from unirl.rewards.spec import RewardEntry, load_reward

Outcome = tuple[Any, ...]
FLUSH_S = 0.05
Item = tuple[int, Sample, tuple[int, ...]]  # sample index, sample, indices of the rewards still to compute
OnCall = Callable[[int, int], None]  # (sample index or -1 for a whole chunk, reward index): a call starts
LoadedReward = tuple[RewardFunction, dict[str, Any]]
# What a reward's own code may raise and still be an outcome: SystemExit too (a reward calling sys.exit must not end
# the worker, let alone the trainer when it scores in-thread); KeyboardInterrupt stays the user's Ctrl-C.
AUTHOR_FAILURES = (Exception, SystemExit)
LOST_CONNECTION = 75  # the worker's exit status when its connection to the host broke under it
MESSAGE_MAX_CHARS = 8192  # a traceback or reason in trajectories.jsonl; a 50 MB exception message is cut


def _capped(message: str) -> str:
    if len(message) <= MESSAGE_MAX_CHARS:
        return message
    half = MESSAGE_MAX_CHARS // 2
    return f"{message[:half]}\n... [{len(message) - MESSAGE_MAX_CHARS} characters cut] ...\n{message[-half:]}"


def ok_outcome(value: Any, rf: RewardFunction) -> Outcome:
    if type(value) is float and math.isfinite(value) and not rf.components:
        return ("ok", value, None, None)  # the common case, without building a RewardResult
    if (type(value) is RewardResult and type(value.score) is float and math.isfinite(value.score)
            and type(value.components) is dict and type(value.info) is dict
            and all(type(v) is float and math.isfinite(v) and k in rf.components
                    for k, v in value.components.items())):
        # a well-formed result (finite float score and declared float components), as check_result would pass it
        return ("ok", value.score, dict(value.components) or None, plain_info(value.info))
    try:
        result = check_result(value, rf)
    except (TypeError, ValueError) as exc:
        return ("error", "invalid", _capped(str(exc)))
    return ("ok", float(result.score), dict(result.components) or None, plain_info(result.info))


def error_outcome(exc: BaseException) -> Outcome:
    kind = "infrastructure" if isinstance(exc, InfrastructureError) else "exception"
    return ("error", kind, _capped("".join(traceback.format_exception(exc)).strip()))


def call_rewards(rewards: Mapping[int, LoadedReward], items: list[Item], async_timeout_s: float,
                 on_call: OnCall) -> Iterator[tuple[int, list[tuple[int, Outcome]]]]:
    """Score ``items`` (``rewards`` by reward index); yields ``(sample index, [(reward index, outcome), ...])`` as
    results become final."""
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
            except AUTHOR_FAILURES as exc:  # the author's code: any failure is an outcome, never a crash of the run
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
    except AUTHOR_FAILURES as exc:
        return [error_outcome(exc)] * len(members)
    if not isinstance(values, list | tuple) or len(values) != len(members):
        got = f"{len(values)} values" if isinstance(values, list | tuple) else type(values).__name__
        message = f"batched reward {rf.name!r} returned {got} for {len(members)} samples; expected one per sample"
        return [("error", "invalid", message)] * len(members)
    return [ok_outcome(v, rf) for v in values]


def _call_async(rf: RewardFunction, kwargs: dict[str, Any], members: list[tuple[int, Sample]],
                timeout_s: float) -> list[Outcome]:
    async def one(sample: Sample) -> Outcome:
        # asyncio.wait, not wait_for: a TimeoutError the reward raises itself (its own HTTP client's) is the
        # reward's exception; only our deadline passing is a timeout.
        task = asyncio.ensure_future(rf.fn(sample, **kwargs))
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
        if not done:
            task.cancel()
            return ("error", "timeout", f"reward {rf.name!r} did not finish within {timeout_s:g} s")
        try:
            return ok_outcome(task.result(), rf)
        except AUTHOR_FAILURES as exc:
            return error_outcome(exc)

    async def all_of() -> list[Outcome]:
        return list(await asyncio.gather(*(one(s) for _, s in members)))

    return asyncio.run(all_of())


def load_rewards(entries: list[RewardEntry | None]) -> dict[int, LoadedReward]:
    """The rewards by their index in the spec; None marks one this process does not score (it runs in-thread)."""
    return {r: (load_reward(e), dict(e.kwargs)) for r, e in enumerate(entries) if e is not None}


class _Channel:
    """The worker's end of the connection: every message as plain bytes (see :mod:`unirl.rewards.messages`)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def send(self, message: tuple[Any, ...]) -> None:
        self.conn.send_bytes(encode(message))


def worker_main(conn: Any, progress: Any, slot: int) -> None:
    """A worker process: load the rewards once, then score chunks until the host closes the connection.

    Before each call it stamps ``progress[slot]`` with (start time, sample index, reward index) in shared
    memory, so the host can kill exactly the call that overran its timeout and name it. After a task it checks
    its own memory and asks to be replaced when over ``memory_mb`` (a leaking reward must not grow unreported).
    """
    from unirl.process_tree import kill_descendants, rss_mib

    base = slot * 3
    channel = _Channel(conn)
    _, entries, async_timeout_s, memory_mb = conn.recv()
    try:
        rewards = load_rewards(entries)
    except BaseException as exc:  # SystemExit at import included: the host reports it, naming the cause
        channel.send(("load_error", "".join(traceback.format_exception(exc)).strip()))
        return
    channel.send(("ready",))

    def on_call(idx: int, r: int) -> None:
        progress[base + 1] = idx
        progress[base + 2] = r
        progress[base] = time.monotonic()

    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message is None:
                return
            task_id, items = message
            try:
                _score_task(channel, rewards, task_id, items, async_timeout_s, on_call, progress, base)
            except OSError:  # a reward closed or broke the connection: the host blames the call and replaces us
                kill_descendants(os.getpid(), reap=True)
                os._exit(LOST_CONNECTION)  # not SystemExit: finalizers would trip over the closed descriptor
            rss = rss_mib(os.getpid())
            if memory_mb and rss is not None and rss > memory_mb:
                channel.send(("recycle", rss))
                return
    finally:
        kill_descendants(os.getpid(), reap=True)  # what the rewards started ends with the worker


def _score_task(channel: _Channel, rewards: Mapping[int, LoadedReward], task_id: int, items: list[Item],
                async_timeout_s: float, on_call: OnCall, progress: Any, base: int) -> None:
    # Results go back in batches (at most FLUSH_S apart): one message per sample made the host's dispatcher
    # thread a tenth of a core on a 2-core machine. A killed worker loses at most FLUSH_S of finished work.
    results: list[tuple[int, list[tuple[int, Outcome]]]] = []
    started = last_flush = time.monotonic()
    for idx, outcomes in call_rewards(rewards, items, async_timeout_s, on_call):
        results.append((idx, outcomes))
        if time.monotonic() - last_flush > FLUSH_S:
            _send_results(channel, task_id, results, None)
            results, last_flush = [], time.monotonic()
    progress[base] = 0.0
    _send_results(channel, task_id, results, time.monotonic() - started)  # the time tells the host how to chunk


def _send_results(channel: _Channel, task_id: int, results: list[tuple[int, list[tuple[int, Outcome]]]],
                  busy_s: float | None) -> None:
    try:
        channel.send((task_id, results, busy_s))
    except (TypeError, ValueError, AttributeError, RecursionError) as exc:
        # Outcomes are plain by construction; should one still not encode, its calls fail by name, not the worker.
        message = f"the reward's result could not be sent to the host ({type(exc).__name__}: {exc})"
        failed = [(idx, [(r, ("error", "invalid", message)) for r, _ in outcomes]) for idx, outcomes in results]
        channel.send((task_id, failed, busy_s))


def _die_with_parent() -> None:
    """A worker stuck in a reward would otherwise outlive a host that was killed."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> None:
    """``python -m unirl.rewards.worker FD PROGRESS_FILE SLOT``: started by the executor, never by hand."""
    import mmap
    from multiprocessing.connection import Connection

    from unirl.process_tree import set_child_subreaper

    _die_with_parent()
    set_child_subreaper()
    # A reward's print() must never reach the host's stdout (``unirl reward test --json`` writes JSON there, and a
    # backend may parse its own stdout): the worker's stdout is its stderr.
    os.dup2(2, 1)
    fd, progress_path, slot = int(argv[0]), argv[1], int(argv[2])
    with open(progress_path, "r+b") as f:
        shared = mmap.mmap(f.fileno(), 0)
    worker_main(Connection(fd), memoryview(shared).cast("d"), slot)


if __name__ == "__main__":
    main(sys.argv[1:])
