"""Run untrusted generated code in a throwaway Linux sandbox built with bubblewrap.

```python
from unirl.rewards.sandbox.core import SandboxLimits, run_sandboxed

result = run_sandboxed("print(input()[::-1])", stdin="abc", limits=SandboxLimits(wall_seconds=2))
result.status, result.stdout  # ('ok', 'cba\\n')
```

Every run is one ``bwrap`` process tree (bubblewrap >= 0.8, ``apt-get install bubblewrap``), torn down completely
afterwards; nothing of it survives the call, and nothing is left in the host's /tmp or /dev/shm.

* **Namespaces**: user, network (only its own loopback: no TCP/UDP or abstract unix socket of the host), PID
  (the program is PID 1, so every process of the run, double-forked daemons included, dies with it; like any
  container's first process it ignores signals it has no handler for when they come from inside), mount, IPC,
  UTS and cgroup. Nested user namespaces are disabled (``--disable-userns``, and seccomp below).
* **Identity**: as root, bwrap itself runs as a uid of its own (``SANDBOX_UID_BASE`` + this process's pid x 64 +
  a slot), unprivileged and unique per live run; as any other user, as that user inside its own user namespace.
  No capability survives into the program.
* **Filesystem, from an allow-list**: an empty read-only root holding only /usr, the /bin, /lib* links (or
  directories), /etc/ld.so.cache and /etc/alternatives, the interpreter's prefixes (``sys.base_prefix``,
  ``sys.prefix``), paths the caller adds with ``readonly_paths``, and synthetic /etc/passwd, /etc/group,
  /etc/hosts. No other sys.path entry: an editable install's project directory (datasets, answers, other runs)
  stays invisible. ``/tmp``
  (working directory and HOME) and ``/dev/shm`` are fresh size-capped tmpfs mounts; ``/dev`` is a private one
  with its own devpts (the host's ptys and device nodes are not reachable); ``/proc`` shows the run only.
* **Resources, per run**: a cgroup per run bounds the memory of all its processes together (memfd, shared memory
  and tmpfs pages included) and its number of tasks (v2 where delegated, else v1 memory + pids, see
  :mod:`unirl.rewards.sandbox.cgroup`). Where neither exists the run still happens, with per-process limits only, and
  ``SandboxResult.isolation["cgroup"]`` says so (RLIMIT_AS per process, and memfd_create/shmget denied, since
  nothing would charge those pages to the run). RLIMIT_CPU, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_NOFILE and
  RLIMIT_CORE=0 always; stdout and stderr read with a byte cap (the run is killed when a stream exceeds it).
* **Kernel interfaces**: a seccomp filter (:mod:`unirl.rewards.sandbox.seccomp`) denies keyrings, pathname unix sockets
  and other non-IP socket families, locks and watches on files, mount/unshare/setns/namespace clones, ptrace,
  bpf, perf, userfaultfd, io_uring, kexec and modules. Each run also starts in a fresh, empty session keyring.
* **Time**: the wall clock starts when the program is exec'd, not when bwrap starts; start-up has its own budget
  (``startup_seconds``). A run whose start-up blows that budget, or that hits its wall-clock limit while it was
  mostly waiting for a CPU (run-queue wait from ``/proc/<pid>/schedstat``), raises :class:`SandboxOverloaded`:
  a starved program did not time out, the host was overloaded. A program that sleeps does time out.
* **Environment**: only PATH, LANG, HOME, TMPDIR (and PWD, which bwrap sets) plus what the caller passes; Python
  runs as ``python -I`` (isolated mode) of the current interpreter.

If bwrap, user namespaces or libseccomp are missing, :class:`SandboxUnavailable` is raised, naming the fix: there
is no unisolated fallback and no opt-out. Exit statuses come from bwrap, which reports a death by signal ``n`` as
status ``128 + n``; a program that exits with such a status itself is reported as killed by that signal.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from unirl.errors import InfrastructureError
from unirl.rewards.sandbox import cgroup as sandbox_cgroup
from unirl.rewards.sandbox import seccomp as sandbox_seccomp
from unirl.rewards.sandbox.spawn import StagingError, spawner

SandboxStatus = Literal["ok", "exit_nonzero", "timeout", "memory", "output_limit", "killed"]

# Sandbox uids as root: above systemd's container range (524288-1879048191) and below 2**31, so they collide
# neither with real users nor with container uid ranges. pid_max is at most 2**22, so pid * 64 + slot < 2**28.
SANDBOX_UID_BASE = 0x70000000
_SLOTS_PER_PROCESS = 64
WORKDIR = "/tmp"  # the working directory and HOME as the program sees them
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
CHANNEL_ENV = "UNIRL_SANDBOX_CHANNEL"  # "<read fd> <write fd>" of a session's request/reply channel

_KILL_GRACE_SECONDS = 5.0  # how long a killed run may take to disappear before we stop waiting politely
_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
# Starved: the program waited on a run queue for more than half its wall time, and the whole run was on a CPU for
# less than a quarter of it (a busy program on a 2x oversubscribed host still gets about half, and times out).
_STARVED_WAIT, _STARVED_RUN = 0.5, 0.25
_MIN_BWRAP = (0, 8, 0)  # --disable-userns, --size, --perms for tmpfs
_SIG_XCPU = int(signal.SIGXCPU)


class SandboxUnavailable(InfrastructureError):
    """Isolation could not be set up on this machine; untrusted code is never run without it."""


class SandboxOverloaded(InfrastructureError):
    """The host, not the program, made the run fail: start-up blew its budget, or the program timed out starved.

    Raised instead of a result: scoring such a run (a correct program as a timeout) would punish the sample for
    the machine's load. The reward executor counts it as an ``infrastructure`` error.
    """


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. Memory and processes bound the whole run (with a cgroup), threads count as processes."""

    cpu_seconds: float = 10.0
    wall_seconds: float = 10.0  # from the program's exec; start-up (bwrap's setup) has its own budget below
    memory_mb: int = 512  # all processes of the run together, plus its memfd, shared memory and tmpfs files
    max_processes: int = 32
    max_file_mb: int = 16  # largest single file the program may write
    disk_mb: int = 64  # size of each private tmpfs (/tmp and /dev/shm); backed by memory
    max_open_files: int = 64
    max_output_bytes: int = 1 << 20  # per stream; the run is killed when stdout or stderr exceeds it
    startup_seconds: float = 5.0  # from starting bwrap to the program's exec; beyond it SandboxOverloaded

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds", "memory_mb", "max_processes", "max_file_mb", "disk_mb",
                     "max_open_files", "max_output_bytes", "startup_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"SandboxLimits.{name}={value!r}: must be a positive number")


