"""Hostile programs against the sandbox (:mod:`unirl.rewards.sandbox.core`): each case is one attack, contained or not.

Every case ends with :meth:`HostWatch.assert_back_to_normal`: no process of the run survives, the host mount table
is unchanged, nothing was left in the host's /tmp, /var/tmp or /dev/shm or in its cgroups, host memory is where it
was, and the host can still fork. ``benchmarks/sandbox_choice.py`` runs the same cases against the earlier,
hand-written sandbox through :func:`using`; cases rely only on the API both share, and pass ``readonly_paths``
(which makes a host directory visible to the program, so the attack reaches it) only where it exists.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

import unirl
import unirl.rewards.sandbox.core
from tests.adversarial import Case
from unirl.process_tree import descendants, set_child_subreaper

AREA = "sandbox: hostile programs"
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
REPO = Path(unirl.__file__).resolve().parent.parent
_implementation: ModuleType = unirl.rewards.sandbox.core


@contextlib.contextmanager
def using(module: ModuleType) -> Iterator[None]:
    """Run the cases against another sandbox module with the same API (the benchmark's comparison)."""
    global _implementation
    previous, _implementation = _implementation, module
    try:
        yield
    finally:
        _implementation = previous


def sandbox() -> Any:
    return _implementation


def run(source: str, *, readonly: tuple[str, ...] = (), **kwargs: Any) -> Any:
    """run_sandboxed of the implementation under test, showing ``readonly`` paths where it can."""
    run_sandboxed = sandbox().run_sandboxed
    if readonly and "readonly_paths" in inspect.signature(run_sandboxed).parameters:
        kwargs["readonly_paths"] = readonly
    return run_sandboxed(source, **kwargs)


def limits(**overrides: Any) -> Any:
    base = {"wall_seconds": 5.0, "cpu_seconds": 5, "memory_mb": 256, "max_processes": 16,
            "max_output_bytes": 1 << 18}
    return sandbox().SandboxLimits(**{**base, **overrides})


# --- watching the host ---------------------------------------------------------------------------------------


def meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def process_status(pid: str) -> dict[str, str]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}  # exited while we looked
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def sandbox_processes() -> set[int]:
    """Live processes of this test process's tree in a PID namespace other than ours, or running as a sandbox uid.

    The test process is a child subreaper (:class:`HostWatch` makes it one), so whatever a run leaves behind,
    double-forked, setsid'd or orphaned by a killed host, is reparented to it instead of to PID 1: a leak stays in
    this tree, and another test process's sandboxes (pytest-xdist runs several) are never taken for one of ours.
    Zombies are dead (no memory, no code) and are not counted.
    """
    own = os.readlink("/proc/self/ns/pid")
    found = set()
    for pid in map(str, descendants(os.getpid())):  # live: zombies are already left out
        try:
            foreign = os.readlink(f"/proc/{pid}/ns/pid") != own
        except OSError:
            continue
        status = process_status(pid)
        if not status or status["State"].startswith("Z"):
            continue
        if foreign or int(status["Uid"].split()[0]) >= unirl.rewards.sandbox.core.SANDBOX_UID_BASE:
            found.add(int(pid))
    return found


def processes_with_marker(marker: str) -> list[int]:
    hits = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                hits.append(int(pid))
        except OSError:
            continue
    return hits


def run_cgroups() -> list[str]:
    """Cgroup directories of runs of this process that still exist."""
    from unirl.rewards.sandbox import cgroup as sandbox_cgroup
    layout, _ = sandbox_cgroup.availability()
    mine = f"{sandbox_cgroup.PREFIX}{os.getpid()}-"
    return [os.path.join(parent, name) for parent in (layout.parents.values() if layout else [])
            for name in os.listdir(parent) if name.startswith(mine)]


