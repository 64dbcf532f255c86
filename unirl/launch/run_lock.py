"""One writer per run directory: a lock file made by exclusive create, naming its holder (pid, start time, command).

Every writer of a run directory holds ``<run_dir>/.unirl.lock`` for the whole run: ``unirl`` itself for a run or a
resume (taken before Hydra writes anything, see :func:`claim_run_directory`), each sweep member in its own directory,
and a sweep's launching process in the sweep directory. A second writer fails at once with
:class:`RunDirectoryLocked` (exit code 2), having written and truncated nothing.

A lock is stale when no process it names still runs: the recorded pid is gone, or the pid now belongs to another
process (its start time in ``/proc/<pid>/stat`` differs from the recorded one, which catches pid reuse), or the
machine rebooted since (another boot id). A stale lock is replaced, and the new holder says whose it was. A local
backend child is recorded in the lock too: if unirl itself is killed, the child may still be writing.

Taking over a stale lock is a read-check-replace; two contenders could both see the same stale lock, so every
change to the lock file happens under ``flock`` on the run directory itself (released by the kernel when a process
dies, so that guard can never go stale). Where ``flock`` is unavailable (some network filesystems) the exclusive
create still admits one fresh writer; only the takeover of a stale lock is then unguarded.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unirl.errors import UnirlError
from unirl.process_tree import alive, process_start

if TYPE_CHECKING:
    from unirl.backend.contract import Framework
    from unirl.backend.plan import LaunchPlan
    from unirl.launch.scheduler import Scheduler

log = logging.getLogger(__name__)

LOCK = ".unirl.lock"
_PROC = Path("/proc")
# Writability failures: the directory (or its filesystem) refuses a new file.
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT)


# --- which process is this -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessId:
    """A process as the kernel can confirm it later: pid plus start time (clock ticks since boot) and boot."""

    pid: int
    start_ticks: int | None
    boot_id: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_ticks": self.start_ticks, "boot_id": self.boot_id,
                "started": started_text(self.start_ticks)}


def boot_id() -> str | None:
    try:
        return (_PROC / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
    except OSError:
        return None


def this_process() -> ProcessId:
    return ProcessId(os.getpid(), process_start(os.getpid()), boot_id())


def identify(pid: int) -> ProcessId:
    return ProcessId(pid, process_start(pid), boot_id())


def started_text(start_ticks: int | None) -> str | None:
    """A start time in ticks since boot as local wall-clock time (for messages), when /proc/stat gives the boot time."""
    if start_ticks is None:
        return None
    try:
        btime = next(int(line.split()[1]) for line in (_PROC / "stat").read_text().splitlines()
                     if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return datetime.fromtimestamp(btime + start_ticks / os.sysconf("SC_CLK_TCK")).isoformat(timespec="seconds")


def same_process(pid: int, start_ticks: int | None, recorded_boot: str | None = None) -> bool:
    """Is the process recorded as (pid, start time, boot) the one running now? Without /proc (not Linux) only
    liveness can be checked."""
    if not _PROC.joinpath("self", "stat").exists():
        return alive(pid)
    if recorded_boot is not None and recorded_boot != boot_id():
        return False
    now = process_start(pid)
    return now is not None and start_ticks is not None and now == start_ticks


# --- errors ----------------------------------------------------------------------------------------------------


class RunDirectoryLocked(UnirlError):
    """Another live process writes this run directory."""

    def __init__(self, run_dir: Path, record: dict[str, Any], why: str) -> None:
        self.run_dir = run_dir
        self.record = record
        command = record.get("command")
        shown = " ".join(command) if isinstance(command, list) else str(command)
        super().__init__(
            f"run directory {run_dir} is in use by another unirl process: pid {record.get('pid')} on "
            f"{record.get('host')}, started {record.get('started') or 'at an unknown time'}, command: {shown} "
            f"({why}; lock {run_dir / LOCK}). Nothing was written. Wait for it to end, or stop it with "
            f"`unirl stop {run_dir}`")


class RunDirectoryNotWritable(UnirlError):
    def __init__(self, directory: Path, reason: str) -> None:
        self.directory = directory
        super().__init__(f"{directory} is not writable ({reason}): unirl cannot make or write its run directory "
                         "there; choose another UNIRL_RUNS_DIR or hydra.run.dir, or fix its permissions")


def not_writable(directory: Path, exc: OSError) -> RunDirectoryNotWritable:
    # Name the directory that refused: the deepest one that exists.
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return RunDirectoryNotWritable(existing, exc.strerror or str(exc))


# --- the lock --------------------------------------------------------------------------------------------------


def read_lock(run_dir: Path) -> dict[str, Any] | None:
    """The lock's record; ``{}`` for a lock file that does not parse (not one unirl wrote whole); None for none."""
    path = run_dir / LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError:  # a symlink, or unreadable: not a lock unirl made
        return {} if os.path.lexists(path) else None
    try:
        with os.fdopen(fd, "rb") as handle:
            record = json.loads(handle.read(1 << 20))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def liveness(record: dict[str, Any]) -> tuple[bool, str]:
    """(is the lock held, why): held while its process or the backend child it records still runs."""
    if not record:
        return False, "the lock file does not parse"
    if record.get("host") not in (None, socket.gethostname()):
        # Another machine's process cannot be checked from here: the lock stands.
        return True, f"held on host {record.get('host')}, which this machine cannot check; if that process is gone, " \
                     f"delete the lock"
    children = record.get("children")
    processes = [record, *[c for c in children if isinstance(c, dict)]] if isinstance(children, list) else [record]
    for proc in processes:
        pid = proc.get("pid")
        if proc is record and pid == os.getpid():
            continue  # this process holds no such lock (acquire asks held() first): a leftover of an earlier attempt
        if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 and \
                same_process(pid, proc.get("start_ticks"), proc.get("boot_id")):
            return True, "its process is running" if proc is record else f"its backend process {pid} is running"
    pid = record.get("pid")
    if record.get("boot_id") not in (None, boot_id()):
        return False, f"process {pid} ran before this machine last booted"
    if isinstance(pid, int) and process_start(pid) is not None:
        return False, f"pid {pid} now belongs to another process (its start time differs from the recorded one)"
    return False, f"process {pid} is no longer running"