@dataclass(frozen=True)
class SandboxResult:
    """What happened to one run. ``status`` is the verdict; ``reason`` says it in words."""

    status: SandboxStatus
    exit_code: int | None  # None when the program was killed by a signal or by us
    signal: int | None  # the signal that ended the program, if one did
    stdout: str
    stderr: str
    reason: str
    wall_seconds: float  # from the program's exec to its end
    cpu_seconds: float | None = None  # user + system time of the program and every process it reaped
    max_rss_mb: float | None = None  # the largest resident set of one of those processes
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    kill_seconds: float | None = None  # from the limit firing to every process of the run being gone
    isolation: Mapping[str, Any] = field(default_factory=dict)  # the mechanisms this run actually got
    startup_seconds: float | None = None  # from starting bwrap to the program's exec
    memory_peak_mb: float | None = None  # the whole run's peak, as its memory cgroup counted it (None without one)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class IsolationReport:
    """Isolation as observed from inside a probe run (see :func:`check_isolation`)."""

    mode: str  # "root" (unique unprivileged uid) or "userns" (caller's uid in a user namespace)
    uid: int  # the host uid the program runs as
    network_interfaces: tuple[str, ...]
    network_blocked: bool
    pid_namespace: bool
    readonly_root: bool
    private_tmp: bool
    proc: str  # "private" (this run's processes only)
    environment: tuple[str, ...]
    visible_root: tuple[str, ...] = ()  # the top-level names of the program's /
    seccomp: bool = False  # unshare, keyctl and AF_UNIX sockets were refused
    cgroup: str = ""  # what bounds the run's memory and processes


def run_sandboxed(
    source: str | None = None,
    *,
    argv: Sequence[str] | None = None,
    files: Mapping[str, str | bytes] | None = None,
    stdin: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    limits: SandboxLimits | None = None,
    readonly_paths: Sequence[str | os.PathLike[str]] = (),
) -> SandboxResult:
    """Run Python ``source`` (as ``python -I main.py``) or an ``argv`` in a fresh sandbox.

    ``files`` are written into the working directory first (relative paths; ``main.py`` holds ``source``).
    ``env`` adds variables on top of the scrubbed environment; nothing is inherited from this process.
    ``readonly_paths`` are host files or directories to show read-only at the same path (datasets, tools).
    Misbehaviour of the program is a status, never an exception; :class:`SandboxUnavailable` means the
    isolation itself could not be set up, :class:`SandboxOverloaded` that the host was too busy to judge it.
    """
    with start_sandboxed(source, argv=argv, files=files, stdin=stdin, env=env, limits=limits,
                         readonly_paths=readonly_paths, channel=False) as session:
        return session.finish()


def start_sandboxed(
    source: str | None = None,
    *,
    argv: Sequence[str] | None = None,
    files: Mapping[str, str | bytes] | None = None,
    stdin: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    limits: SandboxLimits | None = None,
    readonly_paths: Sequence[str | os.PathLike[str]] = (),
    channel: bool = True,
) -> SandboxSession:
    """Start a sandbox and return once its program runs; talk to it with the session's request/reply channel.

    With ``channel``, the program gets a pair of pipes whose descriptors it finds in ``$UNIRL_SANDBOX_CHANNEL``
    ("<read fd> <write fd>"): :meth:`SandboxSession.send` writes to the first, :meth:`SandboxSession.receive_line`
    reads lines from the second. Its stdout and stderr stay what they are in :func:`run_sandboxed` (captured with a
    cap). The limits, the wall clock included, apply to the session as a whole. Use it as a context manager:
    leaving the block kills whatever is still running.
    """
    if (source is None) == (argv is None):
        raise ValueError("run_sandboxed needs exactly one of source (Python code) or argv")
    limits = limits or SandboxLimits()
    workfiles = dict(files or {})
    if source is not None:
        workfiles["main.py"] = source
        argv = [_interpreter(), "-I", "main.py"]
    assert argv is not None
    if not argv:
        raise ValueError("argv must name a program")
    for name in workfiles:
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"file name {name!r}: must be a relative path inside the working directory")
    environment = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": WORKDIR, "TMPDIR": WORKDIR, **(env or {})}
    extra = [_readonly_path(p) for p in readonly_paths]
    session = SandboxSession(list(argv), {n: _as_bytes(c) for n, c in workfiles.items()},
                             None if stdin is None else _as_bytes(stdin), environment, limits, extra, channel)
    try:
        session._start()
    except BaseException:
        session.close()
        raise
    return session