@dataclass
class HostWatch:
    """A snapshot of the host before a run, and the checks that it is back to that state after."""

    subreaper: bool = field(default_factory=set_child_subreaper)  # first: orphans of a run come back to this tree
    processes: set[int] = field(default_factory=sandbox_processes)
    mounts: str = field(default_factory=lambda: Path("/proc/self/mountinfo").read_text())
    entries: dict[str, set[str]] = field(
        default_factory=lambda: {d: set(os.listdir(d)) for d in SHARED_DIRS if os.path.isdir(d)})
    ptys: set[str] = field(default_factory=lambda: set(os.listdir("/dev/pts")))
    shmem_kib: int = field(default_factory=lambda: meminfo_kib("Shmem"))
    rss: int = field(default_factory=lambda: psutil.Process().memory_info().rss)

    def assert_back_to_normal(self) -> None:
        deadline = time.monotonic() + 30  # a run killed from outside may take a moment to be gone (a hang guard)
        while sandbox_processes() - self.processes and time.monotonic() < deadline:
            time.sleep(0.02)
        assert sandbox_processes() - self.processes == set(), "a sandbox process survived the run"
        assert descendants(os.getpid()) == []  # live ones: a subreaper collects a killed run's dead orphans
        assert Path("/proc/self/mountinfo").read_text() == self.mounts, "the host mount table changed"
        for directory, before in self.entries.items():
            for name in set(os.listdir(directory)) - before:
                # These directories are shared with the rest of the machine (other jobs write there too);
                # anything owned by a sandbox uid is a leak.
                with contextlib.suppress(FileNotFoundError):
                    owner = os.lstat(os.path.join(directory, name)).st_uid
                    assert owner < unirl.rewards.sandbox.core.SANDBOX_UID_BASE, \
                        f"the sandbox left {directory}/{name} behind (uid {owner})"
        assert set(os.listdir("/dev/pts")) == self.ptys, "the host's /dev/pts changed"
        assert run_cgroups() == [], "a run's cgroup outlived it"
        # Memory a run can leave held after its processes are gone is shared memory (memfd, System V, tmpfs): the
        # machine's Shmem, not MemAvailable, which every other job on a shared machine moves by gigabytes.
        assert meminfo_kib("Shmem") - self.shmem_kib < 256 << 10, "shared memory of the run outlived it"
        assert psutil.Process().memory_info().rss - self.rss < 64 << 20
        assert subprocess.run(["true"]).returncode == 0  # the host can still fork and exec


class Sampler:
    """Samples, every 20 ms while a run goes on, what the host would notice: the run's memory and Shmem."""

    def __init__(self) -> None:
        self.baseline = self.run_bytes()
        self.shmem_kib = meminfo_kib("Shmem")
        self.peak_run = 0
        self.peak_shmem_kib = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    @staticmethod
    def run_bytes() -> int:
        total = 0
        for pid in sandbox_processes():
            with contextlib.suppress(psutil.Error):
                total += psutil.Process(pid).memory_full_info().uss
        return total

    def _watch(self) -> None:
        while not self._done.is_set():
            self.peak_run = max(self.peak_run, self.run_bytes())
            self.peak_shmem_kib = max(self.peak_shmem_kib, meminfo_kib("Shmem") - self.shmem_kib)
            time.sleep(0.02)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()


def current() -> bool:
    """Whether the implementation under test is unirl.rewards.sandbox.core itself (code_tests is built on it)."""
    return _implementation is unirl.rewards.sandbox.core