@dataclass
class RunLock:
    """This process's hold on one run directory; re-entrant (a run's ``main`` and its task both take it)."""

    run_dir: Path
    record: dict[str, Any]
    depth: int = 1
    replaced: str | None = None
    """Why an earlier, stale lock was replaced (said to the user), or None."""
    children: list[dict[str, Any]] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.run_dir / LOCK

    def release(self) -> None:
        self.depth -= 1
        if self.depth > 0:
            return
        _HELD.pop(_key(self.run_dir), None)
        with contextlib.suppress(OSError), _guard(self.run_dir):
            current = read_lock(self.run_dir)
            if current and current.get("pid") == self.record["pid"] and \
                    current.get("start_ticks") == self.record["start_ticks"]:
                self.path.unlink()

    def note_child(self, pid: int) -> None:
        """Record a backend process started for this run: it writes the directory too, and may outlive unirl."""
        self.children.append(identify(pid).to_dict())
        self.record["children"] = self.children
        with contextlib.suppress(OSError), _guard(self.run_dir):
            _write_atomically(self.path, self.record)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_HELD: dict[str, RunLock] = {}


def _key(run_dir: Path) -> str:
    return os.path.realpath(run_dir)


def held(run_dir: Path) -> RunLock | None:
    """The lock this process holds on ``run_dir``, if any (a fork does not inherit it: the pid is checked)."""
    lock = _HELD.get(_key(run_dir))
    return lock if lock is not None and lock.record["pid"] == os.getpid() else None


def holder(run_dir: Path) -> dict[str, Any] | None:
    """The live holder's record when another process holds the lock, else None (read only: takes nothing)."""
    if held(run_dir) is not None:
        return None
    record = read_lock(run_dir)
    if record is None:
        return None
    alive, _ = liveness(record)
    return record if alive else None


