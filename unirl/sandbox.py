"""Run untrusted generated code in a throwaway Linux sandbox (standard library only).

```python
from unirl.sandbox import SandboxLimits, run_sandboxed

result = run_sandboxed("print(input()[::-1])", stdin="abc", limits=SandboxLimits(wall_seconds=2))
result.status, result.stdout  # ('ok', 'cba\\n')
```

Every run gets a fresh process tree and is torn down completely afterwards:

* **Namespaces** (required): new network (only a loopback that is down: no TCP/UDP, no abstract unix
  sockets of the host), PID (our init is PID 1, so every process of the run, double-forked daemons
  included, dies with it), mount, IPC, UTS and cgroup namespaces. As root they are created directly;
  as any other user inside a fresh user namespace. If they cannot be created, :class:`SandboxUnavailable`
  is raised: there is no unisolated fallback and no opt-out.
* **Identity**: as root the program runs as a uid of its own (``SANDBOX_UID_BASE`` + the supervisor's
  pid), unprivileged and unique per live sandbox. That is what makes ``RLIMIT_NPROC`` real: the kernel
  never enforces it for root, and it counts per uid across the whole machine, so a shared uid such as
  ``nobody`` would pool the limit between concurrent runs. As a non-root user the program keeps the
  caller's uid but inside its own user namespace, where the kernel counts processes per namespace.
  ``no_new_privs`` is set and no capability survives into the program.
* **Filesystem**: the whole tree is remounted read-only and nosuid; ``/tmp`` (the working directory and
  HOME) and ``/dev/shm`` are fresh size-capped tmpfs mounts that only this run sees and that the kernel
  frees when the run ends (nothing to clean up, nothing left behind); ``/run`` and the caller's home are
  hidden under empty mounts, except the interpreter paths the program needs.
* **Resources**: RLIMIT_CPU, RLIMIT_AS, RLIMIT_NPROC, RLIMIT_FSIZE, RLIMIT_NOFILE and RLIMIT_CORE=0;
  a wall-clock limit; stdout and stderr read with a byte cap (the run is killed when a stream exceeds it).
* **Environment**: only PATH, LANG, HOME, TMPDIR plus what the caller passes explicitly; Python runs as
  ``python -I`` (isolated mode) of the current interpreter.

Requires Linux >= 5.12 (mount_setattr; as root an older kernel keeps only the uid's file protection and
says so in ``SandboxResult.isolation``) and pidfd support (5.3). Processes count threads.

Limitations: the kernel is shared (no seccomp filter); the read-only view of the host filesystem shows
world-readable files (and, for a non-root caller, files the caller can read outside its home); memory is
capped per process (address space), not per process tree; the tmpfs mounts are backed by host memory
(at most ``2 * disk_mb`` per run); "memory" is recognised from the program's stderr (MemoryError,
bad_alloc, ...), since an address-space limit shows up as a failed allocation, not as a signal.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import json
import marshal
import os
import pwd
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from unirl.errors import UnirlError

SandboxStatus = Literal["ok", "exit_nonzero", "timeout", "memory", "output_limit", "killed"]

# Sandbox uids as root: above systemd's container range (524288-1879048191) and below 2**31, so they
# collide neither with real users nor with container uid ranges. Unique per live supervisor pid.
SANDBOX_UID_BASE = 0x70000000
WORKDIR = "/tmp"  # the working directory and HOME as the program sees them
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

# How long a killed sandbox may take to disappear before we stop waiting for it politely.
_KILL_GRACE_SECONDS = 5.0
_MEMORY_SIGNS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")

# Linux ABI numbers the supervisor needs (os has no mount/prctl and no unshare before Python 3.12).
_LINUX = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "MS_RDONLY": 1,
    "MS_NOSUID": 2,
    "MS_NODEV": 4,
    "MS_NOEXEC": 8,
    "MS_BIND": 4096,
    "MS_REC": 16384,
    "MS_PRIVATE": 1 << 18,
    "MOUNT_ATTR_RDONLY": 0x1,
    "MOUNT_ATTR_NOSUID": 0x2,
    "AT_FDCWD": -100,
    "AT_RECURSIVE": 0x8000,
    "SYS_mount_setattr": 442,  # the same number on every architecture (syscalls >= 424 are unified)
    "PR_SET_PDEATHSIG": 1,
    "PR_SET_DUMPABLE": 4,
    "PR_SET_NO_NEW_PRIVS": 38,
}


class SandboxUnavailable(UnirlError):
    """Isolation could not be set up on this machine; untrusted code is never run without it."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits. Processes count threads too; memory is the address space of each process."""

    cpu_seconds: float = 10.0
    wall_seconds: float = 10.0  # includes start-up (~50 ms: the supervisor's interpreter, then the program's)
    memory_mb: int = 512
    max_processes: int = 32
    max_file_mb: int = 16  # largest single file the program may write
    disk_mb: int = 64  # size of each private tmpfs (/tmp and /dev/shm); backed by host memory
    max_open_files: int = 64
    max_output_bytes: int = 1 << 20  # per stream; the run is killed when stdout or stderr exceeds it

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds", "memory_mb", "max_processes", "max_file_mb", "disk_mb",
                     "max_open_files", "max_output_bytes"):
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
    wall_seconds: float
    cpu_seconds: float | None = None  # user + system time of the program (None when we killed it)
    max_rss_mb: float | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    kill_seconds: float | None = None  # from the limit firing to every process of the run being gone
    isolation: Mapping[str, Any] = field(default_factory=dict)  # the mechanisms this run actually got

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
    proc: str  # "private" (this run's processes only) or "hidden" (empty)
    environment: tuple[str, ...]