def host_command(body: str, *, uid: int | None = None, env: dict[str, str] | None = None,
                 ) -> tuple[list[str], dict[str, str]]:
    """argv and environment of a fresh host process (root, or unprivileged as ``uid``) running ``body``.

    In ``body``, ``sb`` is the sandbox module under test and ``os`` and ``sys`` are imported.
    """
    module = "" if current() else getattr(_implementation, "__file__", None) or ""
    prelude = (
        "import importlib.util, os, sys\n"
        f"path = {module!r}\n"
        "if path:\n"
        "    spec = importlib.util.spec_from_file_location('sandbox_under_test', path)\n"
        "    sb = sys.modules['sandbox_under_test'] = importlib.util.module_from_spec(spec)\n"
        "    spec.loader.exec_module(sb)\n"
        "else:\n"
        "    import unirl.rewards.sandbox.core as sb\n"
    )
    command = [sys.executable, "-c", prelude + body]
    environment = {**os.environ, **(env or {})}
    if uid is not None:
        system_python = "/usr/bin/python3"
        site = next((p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix)), None)
        version = subprocess.run([system_python, "-c", "import sys; print(sys.version_info[:2])"],
                                 capture_output=True, text=True).stdout.strip() if os.path.exists(system_python) \
            else ""
        if os.geteuid() != 0 or site is None or version != str(sys.version_info[:2]):
            pytest.skip("needs root and a system Python of the same version that an unprivileged user can run")
        command = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", system_python, "-c",
                   prelude + body]
        environment = {"PYTHONPATH": f"{REPO}:{site}", "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                       **(env or {})}
    return command, environment


def host_python(body: str, *, uid: int | None = None, env: dict[str, str] | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``body`` (see :func:`host_command`) to its end."""
    command, environment = host_command(body, uid=uid, env=env)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment, cwd="/")


def _throwaway_uid() -> int:
    # Below the sandbox range and far above real users: a keyring planted under it (if an attack got through)
    # belongs to nobody else.
    return 0x6F000000 + (os.getpid() & 0xFFFF)


def contained(check: Callable[[Path], None]) -> Callable[[Path], None]:
    """The case, then the host checks."""

    def wrapped(tmp: Path) -> None:
        host = HostWatch()
        check(tmp)
        host.assert_back_to_normal()

    wrapped.__doc__ = check.__doc__
    return wrapped


# --- keyrings (the first finding) -------------------------------------------------------------------

_KEYRING_HOST = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(*args):
    result = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return result, ctypes.get_errno()
def read(serial):
    buf = ctypes.create_string_buffer(4096)
    size = libc.syscall(ctypes.c_long(250), ctypes.c_long(11), ctypes.c_long(serial), buf, ctypes.c_long(4096))
    return buf.raw[:max(size, 0)]
# The host's session keyring: a private one for this process (threads started later inherit it).
assert call(250, 1, b"unirl-adversarial-host")[0] > 0
secret = b"hunter2-" + os.urandom(8).hex().encode()
serial = call(248, b"user", b"unirl-secret", secret, len(secret), -3)[0]
user_before = read(-4)
attack = '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(*args):
    result = libc.syscall(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return result, ctypes.get_errno()
buf = ctypes.create_string_buffer(4096)
got = {}
got["read"] = libc.syscall(ctypes.c_long(250), ctypes.c_long(11), ctypes.c_long(SERIAL), buf, ctypes.c_long(4096))
print("payload:", buf.raw[:max(got["read"], 0)])
got["search"] = call(250, 10, -3, b"user", b"unirl-secret", 0)[0]
got["update"] = call(250, 2, SERIAL, b"pwned", 5)[0]
got["plant_session"] = call(248, b"user", b"planted", b"x", 1, -3)[0]
got["plant_user"] = call(248, b"user", b"planted", b"x", 1, -4)[0]
got["plant_user_session"] = call(248, b"user", b"planted", b"x", 1, -5)[0]
try:
    print("proc keys:", open("/proc/keys").read())
except OSError as exc:
    print("proc keys:", exc)
print("GOT", got)
'''.replace("SERIAL", str(serial))
result = sb.run_sandboxed(attack, limits=sb.SandboxLimits(wall_seconds=10))
linked = read(-3)
planted_user = read(-4) != user_before
call(250, 7, -4)  # clear this (throwaway) uid's user keyring, whatever an attack put there
print(json.dumps({"status": result.status, "stdout": result.stdout, "stderr": result.stderr[-1000:],
                  "secret": secret.decode(), "intact": read(serial) == secret,
                  "session_keys": len(linked) // 4, "planted_user": planted_user}))
"""


def _keyring_attack(uid: int | None) -> None:
    probe = host_python(_KEYRING_HOST, uid=uid)
    assert probe.returncode == 0, probe.stderr[-3000:]
    seen = json.loads(probe.stdout.splitlines()[-1])
    assert seen["status"] == "ok", seen["stderr"]
    assert seen["secret"] not in seen["stdout"] + seen["stderr"], "the program read the host's secret key"
    assert "unirl-secret" not in seen["stdout"], "the program saw the host key's description"
    assert seen["intact"], "the program overwrote the host's key"
    assert seen["session_keys"] == 1, "the program planted a key in the host's session keyring"
    assert not seen["planted_user"], "the program planted a key in the host user's keyring"


@contained
def keyring_as_root(tmp: Path) -> None:
    """A root host's session-keyring key: read, overwritten, or a new one planted (also @u, @us)."""
    _keyring_attack(None)


@contained
def keyring_unprivileged(tmp: Path) -> None:
    """The same attack on a non-root host, where the program runs as the host's own uid."""
    # The earlier, hand-written sandbox needs a passwd entry for its caller; ours does not.
    _keyring_attack(_throwaway_uid() if current() else 65534)


@contained
def keyring_through_code_tests(tmp: Path) -> None:
    """Through code_tests the key's payload reaches info (and so trajectories.jsonl)."""
    body = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
assert libc.syscall(ctypes.c_long(250), ctypes.c_long(1), b"unirl-adversarial-host") > 0
secret = b"hunter2-" + os.urandom(8).hex().encode()
serial = libc.syscall(ctypes.c_long(248), b"user", b"unirl-secret", secret, ctypes.c_long(len(secret)),
                      ctypes.c_long(-3))
import unirl
from unirl.plugins.builtin_rewards.code_exec import code_tests
thief = f'''
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
buf = ctypes.create_string_buffer(4096)
for serial in ({serial}, -3, -4, -5):
    n = libc.syscall(ctypes.c_long(250), ctypes.c_long(11), ctypes.c_long(serial), buf, ctypes.c_long(4096))
    print("stolen", buf.raw[:max(n, 0)], file=sys.stderr)
def add(a, b):
    return a + b
'''
if CURRENT:
    info = code_tests(unirl.Sample(prompt="", completion=thief, reference="assert add(1, 2) == 3")).info
else:  # an earlier sandbox: code_tests put the run's stderr tail into info
    info = {"stderr_tail": sb.run_sandboxed(thief).stderr[-500:]}
print("SECRET", secret.decode())
print("INFO", json.dumps(info, default=str))
"""
    probe = host_python(f"import json\nCURRENT = {current()}\n" + body)
    assert probe.returncode == 0, probe.stderr[-3000:]
    secret = next(line.split()[1] for line in probe.stdout.splitlines() if line.startswith("SECRET"))
    info = next(line[5:] for line in probe.stdout.splitlines() if line.startswith("INFO"))
    assert secret not in info, "the host key's payload reached code_tests' info"


_INT80 = """
import ctypes, mmap
# mov eax, 288 (i386 keyctl); mov ebx, 0 (GET_KEYRING_ID); mov ecx, -3 (session); xor edx, edx; int 0x80; ret
code = bytes([0xB8, 0x20, 0x01, 0, 0, 0xBB, 0, 0, 0, 0, 0xB9, 0xFD, 0xFF, 0xFF, 0xFF, 0x31, 0xD2, 0xCD, 0x80, 0xC3])
page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
address = ctypes.addressof(ctypes.c_char.from_buffer(page))
result = ctypes.CFUNCTYPE(ctypes.c_int)(address)()
print("keyring id through int 0x80:", result)
"""


@contained
def keyring_through_int80(tmp: Path) -> None:
    """keyctl through the 32-bit ``int 0x80`` ABI, which a filter written for x86-64 numbers would not see."""
    if os.uname().machine != "x86_64":
        pytest.skip("x86-64 only")
    result = run(_INT80, limits=limits())
    printed = [line for line in result.stdout.splitlines() if line.startswith("keyring id")]
    assert not (printed and int(printed[0].split(":")[1]) > 0), "the program reached a keyring through int 0x80"


# --- resources per run ---------------------------------------------------------------------------------------

_CHILDREN = """
import os, time
for i in range(4):
    if os.fork() == 0:
        block = bytearray({each} << 20)
        for j in range(0, len(block), 4096):
            block[j] = 1
        print("child", i, "holds", {each}, "MB", flush=True)
        time.sleep(2)
        os._exit(0)
time.sleep(2.5)
"""


@contained
def memory_across_children(tmp: Path) -> None:
    """Four children each hold most of memory_mb: with per-process limits the run holds four times it."""
    with Sampler() as sampled:
        result = run(_CHILDREN.format(each=96), limits=limits(memory_mb=128, wall_seconds=6))
    held = sampled.peak_run >> 20
    assert held <= 128 * 1.25, f"the run held {held} MB at once with memory_mb=128 ({result.stdout!r})"


_MEMFD = """
import os
fd = os.memfd_create("hoard")
chunk = b"x" * (1 << 20)
written = 0
try:
    for _ in range(384):
        os.write(fd, chunk)
        written += 1
finally:
    print("memfd holds", written, "MB", flush=True)
"""


@contained
def memory_in_memfd(tmp: Path) -> None:
    """memfd pages are not in any process's address space: per-process limits never see them."""
    with Sampler() as sampled:
        run(_MEMFD, limits=limits(memory_mb=128, max_file_mb=1024, wall_seconds=6))
    assert sampled.peak_shmem_kib >> 10 <= 128 * 1.25, \
        f"the run's memfd held {sampled.peak_shmem_kib >> 10} MB with memory_mb=128"


_SYSV = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
held = 0
for _ in range(12):
    segment = libc.shmget(0, 32 << 20, 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    if segment < 0:
        break
    address = libc.shmat(segment, None, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(address, 1, 32 << 20)
    libc.shmdt(ctypes.c_void_p(address))  # detached, the segment and its pages stay
    held += 32
print("System V segments hold", held, "MB", flush=True)
import time
time.sleep(1)
"""


@contained
def memory_in_sysv_segments(tmp: Path) -> None:
    """Detached System V segments keep their pages, outside every process's address space."""
    with Sampler() as sampled:
        run(_SYSV, limits=limits(memory_mb=128, wall_seconds=6))
    assert sampled.peak_shmem_kib >> 10 <= 128 * 1.25, \
        f"the run's System V segments held {sampled.peak_shmem_kib >> 10} MB with memory_mb=128"


_NESTED_TMPFS = """
import ctypes, os, subprocess
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.getuid(), os.getgid()
result = libc.unshare(0x10000000 | 0x00020000)  # CLONE_NEWUSER | CLONE_NEWNS
print("unshare:", result, os.strerror(ctypes.get_errno()))
if result == 0:
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    os.makedirs("/tmp/big", exist_ok=True)
    if libc.mount(b"none", b"/tmp/big", b"tmpfs", 0, None) == 0:
        print("MOUNTED", flush=True)
        chunk, filled = b"x" * (1 << 20), 0
        with open("/tmp/big/fill", "wb") as handle:
            for _ in range(256):
                handle.write(chunk)
                filled += 1
        print("filled", filled, "MB")
helper = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs none /mnt && echo MOUNTED"],
                        capture_output=True, text=True)
print(helper.stdout, helper.stderr)
"""


@contained
def tmpfs_in_own_user_namespace(tmp: Path) -> None:
    """A user namespace of its own lets the program mount a tmpfs with no size cap (disk_mb bypassed)."""
    result = run(_NESTED_TMPFS, limits=limits(disk_mb=64, max_file_mb=512, wall_seconds=6))
    assert "MOUNTED" not in result.stdout, f"the program mounted its own tmpfs: {result.stdout}"


@contained
def dev_shm_beyond_disk_mb(tmp: Path) -> None:
    """/dev/shm and /tmp are capped at disk_mb each."""
    fill = ("import os\nchunk = b'x' * (1 << 20)\nfor path in ('/dev/shm/fill', '/tmp/fill'):\n    n = 0\n"
            "    try:\n        with open(path, 'wb') as handle:\n            for _ in range(128):\n"
            "                handle.write(chunk)\n                n += 1\n    except OSError:\n        pass\n"
            "    print(path, n)\n")
    result = run(fill, limits=limits(disk_mb=16, max_file_mb=512))
    for line in result.stdout.splitlines():
        assert int(line.split()[1]) <= 16, f"wrote past disk_mb=16: {line}"


@contained
def fork_bomb(tmp: Path) -> None:
    """A fork bomb: at most max_processes at once, and the host can still fork throughout."""
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    peak, host_forks, done = 0, [], threading.Event()
    before = sandbox_processes()

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(sandbox_processes() - before))
            host_forks.append(subprocess.run(["true"]).returncode)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run(bomb, limits=limits(wall_seconds=1.5, max_processes=16))
    finally:
        done.set()
        watcher.join()
    assert result.status == "timeout", result.reason
    assert peak <= 16 + 1, f"{peak} sandbox processes at once (limit 16, plus bwrap's monitor)"
    assert host_forks and set(host_forks) == {0}


# --- host objects -------------------------------------------------------------------------------------------


def _shared_dir(name: str) -> Path:
    """A world-traversable host directory outside /tmp (visible read-only to sandboxes that show the host)."""
    path = Path("/var/tmp") / f"unirl-adversarial-{name}-{uuid.uuid4().hex[:8]}"
    path.mkdir(mode=0o755)
    path.chmod(0o755)
    return path


@contained
def unix_socket_on_visible_path(tmp: Path) -> None:
    """A world-writable unix socket on a path the program can see accepts its connection."""
    shared = _shared_dir("socket")
    path = shared / "daemon.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        path.chmod(0o777)
        listener.listen()
        listener.setblocking(False)
        attempt = (f"import socket\ntry:\n    s = socket.socket(socket.AF_UNIX)\n    s.settimeout(2)\n"
                   f"    s.connect({str(path)!r})\n    print('CONNECTED')\nexcept OSError as exc:\n    print(exc)\n"
                   "a, b = socket.socketpair()\na.sendall(b'ok')\nprint('socketpair', b.recv(2))\n")
        result = run(attempt, readonly=(str(shared),), limits=limits())
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever arrived
        assert "CONNECTED" not in result.stdout, result.stdout
        assert "socketpair b'ok'" in result.stdout, f"socketpair() must keep working: {result.stdout}{result.stderr}"
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        shared.rmdir()


@contained
def unix_socket_with_high_bits(tmp: Path) -> None:
    """socket() with AF_UNIX in the low 32 bits and garbage above: a 64-bit filter comparison misses it."""
    attempt = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
               "fd = libc.syscall(ctypes.c_long(41), ctypes.c_long(0x7FFFFFFF00000001), ctypes.c_long(1), "
               "ctypes.c_long(0))\nprint('UNIX SOCKET' if fd >= 0 else os.strerror(ctypes.get_errno()))\n")
    result = run(attempt, limits=limits())
    assert "UNIX SOCKET" not in result.stdout, "an AF_UNIX socket slipped past the family filter"


@contained
def host_ptys(tmp: Path) -> None:
    """/dev/ptmx of the host: ptys the program opens appear in (and use up) the host's /dev/pts."""
    before = set(os.listdir("/dev/pts"))
    holder = ("import os, time\nfds = [os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY) for _ in range(40)]\n"
              "print('opened', len(fds), sorted(os.listdir('/dev/pts')), flush=True)\ntime.sleep(1.5)\n")
    seen: dict[str, Any] = {}

    def during() -> None:
        time.sleep(1.0)
        seen["host_pts"] = set(os.listdir("/dev/pts"))
        master, slave = os.openpty()  # the host can still get a pty while the run holds its own
        os.close(master)
        os.close(slave)
        seen["host_pty"] = True

    thread = threading.Thread(target=during)
    thread.start()
    result = run(holder, limits=limits(max_open_files=64))
    thread.join()
    assert seen.get("host_pty"), "the host could not open a pty while the run held its own"
    assert seen["host_pts"] == before, f"the run's ptys appeared in the host's /dev/pts: {seen['host_pts'] - before}"
    assert result.status == "ok", result.stderr


@contained
def lock_host_file(tmp: Path) -> None:
    """flock/fcntl locks on a host file the program can read block host writers."""
    shared = _shared_dir("lock")
    victim = shared / "ledger.txt"
    victim.write_text("host data\n")
    victim.chmod(0o644)
    locker = (f"import fcntl, time\nf = open({str(victim)!r})\nfor name, lock in (('flock', lambda: fcntl.flock(f, "
              "fcntl.LOCK_SH)), ('lockf', lambda: fcntl.lockf(f, fcntl.LOCK_SH)), ('ofd', lambda: fcntl.fcntl(f, "
              "37, b'\\0' * 32))):\n    try:\n        lock()\n        print('LOCKED', name, flush=True)\n"
              "    except OSError as exc:\n        print(name, exc, flush=True)\ntime.sleep(1.5)\n")
    blocked: list[str] = []

    def host_writer() -> None:
        time.sleep(1.0)
        import fcntl

        with open(victim, "a") as handle:
            for name, lock in (("flock", lambda: fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)),
                               ("lockf", lambda: fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB))):
                try:
                    lock()
                except OSError:
                    blocked.append(name)

    thread = threading.Thread(target=host_writer)
    thread.start()
    try:
        result = run(locker, readonly=(str(shared),), limits=limits())
    finally:
        thread.join()
        victim.unlink()
        shared.rmdir()
    assert blocked == [], f"the program's locks blocked the host ({blocked}): {result.stdout}"
    assert "LOCKED" not in result.stdout, result.stdout


