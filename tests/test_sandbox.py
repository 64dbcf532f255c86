"""Adversarial corpus for the sandbox: each case checks what a user would notice AND that the host is unharmed.

Every test ends with ``host.assert_back_to_normal()``: no process of the run survives (none in a foreign
PID namespace, none with a sandbox uid, no child of ours), the host mount table is unchanged, nothing new
appeared in the host's /tmp, /var/tmp or /dev/shm from a sandbox uid, host memory is where it was, and the
host can still fork. Limits are short so the whole file stays well under 30 s on 2 cores.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from unirl_rewards.code_exec import code_tests

import unirl
from unirl import sandbox
from unirl.plugins import get_host
from unirl.sandbox import SANDBOX_UID_BASE, SandboxLimits, check_isolation, run_sandboxed

QUICK = SandboxLimits(wall_seconds=1.0, cpu_seconds=5, memory_mb=256, max_processes=16, max_output_bytes=1 << 18)
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


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
    """Live host processes in a PID namespace other than ours, or running as a sandbox uid.

    Zombies are dead (no memory, no code): when the host itself is killed, the namespace's init is
    reparented to the machine's PID 1 and waits there to be reaped.
    """
    own = os.readlink("/proc/self/ns/pid")
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            foreign = os.readlink(f"/proc/{pid}/ns/pid") != own
        except OSError:
            continue
        status = process_status(pid)
        if not status or status["State"].startswith("Z"):
            continue
        if foreign or int(status["Uid"].split()[0]) >= SANDBOX_UID_BASE:
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


@dataclass
class HostWatch:
    """A snapshot of the host before a run, and the checks that it is back to that state after."""

    processes: set[int] = field(default_factory=sandbox_processes)
    mounts: str = field(default_factory=lambda: Path("/proc/self/mountinfo").read_text())
    entries: dict[str, set[str]] = field(
        default_factory=lambda: {d: set(os.listdir(d)) for d in SHARED_DIRS if os.path.isdir(d)})
    available_kib: int = field(default_factory=lambda: meminfo_kib("MemAvailable"))
    rss: int = field(default_factory=lambda: psutil.Process().memory_info().rss)

    def assert_back_to_normal(self) -> None:
        assert sandbox_processes() - self.processes == set(), "a sandbox process survived the run"
        assert psutil.Process().children(recursive=True) == []
        assert Path("/proc/self/mountinfo").read_text() == self.mounts, "the host mount table changed"
        for directory, before in self.entries.items():
            for name in set(os.listdir(directory)) - before:
                # These directories are shared with the rest of the machine (other jobs write there too);
                # anything owned by a sandbox uid is a leak.
                owner = os.lstat(os.path.join(directory, name)).st_uid
                assert owner < SANDBOX_UID_BASE, f"the sandbox left {directory}/{name} behind (uid {owner})"
        assert self.available_kib - meminfo_kib("MemAvailable") < 256 << 10
        assert psutil.Process().memory_info().rss - self.rss < 64 << 20
        assert subprocess.run(["true"]).returncode == 0  # the host can still fork and exec


@pytest.fixture
def host() -> HostWatch:
    return HostWatch()


def test_a_trivial_program_runs_isolated(host: HostWatch) -> None:
    result = run_sandboxed("import sys\nprint(input()[::-1])\nsys.exit(3)", stdin="abc", limits=QUICK)
    assert (result.status, result.exit_code, result.stdout) == ("exit_nonzero", 3, "cba\n")
    assert result.isolation["readonly_root"] is True and result.isolation["proc"] == "private"
    report = check_isolation(QUICK)
    assert report.network_interfaces == ("lo",) and report.network_blocked
    assert report.pid_namespace and report.readonly_root and report.private_tmp
    assert set(report.environment) == {"PATH", "LANG", "HOME", "TMPDIR"}
    host.assert_back_to_normal()


def test_an_infinite_loop_is_killed_at_the_wall_clock_limit(host: HostWatch) -> None:
    result = run_sandboxed("while True:\n    pass", limits=QUICK)
    assert result.status == "timeout" and "wall-clock" in result.reason
    assert result.wall_seconds < QUICK.wall_seconds + 0.5
    assert result.kill_seconds is not None and result.kill_seconds < 0.5
    host.assert_back_to_normal()


def test_the_cpu_limit_stops_a_busy_program_before_the_wall_clock(host: HostWatch) -> None:
    result = run_sandboxed("while True:\n    pass", limits=SandboxLimits(cpu_seconds=1, wall_seconds=10))
    assert result.status == "timeout" and "CPU" in result.reason
    assert result.wall_seconds < 3
    host.assert_back_to_normal()


def test_a_fork_bomb_is_contained_and_the_host_can_still_fork(host: HostWatch) -> None:
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    peak, host_forks = 0, []

    def watch() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, len(sandbox_processes() - host.processes))
            host_forks.append(subprocess.run(["true"]).returncode)
            time.sleep(0.05)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run_sandboxed(bomb, limits=SandboxLimits(wall_seconds=1.5, max_processes=16))
    finally:
        done.set()
        watcher.join()
    assert result.status == "timeout"
    assert 1 < peak <= 16 + 1, f"{peak} sandbox processes at once (limit 16, plus the namespace's init)"
    assert host_forks and set(host_forks) == {0}
    host.assert_back_to_normal()


def test_a_memory_bomb_hits_the_memory_limit(host: HostWatch) -> None:
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n"
    result = run_sandboxed(hog, limits=SandboxLimits(memory_mb=128, wall_seconds=5))
    assert result.status == "memory" and "128 MB" in result.reason
    host.assert_back_to_normal()


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_gigabytes_of_output_are_capped(host: HostWatch, stream: str) -> None:
    flood = f"import sys\nchunk = b'x' * (1 << 20)\nfor _ in range(4096):\n    sys.{stream}.buffer.write(chunk)\n"
    started = time.monotonic()
    result = run_sandboxed(flood, limits=QUICK)
    assert result.status == "output_limit" and stream in result.reason
    assert len(getattr(result, stream)) == QUICK.max_output_bytes
    assert getattr(result, f"{stream}_truncated")
    assert time.monotonic() - started < QUICK.wall_seconds  # killed at the cap, not at the timeout
    host.assert_back_to_normal()


def test_no_network_connection_reaches_the_host(host: HostWatch) -> None:
    tcp = socket.create_server(("127.0.0.1", 0))
    tcp.setblocking(False)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract_name = f"\0unirl-test-{uuid.uuid4().hex}"
    abstract.bind(abstract_name)
    abstract.listen()
    abstract.setblocking(False)
    port = tcp.getsockname()[1]
    attempt = f"""
