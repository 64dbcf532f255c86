"""The one thread of a process that starts sandboxes: a fresh kernel keyring per run, and the host paths bwrap needs.

Why a dedicated, long-lived thread:

* **Keyrings.** A child inherits the session keyring of the *thread* that forked it, and a sandboxed program that
  can reach the host's session keyring can read, overwrite and plant keys there. ``KEYCTL_JOIN_SESSION_KEYRING``
  changes the calling thread's credentials only, so this thread joins a fresh anonymous session keyring right
  before each spawn: every run starts with an empty one of its own (seccomp denies the keyring syscalls as well).
  ``preexec_fn`` could do the same in the child, but it is unsafe in the multi-threaded processes that score.
* **Parent-death signal.** ``bwrap --die-with-parent`` arms ``PR_SET_PDEATHSIG``, which fires when the parent
  *thread* exits. A thread that lives as long as the process makes that "when the process dies", which is the
  intent; a short-lived pool thread would kill runs that are still going.
* **Paths bwrap must resolve (root only).** As root, bwrap runs as the run's own unprivileged uid, which cannot
  traverse a 0700 ancestor such as ``/root`` holding a pyenv interpreter (bwrap 0.8 resolves bind sources by path,
  even for ``--ro-bind-fd``). This thread unshares its own mount namespace (a thread may: only the user namespace
  needs a single-threaded process), and there covers each such ancestor with a tmpfs holding just the needed
  paths, bound back from the real ones. The rest of the process, and the host, see no change.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import platform
import queue
import stat
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_CLONE_NEWNS = 0x00020000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_KEYCTL_JOIN_SESSION_KEYRING = 1
_SYS_KEYCTL = {"x86_64": 250, "aarch64": 219, "ppc64le": 271, "s390x": 280, "riscv64": 219}


class StagingError(OSError):
    """A path the sandbox must see cannot be made visible to the run's uid."""


@dataclass
class _Request:
    argv: list[str]
    stdin: int
    stdout: int
    stderr: int
    pass_fds: tuple[int, ...]
    uid: int | None
    visible: tuple[str, ...]
    future: concurrent.futures.Future[subprocess.Popen[bytes]]