@contained
def watch_host_directories(tmp: Path) -> None:
    """inotify/fanotify/dnotify watches on host directories report host activity."""
    watcher = ("import ctypes, fcntl, os\nlibc = ctypes.CDLL(None, use_errno=True)\nfd = libc.inotify_init1(0)\n"
               "print('INOTIFY' if fd >= 0 and libc.inotify_add_watch(fd, b'/usr', 0xfff) >= 0 else 'no inotify')\n"
               "print('FANOTIFY' if libc.fanotify_init(0, 0) >= 0 else 'no fanotify')\n"
               "d = os.open('/usr', os.O_RDONLY)\ntry:\n    fcntl.fcntl(d, fcntl.F_NOTIFY, fcntl.DN_CREATE)\n"
               "    print('DNOTIFY')\nexcept OSError:\n    print('no dnotify')\n")
    result = run(watcher, limits=limits())
    assert not any(w in result.stdout for w in ("INOTIFY", "FANOTIFY", "DNOTIFY")), result.stdout


@contained
def sees_more_than_the_interpreter(tmp: Path) -> None:
    """The program sees the project directory (datasets, answers, other runs), home directories, /var, /sys."""
    probe = ("import json, os\nfound = [p for p in json.loads(os.environ['CANDIDATES']) if os.path.exists(p)]\n"
             "print(json.dumps(found))\n")
    candidates = [str(REPO / "unirl" / "plugins"), str(REPO / "unirl" / "recipe" / "recipes"), str(REPO / "unirl"),
                  "/home", "/var/lib",
                  "/var/tmp", "/opt", "/srv", "/mnt", "/sys/kernel", "/run", "/etc/shadow", "/etc/ssh",
                  "/root/.bash_history", "/work/shared", str(Path.home() / ".ssh")]
    candidates = [c for c in candidates if os.path.exists(c)]
    result = run(probe, env={"CANDIDATES": json.dumps(candidates)}, limits=limits())
    assert result.status == "ok", result.stderr
    assert json.loads(result.stdout) == [], f"visible host paths: {result.stdout}"