import socket
def attempt(family, address):
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            s.connect(address)
        return "connected"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
print(attempt(socket.AF_INET, ("127.0.0.1", {port})))
print(attempt(socket.AF_UNIX, {abstract_name!r}))
"""
    try:
        result = run_sandboxed(attempt, limits=QUICK)
        for listener in (tcp, abstract):
            with pytest.raises(BlockingIOError):
                listener.accept()  # nothing ever arrived
    finally:
        tcp.close()
        abstract.close()
    assert result.status == "ok", result.stderr
    assert "connected" not in result.stdout
    assert result.stdout.splitlines()[0] == "Network is unreachable"
    host.assert_back_to_normal()


def test_secrets_in_the_host_environment_are_not_visible(host: HostWatch, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"hunter2-{uuid.uuid4().hex}"
    monkeypatch.setenv("UNIRL_TEST_SECRET", secret)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    snoop = """
import os
print(dict(os.environ))
for pid in os.listdir("/proc"):
    for name in ("environ", "cmdline"):
        try:
            print(open(f"/proc/{pid}/{name}", "rb").read())
        except OSError:
            pass
"""
    result = run_sandboxed(snoop, limits=QUICK)
    assert result.status == "ok", result.stderr
    assert secret not in result.stdout + result.stderr
    assert "UNIRL_TEST_SECRET" not in result.stdout
    host.assert_back_to_normal()


def test_files_outside_the_working_directory_cannot_be_written_or_deleted(host: HostWatch, tmp_path: Path) -> None:
    # A world-writable directory outside /tmp: only the read-only root stands between it and the program.
    shared = Path("/var/tmp") / f"unirl-test-{uuid.uuid4().hex}"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    victims = [shared / "keep.txt", tmp_path / "keep.txt"]
    for victim in victims:
        victim.write_text("precious")
        victim.chmod(0o666)
    host.entries = {d: set(os.listdir(d)) for d in SHARED_DIRS}  # the directory above is ours, not a leak
    attack = f"""
import os, shutil
for victim in {[str(v) for v in victims]!r}:
    for action in (os.remove, lambda p: open(p, "w").write("pwned"), lambda p: os.rename(p, p + ".moved"),
                   lambda p: shutil.rmtree(os.path.dirname(p)), lambda p: open(p + ".new", "w").write("x")):
        try:
            action(victim)
            print("succeeded against", victim)
        except OSError as exc:
            print(exc.strerror)