def check_isolation(limits: SandboxLimits | None = None) -> IsolationReport:
    """Run a probe inside the sandbox and report what it can see; raises SandboxUnavailable if it leaks."""
    result = run_sandboxed(_PROBE, limits=limits or SandboxLimits(wall_seconds=10))
    if result.status != "ok":
        raise SandboxUnavailable(f"the isolation probe failed ({result.status}: {result.reason}):\n{result.stderr}")
    seen = json.loads(result.stdout)
    report = IsolationReport(
        mode=str(result.isolation.get("mode")),
        uid=int(result.isolation.get("uid", -1)),
        network_interfaces=tuple(seen["interfaces"]),
        network_blocked=seen["connect_error"] is not None,
        pid_namespace=seen["pid"] == 1,
        readonly_root=seen["root_write_error"] is not None,
        private_tmp=[name for name in seen["tmp"] if name not in _bound_into(WORKDIR)] == ["main.py"],
        proc="private" if seen["proc"] == ["1"] else f"shows {len(seen['proc'])} processes",
        environment=tuple(seen["env"]),
        visible_root=tuple(seen["root"]),
        seccomp=all(seen[key] is not None for key in ("unshare_error", "keyctl_error", "unix_error")),
        cgroup=str(result.isolation.get("cgroup")),
    )
    if report.network_interfaces != ("lo",) or not report.network_blocked:
        raise SandboxUnavailable(f"the sandbox can reach a network: {report}")
    if not report.pid_namespace or report.proc != "private":
        raise SandboxUnavailable(f"the sandbox is not in its own PID namespace: {report}")
    if not report.seccomp or not report.readonly_root:
        raise SandboxUnavailable(f"the sandbox's seccomp filter or read-only root is not in force: {report}")
    return report


# The probe prints what an attacker would look for first: interfaces, loopback, a writable root, /tmp, processes,
# and whether the kernel interfaces seccomp must close are closed.
_PROBE = """
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def error(fn):
    try:
        fn()
    except OSError as exc:
        return exc.strerror
    return None
def refused(result):
    return os.strerror(ctypes.get_errno()) if result == -1 else None
def connect():
    with socket.create_connection(("127.0.0.1", 22), timeout=1):
        pass
def write_root():
    with open("/unirl-probe", "w"):
        pass
print(json.dumps({
    "interfaces": sorted(name for _, name in socket.if_nameindex()),
    "connect_error": error(connect),
    "pid": os.getpid(),
    "root_write_error": error(write_root),
    "tmp": sorted(os.listdir("/tmp")),
    "root": sorted(os.listdir("/")),
    "proc": sorted(p for p in os.listdir("/proc") if p.isdigit()),
    "env": sorted(os.environ),
    "unshare_error": refused(libc.unshare(0x10000000)),
    "keyctl_error": refused(libc.syscall(250, 0, -3, 0)),
    "unix_error": error(lambda: socket.socket(socket.AF_UNIX).close()),
}))
"""


def _as_bytes(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content


def _interpreter() -> str:
    if not sys.executable:
        raise SandboxUnavailable("sys.executable is empty: cannot tell which Python to run in the sandbox")
    return sys.executable


_FORBIDDEN_MOUNTS = ("/", "/proc", "/dev", WORKDIR)


def _readonly_path(path: str | os.PathLike[str]) -> str:
    real = os.path.realpath(os.fspath(path))
    if not os.path.exists(real):
        raise ValueError(f"readonly_paths: {os.fspath(path)!r} does not exist")
    if real in _FORBIDDEN_MOUNTS or real.startswith(("/proc/", "/dev/")):
        raise ValueError(f"readonly_paths: {real!r} would replace part of the sandbox's own filesystem")
    return real


@functools.cache
def _interpreter_paths() -> tuple[str, ...]:
    """The interpreter's prefixes (and the binary itself), the only Python paths the program sees."""
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)}
    binary = os.path.realpath(_interpreter())
    if not any(binary.startswith(p.rstrip("/") + "/") for p in paths):
        paths.add(binary)
    # /usr is bound whole anyway; "/" as a prefix (a Python built with --prefix=/) must not expose the host.
    return tuple(sorted(p for p in paths if p not in ("/", "/usr") and not p.startswith("/usr/")))


def _bound_into(directory: str) -> set[str]:
    """Top-level names in a run's private ``directory`` that are interpreter paths bound back read-only."""
    prefix = directory.rstrip("/") + "/"
    return {p[len(prefix):].split("/")[0] for p in _interpreter_paths() if p.startswith(prefix)}


@functools.cache
def _system_layout() -> tuple[tuple[str, str, str], ...]:
    """("bind" | "symlink", source, destination) for /usr and the top-level /bin, /sbin, /lib* entries."""
    entries = [("bind", "/usr", "/usr")]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            entries.append(("symlink", os.readlink(path), path))
        elif os.path.isdir(path):
            entries.append(("bind", path, path))
    for path in ("/etc/ld.so.cache", "/etc/alternatives"):
        if os.path.exists(path):
            entries.append(("bind", os.path.realpath(path), path))
    return tuple(entries)


@functools.cache
def _bwrap() -> tuple[str, tuple[int, int], str]:
    """bwrap's path, the identity of its binary (to tell its processes from the exec'd program), its version."""
    path = shutil.which("bwrap", path=SAFE_PATH + ":/usr/sbin:/sbin")
    if path is None:
        raise SandboxUnavailable("bubblewrap is not installed; the sandbox needs it: apt-get install bubblewrap "
                                 "(Debian/Ubuntu), dnf install bubblewrap (Fedora)")
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxUnavailable(f"cannot run {path} --version: {exc}") from exc
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", version)
    if found is None or tuple(int(n) for n in found.groups()) < _MIN_BWRAP:
        raise SandboxUnavailable(f"{path} is {version.strip() or 'of unknown version'}; the sandbox needs "
                                 f"bubblewrap >= {'.'.join(map(str, _MIN_BWRAP))}")
    st = os.stat(path)
    return path, (st.st_dev, st.st_ino), version.strip()


# --- sandbox uids (root only) ---------------------------------------------------------------------------------

_uid_slots: set[int] = set()
_uid_lock = threading.Condition()