@contained
def inherited_descriptors(tmp: Path) -> None:
    """A host descriptor (an O_PATH directory, a pipe) inherited by the program reaches outside its root."""
    probe = ("import json, os\nfound = []\nfor fd in sorted(int(fd) for fd in os.listdir('/proc/self/fd')):\n"
             "    try:\n        found.append(os.readlink(f'/proc/self/fd/{fd}') if fd > 2 else None)\n"
             "    except FileNotFoundError:\n        pass  # the directory listdir had open\n"
             "print(json.dumps([target for target in found if target]))\n")
    result = run(probe, limits=limits())
    assert result.status == "ok", result.stderr
    listed = json.loads(result.stdout)
    assert listed == [], f"inherited descriptors: {listed}"


def _kernel_interface(name: str, source: str, must_fail: str) -> Case:
    @contained
    def check(tmp: Path) -> None:
        result = run(source, limits=limits())
        assert must_fail not in result.stdout, f"{name}: {result.stdout}{result.stderr[-500:]}"

    check.__doc__ = name
    return Case(name, check)


_LIBC = "import ctypes, os, socket\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
KERNEL_INTERFACES = [
    _kernel_interface("mount, pivot_root or a new mount API call", _LIBC + (
        "print('MOUNTED' if libc.mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0 else 'no mount')\n"
        "print('OPEN_TREE' if libc.syscall(ctypes.c_long(428), ctypes.c_long(-100), b'/', ctypes.c_long(1)) >= 0 "
        "else 'no open_tree')\nprint('FSOPEN' if libc.syscall(ctypes.c_long(430), b'tmpfs', ctypes.c_long(0)) >= 0 "
        "else 'no fsopen')\n"), "MOUNTED"),
    _kernel_interface("setns or unshare into new namespaces", _LIBC + (
        "for flags in (0x10000000, 0x40000000, 0x20000, 0x08000000):\n"
        "    if libc.unshare(flags) == 0:\n        print('UNSHARED', hex(flags))\n"
        "fd = os.open('/proc/self/ns/net', os.O_RDONLY)\nprint('SETNS' if libc.setns(fd, 0) == 0 else 'no setns')\n"),
        "UNSHARED"),
    _kernel_interface("clone with CLONE_NEWUSER|CLONE_NEWNET (clone3 too)", _LIBC + (
        "pid = libc.syscall(ctypes.c_long(56), ctypes.c_long(0x10000000 | 0x40000000 | 17), ctypes.c_long(0), "
        "ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))\nif pid == 0:\n    os._exit(0)\n"
        "print('CLONED' if pid > 0 else 'no clone')\n"), "CLONED"),
    _kernel_interface("ptrace or process_vm_readv of another process", _LIBC + (
        "import subprocess, time\nchild = subprocess.Popen(['sleep', '5'])\ntime.sleep(0.1)\n"
        "print('TRACED' if libc.ptrace(16, child.pid, None, None) == 0 else 'no ptrace')\n"
        "print('PIDFD_GETFD' if libc.syscall(ctypes.c_long(438), ctypes.c_long(os.pidfd_open(child.pid)), "
        "ctypes.c_long(0), ctypes.c_long(0)) >= 0 else 'no pidfd_getfd')\nchild.kill()\n"), "TRACED"),
    _kernel_interface("bpf, perf_event_open, userfaultfd", _LIBC + (
        "attr = ctypes.create_string_buffer(128)\n"
        "print('BPF' if libc.syscall(ctypes.c_long(321), ctypes.c_long(0), attr, ctypes.c_long(128)) >= 0 "
        "else 'no bpf')\nprint('PERF' if libc.syscall(ctypes.c_long(298), attr, ctypes.c_long(0), ctypes.c_long(-1),"
        " ctypes.c_long(-1), ctypes.c_long(0)) >= 0 else 'no perf')\n"
        "print('USERFAULTFD' if libc.syscall(ctypes.c_long(323), ctypes.c_long(1)) >= 0 else 'no userfaultfd')\n"),
        "USERFAULTFD"),
    _kernel_interface("io_uring, whose operations bypass seccomp", _LIBC + (
        "params = ctypes.create_string_buffer(120)\n"
        "print('IO_URING' if libc.syscall(ctypes.c_long(425), ctypes.c_long(8), params) >= 0 else 'no io_uring')\n"),
        "IO_URING"),
    _kernel_interface("vsock to the hypervisor", _LIBC + (
        "try:\n    s = socket.socket(40, socket.SOCK_STREAM)\n    print('VSOCK')\nexcept OSError as exc:\n"
        "    print(exc)\n"), "VSOCK"),
    _kernel_interface("clearing the parent-death signal to outlive the host", _LIBC + (
        "print('CLEARED' if libc.prctl(1, 0, 0, 0, 0) == 0 else 'kept')\n"), "CLEARED"),
    _kernel_interface("the host's controlling terminal (TIOCSTI keystroke injection)", (
        "import os\ntry:\n    fd = os.open('/dev/tty', os.O_RDWR)\n    import fcntl, termios\n"
        "    fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n    print('INJECTED')\nexcept OSError as exc:\n    print(exc)\n"),
        "INJECTED"),
    _kernel_interface("kernel module and kexec loading", _LIBC + (
        "print('MODULE' if libc.syscall(ctypes.c_long(313), ctypes.c_long(0), b'', ctypes.c_long(0)) == 0 "
        "else 'no finit_module')\nprint('KEXEC' if libc.syscall(ctypes.c_long(246), ctypes.c_long(0), "
        "ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0)) == 0 else 'no kexec')\n"), "MODULE"),
]