open("scratch.txt", "w").write("the working directory is writable")
print(os.getcwd(), sorted(os.listdir(".")))
"""
    try:
        result = run_sandboxed(attack, limits=QUICK)
        assert result.status == "ok", result.stderr
        assert "succeeded against /var/tmp" not in result.stdout
        assert f"succeeded against {tmp_path}" not in result.stdout
        # the interpreter's own directory shows up too when it lives under /tmp (a CI checkout), read-only
        listed = result.stdout.splitlines()[-1]
        assert listed == f"/tmp {sorted(['main.py', 'scratch.txt', *sandbox._bound_into('/tmp')])}"
        for victim in victims:
            assert victim.read_text() == "precious"
            assert sorted(p.name for p in victim.parent.iterdir()) == ["keep.txt"]
    finally:
        for victim in victims:
            victim.unlink()
        shared.rmdir()
    host.assert_back_to_normal()


def test_the_private_working_directory_is_freed_after_the_run(host: HostWatch) -> None:
    fill = "data = b'x' * (1 << 20)\nfor i in range(40):\n    open(f'blob{i}', 'wb').write(data)\nprint('filled')\n"
    shmem_before = meminfo_kib("Shmem")  # tmpfs pages are counted here while they exist
    result = run_sandboxed(fill, limits=SandboxLimits(wall_seconds=5, disk_mb=64))
    assert (result.status, result.stdout) == ("ok", "filled\n")
    assert meminfo_kib("Shmem") - shmem_before < 16 << 10, "the run's 40 MB working directory outlived it"
    overflow = run_sandboxed(fill, limits=SandboxLimits(wall_seconds=5, disk_mb=8))
    assert overflow.status == "exit_nonzero" and "No space left on device" in overflow.stderr
    host.assert_back_to_normal()


@pytest.mark.parametrize("main_loops", [False, True], ids=["program-exits", "program-times-out"])
def test_a_setsid_double_forked_daemon_dies_with_the_run(host: HostWatch, main_loops: bool) -> None:
    marker = f"unirl-daemon-{uuid.uuid4().hex}"
    daemon = f"""
import os, sys, time
read, write = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(write, str(os.getpid()).encode())
        os.execv(sys.executable, [sys.executable, "-I", "-c", "import time; time.sleep(300)", {marker!r}])
    os._exit(0)
os.close(write)
pid = int(os.read(read, 32))
time.sleep(0.2)
os.kill(pid, 0)
print("daemon alive", flush=True)
while {main_loops}:
    pass
"""
    result = run_sandboxed(daemon, limits=QUICK)
    assert result.stdout == "daemon alive\n"
    assert result.status == ("timeout" if main_loops else "ok")
    assert processes_with_marker(marker) == []
    host.assert_back_to_normal()


def test_a_crashing_host_takes_the_whole_run_with_it(host: HostWatch) -> None:
    marker = f"unirl-orphan-{uuid.uuid4().hex}"
    # The marker is spelled backwards in the host's command line, so only the sandboxed process matches.
    runaway = (f"import os, sys\nmarker = {marker[::-1]!r}[::-1]\nif os.fork() == 0:\n    os.setsid()\n"
               "    os.execv(sys.executable, [sys.executable, '-I', '-c', 'while True: pass', marker])\n"
               "while True:\n    pass\n")
    code = f"from unirl.sandbox import SandboxLimits, run_sandboxed\nrun_sandboxed({runaway!r}, " \
           "limits=SandboxLimits(wall_seconds=60))"
    trainer = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while not processes_with_marker(marker):
            assert time.monotonic() < deadline and trainer.poll() is None, "the runaway never started"
            time.sleep(0.05)
    finally:
        trainer.kill()  # SIGKILL: no cleanup code of ours runs in the host
        trainer.wait()
    # The death signals travel host -> supervisor -> init -> the namespace: a few milliseconds.
    deadline = time.monotonic() + 2
    while (processes_with_marker(marker) or sandbox_processes() - host.processes) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes_with_marker(marker) == []
    host.assert_back_to_normal()


def test_root_without_a_spare_uid_is_refused_not_run_unisolated() -> None:
    # Root of a user namespace that maps only itself (a rootless container) has no unprivileged uid.
    # The reward does not turn that into a score: SandboxUnavailable reaches the caller.
    code = ("import unirl\nfrom unirl_rewards.code_exec import code_tests\n"
            "code_tests(unirl.Sample(prompt='', completion='print(1)', metadata={'tests': []}, reference='assert 1'))")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c", code],
                           capture_output=True, text=True, timeout=30)
    if "unshare failed" in probe.stderr:
        pytest.skip("this machine does not allow user namespaces at all")
    assert probe.returncode != 0
    assert "SandboxUnavailable" in probe.stderr and "does not map uid" in probe.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the suite already runs unprivileged: the other tests cover it")
def test_an_unprivileged_caller_gets_a_user_namespace(host: HostWatch) -> None:
    # The venv's interpreter may sit under /root; the system one is reachable by nobody.
    system_python = "/usr/bin/python3"
    site = next((p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix)), None)
    version = subprocess.run([system_python, "-c", "import sys; print(sys.version_info[:2])"],
                             capture_output=True, text=True).stdout.strip() if os.path.exists(system_python) else ""
    if site is None or version != str(sys.version_info[:2]):
        pytest.skip("needs a system Python of the same version that an unprivileged user can run")
    forks = ("import os, time\nn = 0\nfor _ in range(40):\n    try:\n        if os.fork() == 0:\n"
             "            time.sleep(1)\n            os._exit(0)\n        n += 1\n"
             "    except OSError:\n        break\nprint(n)")
    code = f"""