def run_sandboxed(
    source: str | None = None,
    *,
    argv: Sequence[str] | None = None,
    files: Mapping[str, str | bytes] | None = None,
    stdin: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    limits: SandboxLimits | None = None,
) -> SandboxResult:
    """Run Python ``source`` (as ``python -I main.py``) or an ``argv`` in a fresh sandbox.

    ``files`` are written into the working directory first (relative paths; ``main.py`` holds ``source``).
    ``env`` adds variables on top of the scrubbed environment; nothing is inherited from this process.
    Misbehaviour of the program is a status, never an exception; :class:`SandboxUnavailable` means the
    isolation itself could not be set up.
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
    config = {
        "argv": list(argv),
        "env": environment,
        "files": {name: _as_bytes(content) for name, content in workfiles.items()},
        "stdin": None if stdin is None else _as_bytes(stdin),
        "limits": {
            "cpu_seconds": limits.cpu_seconds,
            "memory_mb": limits.memory_mb,
            "max_processes": limits.max_processes,
            "max_file_mb": limits.max_file_mb,
            "disk_mb": limits.disk_mb,
            "max_open_files": limits.max_open_files,
        },
        "uid_base": SANDBOX_UID_BASE,
        "hide": _hidden_paths(),
        "expose": _interpreter_paths(),
        "workdir": WORKDIR,
    }
    return _Run(config, limits).execute()


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
        pid_namespace=seen["pid"] == 2,
        readonly_root=seen["root_write_error"] is not None,
        private_tmp=[name for name in seen["tmp"] if name not in _bound_into(WORKDIR)] == ["main.py"],
        proc=str(result.isolation.get("proc")),
        environment=tuple(seen["env"]),
    )
    if report.network_interfaces != ("lo",) or not report.network_blocked:
        raise SandboxUnavailable(f"the sandbox can reach a network: {report}")
    if not report.pid_namespace:
        raise SandboxUnavailable(f"the sandbox is not in its own PID namespace: {report}")
    return report


# The probe prints what an attacker would look for first: interfaces, loopback, a writable root, /tmp.
_PROBE = """
import json, os, socket
def error(fn):
    try:
        fn()
    except OSError as exc:
        return exc.strerror
    return None
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
    "env": sorted(os.environ),
}))
"""


def _as_bytes(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else content


def _interpreter() -> str:
    if not sys.executable:
        raise SandboxUnavailable("sys.executable is empty: cannot tell which Python to run in the sandbox")
    return sys.executable


@functools.cache
def _interpreter_paths() -> list[str]:
    """Paths the sandboxed interpreter needs, kept visible when an ancestor is hidden or unreadable."""
    paths = {sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(_interpreter()))}
    # Installed packages and editable installs (.pth entries); not the caller's working directory.
    cwd = os.getcwd()
    paths.update(p for p in sys.path if p and p != cwd and os.path.isdir(p))
    return sorted(os.path.realpath(p) for p in paths)


def _bound_into(directory: str) -> set[str]:
    """Top-level names in a run's private ``directory`` that are interpreter paths bound back read-only."""
    prefix = directory.rstrip("/") + "/"
    return {p[len(prefix):].split("/")[0] for p in _interpreter_paths() if p.startswith(prefix)}