# --- the wall clock under load (the sixth finding) ---------------------------------------------------

_STARVED_HOST = r"""
import json, time
outcomes = {}
for name, source, wall in (("busy", "while True:\n    pass\n", 1.0),
                           ("sleeping", "import time\ntime.sleep(30)\n", 2.0)):
    try:
        wanted = {"wall_seconds": wall, "cpu_seconds": 30, "startup_seconds": 30}
        limits = sb.SandboxLimits(**{k: v for k, v in wanted.items() if k in sb.SandboxLimits.__dataclass_fields__})
        result = sb.run_sandboxed(source, limits=limits)
        outcomes[name] = result.status
    except Exception as exc:
        outcomes[name] = type(exc).__name__
try:
    if not CURRENT:
        raise RuntimeError("code_tests is built on unirl.rewards.sandbox.core")
    import unirl
    from unirl.plugins.builtin_rewards.code_exec import code_tests
    code_tests(unirl.Sample(prompt="", completion="while True:\n    pass\n",
                            metadata={"tests": [{"input": "", "output": "1\n"}]}), timeout_s=1.0)
    outcomes["code_tests"] = "scored"
except Exception as exc:
    outcomes["code_tests"] = type(exc).__name__
print(json.dumps(outcomes))
"""


@contained
def starved_program_scored_as_timeout(tmp: Path) -> None:
    """On an oversubscribed host a program starved of CPU is scored as a timeout instead of an infrastructure error.

    The host process and its sandboxes are pinned to one CPU shared with five busy processes, each in its own
    session (so the scheduler's per-session groups give each an equal share): the program gets a sixth at most.
    A program that sleeps through its limit under the same load must still be a plain timeout.
    """
    cpu = min(os.sched_getaffinity(0))
    competitors = [subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"],
                                    start_new_session=True) for _ in range(5)]
    try:
        probe = host_python(f"os.sched_setaffinity(0, {{{cpu}}})\nCURRENT = {current()}\n" + _STARVED_HOST,
                            timeout=120)
    finally:
        for competitor in competitors:
            competitor.kill()
            competitor.wait()
    assert probe.returncode == 0, probe.stderr[-3000:]
    outcomes = json.loads(probe.stdout.splitlines()[-1])
    assert outcomes["busy"] == "SandboxOverloaded", f"a starved program was scored: {outcomes}"
    assert outcomes["code_tests"] == "SandboxOverloaded", f"code_tests scored a starved program: {outcomes}"
    assert outcomes["sleeping"] == "timeout", f"a sleeping program must stay a timeout: {outcomes}"