import json
from unirl.sandbox import SandboxLimits, check_isolation, run_sandboxed
report = check_isolation()
result = run_sandboxed({forks!r}, limits=SandboxLimits(max_processes=8, wall_seconds=5))
print(json.dumps({{"mode": report.mode, "uid": report.uid, "readonly": report.readonly_root, "forks": result.stdout}}))
"""
    repo = str(Path(unirl.__file__).parent.parent)
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", system_python, "-c", code],
                           capture_output=True, text=True, timeout=30, env={"PYTHONPATH": f"{repo}:{site}"}, cwd="/")
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert (seen["mode"], seen["uid"], seen["readonly"]) == ("userns", 65534, True)
    assert int(seen["forks"]) < 8  # the program itself counts, so fewer than 8 children
    host.assert_back_to_normal()


# --- the code_tests reward on top of the sandbox -----------------------------------------------------------

ADDITION = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"},
            {"input": "-4 1\n", "output": "-3\n"}, {"input": "0 0\n", "output": "0\n"}]


def score(completion: str, reference: str | None = None, **kwargs: float) -> unirl.RewardResult:
    sample = unirl.Sample(prompt="add two numbers", completion=completion, reference=reference,
                          metadata={"tests": ADDITION} if reference is None else {})
    return code_tests(sample, **{"timeout_s": 1.0, **kwargs})


def test_code_tests_scores_correct_wrong_and_partial_programs(host: HostWatch) -> None:
    correct = score("Here you go:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\nDone.")
    assert correct.score == 1.0
    assert correct.components == {"compiled": 1.0, "passed_fraction": 1.0, "timed_out": 0.0}
    wrong = score("```python\nprint(42)\n```")
    assert wrong.score == 0.0 and wrong.info["reason"] == "wrong answer on test 0"
    partial = score("```python\na, b = map(int, input().split())\nprint(a + b if a > 0 else 0)\n```")
    assert partial.score == 0.75 and partial.info["verdicts"] == ["pass", "pass", "wrong_answer", "pass"]
    broken = score("```python\ndef f(:\n```")
    assert broken.score == 0.0 and broken.components["compiled"] == 0.0
    assert "SyntaxError" in broken.info["reason"]
    host.assert_back_to_normal()


def test_code_tests_scores_an_infinite_loop_zero_with_the_reason(host: HostWatch) -> None:
    looping = score("```python\nwhile True:\n    pass\n```")
    assert looping.score == 0.0 and looping.components["timed_out"] == 1.0
    assert looping.info["status"] == "timeout" and "timeout" in looping.info["reason"]
    assert looping.info["verdicts"] == ["timeout", "not_run", "not_run", "not_run"]  # one timeout, not four
    host.assert_back_to_normal()


def test_code_tests_runs_assert_style_references(host: HostWatch) -> None:
    reference = "assert add(1, 2) == 3\nassert add(2, 2) == 4\nimport math\nassert add(-1, 1) == 0\n"
    assert score("def add(a, b):\n    return a + b", reference).score == 1.0
    assert score("def add(a, b):\n    return 3", reference).score == pytest.approx(1 / 3)
    # Exiting early, or printing look-alike result lines, passes nothing.
    cheat = score("import sys\nprint('pass 0')\nprint('x pass 1')\nsys.exit(0)", reference)
    assert cheat.score == 0.0
    host.assert_back_to_normal()


def test_code_tests_is_registered_and_raises_when_there_is_nothing_to_test() -> None:
    assert get_host().rewards.get("code_tests") is code_tests
    with pytest.raises(ValueError, match="needs"):
        code_tests(unirl.Sample(prompt="", completion="print(1)", reference="42"))