def acquire(run_dir: Path, command: list[str]) -> RunLock:
    """Take the run directory's lock (making the directory), or raise :class:`RunDirectoryLocked` naming the holder.

    :class:`RunDirectoryNotWritable` when the directory cannot be made or written."""
    mine = held(run_dir)
    if mine is not None:
        mine.depth += 1
        return mine
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno in _NOT_WRITABLE:
            raise not_writable(run_dir, exc) from None
        raise UnirlError(f"cannot make the run directory {run_dir}: {exc.strerror or exc}") from None
    me = this_process()
    record = {**me.to_dict(), "host": socket.gethostname(), "command": [str(c) for c in command],
              "acquired": datetime.now().isoformat(timespec="seconds")}
    replaced = None
    with _guard(run_dir):
        existing = read_lock(run_dir)
        if existing is not None:
            alive, why = liveness(existing)
            if alive:
                raise RunDirectoryLocked(run_dir, existing, why)
            who = f"pid {existing.get('pid')}, started {existing.get('started')}" if existing else "unreadable"
            replaced = f"replaced a stale lock ({who}): {why}"
        try:
            if existing is not None:
                with contextlib.suppress(FileNotFoundError):
                    (run_dir / LOCK).unlink()
            fd = os.open(run_dir / LOCK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except FileExistsError:  # only without the flock guard: another writer got there first
            existing = read_lock(run_dir) or {}
            raise RunDirectoryLocked(run_dir, existing, "it was taken at the same moment") from None
        except OSError as exc:
            if exc.errno in _NOT_WRITABLE:
                raise not_writable(run_dir, exc) from None
            raise
        try:
            os.write(fd, (json.dumps(record, indent=2) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    lock = RunLock(run_dir, record, replaced=replaced)
    _HELD[_key(run_dir)] = lock
    return lock


def note_child(run_dir: Path, pid: int) -> None:
    """Record a backend child in the lock this process holds on ``run_dir`` (nothing when it holds none)."""
    lock = held(run_dir)
    if lock is not None:
        lock.note_child(pid)


@contextlib.contextmanager
def _guard(run_dir: Path) -> Iterator[None]:
    """Serialise changes to the lock file: ``flock`` on the directory, dropped by the kernel with its holder."""
    try:
        fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # a directory we may write but not read: the exclusive create alone decides
        yield
        return
    try:
        with contextlib.suppress(OSError):  # no flock here (some network filesystems): exclusive create only
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_atomically(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, path)


def command_line() -> list[str]:
    """This process's command line as the user typed it (``unirl ...``), for the lock's ``command``."""
    argv = list(sys.argv)
    if argv and (argv[0].endswith(("unirl", os.path.join("unirl", "cli.py"))) or argv[0] == "-m"):
        argv[0] = "unirl"
    return argv


# --- before Hydra: the run directory a command will write, checked and locked ----------------------------------

# Files that make a directory a unirl run directory (Hydra's .hydra/ and what unirl writes first).
RUN_MARKERS = (".hydra", "job.json", "plan.json", "manifest.json", "summary.json", "metrics.jsonl", "outcome.json")
SWEEP_MARKER = "multirun.yaml"
OUTCOME = "outcome.json"


@dataclass
class Claim:
    """What :func:`claim_run_directory` decided: the overrides to run (the run directory pinned), the lock held for
    the whole run (released by ``with``), or the exit code when there is nothing to run."""

    overrides: list[str]
    lock: RunLock | None = None
    finished: int | None = None

    def __enter__(self) -> Claim:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def claim_run_directory(overrides: list[str], plan: LaunchPlan | None, sweep_dir: Path | None, command: list[str], *,
                        framework: Framework | None = None,
                        scheduler_named: Callable[[str], Scheduler | None] = lambda name: None,
                        run_dir: Path | None = None) -> Claim:
    """Before Hydra starts: the directory this command writes, checked and locked, so that a refusal leaves every
    file as it was (Hydra rewrites ``.hydra/`` and opens its log as soon as it runs).

    A single run (``plan`` from the preflight): its directory is resolved from the composed config and pinned as
    ``hydra.run.dir``, so Hydra uses exactly the one that was checked. It must be new, empty, or (for a resume) a
    run directory; it must be writable; no live process may hold its lock. A resume is then checked against the run
    it continues (:func:`unirl.launch.resume.check_resume`). A sweep: its sweep directory the same way. With neither
    (only
    Hydra's informational flags) nothing is claimed. ``framework``: the plan's, which says whether a resume can
    continue the directory; ``scheduler_named``: the loaded scheduler of that name (None if none), asked whether
    a job submitted without waiting still writes the directory; ``run_dir``: the directory the preflight's compose
    already resolved for these overrides (:func:`hydra_run_dir`), which saves composing again."""
    from unirl.launch import resume
    if sweep_dir is not None:
        sweep_dir = Path(os.path.abspath(sweep_dir))
        _refuse_if_held(sweep_dir)
        check_destination(sweep_dir, resume=False, sweep=True)
        return Claim(overrides, acquire(sweep_dir, command))
    if plan is None:
        return Claim(overrides)
    run_dir = run_dir or resolve_run_dir(overrides)
    if run_dir is None:  # not resolvable before Hydra (an exotic hydra.run.dir): the task takes the lock itself
        return Claim(overrides)
    is_resume = bool(plan.recipe.get("run", {}).get("resume"))
    request = resume.current_request(run_dir)
    if request is not None and request.command:
        command = request.command
    _refuse_if_held(run_dir)
    check_destination(run_dir, resume=is_resume)
    _refuse_if_detached_job_runs(run_dir, scheduler_named)
    pinned = overrides if any(_override_key(o) == "hydra.run.dir" for o in overrides) else \
        [*overrides, f"hydra.run.dir={resume._hydra_value(str(run_dir))}"]
    recipe = json.loads(json.dumps(plan.recipe, default=str))  # as plan.json holds it (lists, not tuples)
    if is_resume:  # refused, or nothing to do, before anything is touched (the lock included)
        done, _ = resume.check_resume(run_dir, recipe)
        if done is not None:
            print(_completed_message(run_dir, done))
            return Claim(pinned, finished=0)
        if framework is not None:
            framework.require_resumable(run_dir)
    lock = acquire(run_dir, command)
    try:
        if lock.replaced:
            log.warning("%s: %s", run_dir, lock.replaced)
        if is_resume:  # again under the lock: what another writer may have changed in between
            done, changes = resume.check_resume(run_dir, recipe)
            if done is not None:
                print(_completed_message(run_dir, done))
                lock.release()
                return Claim(pinned, finished=0)
            if changes:
                resume.record_forced_changes(run_dir, changes)
                shown = "; ".join(f"{k}: {c['old']!r} -> {c['new']!r}" for k, c in sorted(changes.items()))
                log.warning("resume --force: continuing %s with a changed recipe (%s); recorded in manifest.json, and "
                            "the run is no longer bit-identical to one uninterrupted run", run_dir, shown)
    except BaseException:
        lock.release()
        raise
    return Claim(pinned, lock)


def _refuse_if_held(run_dir: Path) -> None:
    """A live holder is reported before anything else is checked or written (read only)."""
    record = holder(run_dir)
    if record is not None:
        raise RunDirectoryLocked(run_dir, record, liveness(record)[1])


def _refuse_if_detached_job_runs(run_dir: Path, scheduler_named: Callable[[str], Scheduler | None]) -> None:
    """A Ray or Slurm job submitted with ``scheduler.wait=false`` writes the directory with no unirl process holding
    its lock: while the scheduler reports it active, nothing else may write there. A scheduler that cannot be asked
    (cluster unreachable) is said, not assumed."""
    try:
        record = json.loads((run_dir / "job.json").read_text())
    except (OSError, ValueError):
        return
    if not isinstance(record, dict) or record.get("state") not in ("submitted", "running") or \
            record.get("scheduler") in (None, "local"):
        return
    scheduler = scheduler_named(str(record["scheduler"]))
    if scheduler is None:
        return
    active = detached_job_active(scheduler, {**record, "run_dir": str(run_dir)})
    if active:
        raise UnirlError(f"run directory {run_dir} is being written by {record['scheduler']} job "
                         f"{record.get('job_id')!r} (submitted without waiting, scheduler.wait=false), which is still "
                         f"active; nothing was written. Wait for it to end, or stop it with `unirl stop {run_dir}`")
    if active is None:
        log.warning("warning: %s's %s job %r is recorded as %s and the scheduler could not be asked whether it still "
                    "runs", run_dir, record["scheduler"], record.get("job_id"), record.get("state"))


def detached_job_active(scheduler: Any, record: dict[str, Any]) -> bool | None:
    """The scheduler's answer to "is this job still queued or running?" (``active(record)``, None by default in
    :class:`unirl.launch.scheduler.SchedulerBase`); None when it has no answer."""
    try:
        answer = scheduler.active(record)
    except UnirlError:
        return None
    return answer if isinstance(answer, bool) else None


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def resolve_run_dir(overrides: list[str]) -> Path | None:
    """The absolute directory Hydra would make for this single run (``hydra.run.dir`` resolved as Hydra does:
    ``os.path.abspath`` of the interpolated value); None when it cannot be resolved before Hydra runs."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from unirl.recipe.compose import CONFIG_MODULE

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose(config_name="config", overrides=[o for o in overrides if not o.startswith("-")],
                          return_hydra_config=True)
        return hydra_run_dir(cfg)
    except Exception:  # Hydra reports its own errors when it runs; the task then takes the lock
        return None
    finally:
        GlobalHydra.instance().clear()


def hydra_run_dir(cfg: Any) -> Path | None:
    """``hydra.run.dir`` of a config composed with its Hydra part, resolved and made absolute as Hydra does."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    HydraConfig.instance().set_config(cfg)  # for ${hydra:...} in a user's hydra.run.dir
    value = OmegaConf.select(cfg, "hydra.run.dir")
    return Path(os.path.abspath(str(value))) if value else None


def _entries(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def _only_leftovers(directory: Path, entries: list[str]) -> bool:
    """A directory where an earlier attempt was refused before it trained: Hydra's .hydra/ and log, a stale lock,
    an ``invalid`` outcome. Reusing it loses nothing."""
    for entry in entries:
        if entry in (".hydra", LOCK) or (entry.endswith(".log") and (directory / entry).is_file()):
            continue
        if entry == OUTCOME:
            try:
                if json.loads((directory / entry).read_text()).get("state") == "invalid":
                    continue
            except (OSError, ValueError, AttributeError):
                pass
        return False
    return True


def check_destination(run_dir: Path, resume: bool, sweep: bool = False) -> None:
    """Refuse a directory unirl must not write: for a new run or sweep, one that holds anything (an earlier run,
    whose steps the new one would be appended to, or someone's files: ``hydra.run.dir=.`` or ``$HOME``); for a
    resume, one that is not a run directory. A new or empty directory is always fine."""
    what = "hydra.sweep.dir" if sweep else "run directory"
    if not os.path.lexists(run_dir):
        if resume:
            raise UnirlError(f"run.resume=true: no complete checkpoint in {run_dir}: the directory does not exist "
                             "(resume needs the directory of an earlier run, given as hydra.run.dir=<dir> or "
                             "`unirl resume <dir>`)")
        return
    if not run_dir.is_dir():
        raise UnirlError(f"{what} {run_dir} exists and is not a directory")
    entries = _entries(run_dir)
    is_run = any(e in RUN_MARKERS for e in entries)
    if resume:
        if not is_run:
            raise UnirlError(f"run.resume=true: {run_dir} is not a unirl run directory (no .hydra/, job.json or "
                             "plan.json): there is nothing to resume there")
        return
    if not entries or _only_leftovers(run_dir, entries):
        return
    if sweep and SWEEP_MARKER in entries:
        raise UnirlError(f"hydra.sweep.dir={run_dir} holds an earlier sweep: a new sweep there would rewrite its "
                         "members' directories and append to their logs; give a new hydra.sweep.dir")
    if is_run:
        state = _state_of(run_dir)
        raise UnirlError(f"{what} {run_dir} holds an earlier run ({state}): a new run there would append its steps "
                         f"to that run's files. Continue that run with `unirl resume {run_dir}`, or give a new "
                         "directory (hydra.run.dir=...)")
    shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
    raise UnirlError(f"{what} {run_dir} is not empty ({len(entries)} entries: {shown}) and is not a unirl run "
                     "directory: a run writes .hydra/, plan.json, metrics.jsonl, checkpoints and more there, among "
                     "what it holds. Give a new or empty directory")


def _state_of(run_dir: Path) -> str:
    for name in ("summary.json", "job.json", OUTCOME):
        try:
            state = json.loads((run_dir / name).read_text()).get("state")
        except (OSError, ValueError, AttributeError):
            continue
        if state:
            return f"state {state}"
    return "it never finished"


def _completed_message(run_dir: Path, summary: dict[str, Any]) -> str:
    accuracy = ""
    if isinstance(summary.get("accuracy_after"), int | float):
        before = summary.get("accuracy_before")
        accuracy = (f", held-out accuracy {before:.3f} -> {summary['accuracy_after']:.3f}"
                    if isinstance(before, int | float) else f", held-out accuracy {summary['accuracy_after']:.3f}")
    return (f"unirl: the run in {run_dir} already completed ({summary.get('steps')} steps{accuracy}): nothing to "
            "resume, nothing was run again. To train it further, resume with more steps on purpose: "
            f"`unirl resume {run_dir} --force algorithm.steps=N`")
