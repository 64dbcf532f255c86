"""The reward executor: scores batches in worker processes, with per-call timeouts and crash recovery.

Why processes: CPU-bound scorers (math parsing, sympy) hold the GIL, and a hung or crashing scorer can
only be stopped by killing its process; SIGALRM timeouts (math-verify, verl's legacy manager) fail off
the main thread, which is where verl and OpenRLHF call rewards. One dispatcher thread owns the workers;
``score`` may be called from any number of threads at once (verl and OpenRLHF call adapters that way).

Rewards that declare themselves trusted (pure, fast, bounded: the arithmetic built-ins) score in the caller's
thread instead, where a round trip to a worker would cost more than the reward; every other reward gets workers
and a timeout unless the recipe says ``rewards[i].inline=true`` for it.

Nothing here may wait forever: every call ends within its timeout (the worker running it is killed), worker
start-up has its own budget, a worker that dies is replaced and the call it was running is blamed (a chunk that
kills its worker twice without a call in progress is blamed on the last call it ran), workers that keep dying
without producing a result, a dispatcher that fails and a caller that sees no progress for longer than any call
may take all fail the run with the cause, instead of a silent wait.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import math
import mmap
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from unirl.errors import UnirlError
from unirl.process_tree import kill_descendants, rss_mib
from unirl.rewards.contract import Sample
from unirl.rewards.messages import ERROR_KINDS, CorruptMessage, decode
from unirl.rewards.spec import RewardRuntimeSpec, load_reward
from unirl.rewards.worker import LOST_CONNECTION, Item, LoadedReward, Outcome, call_rewards

log = logging.getLogger(__name__)

ASYNC_GRACE_S = 2.0  # an async gather that ignores cancellation is killed this long after its own timeout
PIPELINE_DEPTH = 2  # tasks in flight per worker
CHUNK_TARGET_S = 0.02  # worker time per task once the cost of a sample is known
POLL_S = 0.5  # the dispatcher looks at deadlines and memory at least this often
MAX_LOAD_KILLS_IN_A_ROW = 3  # a worker killed by a signal while importing the rewards is replaced this often in a row
STALL_SLACK_S = 10.0  # on top of the longest call and a worker start-up: no progress for longer is a defect
MAX_MESSAGE_BYTES = 256 * 2**20  # one result message; more is a corrupt frame (info is capped at 64 KiB a sample)
HARD_MEMORY_FACTOR = 2.0  # a worker above this many times reward_policy.worker_memory_mb is killed mid-call
_NEVER = -2.0  # the progress stamp of a worker that has run no call yet
CORRUPT = "the worker sent a corrupt message"

__all__ = ["ERROR_KINDS", "ExecutorStats", "RewardAbort", "RewardExecutor", "RewardRuntimeError", "ScoredSample",
           "error_metrics"]


@dataclass
class ScoredSample:
    """Every reward's score and components for one sample (fixed keys; None where it failed), and the total."""

    scores: dict[str, float | None]
    components: dict[str, float | None]
    errors: dict[str, str]
    info: dict[str, Any]
    total: float | None  # weighted sum, after the error policy; None when excluded
    error_kinds: dict[str, str] = field(default_factory=dict)


class RewardAbort(UnirlError):
    """The reward error policy stopped the run."""


class RewardRuntimeError(UnirlError):
    """The reward runtime itself failed (workers, their start-up, the dispatcher or result transport)."""


TOTAL_KEY = "total"
"""The key of a sample's error when its weighted total overflowed (each score was finite, their sum is not)."""


@dataclass
class ExecutorStats:
    calls: int = 0
    errors: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    worker_restarts: int = 0
    worker_recycles: int = 0
    first_error: dict[str, str] | None = None
    """The first failed call of the run: reward, kind and message (a traceback for exceptions)."""


