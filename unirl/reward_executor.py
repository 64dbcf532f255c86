"""The reward executor: scores batches in worker processes, with per-call timeouts and crash recovery.

Why processes: CPU-bound scorers (math parsing, sympy) hold the GIL, and a hung or crashing scorer can
only be stopped by killing its process; SIGALRM timeouts (math-verify, verl's legacy manager) fail off
the main thread, which is where verl and OpenRLHF call rewards. One dispatcher thread owns the workers;
``score`` may be called from any number of threads at once (verl and OpenRLHF call adapters that way).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
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
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from unirl.errors import UnirlError
from unirl.reward_spec import RewardRuntimeSpec
from unirl.reward_worker import Item, Outcome, call_rewards, load_rewards
from unirl.rewards import Sample

ASYNC_GRACE_S = 2.0  # an async gather that ignores cancellation is killed this long after its own timeout
PIPELINE_DEPTH = 2  # tasks in flight per worker
CHUNK_TARGET_S = 0.02  # worker time per task once the cost of a sample is known


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


@dataclass
class ExecutorStats:
    calls: int = 0
    errors: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    worker_restarts: int = 0


ERROR_KINDS = ("exception", "invalid", "timeout", "crash")


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
        self._layout = [(e.name, e.weight, e.components, tuple(f"{e.name}/{c}" for c in e.components))
                        for e in spec.rewards]
        self._fallback = spec.policy.fallback_score if spec.policy.on_error == "fallback" else None
        self._pool: _Pool | None = None
        self._pool_lock = threading.Lock()
        self._inline = load_rewards(spec.rewards) if self.workers == 0 else None

    def score(self, samples: list[Sample]) -> list[ScoredSample]:
        """Score every sample with every reward; thread-safe; never raises for a reward's failure."""
        if not samples:
            return []
        n_rewards = len(self.spec.rewards)
        items: list[Item] = [(i, s, tuple(range(n_rewards))) for i, s in enumerate(samples)]
        if self._inline is not None:
            outcomes: dict[int, list[tuple[int, Outcome]]] = dict(
                call_rewards(self._inline, items, self.timeout_s, lambda idx, r: None))
        else:
            outcomes = self._ensure_pool().submit(items).result()
        scored = [self._assemble(outcomes[i]) for i in range(len(samples))]
        with self._stats_lock:
            self.stats.calls += len(samples) * n_rewards
            for s in scored:
                self.stats.errors += len(s.errors)
                for kind in s.error_kinds.values():
                    self.stats.by_kind[kind] = self.stats.by_kind.get(kind, 0) + 1
        return scored

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
        return ScoredSample(scores, components, errors, info, total, kinds)

    def check_policy(self, scored: list[ScoredSample]) -> None:
        """Raise :class:`RewardAbort` when the policy says so (abort on any error, or past the error rate)."""
        policy = self.spec.policy
        failed = [s for s in scored if s.errors]
        if failed and policy.on_error == "abort":
            name, message = next(iter(failed[0].errors.items()))
            raise RewardAbort(f"reward {name!r} failed and reward_policy.on_error=abort:\n{message}")
        calls, errors = self.stats.calls, self.stats.errors
        if calls >= policy.min_calls and errors / calls > policy.max_error_rate:
            raise RewardAbort(
                f"{errors} of {calls} reward calls failed ({errors / calls:.1%}: {self.stats.by_kind}), above "
                f"reward_policy.max_error_rate={policy.max_error_rate}; see 'errors' in trajectories.jsonl")

    def _ensure_pool(self) -> _Pool:
        with self._pool_lock:
            if self._pool is None:
                self._pool = _Pool(self.spec, self.workers, self.timeout_s, self._count_restart)
            return self._pool

    def _count_restart(self) -> None:
        with self._stats_lock:
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


@dataclass
class _Job:
    future: Future[dict[int, list[tuple[int, Outcome]]]]
    expected: int
    outcomes: dict[int, list[tuple[int, Outcome]]] = field(default_factory=dict)
    received: int = 0


@dataclass
class _Task:
    job: _Job
    items: list[Item]


@dataclass
class _Worker:
    slot: int
    process: Any
    conn: Connection
    ready: bool = False
    task_ids: list[int] = field(default_factory=list)  # sent, in order; the first is the one running
    eof: bool = False

    @property
    def task_id(self) -> int | None:
        return self.task_ids[0] if self.task_ids else None


