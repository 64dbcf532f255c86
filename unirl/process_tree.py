"""Finding and killing every process a reward worker started, ``setsid`` daemons included (Linux /proc).

A reward may start processes of its own (a judge server, a compiler) that leave the worker's process group with
``setsid`` and double-fork. A worker marks itself a child subreaper, so such orphans are re-parented to it rather
than to the machine's init; the tree under the worker then holds all of them, and killing that tree before the
worker leaves nothing behind to hold the host's stdout open or keep using memory.
"""

from __future__ import annotations

import contextlib
import os
import signal

PR_SET_CHILD_SUBREAPER = 36
_MAX_PASSES = 100  # a fork bomb under the worker: each pass kills everything alive, so few passes are needed


def set_child_subreaper() -> bool:
    """Adopt this process's orphaned descendants (so they stay findable under it); False where unsupported."""
    try:
        import ctypes

        return bool(ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def children_map() -> dict[int, list[int]]:
    """parent pid -> child pids, for every live process visible in /proc (zombies are already dead)."""
    tree: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = stat_fields(int(name))  # None: exited while we looked
        if fields is not None and len(fields) > 1 and fields[0] not in (b"Z", b"X"):
            tree.setdefault(int(fields[1]), []).append(int(name))
    return tree


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children first, breadth-first)."""
    tree = children_map()
    found, queue = [], list(tree.get(pid, ()))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(tree.get(child, ()))
    return found


def kill_descendants(pid: int, *, reap: bool = False) -> int:
    """SIGKILL every descendant of ``pid`` until none is left (``pid`` itself lives); returns how many died.

    Call it while ``pid`` is stopped or cannot fork (the worker is SIGSTOPped first by the host): anything a dying
    descendant forked in between is re-parented to the subreaper ``pid`` and found by the next pass. ``reap``: this
    process is ``pid`` and collects the dead itself (only a subreaper may: another process's waitpid(-1) would steal
    exit statuses its own subprocess objects wait for).
    """
    killed = 0
    for _ in range(_MAX_PASSES):
        found = descendants(pid)
        if not found:
            break
        for child in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
                killed += 1
        if reap:
            reap_children()
    return killed


def reap_children() -> None:
    """Collect exited children of this process that nobody waits for (adopted orphans), without blocking."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (so ``[0]`` is the state, ``[1]`` the parent pid,
    ``[19]`` the start time); None when no such process is visible."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')': split after the last one.
    return stat[stat.rfind(b")") + 2:].split()


def process_start(pid: int) -> int | None:
    """The start time of ``pid`` (clock ticks since boot): with the pid it names one process for good, so a reused
    pid is told apart. None when no such process runs, or it is a zombie (dead, waiting to be reaped)."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] == b"Z":
        return None
    return int(fields[19])


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (one of another user's counts too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rss_mib(pid: int) -> float | None:
    """Resident memory of one process in MiB (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            resident_pages = int(handle.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
