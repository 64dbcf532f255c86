"""A cgroup per sandboxed run: memory and process limits for the run as a whole, not per process.

Per-process limits (RLIMIT_AS, RLIMIT_NPROC) let a run multiply its memory by forking, and do not see memfd or
shared-memory pages at all. A memory cgroup charges every page the run's processes touch (anonymous memory,
memfd, tmpfs files, page tables, pipe buffers), and a pids cgroup counts every task, so the run's total is bounded.

Where the cgroup comes from, in order:

* cgroup v2 where a subtree is delegated to us: ``$UNIRL_SANDBOX_CGROUP`` (a v2 directory we may create children
  in), else our own cgroup's parent when it enables ``memory`` and ``pids`` for its children and is writable (the
  systemd ``Delegate=yes`` layout: this process in a leaf, run cgroups beside it);
* cgroup v1 ``memory`` and ``pids`` hierarchies, each run a child of this process's own cgroup there, as root on a
  hybrid or legacy host;
* none: :func:`availability` says why, and the sandbox falls back to per-process rlimits and says so.

A run's cgroup is named ``unirl-sandbox-<pid>-<random>-<n>``; directories left by a process that died (and any
process still in them) are removed the next time a process of this machine creates one.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "unirl-sandbox-"
_counter = itertools.count()
_swept: set[str] = set()
_sweep_lock = threading.Lock()


@dataclass(frozen=True)
class Layout:
    """Where run cgroups are created on this machine."""

    kind: str  # "v2" or "v1"
    parents: dict[str, str]  # controller -> parent directory ("unified" for v2)

    def describe(self) -> str:
        if self.kind == "v2":
            return f"cgroup v2 (memory, pids) under {self.parents['unified']}"
        controllers = ", ".join(sorted(self.parents))
        return f"cgroup v1 ({controllers})"


@dataclass
class RunCgroup:
    """The cgroup (v2) or cgroups (v1, one per controller) of one run."""

    layout: Layout
    dirs: dict[str, str] = field(default_factory=dict)  # controller -> the run's directory

    def attach(self, pid: int) -> None:
        """Move ``pid`` (not yet forked) into the run's cgroup(s); everything it forks stays there.

        On cgroup v1 the first move after a fork in this process waits for an RCU grace period (a few ms of
        latency, no CPU): most of a run's start-up beyond bwrap's own.
        """
        for directory in self.dirs.values():
            Path(directory, "cgroup.procs").write_text(str(pid))

    def _read(self, controller: str, name: str) -> str | None:
        directory = self.dirs.get(controller)
        if directory is None:
            return None
        try:
            return Path(directory, name).read_text()
        except OSError:
            return None

    def oom_kills(self) -> int:
        """How many processes of the run the kernel's OOM killer ended because the run hit its memory limit."""
        if self.layout.kind == "v2":
            text = self._read("unified", "memory.events")
        else:
            text = self._read("memory", "memory.oom_control")
        for line in (text or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak_bytes(self) -> int | None:
        """The run's peak memory (processes, page cache, tmpfs files)."""
        if self.layout.kind == "v2":
            text = self._read("unified", "memory.peak")
        else:
            text = self._read("memory", "memory.max_usage_in_bytes")
        return int(text) if text and text.strip().isdigit() else None

    def tasks(self) -> list[int]:
        """Every live task (thread) of the run."""
        if self.layout.kind == "v2":
            text = self._read("unified", "cgroup.threads")
        else:
            text = self._read("pids", "tasks") or self._read("memory", "tasks")
        return [int(word) for word in (text or "").split()]

    def remove(self, grace: float) -> bool:
        """Remove the run's directories once they are empty (killing stragglers); False if one stayed busy."""
        deadline = time.monotonic() + grace
        removed = True
        for controller, directory in list(self.dirs.items()):
            while True:
                try:
                    os.rmdir(directory)
                    del self.dirs[controller]
                    break
                except FileNotFoundError:
                    del self.dirs[controller]
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        removed = False
                        break
                    # Dying tasks leave the cgroup a few microseconds after their SIGKILL; anything still alive
                    # here escaped every other teardown path, so it is killed too.
                    for pid in _procs(directory):
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.kill(pid, signal.SIGKILL)
                    time.sleep(0.001)
        return removed


def _procs(directory: str) -> list[int]:
    try:
        return [int(word) for word in Path(directory, "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root within the hierarchy, fs type, super options) of every cgroup mount."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[4], fields[3], tail[0], set(tail[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """controller (or "unified") -> this process's cgroup path, from /proc/self/cgroup."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            paths["unified"] = path
        for name in controllers.split(","):
            if name:
                paths[name] = path
    return paths


def _join(mount_point: str, mount_root: str, path: str) -> str:
    if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
        path = path[len(mount_root):] or "/"
    return os.path.normpath(mount_point + "/" + path.lstrip("/"))


def _v2_parent(directory: str) -> bool:
    """Whether run cgroups with memory and pids limits can be created under ``directory``."""
    try:
        enabled = Path(directory, "cgroup.subtree_control").read_text().split()
        available = Path(directory, "cgroup.controllers").read_text().split()
    except OSError:
        return False
    missing = [c for c in ("memory", "pids") if c not in enabled]
    if any(c not in available for c in missing):
        return False
    if missing:
        try:  # a delegated subtree whose controllers are not switched on yet
            Path(directory, "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
        except OSError:
            return False
    return os.access(directory, os.W_OK | os.X_OK)


@functools.cache
def availability() -> tuple[Layout | None, str]:
    """(layout, description) or (None, why there is none). Probed once per process."""
    mounts = _mounts()
    own = _own_paths()
    unified = next(((point, root) for point, root, kind, _ in mounts if kind == "cgroup2"), None)
    override = os.environ.get("UNIRL_SANDBOX_CGROUP")
    if override:
        if _v2_parent(override):
            layout = Layout("v2", {"unified": override})
            return layout, layout.describe()
        return None, (f"UNIRL_SANDBOX_CGROUP={override} is not a writable cgroup v2 directory with the memory and "
                      "pids controllers available")
    if unified is not None and "unified" in own:
        mine = _join(unified[0], unified[1], own["unified"])
        parent = os.path.dirname(mine)
        if mine != unified[0] and _v2_parent(parent):
            layout = Layout("v2", {"unified": parent})
            return layout, layout.describe()
    parents: dict[str, str] = {}
    for point, root, kind, options in mounts:
        if kind != "cgroup":
            continue
        for controller in ("memory", "pids"):
            if controller in options and controller in own and controller not in parents:
                directory = _join(point, root, own[controller])
                if os.access(directory, os.W_OK | os.X_OK):
                    parents[controller] = directory
    if "memory" in parents and "pids" in parents:
        layout = Layout("v1", parents)
        return layout, layout.describe()
    reasons = []
    if unified is not None:
        reasons.append("no delegated cgroup v2 subtree with the memory and pids controllers (set "
                       "UNIRL_SANDBOX_CGROUP, or run under systemd with Delegate=yes)")
    if not parents and any(kind == "cgroup" for *_, kind, _ in mounts):
        reasons.append("cgroup v1 memory/pids hierarchies are not writable by this user")
    elif parents:
        reasons.append(f"cgroup v1 lacks a writable {'memory' if 'memory' not in parents else 'pids'} hierarchy")
    if not mounts:
        reasons.append("no cgroup filesystem is mounted")
    return None, "; ".join(reasons)


_tokens: dict[int, str] = {}


def _token() -> str:
    """A random name part per process (a forked child gets its own)."""
    return _tokens.setdefault(os.getpid(), os.urandom(4).hex())


def _sweep(parent: str) -> None:
    """Remove run directories of processes that died before removing them."""
    with _sweep_lock:
        if parent in _swept:
            return
        _swept.add(parent)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX):].split("-")[0]
        if owner.isdigit() and int(owner) != os.getpid() and not os.path.exists(f"/proc/{owner}"):
            directory = os.path.join(parent, name)
            # Whatever is still in there outlived a host that died mid-start (before bwrap armed its parent-death
            # signal): it is a sandboxed program with nobody left to wait for it.
            for pid in _procs(directory):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.rmdir(directory)


def create(memory_bytes: int, max_tasks: int) -> RunCgroup | None:
    """A fresh cgroup for one run with its limits set, or None where this machine offers none."""
    layout, _ = availability()
    if layout is None:
        return None
    group = RunCgroup(layout)
    # The random part: a later process that reuses a dead one's pid must not collide with its leftovers.
    name = f"{PREFIX}{os.getpid()}-{_token()}-{next(_counter)}"
    try:
        for controller, parent in layout.parents.items():
            _sweep(parent)
            directory = os.path.join(parent, name)
            os.mkdir(directory)
            group.dirs[controller] = directory
        if layout.kind == "v2":
            directory = group.dirs["unified"]
            Path(directory, "memory.max").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # no swap accounting on this kernel: nothing to bound
                Path(directory, "memory.swap.max").write_text("0")
            Path(directory, "pids.max").write_text(str(max_tasks))
        else:
            memory = group.dirs["memory"]
            Path(memory, "memory.limit_in_bytes").write_text(str(memory_bytes))
            with contextlib.suppress(OSError):  # memsw exists only with swap accounting
                Path(memory, "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
            Path(group.dirs["pids"], "pids.max").write_text(str(max_tasks))
    except BaseException:
        group.remove(grace=0)
        raise
    return group