def error_metrics(scored: list[ScoredSample]) -> dict[str, float]:
    """Failed reward calls in one batch, in total and by kind: the same metric names on every backend."""
    counts = dict.fromkeys(ERROR_KINDS, 0)
    for s in scored:
        for kind in s.error_kinds.values():
            counts[kind] += 1
    return {"reward/errors": float(sum(counts.values())), **{f"reward/errors/{k}": float(v) for k, v in counts.items()}}


class RewardExecutor:
    """Scores samples with the spec's rewards; applies its error policy to the totals."""

    def __init__(self, spec: RewardRuntimeSpec, *, workers: int | None = None, timeout_s: float | None = None) -> None:
        self.spec = spec
        self.workers = spec.policy.workers if workers is None else workers
        self.timeout_s = spec.policy.timeout_s if timeout_s is None else timeout_s
        self.stats = ExecutorStats()
        self._stats_lock = threading.Lock()
        self._window: deque[tuple[int, int]] = deque()  # (calls, errors) per scored batch, newest last
        self._window_calls = self._window_errors = 0
        self._layout = [(e.name, e.weight, e.components, tuple(f"{e.name}/{c}" for c in e.components))
                        for e in spec.rewards]
        self._fallback = spec.policy.fallback_score if spec.policy.on_error == "fallback" else None
        self._inline_ids = tuple(r for r, e in enumerate(spec.rewards) if e.inline)
        self._pool_ids = tuple(r for r, e in enumerate(spec.rewards) if not e.inline)
        self._inline: dict[int, LoadedReward] = {r: (load_reward(spec.rewards[r]), dict(spec.rewards[r].kwargs))
                                                 for r in self._inline_ids}
        if self._pool_ids and self.workers < 1:
            names = [spec.rewards[r].name for r in self._pool_ids]
            raise UnirlError(f"rewards {names} score in worker processes (they are not trusted to run in the caller's "
                             f"thread), but workers={self.workers}; use workers >= 1, or mark them inline")
        self._pool: _Pool | None = None
        self._pool_lock = threading.Lock()

    def score(self, samples: list[Sample]) -> list[ScoredSample]:
        """Score every sample with every reward; thread-safe; never raises for a reward's failure.

        Raises :class:`RewardRuntimeError` when the runtime itself fails (never waits without a deadline).
        """
        if not samples:
            return []
        job = None
        if self._pool_ids:  # the workers start on their share first, then this thread scores the inline rewards
            job = self._ensure_pool().submit([(i, s, self._pool_ids) for i, s in enumerate(samples)])
        outcomes: dict[int, list[tuple[int, Outcome]]] = {i: [] for i in range(len(samples))}
        if self._inline_ids:
            items: list[Item] = [(i, s, self._inline_ids) for i, s in enumerate(samples)]
            for i, done in call_rewards(self._inline, items, self.timeout_s, _no_stamp):
                outcomes[i].extend(done)
        if job is not None:
            assert self._pool is not None
            for i, done in self._pool.wait(job).items():
                outcomes[i].extend(done)
        scored = [self._assemble(outcomes[i]) for i in range(len(samples))]
        self._count(scored)
        return scored

    def _count(self, scored: list[ScoredSample]) -> None:
        calls = len(scored) * len(self.spec.rewards)
        errors = sum(len(s.errors) for s in scored)
        window = self.spec.policy.error_window
        with self._stats_lock:
            self.stats.calls += calls
            self.stats.errors += errors
            for s in scored:
                for name, kind in s.error_kinds.items():
                    self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1
                    if self.stats.first_error is None:
                        self.stats.first_error = {"reward": name, "kind": kind, "message": s.errors[name]}
            self._window.append((calls, errors))
            self._window_calls += calls
            self._window_errors += errors
            while len(self._window) > 1 and self._window_calls - self._window[0][0] >= window:
                old_calls, old_errors = self._window.popleft()
                self._window_calls -= old_calls
                self._window_errors -= old_errors

    def _assemble(self, outcomes: list[tuple[int, Outcome]]) -> ScoredSample:
        # Hot path (every sample of every step): the per-reward layout is computed once in __init__.
        by_reward = dict(outcomes)
        scores: dict[str, float | None] = {}
        components: dict[str, float | None] = {}
        errors: dict[str, str] = {}
        kinds: dict[str, str] = {}
        info: dict[str, Any] = {}
        total: float | None = 0.0
        for r, (name, weight, names, keys) in enumerate(self._layout):
            outcome = by_reward[r]
            if outcome[0] == "ok":
                _, score, comps, extra = outcome
                scores[name] = score
                for c, key in zip(names, keys, strict=True):
                    value = comps.get(c) if comps else None
                    components[key] = None if value is None else float(value)
                if extra:
                    info[name] = extra
            else:
                _, kind, message = outcome
                scores[name] = score = None
                errors[name] = message
                kinds[name] = kind
                for key in keys:
                    components[key] = None
                if self._fallback is None:
                    total = None  # excluded (or about to abort): never a partial sum that looks real
                score = self._fallback
            if total is not None and score is not None:
                total += weight * score
        if total is not None and not math.isfinite(total):
            errors[TOTAL_KEY] = (f"the weighted total overflowed to {total} (each score was finite; weights "
                                 f"{[w for _, w, _, _ in self._layout]})")
            kinds[TOTAL_KEY] = "invalid"
            total = None
        return ScoredSample(scores, components, errors, info, total, kinds)

    def check_policy(self, scored: list[ScoredSample]) -> None:
        """Raise :class:`RewardAbort` when the policy says so (abort on any error, or past the error rate).

        The rate is over the most recent ``reward_policy.error_window`` calls, so a burst of failures late in a
        long run is seen, and is checked once ``min_calls`` calls were made in all.
        """
        policy = self.spec.policy
        failed = [s for s in scored if s.errors]
        if failed and policy.on_error == "abort":
            name, message = next(iter(failed[0].errors.items()))
            raise RewardAbort(f"reward {name!r} failed and reward_policy.on_error=abort:\n{message}")
        with self._stats_lock:
            total_calls = self.stats.calls
            calls, errors, by_kind = self._window_calls, self._window_errors, dict(self.stats.by_kind)
        if total_calls >= policy.min_calls and calls and errors / calls > policy.max_error_rate:
            raise RewardAbort(
                f"{errors} of {calls} reward calls failed ({errors / calls:.1%}; all errors so far by kind: "
                f"{by_kind}), above reward_policy.max_error_rate={policy.max_error_rate} over the last "
                f"{policy.error_window} calls; see 'errors' in trajectories.jsonl")

    def _ensure_pool(self) -> _Pool:
        with self._pool_lock:
            if self._pool is None:
                self._pool = _Pool(self.spec, self._pool_ids, self.workers, self.timeout_s, self._count_restart)
            return self._pool

    def _count_restart(self, recycled: bool) -> None:
        with self._stats_lock:
            if recycled:
                self.stats.worker_recycles += 1
            else:
                self.stats.worker_restarts += 1

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None

    def __enter__(self) -> RewardExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _no_stamp(idx: int, r: int) -> None:
    """In-thread calls need no progress stamp: nothing kills the caller's thread."""