@contained
def startup_budget_blown(tmp: Path) -> None:
    """A sandbox that takes longer to start than its start-up budget is scored (a 0) instead of reported."""
    fields = sandbox().SandboxLimits.__dataclass_fields__
    assert "startup_seconds" in fields, "this sandbox has no start-up budget: start-up eats the program's time"
    with pytest.raises(sandbox().SandboxOverloaded, match="start-up budget"):
        run("print(1)", limits=limits(startup_seconds=0.001))


@contained
def host_crash_mid_run(tmp: Path) -> None:
    """The host process is SIGKILLed mid-run: a daemon of the run must not survive it (not even a reparented one)."""
    marker = f"unirl-orphan-{uuid.uuid4().hex}"
    # The marker is spelled backwards in the host's command line, so only the sandboxed process matches.
    runaway = (f"import ctypes, os, sys\nmarker = {marker[::-1]!r}[::-1]\n"
               "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # try to clear the parent-death signal\n"
               "if os.fork() == 0:\n    os.setsid()\n"
               "    os.execv(sys.executable, [sys.executable, '-I', '-c', 'import time; time.sleep(300)', marker])\n"
               "import time\ntime.sleep(300)\n")
    command, environment = host_command(f"sb.run_sandboxed({runaway!r}, limits=sb.SandboxLimits(wall_seconds=60))")
    trainer = subprocess.Popen(command, env=environment)
    try:
        deadline = time.monotonic() + 15
        while not processes_with_marker(marker):
            assert time.monotonic() < deadline and trainer.poll() is None, "the runaway never started"
            time.sleep(0.05)
    finally:
        trainer.kill()  # SIGKILL: no cleanup code of ours runs in the host
        trainer.wait()
    deadline = time.monotonic() + 30  # the daemon would sleep 300 s: gone before this is its dying with the host
    while processes_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes_with_marker(marker) == [], "a daemon of the run outlived its host"