def _take_uid() -> int:
    with _uid_lock:
        while len(_uid_slots) >= _SLOTS_PER_PROCESS:
            _uid_lock.wait()
        slot = min(set(range(_SLOTS_PER_PROCESS)) - _uid_slots)
        _uid_slots.add(slot)
    return SANDBOX_UID_BASE + (os.getpid() % (1 << 22)) * _SLOTS_PER_PROCESS + slot


def _give_uid(uid: int) -> None:
    with _uid_lock:
        _uid_slots.discard((uid - SANDBOX_UID_BASE) % _SLOTS_PER_PROCESS)
        _uid_lock.notify()


def _reset_uids_after_fork() -> None:
    global _uid_lock
    _uid_slots.clear()
    _uid_lock = threading.Condition()


os.register_at_fork(after_in_child=_reset_uids_after_fork)


@functools.cache
def _uids_mapped() -> bool:
    """Whether this (root) process can switch to sandbox uids: false as root of a rootless container."""
    with open("/proc/self/uid_map") as handle:
        ranges = [[int(n) for n in line.split()] for line in handle if line.strip()]
    top = SANDBOX_UID_BASE + (1 << 22) * _SLOTS_PER_PROCESS
    return any(inside <= SANDBOX_UID_BASE and top <= inside + count for inside, _, count in ranges)