@dataclass
class _Job:
    future: Future[dict[int, list[tuple[int, Outcome]]]]
    expected: int
    largest_task: int = 1
    outcomes: dict[int, list[tuple[int, Outcome]]] = field(default_factory=dict)
    received: int = 0
    last_progress: float = field(default_factory=time.monotonic)


@dataclass
class _Task:
    job: _Job
    items: list[Item]
    unblamed_deaths: int = 0
    """Workers that died holding this task with no call in progress (a result that could not be sent back)."""


@dataclass
class _Worker:
    slot: int
    process: Any
    conn: Connection
    started_at: float = field(default_factory=time.monotonic)
    ready: bool = False
    task_ids: list[int] = field(default_factory=list)  # sent, in order; the first is the one running
    broken: str | None = None  # why the connection can no longer be trusted (EOF, a corrupt frame)
    killed_for: tuple[str, str] | None = None  # (kind, message) when the dispatcher killed it on purpose
    recycling: bool = False  # it asked to be replaced (over its memory cap) and exits on its own
    load_error: str | None = None

    @property
    def task_id(self) -> int | None:
        return self.task_ids[0] if self.task_ids else None


class _Pool:
    """Worker processes plus the dispatcher thread that feeds them, enforces deadlines and replaces the dead."""

    def __init__(self, spec: RewardRuntimeSpec, reward_ids: tuple[int, ...], workers: int, timeout_s: float,
                 on_restart: Any) -> None:
        self.spec = spec
        self.reward_ids = reward_ids
        self.size = workers
        self.timeout_s = timeout_s
        self.startup_s = spec.policy.startup_timeout_s
        self.memory_mb = spec.policy.worker_memory_mb
        self.on_restart = on_restart
        self.kinds = [e.kind for e in spec.rewards]
        self.chunked = any(self.kinds[r] != "sample" for r in reward_ids)
        # (start time, sample index, reward index) per worker, in a shared file mapping the workers stamp.
        fd, self.progress_file = tempfile.mkstemp(prefix="unirl-reward-progress-", dir=_shm_dir())
        os.ftruncate(fd, 8 * 3 * workers)
        self._mapping = mmap.mmap(fd, 0)
        os.close(fd)
        self.progress = memoryview(self._mapping).cast("d")
        self.queue: deque[tuple[int, _Task]] = deque()
        self.tasks: dict[int, _Task] = {}
        self.ids = itertools.count()
        self.lock = threading.Lock()
        self.wake_r, self.wake_w = os.pipe()
        self.closing = False
        self.fatal: str | None = None
        self.deaths_in_a_row = 0  # worker deaths since the last recorded outcome
        self.max_deaths_in_a_row = 4 + 2 * workers
        self.load_kills_in_a_row = 0  # workers killed by a signal while loading, since one last finished loading
        self.cost_per_item: float | None = None  # seconds of worker time per sample (all rewards), smoothed
        self.last_memory_check = 0.0
        self.reported_crash = False
        self.workers: list[_Worker] = []
        self.thread = threading.Thread(target=self._loop, name="unirl-reward-dispatcher", daemon=True)
        self.thread.start()
        atexit.register(self.close)

    # -- callers' threads ---------------------------------------------------------------------------
    def submit(self, items: list[Item]) -> _Job:
        if self.fatal is not None:
            raise RewardRuntimeError(self.fatal)
        job = _Job(Future(), expected=len(items))
        size = self._chunk_size(len(items))
        job.largest_task = min(size, len(items))
        with self.lock:
            for start in range(0, len(items), size):
                task_id = next(self.ids)
                task = _Task(job, items[start:start + size])
                self.tasks[task_id] = task
                self.queue.append((task_id, task))
        os.write(self.wake_w, b"x")
        return job

    def wait(self, job: _Job) -> dict[int, list[tuple[int, Outcome]]]:
        """The job's outcomes; raises RewardRuntimeError when the runtime fails or stops making progress."""
        # Any single call ends within its timeout (its worker is killed), a replaced worker gets startup_s to load:
        # so a job that records nothing for longer than both plus slack is stuck in the runtime, not in a reward.
        longest_call = self.timeout_s * (job.largest_task if self.chunked else 1) + ASYNC_GRACE_S
        stall_limit = self.startup_s + longest_call + STALL_SLACK_S
        while True:
            try:
                return job.future.result(timeout=POLL_S)
            except FutureTimeout:
                pass
            if self.fatal is not None:
                raise RewardRuntimeError(self.fatal)
            if not self.thread.is_alive():
                raise RewardRuntimeError("the reward dispatcher thread is gone (the executor was closed?)")
            stalled = time.monotonic() - job.last_progress
            if stalled > stall_limit:
                self._fail(f"no reward result arrived for {stalled:.0f} s, longer than any call may take "
                           f"(reward_policy.timeout_s={self.timeout_s:g}, startup_timeout_s={self.startup_s:g}); "
                           f"workers: {self._describe_workers()}")
                raise RewardRuntimeError(self.fatal or "the reward runtime stalled")

    def _chunk_size(self, n: int) -> int:
        """Samples per task, from the measured cost of a sample.

        Cheap rewards: few big chunks, since each chunk costs a round trip to a worker (about 0.2 ms) that a
        microsecond reward cannot amortise. Expensive ones: chunks of about CHUNK_TARGET_S, so a batch does not
        wait at its end for one worker still busy with a large chunk. Never fewer chunks than workers.
        """
        balanced = math.ceil(n / self.size)
        if self.cost_per_item is None:  # nothing measured yet: small chunks are the safe guess
            return max(1, min(balanced, math.ceil(n / (self.size * 16)), 64))
        return max(1, min(balanced, math.ceil(CHUNK_TARGET_S / max(self.cost_per_item, 1e-7))))

    # -- dispatcher thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        # Workers are started (and restarted) from this long-lived thread only: their parent-death signal fires
        # when the creating THREAD exits, and callers' threads (an HTTP request, a verl worker task) come and go.
        try:
            self.workers = [self._start(slot) for slot in range(self.size)]
            while not self.closing and self.fatal is None:
                self._step()
        except BaseException:  # a defect here must fail every caller with its cause, not leave them waiting
            self._fail(f"the reward dispatcher failed:\n{traceback.format_exc().strip()}")
        finally:
            self._stop_workers()

    def _stop_workers(self) -> None:
        """Ask each worker to finish (it kills what its rewards started), then kill what is left.

        From this thread, before it ends: the workers' parent-death signal fires the moment it does, and a worker
        killed that way leaves the processes its rewards started behind.
        """
        for w in self.workers:
            if self.fatal is None:
                with contextlib.suppress(OSError, ValueError):
                    w.conn.send(None)
        deadline = time.monotonic() + 2
        for w in self.workers:
            try:
                w.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _kill(w.process)
            w.conn.close()

    def _step(self) -> None:
        self._dispatch()
        waitables: list[Any] = [self.wake_r, *(w.conn for w in self.workers if w.broken is None)]
        for ready in wait(waitables, timeout=self._next_deadline()):
            if ready == self.wake_r:
                os.read(self.wake_r, 4096)
        for w in list(self.workers):
            self._drain(w)
            if w.broken is not None or w.process.poll() is not None:
                self._on_death(w)
                if self.fatal is not None:
                    return
        self._enforce_startup()
        self._enforce_timeouts()
        self._enforce_memory()

    def _start(self, slot: int) -> _Worker:
        # Our own interpreter per worker (not multiprocessing's fork/spawn/forkserver): no fork of a host holding
        # torch threads or locks, and no re-import of the user's __main__, which spawn/forkserver would run again.
        host_end, child_end = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        process = subprocess.Popen(
            [sys.executable, "-m", "unirl.rewards.worker", str(child_end.fileno()), self.progress_file, str(slot)],
            pass_fds=(child_end.fileno(),), env=env, start_new_session=True, stdin=subprocess.DEVNULL)
        child_end.close()
        worker = _Worker(slot, process, Connection(host_end.detach()))
        self.progress[slot * 3] = 0.0
        self.progress[slot * 3 + 1] = _NEVER
        entries = [self.spec.rewards[r] if r in self.reward_ids else None for r in range(len(self.spec.rewards))]
        try:
            worker.conn.send(("init", entries, self.timeout_s, self.memory_mb))
        except (OSError, ValueError):
            worker.broken = "the worker exited before it received the rewards to load"
        return worker

    def _dispatch(self) -> None:
        with self.lock:
            for w in self.workers:
                # Two tasks in flight per worker: it starts the next as soon as one ends, without a round trip.
                while w.ready and w.broken is None and len(w.task_ids) < PIPELINE_DEPTH and self.queue:
                    task_id, task = self.queue.popleft()
                    try:
                        w.conn.send((task_id, task.items))
                    except (OSError, ValueError):  # it died since the last look: the task never reached it
                        self.queue.appendleft((task_id, task))
                        w.broken = "the connection to the worker broke"
                        break
                    w.task_ids.append(task_id)
                    task.job.last_progress = time.monotonic()

    def _drain(self, w: _Worker) -> None:
        if w.broken is not None:
            return
        try:
            while w.conn.poll():
                message = decode(w.conn.recv_bytes(MAX_MESSAGE_BYTES))
                tag = message[0]
                if tag == "ready":
                    w.ready = True
                    self.load_kills_in_a_row = 0
                elif tag == "load_error":
                    w.load_error = message[1]
                elif tag == "recycle":
                    w.recycling = True
                    log.warning("reward worker %s uses %.0f MiB, above reward_policy.worker_memory_mb=%g; replacing "
                                "it (a reward may be leaking memory)", w.slot, message[1], self.memory_mb)
                else:
                    self._receive(w, *message)
        except CorruptMessage as exc:
            w.broken = f"{CORRUPT} ({exc})"
            _kill(w.process)
        except (EOFError, OSError) as exc:  # the worker died or closed its end; its exit status names the cause
            w.broken = f"the worker's connection closed ({type(exc).__name__})"
            try:
                w.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill(w.process)

    def _receive(self, w: _Worker, task_id: int, results: list[tuple[int, list[tuple[int, Outcome]]]],
                 busy_s: float | None) -> None:
        """``busy_s`` is set on a task's last message: the worker's compute time for the whole task."""
        task = self.tasks.get(task_id)
        if task is None or task_id not in w.task_ids:
            raise CorruptMessage(f"results for task {task_id}, which this worker does not hold")
        todo = {idx: set(rewards) for idx, _, rewards in task.items}
        for idx, outcomes in results:
            if idx not in todo or not {r for r, _ in outcomes} <= todo[idx]:
                raise CorruptMessage(f"results for sample {idx} that task {task_id} did not ask for")
        for idx, outcomes in results:
            self._record(task, idx, outcomes)
        if busy_s is not None:
            per_item = busy_s / max(1, len(task.items))
            self.cost_per_item = per_item if self.cost_per_item is None else 0.8 * self.cost_per_item + 0.2 * per_item
            w.task_ids.remove(task_id)
            del self.tasks[task_id]

    def _record(self, task: _Task, idx: int, outcomes: list[tuple[int, Outcome]]) -> None:
        job = task.job
        got = job.outcomes.setdefault(idx, [])
        seen = {r for r, _ in got}
        got.extend(pair for pair in outcomes if pair[0] not in seen)  # a reward's outcome is recorded once
        job.last_progress = time.monotonic()
        self.deaths_in_a_row = 0
        if len(got) == len(self.reward_ids):
            job.received += 1
            if job.received == job.expected and not job.future.done():
                job.future.set_result(job.outcomes)

    def _next_deadline(self) -> float:
        now = time.monotonic()
        deadline = POLL_S
        for w in self.workers:
            started = self.progress[w.slot * 3]
            if w.task_id is not None and started > 0:
                deadline = min(deadline, started + self._limit(w) - now)
            if not w.ready:
                deadline = min(deadline, w.started_at + self.startup_s - now)
        return max(0.0, deadline)

    def _limit(self, w: _Worker) -> float:
        idx, r = int(self.progress[w.slot * 3 + 1]), int(self.progress[w.slot * 3 + 2])
        if idx >= 0:
            return self.timeout_s
        if self.kinds[r] == "async":
            return self.timeout_s + ASYNC_GRACE_S
        task = self.tasks.get(w.task_id) if w.task_id is not None else None
        return self.timeout_s * (len(task.items) if task else 1)  # a batched call scores the whole chunk

    def _running_reward(self, w: _Worker) -> str:
        r = int(self.progress[w.slot * 3 + 2])
        return self.spec.rewards[r].name if 0 <= r < len(self.spec.rewards) else "?"

    def _enforce_startup(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            if not w.ready and w.broken is None and now - w.started_at > self.startup_s:
                _kill(w.process)
                self._fail(f"a reward worker did not finish loading the rewards within {self.startup_s:g} s "
                           f"(reward_policy.startup_timeout_s): does importing {self._modules()} hang?")
                return

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        for w in list(self.workers):
            started = self.progress[w.slot * 3]
            if w.task_id is None or started <= 0 or w.broken is not None:
                continue
            limit = self._limit(w)
            if now - started > limit:
                w.killed_for = ("timeout", f"reward {self._running_reward(w)!r} did not finish within {limit:g} s; "
                                           "its worker was killed (reward_policy.timeout_s)")
                _kill(w.process)
                self._on_death(w)

    def _enforce_memory(self) -> None:
        now = time.monotonic()
        if not self.memory_mb or now - self.last_memory_check < POLL_S:
            return
        self.last_memory_check = now
        hard = self.memory_mb * HARD_MEMORY_FACTOR
        for w in list(self.workers):
            if w.task_id is None or w.broken is not None:
                continue
            rss = rss_mib(w.process.pid)
            if rss is not None and rss > hard:
                w.killed_for = ("memory", f"reward {self._running_reward(w)!r} grew its worker to {rss:.0f} MiB, "
                                          f"above {HARD_MEMORY_FACTOR:g} x reward_policy.worker_memory_mb="
                                          f"{self.memory_mb:g}; its worker was killed")
                _kill(w.process)
                self._on_death(w)

    def _on_death(self, w: _Worker) -> None:
        if w.process.poll() is None:
            _kill(w.process)
        if w not in self.workers:
            return  # already replaced
        if w.recycling:  # it finished its task and left on purpose: what it still held was never started
            held = [(tid, self.tasks.pop(tid)) for tid in w.task_ids if tid in self.tasks]
            with self.lock:
                self.tasks.update(held)
                self.queue.extendleft(reversed(held))
            self._restart(w, recycled=True)
            return
        if not w.ready:
            code = w.process.poll()
            # A signal from outside (the OOM killer, an operator) can land while a worker imports the rewards; it
            # holds no work yet, so it is replaced. A reported import error, an exit, or a signal on every try in a
            # row is the rewards' own doing: restarting would loop forever.
            if w.load_error is None and code is not None and code < 0 \
                    and self.load_kills_in_a_row < MAX_LOAD_KILLS_IN_A_ROW:
                self.load_kills_in_a_row += 1
                self._restart(w, recycled=False)
                return
            cause = w.load_error or self._crash_message(w)
            self._fail(f"reward workers could not load the rewards:\n{cause}")
            return
        kind, message = w.killed_for or ("crash", self._crash_message(w))
        if not self.reported_crash and kind == "crash":
            self.reported_crash = True
            log.warning("%s; the worker was replaced (later crashes are counted, not printed)", message)
        self._replace(w, kind, message)

    def _crash_message(self, w: _Worker) -> str:
        code = w.process.poll()
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if code == LOST_CONNECTION:
            how += ": its connection to unirl broke"
        if int(self.progress[w.slot * 3 + 1]) == _NEVER:
            return f"reward worker died ({how}) before running any reward"
        detail = f"; {w.broken}" if w.broken else ""
        when = "while running" if self.progress[w.slot * 3] > 0 else "after"
        return f"reward worker died ({how}{detail}) {when} reward {self._running_reward(w)!r}"

    def _restart(self, w: _Worker, recycled: bool) -> None:
        w.conn.close()
        self.workers[self.workers.index(w)] = self._start(w.slot)
        self.on_restart(recycled)

    def _replace(self, w: _Worker, kind: str, message: str) -> None:
        """The call in progress gets the error; everything else the worker held goes back to the queue."""
        stamp = self.progress[w.slot * 3]
        idx, r = int(self.progress[w.slot * 3 + 1]), int(self.progress[w.slot * 3 + 2])
        ran_a_call = idx != int(_NEVER)
        # A corrupt frame is noticed only when the host reads it, by which time the worker may be running a later,
        # innocent call: such a death is not blamed on the running call but retried like one with no call running.
        was_running = stamp > 0 and not (w.broken or "").startswith(CORRUPT)
        held = list(w.task_ids)
        self._restart(w, recycled=False)
        self.deaths_in_a_row += 1
        if self.deaths_in_a_row > self.max_deaths_in_a_row:
            self._fail(f"reward workers keep dying: {self.deaths_in_a_row} deaths in a row without a single result; "
                       f"the last: {message}")
            return
        requeue: list[tuple[int, _Task]] = []
        for position, task_id in enumerate(held):
            task = self.tasks.pop(task_id, None)
            if task is None:
                continue
            deaths = 0
            blamed: set[tuple[int, int]] = set()
            if position == 0 and was_running:
                blamed = {(i, r) for i, _, todo in task.items if (i == idx or idx < 0) and r in todo}
            elif position == 0 and ran_a_call:
                # Died with no call in progress: the last call's result could not be sent (or the reward broke the
                # connection). Retry once; the second time the chunk kills a worker, its last call is to blame.
                deaths = task.unblamed_deaths + 1
                if deaths >= 2:
                    blamed = {(i, r) for i, _, todo in task.items if (i == idx or idx < 0) and r in todo}
                    if not blamed:  # the worker had moved past this chunk: its last call is the one to blame
                        last_idx, _, last_todo = task.items[-1]
                        blamed = {(last_idx, last_todo[-1])}
                    message = (f"{message}; the worker died twice after reward {self._running_reward(w)!r} returned "
                               "(its result could not be sent back, or the reward broke the worker's connection)")
                    deaths = 0
            retry: list[Item] = []
            for item_idx, sample, todo in task.items:
                done = {done_r for done_r, _ in task.job.outcomes.get(item_idx, ())}
                for blame_idx, blame_r in blamed:
                    if blame_idx == item_idx and blame_r not in done:
                        self._record(task, item_idx, [(blame_r, ("error", kind, message))])
                        done.add(blame_r)
                left = tuple(x for x in todo if x not in done)
                if left:
                    retry.append((item_idx, sample, left))
            if retry:
                requeue.append((next(self.ids), _Task(task.job, retry, unblamed_deaths=deaths)))
        with self.lock:
            for new_id, task in reversed(requeue):
                self.tasks[new_id] = task
                self.queue.appendleft((new_id, task))

    def _fail(self, message: str) -> None:
        """Fail every waiting caller with ``message``; the pool takes no more work."""
        with self.lock:
            if self.fatal is None:
                self.fatal = message
            for task in list(self.tasks.values()) + [t for _, t in self.queue]:
                if not task.job.future.done():
                    task.job.future.set_exception(RewardRuntimeError(self.fatal))
            self.tasks.clear()
            self.queue.clear()

    def _describe_workers(self) -> str:
        parts = []
        for w in self.workers:
            state = "loading" if not w.ready else f"running {self._running_reward(w)!r}" if w.task_id is not None \
                else "idle"
            parts.append(f"{w.slot}: pid {w.process.pid} {state}")
        return "; ".join(parts) or "none started"

    def _modules(self) -> str:
        return ", ".join(sorted({self.spec.rewards[r].ref.partition(":")[0] for r in self.reward_ids}))

    def close(self) -> None:
        self.closing = True
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"x")
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=30)
        self.progress.release()
        self._mapping.close()
        Path(self.progress_file).unlink(missing_ok=True)
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        atexit.unregister(self.close)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill a worker and everything its rewards started, ``setsid`` daemons included.

    The worker is stopped first so it cannot start more, then its descendants (orphans are re-parented to it: it is
    a child subreaper) are killed, then its process group and itself.
    """
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGSTOP)
        kill_descendants(process.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