CASES: list[Case] = [
    Case("reads, overwrites and plants host keyring keys (root host)", keyring_as_root),
    Case("reads, overwrites and plants host keyring keys (unprivileged host)", keyring_unprivileged),
    Case("a host keyring secret reaches code_tests info", keyring_through_code_tests),
    Case("keyctl through the 32-bit int 0x80 ABI", keyring_through_int80),
    Case("children together hold 3x memory_mb", memory_across_children),
    Case("memfd pages beyond memory_mb", memory_in_memfd),
    Case("detached System V segments beyond memory_mb", memory_in_sysv_segments),
    Case("own user namespace mounts an uncapped tmpfs", tmpfs_in_own_user_namespace),
    Case("/dev/shm and /tmp beyond disk_mb", dev_shm_beyond_disk_mb),
    Case("fork bomb", fork_bomb),
    Case("connects to a world-writable unix socket on a visible path", unix_socket_on_visible_path),
    Case("AF_UNIX socket with garbage in the high bits of the family", unix_socket_with_high_bits),
    Case("opens ptys in the host's devpts", host_ptys),
    Case("locks a readable host file against host writers", lock_host_file),
    Case("watches host directories (inotify, fanotify, dnotify)", watch_host_directories),
    Case("sees the project directory, homes, /var, /sys", sees_more_than_the_interpreter),
    Case("inherits a host descriptor", inherited_descriptors),
    *KERNEL_INTERFACES,
    Case("a starved program is scored as a timeout", starved_program_scored_as_timeout, marks=("slow",)),
    Case("a blown start-up budget is scored", startup_budget_blown),
    Case("a daemon clears its parent-death signal and outlives a crashed host", host_crash_mid_run),
]