# --- one run ----------------------------------------------------------------------------------------------------


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _schedstat(tid: int) -> tuple[int, int]:
    """(ns on a CPU, ns waiting on a run queue) of one task; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{tid}/schedstat") as handle:
            run, wait, _ = handle.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return 0, 0


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid``."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found.extend(int(word) for word in handle.read().split())
        except OSError:
            continue
    return found


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


_PRLIMIT_OPTIONS = {resource.RLIMIT_CPU: "cpu", resource.RLIMIT_FSIZE: "fsize", resource.RLIMIT_NOFILE: "nofile",
                    resource.RLIMIT_CORE: "core", resource.RLIMIT_NPROC: "nproc", resource.RLIMIT_AS: "as"}


@functools.cache
def _prlimit() -> str:
    path = shutil.which("prlimit", path=SAFE_PATH + ":/usr/sbin:/sbin")
    if path is None:
        raise SandboxUnavailable("util-linux's prlimit is not installed; the sandbox needs it as root: "
                                 "apt-get install util-linux")
    return path


_KillReason = Literal["timeout", "output_limit", "reply_limit", "startup", "cancelled"]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class SandboxSession:
    """One run: bwrap started, its program exec'd, output read with caps, the wall clock enforced, torn down.

    The program is PID 1 of its namespace (``bwrap --as-pid-1``): when it ends, the kernel ends every process
    it left behind before bwrap (our child) can reap it, so "bwrap exited" means "nothing of the run is left",
    and bwrap's rusage, which we read with wait4, covers the program and all it reaped. As PID 1 the program
    ignores signals it has no handler for when they come from inside its namespace (as in any container).

    Create it with :func:`start_sandboxed` (or let :func:`run_sandboxed` do it); one thread drives a session.
    """

    def __init__(self, argv: list[str], files: dict[str, bytes], stdin: bytes | None, env: dict[str, str],
                 limits: SandboxLimits, readonly: list[str], channel: bool) -> None:
        self.argv, self.files, self.stdin, self.env = argv, files, stdin, env
        self.limits, self.readonly, self.channel = limits, readonly, channel
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = {"stdout": False, "stderr": False}
        self.status_docs: list[dict[str, Any]] = []
        self._status_buffer = bytearray()
        self._replies = bytearray()
        self._replies_ended = False
        self.reply_cap: int | None = None
        self.kill_reason: _KillReason | None = None
        self.kill_time: float | None = None
        self.overloaded: str | None = None
        self.uid: int | None = None
        self.cgroup: sandbox_cgroup.RunCgroup | None = None
        self.proc: subprocess.Popen[bytes] | None = None  # bwrap (its monitor process)
        self.rusage: resource.struct_rusage | None = None
        self.monitor_fd = -1  # pidfd of bwrap: readable once it exited, i.e. once the whole run is gone
        self.program_pid: int | None = None  # the program (PID 1 inside) as the host numbers it
        self.program_fd = -1
        self._baseline = (0, 0)
        self.spawned_at = 0.0
        self.exec_at: float | None = None
        self.deadline = math.inf
        self.ended_at: float | None = None
        self._fds: dict[str, int] = {}  # our ends: args, stdout, stderr, status, requests, replies
        self._selector = selectors.DefaultSelector()
        self._closed = False
        self._result: SandboxResult | None = None

    # --- public -----------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """The program has not ended, nor been killed, yet."""
        return self.ended_at is None and self.kill_time is None

    def send(self, data: bytes) -> bool:
        """Write ``data`` to the program's request channel; False when the program no longer reads it."""
        view = memoryview(data)
        while view:
            fd = self._fds.get("requests")
            if fd is None or not self.running:
                return False
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                self._step(write_fd=fd)
            except BrokenPipeError:
                self._close_fd("requests")
                return False
        return True

    def receive_line(self, max_bytes: int) -> bytes | None:
        """The program's next reply line (without its newline); None once it ended, was killed or sent too much.

        A line longer than ``max_bytes`` kills the run (status ``output_limit``): it cannot be a reply.
        """
        while True:
            end = self._replies.find(b"\n")
            if end >= 0:
                line = bytes(self._replies[:end])
                del self._replies[:end + 1]
                return line
            if len(self._replies) > max_bytes:
                self.reply_cap = max_bytes
                self._kill("reply_limit")
                return None
            if self._replies_ended or self.kill_time is not None or "replies" not in self._fds:
                return None
            self._step()

    def close_requests(self) -> None:
        """End of input on the request channel (a server program sees EOF)."""
        self._close_fd("requests")

    def finish(self) -> SandboxResult:
        """Let the program end within its limits, tear the run down, and say what happened.

        Raises :class:`SandboxOverloaded` instead when the run was starved (see the module docstring).
        """
        if self._result is None:
            self.close_requests()
            while self.ended_at is None:
                self._step()
            self._drain()
            self._result = self._verdict()
            self.close()
        if self.overloaded:
            raise SandboxOverloaded(self.overloaded)
        return self._result

    def kill(self) -> None:
        """End the run now (status ``killed`` unless something else ended it first)."""
        self._kill("cancelled")

    def close(self) -> None:
        """Kill whatever still runs and release every resource (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.proc is not None and self.ended_at is None:
                self._kill("cancelled")
                while self.ended_at is None:
                    self._step()
        finally:
            for name in list(self._fds):
                self._close_fd(name)
            for fd in (self.monitor_fd, self.program_fd):
                if fd >= 0:
                    os.close(fd)
            self.monitor_fd = self.program_fd = -1
            self._selector.close()
            if self.cgroup is not None:
                self.cgroup.remove(grace=_KILL_GRACE_SECONDS)
            if self.uid is not None and os.geteuid() == 0:
                _give_uid(self.uid)
                self.uid = None

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- start-up ---------------------------------------------------------------------------------------------

    def _start(self) -> None:
        bwrap, _, _ = _bwrap()
        root = os.geteuid() == 0
        if root and not _uids_mapped():
            raise SandboxUnavailable(
                f"running as root in a user namespace that does not map uid {SANDBOX_UID_BASE} and above (e.g. a "
                "rootless container): there is no unprivileged uid to run the program as; run the sandbox as a "
                "non-root user there")
        try:
            program_filter = sandbox_seccomp.filter_program(deny_memfd=sandbox_cgroup.availability()[0] is None)
        except sandbox_seccomp.SeccompUnavailable as exc:
            raise SandboxUnavailable(str(exc)) from exc
        self.uid = _take_uid() if root else os.geteuid()
        try:
            self.cgroup = sandbox_cgroup.create(self.limits.memory_mb << 20, self.limits.max_processes + 1)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot create the run's cgroup: {exc}") from exc
        child_fds: list[int] = []  # the ends bwrap gets; ours are closed once it runs

        def child_end(fd: int) -> str:
            child_fds.append(fd)
            return str(fd)

        gate = None
        try:
            args = self._arguments(child_end, program_filter)
            if not root and self.cgroup is None:
                # Without a pids cgroup, RLIMIT_NPROC is the process limit; for a non-root caller it must be set
                # after bwrap created the user namespace (the kernel checks the count outside the namespace, which
                # holds all of the caller's processes, against the limit the namespace's creator had).
                gate_read, gate = os.pipe()
                args += ["--block-fd", child_end(gate_read)]
            args_read, self._fds["args"] = os.pipe()
            self._fds["stdout"], out_write = os.pipe()
            self._fds["stderr"], err_write = os.pipe()
            self._fds["status"], status_write = os.pipe()
            args += ["--json-status-fd", child_end(status_write)]
            stdin_fd = (os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC) if self.stdin is None
                        else _memfd("stdin", self.stdin))
            passed = [*child_fds, args_read]
            child_fds += [stdin_fd, out_write, err_write, args_read]
            # Limits set before bwrap creates the user namespace, inherited by everything it starts. As root
            # (often without CAP_SYS_RESOURCE, which setting another uid's limits needs) through util-linux's
            # prlimit, which sets its own and execs bwrap; the uid is the run's own, so RLIMIT_NPROC counts this
            # run only. A non-root caller sets them on bwrap directly, and RLIMIT_NPROC through the gate above.
            wrapper = []
            if root:
                wrapper = [_prlimit(), *(f"--{_PRLIMIT_OPTIONS[which]}={soft}:{hard}"
                                         for which, (soft, hard) in self._rlimits(nproc=True)), "--"]
            self.spawned_at = time.monotonic()
            try:
                self.proc = spawner().spawn([*wrapper, bwrap, "--args", str(args_read), "--", *self.argv],
                                            stdin=stdin_fd, stdout=out_write, stderr=err_write, pass_fds=passed,
                                            uid=self.uid if root else None, visible=self._sources())
            except StagingError as exc:
                raise SandboxUnavailable(str(exc)) from exc
            except OSError as exc:
                raise SandboxUnavailable(f"cannot start {bwrap}: {exc}") from exc
        except BaseException:
            if gate is not None:
                os.close(gate)
            raise
        finally:
            for fd in child_fds:
                os.close(fd)
        self.monitor_fd = os.pidfd_open(self.proc.pid)
        self._selector.register(self.monitor_fd, selectors.EVENT_READ, "monitor")
        for name in ("stdout", "stderr", "status", "replies"):
            if name in self._fds:
                os.set_blocking(self._fds[name], False)
                self._selector.register(self._fds[name], selectors.EVENT_READ, name)
        if "requests" in self._fds:
            os.set_blocking(self._fds["requests"], False)
        try:
            try:
                if self.cgroup is not None:
                    self.cgroup.attach(self.proc.pid)  # before it forks: bwrap still waits for its arguments
                if not root:
                    for which, value in self._rlimits(nproc=False):
                        resource.prlimit(self.proc.pid, which, value)
            except OSError as exc:
                raise SandboxUnavailable(f"cannot put the sandbox into its cgroup and limits: {exc}") from exc
            with os.fdopen(self._fds.pop("args"), "wb") as handle:
                handle.write(b"".join(arg.encode() + b"\0" for arg in args))
            startup_deadline = self.spawned_at + self.limits.startup_seconds
            while not self.status_docs and self.ended_at is None:
                self._step(deadline=startup_deadline, startup=True)
            if self.status_docs:
                self._open_program(int(self.status_docs[0]["child-pid"]))
                if gate is not None and self.program_pid is None:
                    self._kill("cancelled")  # never let a program run without its process limit
                elif gate is not None and self.program_pid is not None:
                    with contextlib.suppress(ProcessLookupError):  # it ended already
                        resource.prlimit(self.program_pid, resource.RLIMIT_NPROC, (self.limits.max_processes,) * 2)
        finally:
            if gate is not None:
                os.close(gate)  # releases bwrap: it reads a byte or end of file, either goes on
        self._await_exec(startup_deadline)

    def _open_program(self, pid: int) -> None:
        """Hold a pidfd on the program, once sure the pid is still bwrap's child (not a reused number)."""
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return  # gone already: its exit is in the status
        # bwrap is our child and unreaped, so while the program is its child the number is the program's; a pid
        # reused after the program ended belongs to someone else's child.
        status = Path(f"/proc/{pid}/status")
        try:
            parent = next(int(line.split()[1]) for line in status.read_text().splitlines()
                          if line.startswith("PPid:"))
        except (OSError, StopIteration, ValueError):
            parent = -1
        if self.proc is not None and parent == self.proc.pid:
            self.program_pid, self.program_fd = pid, fd
        else:
            os.close(fd)

    def _sources(self) -> list[str]:
        return [source for kind, source, _ in _system_layout() if kind == "bind"] + [
            *_interpreter_paths(), *self.readonly]

    def _arguments(self, child_end: Callable[[int], str], program_filter: bytes) -> list[str]:
        args = ["--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
                "--as-pid-1", "--hostname", "sandbox", "--clearenv"]
        env = dict(self.env)
        if self.channel:
            requests_read, self._fds["requests"] = os.pipe()
            self._fds["replies"], replies_write = os.pipe()
            env[CHANNEL_ENV] = f"{child_end(requests_read)} {child_end(replies_write)}"
        for key, value in env.items():
            args += ["--setenv", key, value]
        args += ["--seccomp", child_end(_memfd("seccomp", program_filter))]
        for kind, source, dest in _system_layout():
            args += ["--ro-bind" if kind == "bind" else "--symlink", source, dest]
        disk = str(self.limits.disk_mb << 20)
        args += ["--dev", "/dev", "--size", disk, "--tmpfs", "/dev/shm", "--proc", "/proc",
                 "--size", disk, "--perms", "0700", "--tmpfs", WORKDIR]
        # A fresh procfs still lists the keys (descriptions, not payloads) the run's uid may view: for a non-root
        # caller, its own. Covered by /dev/null on a nodev mount, they cannot even be opened.
        for path in ("/proc/keys", "/proc/key-users"):
            args += ["--ro-bind", os.devnull, path]
        # Parents before children: a prefix under /tmp (a CI checkout) lands inside the private /tmp.
        kept: list[str] = []
        for path in sorted(set(_interpreter_paths()) | set(self.readonly), key=lambda p: (p.count("/"), p)):
            if not any(path.startswith(k.rstrip("/") + "/") for k in kept):
                kept.append(path)
                args += ["--ro-bind", path, path]
        made: set[str] = set()
        for name in sorted(self.files):
            parts = name.split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                directory = os.path.join(WORKDIR, *parts[:depth])
                if directory not in made:
                    made.add(directory)
                    args += ["--dir", directory]
        for name, content in self.files.items():
            args += ["--perms", "0644", "--file", child_end(_memfd("file", content)), os.path.join(WORKDIR, name)]
        for path, content in _identity_files(self.uid or 0).items():
            args += ["--perms", "0644", "--file", child_end(_memfd("etc", content)), path]
        args += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", WORKDIR]
        return args

    def _rlimits(self, *, nproc: bool) -> list[tuple[int, tuple[int, int]]]:
        limits = self.limits
        mib = 1 << 20
        # Whole seconds, soft = hard: as PID 1 the program would ignore the soft limit's SIGXCPU.
        cpu = max(1, math.ceil(limits.cpu_seconds))
        settings = [
            (resource.RLIMIT_CPU, (cpu, cpu)),
            (resource.RLIMIT_FSIZE, (limits.max_file_mb * mib,) * 2),
            (resource.RLIMIT_NOFILE, (limits.max_open_files,) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        if nproc:  # bwrap's monitor, outside the namespace, counts too
            settings.append((resource.RLIMIT_NPROC, (limits.max_processes + 1,) * 2))
        if self.cgroup is None:  # the memory cgroup is the real bound; without one, each process's own
            settings.append((resource.RLIMIT_AS, (limits.memory_mb * mib,) * 2))
        return settings

    def _await_exec(self, deadline: float) -> None:
        """Wait until bwrap's setup is done and the program is exec'd: that is when its wall clock starts."""
        _, bwrap_identity, _ = _bwrap()
        while self.exec_at is None:
            if self.kill_reason == "startup":
                while self.ended_at is None:
                    self._step()
                raise SandboxOverloaded(self.overloaded or "start-up budget exceeded")
            if self.ended_at is not None:
                self._drain()
                if any("exit-code" in doc for doc in self.status_docs):
                    self.exec_at = self.ended_at  # exec'd and ended between two looks
                    break
                raise SandboxUnavailable(self._setup_failure())
            if self.program_pid is not None:
                try:
                    exe = os.stat(f"/proc/{self.program_pid}/exe")
                    execed = (exe.st_dev, exe.st_ino) != bwrap_identity
                except OSError:
                    execed = False  # exited (the status says how) or not readable yet
                if execed or self.out["stdout"] or self.out["stderr"]:
                    self.exec_at = time.monotonic()
                    self._baseline = _schedstat(self.program_pid)
                    break
            self._step(deadline=deadline, startup=True, poll=0.001)
        self.deadline = self.exec_at + self.limits.wall_seconds

    def _setup_failure(self) -> str:
        stderr = self.out["stderr"].decode("utf-8", "replace").strip()
        if "execvp" in stderr:
            return f"cannot start the program inside the sandbox: {stderr[-2000:]}"
        hint = ""
        if "namespace" in stderr.lower() or "No permissions" in stderr:
            hint = ("; unprivileged user namespaces are disabled: enable them (sysctl "
                    "kernel.unprivileged_userns_clone=1 on Debian, user.max_user_namespaces > 0, "
                    "kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap on Ubuntu >= "
                    "23.10; in Docker, a seccomp profile that allows them)")
        code = self.proc.returncode if self.proc else "?"
        return f"bwrap could not set up the sandbox (exit {code}): {stderr[-2000:] or 'no message'}{hint}"

    # --- the event loop ---------------------------------------------------------------------------------------

    def _step(self, *, deadline: float | None = None, startup: bool = False, write_fd: int | None = None,
              poll: float | None = None) -> None:
        """Wait for one batch of events (output, replies, writability, bwrap's exit, a deadline); handle them."""
        now = time.monotonic()
        limit = deadline if deadline is not None else self.deadline
        if self.kill_time is None and self.ended_at is None and now >= limit:
            if startup:
                self.overloaded = (f"the sandbox did not start within its start-up budget of "
                                   f"{self.limits.startup_seconds:g}s (the host is overloaded)")
                self._kill("startup")
            else:
                self._on_deadline(now)
        if self.kill_time is not None:
            limit = self.kill_time + _KILL_GRACE_SECONDS
            if now >= limit:
                self._force_kill()
                limit = now + _KILL_GRACE_SECONDS
        wait = min(max(0.0, limit - now), poll if poll is not None else 3600.0)
        if write_fd is not None:
            self._selector.register(write_fd, selectors.EVENT_WRITE, "write")
        try:
            events = self._selector.select(wait)
        finally:
            if write_fd is not None:
                self._selector.unregister(write_fd)
        for key, _ in events:
            self._handle(str(key.data), int(key.fd))

    def _handle(self, name: str, fd: int) -> None:
        if name == "write":
            return
        if name == "monitor":
            # bwrap has exited, so has the program, PID 1 of its namespace, and with it every process of the run.
            self._selector.unregister(fd)
            assert self.proc is not None
            _, status, self.rusage = os.wait4(self.proc.pid, 0)
            self.proc.returncode = os.waitstatus_to_exitcode(status)
            self.ended_at = time.monotonic()
            return
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self._selector.unregister(fd)
            if name == "replies":
                self._replies_ended = True
            return
        if name == "status":
            self._status_buffer += chunk
            while b"\n" in self._status_buffer:
                line, _, rest = bytes(self._status_buffer).partition(b"\n")
                self._status_buffer = bytearray(rest)
                if line.strip():
                    self.status_docs.append(json.loads(line))  # written by bwrap, never by the program
        elif name == "replies":
            self._replies += chunk
        else:
            buffer = self.out[name]
            room = self.limits.max_output_bytes - len(buffer)
            buffer += chunk[:max(room, 0)]
            if len(chunk) > room:
                self.truncated[name] = True
                self._kill("output_limit")

    def _on_deadline(self, now: float) -> None:
        """The wall clock ran out: a real timeout, unless the program spent it waiting for a CPU."""
        self.overloaded = self._starvation(now)
        self._kill("timeout")

    def _starvation(self, now: float) -> str | None:
        if self.exec_at is None or self.program_pid is None:
            return None
        wall_ns = (now - self.exec_at) * 1e9
        main_wait = 0
        total_run = 0
        for tid in self._program_tasks():
            run, wait = _schedstat(tid)
            if tid == self.program_pid:
                run, wait = run - self._baseline[0], wait - self._baseline[1]
                main_wait = wait
            total_run += run
        # Waiting most of the time on a run queue while the run as a whole got little CPU: the host was busy.
        # Self-inflicted contention (more busy threads than CPUs) shows as a high total and stays a timeout, and
        # so does a program that got a fair share of a loaded machine.
        if main_wait > _STARVED_WAIT * wall_ns and total_run < _STARVED_RUN * wall_ns:
            return (f"the program was starved of CPU: in its {wall_ns / 1e9:.2f}s wall-clock limit it waited "
                    f"{main_wait / 1e9:.2f}s on a run queue and ran {total_run / 1e9:.2f}s (the host is overloaded)")
        return None

    def _program_tasks(self) -> list[int]:
        if self.cgroup is not None:
            monitor = self.proc.pid if self.proc else None
            return [tid for tid in self.cgroup.tasks() if tid != monitor]
        found: list[int] = []
        todo, seen = [self.program_pid] if self.program_pid else [], set()
        while todo:
            pid = todo.pop()
            if pid not in seen:
                seen.add(pid)
                found.extend(_threads(pid))
                todo.extend(_children(pid))
        return found

    # --- ending -----------------------------------------------------------------------------------------------

    def _kill(self, reason: _KillReason) -> None:
        if self.kill_time is not None or self.ended_at is not None:
            return
        self.kill_reason, self.kill_time = reason, time.monotonic()
        # SIGKILL to the program, PID 1 of its namespace, ends every process in it; bwrap reaps it and exits. Only
        # a program we never learnt the pid of is killed through bwrap (its parent-death signal): killing bwrap
        # first would leave the program's zombie to the machine's init, counted against the run's uid.
        fd = self.program_fd if self.program_fd >= 0 else self.monitor_fd
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)

    def _force_kill(self) -> None:
        for pid in self.cgroup.tasks() if self.cgroup is not None else []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.kill_time = self.kill_time or time.monotonic()
        for fd in (self.program_fd, self.monitor_fd):
            if fd >= 0:
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)

    def _drain(self) -> None:
        """Read stdout, stderr and the status to their end: every writer is gone once bwrap has exited."""
        deadline = time.monotonic() + _KILL_GRACE_SECONDS
        while any(key.data in ("stdout", "stderr", "status") for key in self._selector.get_map().values()):
            wait = deadline - time.monotonic()
            if wait <= 0:
                break
            for key, _ in self._selector.select(wait):
                self._handle(str(key.data), int(key.fd))

    def _close_fd(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(fd)
        os.close(fd)

    def _isolation(self) -> dict[str, Any]:
        layout, why = sandbox_cgroup.availability()
        if self.cgroup is not None and layout is not None:
            cgroup = layout.describe()
            memfd = "charged to the run's memory cgroup"
        else:
            cgroup = (f"none ({why}): memory is capped per process (RLIMIT_AS), processes per user namespace "
                      "(RLIMIT_NPROC)")
            memfd = "denied (no memory cgroup to charge it to)"
        return {
            "tool": _bwrap()[2],
            "mode": "root" if os.geteuid() == 0 else "userns",
            "uid": self.uid,
            "network": "namespace",
            "pid": "namespace",
            "readonly_root": True,
            "proc": "private",
            "root": "allow-list",
            "visible": sorted({dest for _, _, dest in _system_layout()} | set(_interpreter_paths())
                              | set(self.readonly)),
            "devpts": "private",
            "userns": "disabled",
            "cgroup": cgroup,
            "memfd": memfd,
            "seccomp": f"deny-list of {len(sandbox_seccomp.denied_syscalls(self.cgroup is None))} syscalls",
            "keyring": spawner().keyring,
        }

    def _verdict(self) -> SandboxResult:
        stdout = self.out["stdout"].decode("utf-8", "replace")
        stderr = self.out["stderr"].decode("utf-8", "replace")
        end = self.ended_at or time.monotonic()
        usage: dict[str, float | None] = {"cpu_seconds": None, "max_rss_mb": None}
        if self.rusage is not None:
            usage = {"cpu_seconds": round(self.rusage.ru_utime + self.rusage.ru_stime, 4),
                     "max_rss_mb": round(self.rusage.ru_maxrss / 1024, 1)}
        common: dict[str, Any] = {
            "stdout": stdout, "stderr": stderr, "wall_seconds": max(0.0, end - (self.exec_at or end)),
            "kill_seconds": None if self.kill_time is None else end - self.kill_time,
            "stdout_truncated": self.truncated["stdout"], "stderr_truncated": self.truncated["stderr"],
            "isolation": self._isolation(),
            "startup_seconds": None if self.exec_at is None else self.exec_at - self.spawned_at, **usage,
            "memory_peak_mb": None,
        }
        if self.cgroup is not None:
            peak = self.cgroup.peak_bytes()
            common["memory_peak_mb"] = None if peak is None else round(peak / (1 << 20), 1)
        limits = self.limits
        if self.kill_reason == "timeout":
            return SandboxResult("timeout", None, None, reason=f"timeout: wall-clock limit of {limits.wall_seconds:g}s "
                                 "exceeded; the run was killed", **common)
        if self.kill_reason == "output_limit":
            which = " and ".join(name for name, cut in self.truncated.items() if cut)
            return SandboxResult("output_limit", None, None, reason=f"output limit: {which} exceeded "
                                 f"{limits.max_output_bytes} bytes; the run was killed", **common)
        if self.kill_reason == "reply_limit":
            return SandboxResult("output_limit", None, None, reason=f"output limit: a reply on the request channel "
                                 f"exceeded {self.reply_cap} bytes; the run was killed", **common)
        codes = [int(doc["exit-code"]) for doc in self.status_docs if "exit-code" in doc]
        if self.kill_reason is not None or not codes:
            return SandboxResult("killed", None, None, reason="the run was killed before its program ended "
                                 "(cancelled, or killed from outside)", **common)
        status = codes[-1]
        cpu = usage["cpu_seconds"] or 0.0
        memory_sign = next((s for s in _MEMORY_SIGNS if s in stderr[-4000:]), None)
        if self.cgroup is not None and self.cgroup.oom_kills():
            memory_sign = memory_sign or "the run's memory cgroup OOM-killed a process"
        if 128 < status <= 128 + 64:
            number = status - 128
            name = _signal_name(number)
            if memory_sign:
                return SandboxResult("memory", None, number, reason=f"memory limit of {limits.memory_mb} MB "
                                     f"exceeded ({memory_sign}, then {name})", **common)
            # RLIMIT_CPU kills with SIGKILL (PID 1 ignores the soft limit's SIGXCPU); rusage rounds to ticks, so
            # "used its whole allowance" is within a tenth of it.
            if number == _SIG_XCPU or (number == signal.SIGKILL and cpu >= 0.9 * max(1, math.ceil(
                    limits.cpu_seconds))):
                return SandboxResult("timeout", None, number, reason=f"timeout: CPU limit of "
                                     f"{limits.cpu_seconds:g}s exceeded ({name})", **common)
            return SandboxResult("killed", None, number, reason=f"killed by {name}", **common)
        if status == 0:
            return SandboxResult("ok", 0, None, reason="exited normally", **common)
        if memory_sign:
            return SandboxResult("memory", status, None, reason=f"memory limit of {limits.memory_mb} MB exceeded "
                                 f"({memory_sign})", **common)
        return SandboxResult("exit_nonzero", status, None, reason=f"exited with status {status}", **common)


def _identity_files(uid: int) -> dict[str, bytes]:
    """Synthetic /etc files: names for the run's uid and localhost, and nothing of the host's."""
    return {
        "/etc/passwd": (f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{uid}:sandbox:{WORKDIR}:/bin/sh\n"
                        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n").encode(),
        "/etc/group": f"root:x:0:\nsandbox:x:{uid}:\nnogroup:x:65534:\n".encode(),
        "/etc/hosts": b"127.0.0.1 localhost sandbox\n::1 localhost\n",
    }