class _Pool:
    """Worker processes plus the dispatcher thread that feeds them, enforces timeouts and replaces the dead."""

    def __init__(self, spec: RewardRuntimeSpec, workers: int, timeout_s: float, on_restart: Any) -> None:
        self.spec = spec
        self.size = workers
        self.timeout_s = timeout_s
        self.on_restart = on_restart
        self.kinds = [e.kind for e in spec.rewards]
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
        self.load_error: str | None = None
        self.cost_per_item: float | None = None  # seconds of worker time per sample (all rewards), smoothed
        self.workers: list[_Worker] = []
        self.thread = threading.Thread(target=self._loop, name="unirl-reward-dispatcher", daemon=True)
        self.thread.start()
        atexit.register(self.close)

    def _start(self, slot: int) -> _Worker:
        # Our own interpreter per worker (not multiprocessing's fork/spawn/forkserver): no fork of a host holding
        # torch threads or locks, and no re-import of the user's __main__, which spawn/forkserver would run again.
        host_end, child_end = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        process = subprocess.Popen(
            [sys.executable, "-m", "unirl.reward_worker", str(child_end.fileno()), self.progress_file, str(slot)],
            pass_fds=(child_end.fileno(),), env=env, start_new_session=True, stdin=subprocess.DEVNULL)
        child_end.close()
        conn = Connection(host_end.detach())
        conn.send(("init", list(self.spec.rewards), self.timeout_s))
        self.progress[slot * 3] = 0.0
        return _Worker(slot, process, conn)

    def submit(self, items: list[Item]) -> Future[dict[int, list[tuple[int, Outcome]]]]:
        if self.load_error is not None:
            raise UnirlError(f"reward workers could not load the rewards:\n{self.load_error}")
        job = _Job(Future(), expected=len(items))
        size = self._chunk_size(len(items))
        with self.lock:
            for start in range(0, len(items), size):
                task_id = next(self.ids)
                task = _Task(job, items[start:start + size])
                self.tasks[task_id] = task
                self.queue.append((task_id, task))
        os.write(self.wake_w, b"x")
        return job.future

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
        self.workers = [self._start(slot) for slot in range(self.size)]
        while not self.closing:
            self._dispatch()
            waitables: list[Any] = [self.wake_r]
            for w in self.workers:
                waitables.append(w.conn)  # a dead worker's connection reads as EOF
            for ready in wait(waitables, timeout=self._next_deadline()):
                if ready == self.wake_r:
                    os.read(self.wake_r, 4096)
            for w in list(self.workers):
                self._drain(w)
                if w.eof or w.process.poll() is not None:
                    if not w.ready:  # died while importing the rewards: restarting would loop forever
                        self._fail_all(f"a reward worker died while loading the rewards ({self._crash_message(w)})")
                        break
                    self._replace(w, "crash", self._crash_message(w))
            self._enforce_timeouts()

    def _dispatch(self) -> None:
        with self.lock:
            for w in self.workers:
                # Two tasks in flight per worker: it starts the next as soon as one ends, without a round trip.
                while w.ready and len(w.task_ids) < PIPELINE_DEPTH and self.queue:
                    task_id, task = self.queue.popleft()
                    w.task_ids.append(task_id)
                    w.conn.send((task_id, task.items))

    def _drain(self, w: _Worker) -> None:
        try:
            while w.conn.poll():
                message = w.conn.recv()
                if message[0] == "ready":
                    w.ready = True
                elif message[0] == "load_error":
                    self._fail_all(message[1])
                else:
                    self._receive(w, *message)
        except (EOFError, OSError):  # the worker died; reap it so its exit status names the cause
            w.eof = True
            try:
                w.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                _kill(w.process)

    def _receive(self, w: _Worker, task_id: int, results: list[tuple[int, list[tuple[int, Outcome]]]],
                 busy_s: float | None) -> None:
        """``busy_s`` is set on a task's last message: the worker's compute time for the whole task."""
        task = self.tasks.get(task_id)
        if task is None:
            return
        for idx, outcomes in results:
            self._record(task, idx, outcomes)
        if busy_s is not None:
            per_item = busy_s / max(1, len(task.items))
            self.cost_per_item = per_item if self.cost_per_item is None else 0.8 * self.cost_per_item + 0.2 * per_item
            if task_id in w.task_ids:
                w.task_ids.remove(task_id)
            del self.tasks[task_id]

    def _record(self, task: _Task, idx: int, outcomes: list[tuple[int, Outcome]]) -> None:
        job = task.job
        got = job.outcomes.setdefault(idx, [])
        got.extend(outcomes)
        if len(got) == len(self.kinds):
            job.received += 1
            if job.received == job.expected and not job.future.done():
                job.future.set_result(job.outcomes)

    def _next_deadline(self) -> float:
        now = time.monotonic()
        deadline = 1.0
        for w in self.workers:
            started = self.progress[w.slot * 3]
            if w.task_id is not None and started > 0:
                deadline = min(deadline, started + self._limit(w) - now)
        return max(0.0, deadline)

    def _limit(self, w: _Worker) -> float:
        idx, r = int(self.progress[w.slot * 3 + 1]), int(self.progress[w.slot * 3 + 2])
        if idx >= 0:
            return self.timeout_s
        if self.kinds[r] == "async":
            return self.timeout_s + ASYNC_GRACE_S
        task = self.tasks.get(w.task_id) if w.task_id is not None else None
        return self.timeout_s * (len(task.items) if task else 1)  # a batched call scores the whole chunk

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        for w in list(self.workers):
            started = self.progress[w.slot * 3]
            if w.task_id is None or started <= 0:
                continue
            limit = self._limit(w)
            if now - started > limit:
                _kill(w.process)
                self._drain(w)
                name = self.spec.rewards[int(self.progress[w.slot * 3 + 2])].name
                self._replace(w, "timeout", f"reward {name!r} did not finish within {limit:g} s; its worker was "
                                            "killed (reward_policy.timeout_s)")

    def _crash_message(self, w: _Worker) -> str:
        code = w.process.poll()
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        r = int(self.progress[w.slot * 3 + 2])
        return f"reward worker died ({how}) while running reward {self.spec.rewards[r].name!r}"

    def _replace(self, w: _Worker, kind: str, message: str) -> None:
        """The call in progress gets the error; everything else the worker held goes back to the queue."""
        idx, r = int(self.progress[w.slot * 3 + 1]), int(self.progress[w.slot * 3 + 2])
        was_running = self.progress[w.slot * 3] > 0
        held = list(w.task_ids)
        w.conn.close()
        self.workers[self.workers.index(w)] = self._start(w.slot)
        self.on_restart()
        requeue: list[tuple[int, _Task]] = []
        for position, task_id in enumerate(held):
            task = self.tasks.pop(task_id, None)
            if task is None:
                continue
            retry: list[Item] = []
            for item_idx, sample, todo in task.items:
                done = {done_r for done_r, _ in task.job.outcomes.get(item_idx, ())}
                blamed = {r} if position == 0 and was_running and (item_idx == idx or idx < 0) else set()
                if blamed - done:
                    self._record(task, item_idx, [(r, ("error", kind, message))])
                    done = done | blamed
                left = tuple(x for x in todo if x not in done)
                if left:
                    retry.append((item_idx, sample, left))
            if retry:
                requeue.append((next(self.ids), _Task(task.job, retry)))
        with self.lock:
            for new_id, task in reversed(requeue):
                self.tasks[new_id] = task
                self.queue.appendleft((new_id, task))

    def _fail_all(self, message: str) -> None:
        self.load_error = message
        with self.lock:
            for task in self.tasks.values():
                if not task.job.future.done():
                    task.job.future.set_exception(UnirlError(f"reward workers could not load the rewards:\n{message}"))
            self.tasks.clear()
            self.queue.clear()
        self.closing = True

    def close(self) -> None:
        self.closing = True
        with contextlib.suppress(OSError):
            os.write(self.wake_w, b"x")
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=5)
        for w in self.workers:
            with contextlib.suppress(OSError, ValueError):
                w.conn.send(None)
        for w in self.workers:
            try:
                w.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                _kill(w.process)
            w.conn.close()
        self.progress.release()
        self._mapping.close()
        Path(self.progress_file).unlink(missing_ok=True)
        for fd in (self.wake_r, self.wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        atexit.unregister(self.close)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill a worker and anything its reward started (the worker leads its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _shm_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