def _hidden_paths() -> list[str]:
    """The caller's home (keys, tokens, shell history) and /run (daemon sockets) are replaced by empty mounts."""
    home = os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)
    return sorted({p for p in (home, "/run") if p != "/" and os.path.isdir(p)})


@functools.cache
def _supervisor_code() -> Any:
    """The supervisor's functions, compiled once per host process and sent with each run's configuration."""
    shipped = (_sandbox_libc, _sandbox_call, _sandbox_mount, _sandbox_mount_setattr, _sandbox_report,
               _sandbox_private_tmpfs, _sandbox_hide, _sandbox_write_files, _sandbox_exec_program, _sandbox_init_main,
               _sandbox_supervisor_main)
    parts = ["from __future__ import annotations", "import os, signal", f"_LINUX = {_LINUX!r}",
             *(inspect.getsource(fn) for fn in shipped)]
    return compile("\n".join(parts), "<unirl sandbox supervisor>", "exec")


@functools.cache
def _bootstrap_source() -> str:
    # python -I -S with nothing but marshal to import: start-up cost is most of a run's overhead.
    parts = ["import os", inspect.getsource(_sandbox_read_exact), inspect.getsource(_sandbox_bootstrap),
             "_sandbox_bootstrap()"]
    return "\n".join(parts)