class Spawner:
    """Starts processes from one long-lived thread; see the module docstring for why."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._root = os.geteuid() == 0
        self.keyring = "not tried yet"  # what the last spawn got, for SandboxResult.isolation
        self._staging_error: str | None = None
        self._staged: set[str] = set()
        self._covered: dict[str, int] = {}  # covered ancestor -> O_PATH fd of the real directory underneath
        self._libc: Any = None
        self._thread = threading.Thread(target=self._serve, name="unirl-sandbox-spawner", daemon=True)
        self._thread.start()

    def spawn(self, argv: Sequence[str], *, stdin: int, stdout: int, stderr: int, pass_fds: Sequence[int],
              uid: int | None, visible: Sequence[str]) -> subprocess.Popen[bytes]:
        """Popen ``argv`` from the spawner thread, as ``uid`` (root only) with every path of ``visible`` resolvable."""
        future: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._queue.put(_Request(list(argv), stdin, stdout, stderr, tuple(pass_fds), uid, tuple(visible), future))
        return future.result()

    # --- the spawner thread ---------------------------------------------------------------------------------

    def _serve(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.syscall.restype = ctypes.c_long
        if self._root:
            self._private_mount_namespace()
        while True:
            request = self._queue.get()
            if not request.future.set_running_or_notify_cancel():
                continue
            try:
                request.future.set_result(self._start(request))
            except BaseException as exc:  # handed to the caller, which raises it
                request.future.set_exception(exc)

    def _start(self, request: _Request) -> subprocess.Popen[bytes]:
        if self._root:
            for path in request.visible:
                self._make_visible(path)
        self._fresh_keyring()
        identity: dict[str, Any] = {}
        if request.uid is not None:
            identity = {"user": request.uid, "group": request.uid, "extra_groups": []}
        return subprocess.Popen(request.argv, stdin=request.stdin, stdout=request.stdout, stderr=request.stderr,
                                pass_fds=request.pass_fds, env={}, cwd="/", close_fds=True, **identity)

    def _fresh_keyring(self) -> None:
        number = _SYS_KEYCTL.get(platform.machine())
        if number is None:
            self.keyring = f"not isolated on {platform.machine()} (unknown keyctl number); seccomp still denies it"
            return
        result = self._libc.syscall(ctypes.c_long(number), ctypes.c_long(_KEYCTL_JOIN_SESSION_KEYRING),
                                    ctypes.c_void_p(None))
        if result < 0:
            # E.g. a container whose own seccomp profile denies keyctl: nothing here can reach a keyring either.
            self.keyring = f"unchanged: keyctl(JOIN_SESSION_KEYRING) failed ({os.strerror(ctypes.get_errno())})"
        else:
            self.keyring = "fresh anonymous session keyring per run"

    def _mount(self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
        def encode(text: str | None) -> bytes | None:
            return None if text is None else text.encode()

        if self._libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)):
            code = ctypes.get_errno()
            raise OSError(code, f"mount {source or fstype} on {target}: {os.strerror(code)}")

    def _private_mount_namespace(self) -> None:
        try:
            if self._libc.unshare(_CLONE_NEWNS):
                code = ctypes.get_errno()
                raise OSError(code, os.strerror(code))
            # Nothing mounted here may propagate back to the host's mount table.
            self._mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
        except OSError as exc:
            self._staging_error = f"cannot unshare a mount namespace for staging ({exc.strerror})"

    def _make_visible(self, path: str) -> None:
        """Let a stranger uid resolve ``path``: cover its first untraversable ancestor with a tmpfs, bind it back."""
        if path in self._staged:
            return
        # Under an ancestor covered before, the real directory is reached through the fd kept for it.
        blocker = next((b for b in self._covered if path == b or path.startswith(b + "/")), None)
        if blocker is None:
            blocker = _untraversable_ancestor(path)
        if blocker is None:
            _check_readable(path)
            self._staged.add(path)
            return
        if self._staging_error is not None:
            raise StagingError(f"{path} is under {blocker}, which the sandbox's uid cannot traverse, and "
                               f"{self._staging_error}; make it traversable (chmod o+x {blocker}) or run as "
                               "a non-root user")
        if blocker not in self._covered:
            real = os.open(blocker, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # before the tmpfs hides it
            self._mount("tmpfs", blocker, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=64k")
            self._covered[blocker] = real
        source = f"/proc/self/fd/{self._covered[blocker]}/{os.path.relpath(path, blocker)}"
        _check_readable(source, shown=path)
        if stat.S_ISDIR(os.stat(source).st_mode):
            os.makedirs(path, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        self._mount(source, path, None, _MS_BIND | _MS_REC, None)
        self._mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, None)
        self._staged.add(path)


def _untraversable_ancestor(path: str) -> str | None:
    ancestor = "/"
    for part in path.strip("/").split("/")[:-1]:
        ancestor = os.path.join(ancestor, part)
        if not os.stat(ancestor).st_mode & stat.S_IXOTH:
            return ancestor
    return None


def _check_readable(path: str, shown: str | None = None) -> None:
    mode = os.stat(path).st_mode
    needed = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    if mode & needed != needed:
        raise StagingError(f"{shown or path} is not readable by other users (mode {stat.filemode(mode)}), so the "
                           "sandbox's unprivileged uid cannot read it")


_spawner: Spawner | None = None
_lock = threading.Lock()


def spawner() -> Spawner:
    """This process's spawner, started on first use (and again in a forked child, which has no threads)."""
    global _spawner
    with _lock:
        if _spawner is None:
            _spawner = Spawner()
        return _spawner


def _forget_after_fork() -> None:
    global _spawner, _lock
    _spawner = None
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