class _Run:
    """The host side of one run: start the supervisor, feed it, read with caps, enforce the wall clock."""

    def __init__(self, config: dict[str, Any], limits: SandboxLimits) -> None:
        self.config = config
        self.limits = limits
        self.out = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = {"stdout": False, "stderr": False}
        self.reports: list[dict[str, Any]] = []
        self.kill_reason: Literal["timeout", "output_limit"] | None = None
        self.kill_time: float | None = None
        self.report_fd = -1

    def execute(self) -> SandboxResult:
        report_read, report_write = os.pipe()
        self.report_fd = report_write  # the same number in the supervisor (pass_fds keeps it)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                [_interpreter(), "-I", "-S", "-c", _bootstrap_source()],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(report_write,), start_new_session=True, env={"PATH": SAFE_PATH}, cwd="/",
            )
        except OSError as exc:
            os.close(report_read)
            raise SandboxUnavailable(f"cannot start the sandbox supervisor {_interpreter()}: {exc}") from exc
        finally:
            os.close(report_write)
        try:
            self._send_config(proc)
            self._pump(proc, report_read, start + self.limits.wall_seconds)
        finally:
            self._reap(proc)
            os.close(report_read)
        end = time.monotonic()
        kill_seconds = None if self.kill_time is None else end - self.kill_time
        return self._verdict(proc, end - start, kill_seconds)

    def _send_config(self, proc: subprocess.Popen[bytes]) -> None:
        config = {**self.config, "parent_pid": os.getpid(), "report_fd": self.report_fd}
        # marshal: the supervisor is this same interpreter, and marshal needs no import (json costs ~8 ms).
        payload = marshal.dumps({"code": _supervisor_code(), "config": config})
        assert proc.stdin is not None
        try:
            # The stdin pipe stays open afterwards: writing to or closing it asks the supervisor to kill the run.
            proc.stdin.write(b"%d\n" % len(payload) + payload)
            proc.stdin.flush()
        except BrokenPipeError:
            pass  # the supervisor died at start-up; its stderr says why (reported by _verdict)

    def _kill(self, proc: subprocess.Popen[bytes], reason: Literal["timeout", "output_limit"]) -> None:
        if self.kill_time is not None:
            return
        self.kill_reason, self.kill_time = reason, time.monotonic()
        assert proc.stdin is not None
        # Any byte, or end of input, asks the supervisor to SIGKILL the namespace's init. The byte matters
        # when a process forked from this one (multiprocessing) holds a copy of the pipe open.
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(b"k")
            proc.stdin.flush()
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.close()

    def _pump(self, proc: subprocess.Popen[bytes], report_fd: int, deadline: float) -> None:
        assert proc.stdout is not None and proc.stderr is not None
        streams = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr", report_fd: "report"}
        cap = self.limits.max_output_bytes
        reports = bytearray()
        with selectors.DefaultSelector() as selector:
            for fd in streams:
                os.set_blocking(fd, False)
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                now = time.monotonic()
                if self.kill_time is None and now >= deadline:
                    self._kill(proc, "timeout")
                if self.kill_time is not None and now >= self.kill_time + _KILL_GRACE_SECONDS:
                    self._force_kill(proc)
                    break
                wait = (deadline if self.kill_time is None else self.kill_time + _KILL_GRACE_SECONDS) - now
                for key, _ in selector.select(max(wait, 0.0)):
                    fd = int(key.fd)
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        selector.unregister(fd)
                        continue
                    name = streams[fd]
                    if name == "report":
                        reports += chunk
                        continue
                    buffer = self.out[name]
                    room = cap - len(buffer)
                    buffer += chunk[:max(room, 0)]
                    if len(chunk) > room:
                        self.truncated[name] = True
                        self._kill(proc, "output_limit")
        # Reports are repr()s of plain literals, written by our own supervisor code (never by the program).
        self.reports = [ast.literal_eval(line) for line in reports.decode(errors="replace").splitlines()
                        if line.strip()]

    def _force_kill(self, proc: subprocess.Popen[bytes]) -> None:
        # The supervisor did not finish the kill in time; killing it takes the namespace's init with it
        # (parent-death signal), which takes every process of the run with it.
        for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill()

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            proc.wait(timeout=_KILL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self._force_kill(proc)
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()

    def _verdict(self, proc: subprocess.Popen[bytes], wall: float, kill_seconds: float | None) -> SandboxResult:
        merged: dict[str, Any] = {}
        for message in self.reports:
            merged.update(message)
        stdout = self.out["stdout"].decode("utf-8", "replace")
        stderr = self.out["stderr"].decode("utf-8", "replace")
        if "error" in merged:
            raise SandboxUnavailable(f"cannot isolate untrusted code on this machine: {merged['error']}")
        if "exec_error" in merged:
            raise SandboxUnavailable(f"cannot start the program inside the sandbox: {merged['exec_error']}")
        if "init_pid" not in merged and self.kill_time is None:
            raise SandboxUnavailable(
                f"the sandbox supervisor exited ({proc.returncode}) before isolating anything:\n{stderr[-2000:]}"
            )
        common = {
            "stdout": stdout, "stderr": stderr, "wall_seconds": wall, "kill_seconds": kill_seconds,
            "stdout_truncated": self.truncated["stdout"], "stderr_truncated": self.truncated["stderr"],
            "isolation": merged.get("isolation", {}),
        }
        limits = self.limits
        if self.kill_reason == "timeout":
            return SandboxResult("timeout", None, None, reason=f"timeout: wall-clock limit of {limits.wall_seconds:g}s "
                                 "exceeded; the run was killed", **common)
        if self.kill_reason == "output_limit":
            which = " and ".join(name for name, cut in self.truncated.items() if cut)
            return SandboxResult("output_limit", None, None, reason=f"output limit: {which} exceeded "
                                 f"{limits.max_output_bytes} bytes; the run was killed", **common)
        if "exit" not in merged:
            return SandboxResult("killed", None, None, reason="the sandbox init process died unexpectedly "
                                 "(killed from outside, e.g. by the host's OOM killer)", **common)
        status = int(merged["exit"])
        usage = {"cpu_seconds": merged.get("cpu_seconds"), "max_rss_mb": merged.get("max_rss_mb")}
        cpu = usage["cpu_seconds"] or 0.0
        memory_sign = next((s for s in _MEMORY_SIGNS if s in stderr[-4000:]), None)
        if status < 0:
            number = -status
            name = _signal_name(number)
            if number == signal.SIGXCPU or (number == signal.SIGKILL and cpu >= limits.cpu_seconds):
                return SandboxResult("timeout", None, number, reason=f"timeout: CPU limit of "
                                     f"{limits.cpu_seconds:g}s exceeded ({name})", **common, **usage)
            if memory_sign:
                return SandboxResult("memory", None, number, reason=f"memory limit of {limits.memory_mb} MB "
                                     f"exceeded ({memory_sign}, then {name})", **common, **usage)
            return SandboxResult("killed", None, number, reason=f"killed by {name}", **common, **usage)
        if status == 0:
            return SandboxResult("ok", 0, None, reason="exited normally", **common, **usage)
        if memory_sign:
            return SandboxResult("memory", status, None, reason=f"memory limit of {limits.memory_mb} MB exceeded "
                                 f"({memory_sign})", **common, **usage)
        return SandboxResult("exit_nonzero", status, None, reason=f"exited with status {status}", **common, **usage)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# --- Everything below runs in the supervisor process (python -I -S), shipped by source. ---------------
# Standard library only, no module globals other than _LINUX, no annotations evaluated at run time.
# Three processes: the supervisor (host side, creates the namespaces), the namespace's init (PID 1: sets
# up the mounts, reaps, reports the exit status) and the program (drops everything, then execs).


def _sandbox_libc() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.syscall.restype = ctypes.c_long
    return libc


def _sandbox_call(result: int, what: str) -> None:
    import ctypes

    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _sandbox_mount(libc: Any, source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    def encode(text: str | None) -> bytes | None:
        return None if text is None else text.encode()

    _sandbox_call(libc.mount(encode(source), target.encode(), encode(fstype), flags, encode(data or None)),
                  f"mount {fstype or source} on {target}")


def _sandbox_mount_setattr(libc: Any, path: str, attrs: int) -> None:
    """Set mount attributes on a whole subtree at once (read-only root needs every submount covered)."""
    import ctypes

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(attrs, 0, 0, 0)
    result = libc.syscall(ctypes.c_long(_LINUX["SYS_mount_setattr"]), ctypes.c_long(_LINUX["AT_FDCWD"]),
                          ctypes.c_char_p(path.encode()), ctypes.c_long(_LINUX["AT_RECURSIVE"]),
                          ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    _sandbox_call(result, f"mount_setattr {path}")


def _sandbox_report(fd: int, **message: Any) -> None:
    # One short line per write: pipe writes under PIPE_BUF are atomic, so processes never interleave.
    os.write(fd, (repr(message) + "\n").encode())


def _sandbox_read_exact(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the host closed the configuration pipe early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _sandbox_hide(libc: Any, hide: list[str], expose: list[str], root_mode: bool) -> list[str]:
    """Cover private directories with empty read-only mounts, re-exposing the paths the interpreter needs.

    As root the program runs as a stranger, so an exposed path under a directory it may not traverse
    (the interpreter under /root, say) is hidden-and-re-exposed the same way.
    """
    import stat

    roots = set(hide)
    if root_mode:
        for path in expose:
            ancestor = "/"
            for part in path.strip("/").split("/")[:-1]:
                ancestor = os.path.join(ancestor, part)
                if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                    roots.add(ancestor)
                    break
    # Only paths strictly inside a hidden root are re-exposed: a hidden directory never reappears whole.
    hidden = []
    for root in sorted(roots):
        if any(root.startswith(h + "/") for h in hidden):
            continue  # already covered by a hidden ancestor
        _sandbox_private_tmpfs(libc, root, "size=1m,mode=0755", expose)
        _sandbox_mount_setattr(libc, root, _LINUX["MOUNT_ATTR_RDONLY"] | _LINUX["MOUNT_ATTR_NOSUID"])
        hidden.append(root)
    return hidden


def _sandbox_private_tmpfs(libc: Any, target: str, options: str, expose: list[str]) -> None:
    """A fresh tmpfs over ``target``, with the interpreter paths inside it bound back read-only.

    A virtual environment under /tmp (a CI checkout, say) would otherwise vanish under the run's private /tmp.
    """
    inside = sorted(p for p in expose if p.startswith(target.rstrip("/") + "/"))
    keep: list[str] = []
    for path in inside:
        if not any(path == k or path.startswith(k + "/") for k in keep):
            keep.append(path)
    handles = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep}  # before the tmpfs hides them
    _sandbox_mount(libc, "tmpfs", target, "tmpfs", _LINUX["MS_NOSUID"] | _LINUX["MS_NODEV"], options)
    for path, handle in handles.items():
        os.makedirs(path, mode=0o755, exist_ok=True)
        _sandbox_mount(libc, f"/proc/self/fd/{handle}", path, None, _LINUX["MS_BIND"] | _LINUX["MS_REC"])
        os.close(handle)
        _sandbox_mount_setattr(libc, path, _LINUX["MOUNT_ATTR_RDONLY"] | _LINUX["MOUNT_ATTR_NOSUID"])


def _sandbox_write_files(cfg: dict[str, Any], uid: int, gid: int, root_mode: bool) -> None:
    for name, content in cfg["files"].items():
        path = os.path.join(cfg["workdir"], name)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content)
        if root_mode:
            # Files written by init (root) are handed to the program's uid, directories included.
            while directory != cfg["workdir"]:
                os.chown(directory, uid, gid)
                directory = os.path.dirname(directory)
            os.chown(path, uid, gid)


def _sandbox_exec_program(cfg: dict[str, Any], libc: Any, report_fd: int, stdin_fd: int, uid: int, gid: int,
                          root_mode: bool) -> None:
    """The program's process: stdin, fds, limits, identity, then exec. Never returns."""
    import math
    import resource

    try:
        os.dup2(stdin_fd, 0)
        os.set_inheritable(report_fd, False)  # closed by a successful exec; reports an exec failure
        os.closerange(3, report_fd)
        os.closerange(report_fd + 1, 1 << 20)
        os.chdir(cfg["workdir"])
        limits = cfg["limits"]
        cpu = max(1, math.ceil(limits["cpu_seconds"]))  # RLIMIT_CPU counts whole seconds
        mib = 1 << 20
        extra = 0 if root_mode else 2  # in a user namespace the supervisor and init count as well
        for resource_id, value in (
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),  # SIGXCPU first, SIGKILL a second later
            (resource.RLIMIT_AS, (limits["memory_mb"] * mib,) * 2),
            (resource.RLIMIT_NPROC, (limits["max_processes"] + extra,) * 2),
            (resource.RLIMIT_FSIZE, (limits["max_file_mb"] * mib,) * 2),
            (resource.RLIMIT_NOFILE, (limits["max_open_files"],) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
        ):
            resource.setrlimit(resource_id, value)
        if root_mode:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)  # drops every capability; NPROC now counts this run's uid only
        _sandbox_call(libc.prctl(_LINUX["PR_SET_NO_NEW_PRIVS"], 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)  # undo the supervisor interpreter's own dispositions
        argv = cfg["argv"]
        os.execvpe(argv[0], argv, cfg["env"])
    except BaseException as exc:
        _sandbox_report(report_fd, exec_error=f"{cfg['argv'][0]}: {exc}")
    os._exit(127)


def _sandbox_init_main(cfg: dict[str, Any], libc: Any, report_fd: int, alive_fd: int, uid: int, gid: int,
                       root_mode: bool) -> None:
    """PID 1 of the run: mounts, then fork the program and reap until it exits. Never returns."""
    import select
    import socket

    _sandbox_call(libc.prctl(_LINUX["PR_SET_PDEATHSIG"], signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    if select.select([alive_fd], [], [], 0)[0]:
        os._exit(1)  # the supervisor died before the death signal was armed
    os.close(alive_fd)
    # Not dumpable: a program running as our uid (user-namespace mode) cannot ptrace init or open its fds.
    _sandbox_call(libc.prctl(_LINUX["PR_SET_DUMPABLE"], 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    isolation: dict[str, Any] = {"mode": "root" if root_mode else "userns", "uid": uid, "network": "namespace",
                                 "pid": "namespace"}
    try:
        _sandbox_mount_setattr(libc, "/", _LINUX["MOUNT_ATTR_RDONLY"] | _LINUX["MOUNT_ATTR_NOSUID"])
        isolation["readonly_root"] = True
    except OSError as exc:
        if not root_mode:  # as the caller's own uid, a writable root would expose all of their files
            raise
        isolation["readonly_root"] = f"unavailable ({exc.strerror}); files are protected by the uid only"
    isolation["hidden"] = _sandbox_hide(libc, cfg["hide"], cfg["expose"], root_mode)
    nosuid_nodev = _LINUX["MS_NOSUID"] | _LINUX["MS_NODEV"]
    try:
        _sandbox_mount(libc, "proc", "/proc", "proc", nosuid_nodev | _LINUX["MS_NOEXEC"])
        isolation["proc"] = "private"
    except OSError:
        # A container may forbid a fresh procfs; then /proc is hidden rather than showing the host's.
        _sandbox_mount(libc, "tmpfs", "/proc", "tmpfs", nosuid_nodev | _LINUX["MS_RDONLY"], "size=4k")
        isolation["proc"] = "hidden"
    owner = f",uid={uid},gid={gid}" if root_mode else ""
    size = f"size={cfg['limits']['disk_mb']}m"
    _sandbox_private_tmpfs(libc, cfg["workdir"], f"{size},mode=0700{owner}", cfg["expose"])
    if os.path.isdir("/dev/shm"):
        _sandbox_private_tmpfs(libc, "/dev/shm", f"{size},mode=1777", cfg["expose"])
    socket.sethostname("sandbox")
    _sandbox_write_files(cfg, uid, gid, root_mode)
    if cfg["stdin"] is None:
        stdin_fd = os.open("/dev/null", os.O_RDONLY)
    else:
        # A memfd holds all of stdin up front: no pipe to keep fed, no file in the working directory.
        stdin_fd = os.memfd_create("stdin", 0)
        os.write(stdin_fd, cfg["stdin"])
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    _sandbox_report(report_fd, isolation=isolation)
    program = os.fork()
    if program == 0:
        _sandbox_exec_program(cfg, libc, report_fd, stdin_fd, uid, gid, root_mode)
    os.close(stdin_fd)
    while True:  # as PID 1 we inherit every orphan; reap them all until the program itself exits
        pid, status, usage = os.wait4(-1, 0)
        if pid == program:
            break
    _sandbox_report(report_fd, exit=os.waitstatus_to_exitcode(status),
                    cpu_seconds=round(usage.ru_utime + usage.ru_stime, 4), max_rss_mb=round(usage.ru_maxrss / 1024, 1))
    # Exiting as PID 1 makes the kernel kill whatever the program left behind before our parent sees us go.
    os._exit(0)


def _sandbox_bootstrap() -> None:
    """Read the supervisor's code and the run's configuration from stdin, then hand over to it."""
    import marshal

    header = b""
    while not header.endswith(b"\n"):
        byte = os.read(0, 1)
        if not byte:
            os._exit(1)  # the host went away before sending anything
        header += byte
    payload = marshal.loads(_sandbox_read_exact(0, int(header)))
    namespace = {"__name__": "unirl_sandbox_supervisor"}
    exec(payload["code"], namespace)
    namespace["_sandbox_supervisor_main"](payload["config"])


def _sandbox_supervisor_main(cfg: dict[str, Any]) -> None:
    """Host side of the namespaces: create them, fork init, turn "stdin closed" into SIGKILL of init."""
    import select

    report_fd = cfg["report_fd"]
    libc = _sandbox_libc()
    try:
        # If the host process dies, so do we, and init with us (its own death signal).
        _sandbox_call(libc.prctl(_LINUX["PR_SET_PDEATHSIG"], signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != cfg["parent_pid"]:
            os._exit(1)  # the host died before the death signal was armed
        flags = (_LINUX["CLONE_NEWNS"] | _LINUX["CLONE_NEWNET"] | _LINUX["CLONE_NEWPID"] | _LINUX["CLONE_NEWIPC"]
                 | _LINUX["CLONE_NEWUTS"] | _LINUX["CLONE_NEWCGROUP"])
        root_mode = os.geteuid() == 0
        if root_mode:
            uid = gid = cfg["uid_base"] + os.getpid()
            with open("/proc/self/uid_map") as handle:
                ranges = [[int(n) for n in line.split()] for line in handle if line.strip()]
            if not any(inside <= uid < inside + count for inside, _, count in ranges):
                # Root of a container's user namespace: there is no unprivileged uid to switch to.
                raise OSError(f"running as root in a user namespace that does not map uid {uid} "
                              "(e.g. a rootless container); run the sandbox as a non-root user there")
            _sandbox_call(libc.unshare(flags), "unshare(net, pid, mount, ipc, uts, cgroup namespaces)")
        else:
            uid, gid = os.geteuid(), os.getegid()
            _sandbox_call(libc.unshare(flags | _LINUX["CLONE_NEWUSER"]),
                          "unshare(user, net, pid, mount, ipc, uts, cgroup namespaces); are unprivileged user "
                          "namespaces disabled (kernel.unprivileged_userns_clone, AppArmor, user.max_user_namespaces)?")
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as handle:
                    handle.write(text)
        # Private propagation first, so nothing we mount leaks back into the host's mount table.
        _sandbox_mount(libc, None, "/", None, _LINUX["MS_REC"] | _LINUX["MS_PRIVATE"])
    except (OSError, ValueError) as exc:
        _sandbox_report(report_fd, error=str(exc))
        os._exit(121)
    alive_read, alive_write = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(alive_write)
        try:
            _sandbox_init_main(cfg, libc, report_fd, alive_read, uid, gid, root_mode)
        except BaseException as exc:
            _sandbox_report(report_fd, error=f"sandbox init: {exc}")
        os._exit(121)
    os.close(alive_read)
    _sandbox_report(report_fd, init_pid=init)
    try:
        pidfd = os.pidfd_open(init)  # Linux >= 5.3: lets one poll wait for init's exit and the host alike
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(0, select.POLLIN)
        done = False
        while not done:
            for fd, _ in poller.poll():
                if fd == pidfd:
                    done = True
                else:
                    os.read(0, 4096)  # anything, including end of input, is the request to kill
                    poller.unregister(0)
                    # Init is not reaped yet, so its pid cannot have been reused. Killing PID 1 kills the namespace.
                    os.kill(init, signal.SIGKILL)
    except OSError as exc:
        _sandbox_report(report_fd, error=f"sandbox supervisor: {exc}")
        os.kill(init, signal.SIGKILL)
    os.waitpid(init, 0)  # returns only once every process of the namespace is gone
    os._exit(0)
