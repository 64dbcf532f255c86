"""The sandbox as its callers use it: each test checks what a user would notice AND that the host is unharmed.

Every test ends with ``host.assert_back_to_normal()`` (see tests/adversarial/sandbox_programs.py, which also holds
the attacks: keyrings, memory across children and in memfd, own user namespaces, host sockets, ptys, locks and
watches, the allow-listed root, kernel interfaces, a fork bomb, starvation, a crashing host). Limits are short so
the file stays well under 30 s on 2 cores; programs that must run into the wall clock sleep rather than spin, so
a loaded machine cannot turn their timeout into a (correct) report of starvation.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.adversarial.sandbox_programs import (
    REPO,
    SHARED_DIRS,
    HostWatch,
    meminfo_kib,
    processes_with_marker,
)
from unirl.errors import InfrastructureError
from unirl.rewards.sandbox import core as sandbox
from unirl.rewards.sandbox.core import (
    SandboxLimits,
    SandboxUnavailable,
    check_isolation,
    run_sandboxed,
    start_sandboxed,
)

QUICK = SandboxLimits(wall_seconds=1.0, cpu_seconds=5, memory_mb=256, max_processes=16, max_output_bytes=1 << 18)


@pytest.fixture
def host() -> HostWatch:
    return HostWatch()


def test_a_trivial_program_runs_isolated(host: HostWatch) -> None:
    result = run_sandboxed("import sys\nprint(input()[::-1])\nsys.exit(3)", stdin="abc", limits=QUICK)
    assert (result.status, result.exit_code, result.stdout) == ("exit_nonzero", 3, "cba\n")
    isolation = result.isolation
    assert isolation["readonly_root"] is True and isolation["proc"] == "private" and isolation["root"] == "allow-list"
    assert isolation["seccomp"].startswith("deny-list") and isolation["devpts"] == "private"
    assert isolation["cgroup"].startswith(("cgroup v1", "cgroup v2", "none ("))
    assert result.startup_seconds is not None and result.startup_seconds > 0
    report = check_isolation(QUICK)
    assert report.network_interfaces == ("lo",) and report.network_blocked
    assert report.pid_namespace and report.readonly_root and report.private_tmp and report.seccomp
    assert set(report.environment) == {"PATH", "LANG", "HOME", "TMPDIR", "PWD"}  # PWD: bwrap sets it
    # The root holds the interpreter's paths and nothing else of the host.
    tops = {p.strip("/").split("/")[0] for p in isolation["visible"]}
    assert set(report.visible_root) <= tops | {"dev", "proc", "tmp", "etc"}, report.visible_root
    host.assert_back_to_normal()


def test_an_unresponsive_program_is_killed_at_the_wall_clock_limit(host: HostWatch) -> None:
    result = run_sandboxed("import time\ntime.sleep(600)", limits=QUICK)
    assert result.status == "timeout" and "wall-clock" in result.reason
    # The clock starts at exec: the program had its whole second (no start-up eaten), and was then killed: the kill
    # was measured and nothing of the run is left (below). How fast it goes is benchmarks/sandbox.py's to measure:
    # a deadline here fails on a loaded machine with nothing wrong.
    assert result.wall_seconds >= QUICK.wall_seconds
    assert result.kill_seconds is not None
    host.assert_back_to_normal()


def test_the_cpu_limit_stops_a_busy_program_before_the_wall_clock(host: HostWatch) -> None:
    result = run_sandboxed("while True:\n    pass", limits=SandboxLimits(cpu_seconds=1, wall_seconds=30))
    assert result.status == "timeout" and "CPU" in result.reason
    assert result.cpu_seconds is not None and result.cpu_seconds >= 0.9
    host.assert_back_to_normal()


def test_a_memory_bomb_hits_the_memory_limit(host: HostWatch) -> None:
    hog = "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n"
    result = run_sandboxed(hog, limits=SandboxLimits(memory_mb=128, wall_seconds=5))
    assert result.status == "memory" and "128 MB" in result.reason
    if result.memory_peak_mb is not None:  # with a memory cgroup: the run as a whole stayed under its limit
        assert result.memory_peak_mb <= 128
    host.assert_back_to_normal()


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_gigabytes_of_output_are_capped(host: HostWatch, stream: str) -> None:
    flood = f"import sys\nchunk = b'x' * (1 << 20)\nfor _ in range(4096):\n    sys.{stream}.buffer.write(chunk)\n"
    result = run_sandboxed(flood, limits=SandboxLimits(wall_seconds=30, max_output_bytes=1 << 18))
    assert result.status == "output_limit" and stream in result.reason
    assert len(getattr(result, stream)) == 1 << 18
    assert getattr(result, f"{stream}_truncated")  # and killed at the cap: the status is not the wall-clock timeout
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
print(sorted(name for _, name in socket.if_nameindex()))
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
    tcp_outcome, unix_outcome, interfaces = result.stdout.splitlines()
    # The run's own loopback refuses (nothing listens there); the host's is another namespace.
    assert tcp_outcome == "Connection refused" and unix_outcome != "connected"
    assert interfaces == "['lo']"
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


def test_files_shown_read_only_cannot_be_written_or_deleted(host: HostWatch, tmp_path: Path) -> None:
    # A world-writable directory outside /tmp, and the test's own (under a 0700 pytest directory): both shown to
    # the program with readonly_paths, so only the read-only mount stands between them and the program.
    shared = Path("/var/tmp") / f"unirl-test-{uuid.uuid4().hex}"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    tmp_path.chmod(0o755)
    victims = [shared / "keep.txt", tmp_path / "keep.txt"]
    for victim in victims:
        victim.write_text("precious")
        victim.chmod(0o666)
    host.entries = {d: set(os.listdir(d)) for d in SHARED_DIRS}  # the directory above is ours, not a leak
    attack = f"""
import os, shutil
for victim in {[str(v) for v in victims]!r}:
    print("read", open(victim).read())
    for action in (os.remove, lambda p: open(p, "w").write("pwned"), lambda p: os.rename(p, p + ".moved"),
                   lambda p: shutil.rmtree(os.path.dirname(p)), lambda p: open(p + ".new", "w").write("x"),
                   lambda p: os.chmod(p, 0o777)):
        try:
            action(victim)
            print("succeeded against", victim)
        except OSError as exc:
            print(exc.strerror)
open("scratch.txt", "w").write("the working directory is writable")
print(os.getcwd(), sorted(os.listdir(".")))
"""
    try:
        result = run_sandboxed(attack, limits=QUICK, readonly_paths=[shared, tmp_path])
        assert result.status == "ok", result.stderr
        assert result.stdout.count("read precious") == 2, "readonly_paths did not show the files"
        assert "succeeded against" not in result.stdout
        # the interpreter's own directory shows up too when it lives under /tmp (a CI checkout), read-only; so do
        # readonly paths under /tmp, like the test's own directory
        listed = result.stdout.splitlines()[-1]
        extra = {*sandbox._bound_into("/tmp"), str(tmp_path).split("/")[2]}
        assert listed == f"/tmp {sorted(['main.py', 'scratch.txt', *extra])}"
        for victim in victims:
            assert victim.read_text() == "precious"
            assert stat.S_IMODE(victim.stat().st_mode) == 0o666
            assert sorted(p.name for p in victim.parent.iterdir()) == ["keep.txt"]
    finally:
        for victim in victims:
            victim.unlink()
        shared.rmdir()
    host.assert_back_to_normal()


def test_readonly_paths_the_sandbox_cannot_read_are_refused(host: HostWatch, tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    if os.geteuid() == 0:  # a stranger uid runs the program: a 0700 directory is unreadable to it
        with pytest.raises(SandboxUnavailable, match="not readable by other users"):
            run_sandboxed("print(1)", readonly_paths=[private], limits=QUICK)
    for forbidden in ("/", "/proc/self", "/tmp", str(tmp_path / "missing")):
        with pytest.raises(ValueError, match="readonly_paths"):
            run_sandboxed("print(1)", readonly_paths=[forbidden], limits=QUICK)
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


@pytest.mark.parametrize("main_waits", [False, True], ids=["program-exits", "program-times-out"])
def test_a_setsid_double_forked_daemon_dies_with_the_run(host: HostWatch, main_waits: bool) -> None:
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
while {main_waits}:
    time.sleep(1)
"""
    result = run_sandboxed(daemon, limits=QUICK)
    assert result.stdout == "daemon alive\n"
    assert result.status == ("timeout" if main_waits else "ok")
    assert processes_with_marker(marker) == []
    host.assert_back_to_normal()


def test_a_session_relays_requests_and_replies_and_caps_them(host: HostWatch) -> None:
    echo = ("import os\nrequests, replies = map(int, os.environ['UNIRL_SANDBOX_CHANNEL'].split())\n"
            "print('stdout stays separate', flush=True)\n"
            "for line in os.fdopen(requests, 'rb'):\n    os.write(replies, line.upper())\n"
            "    if line.startswith(b'flood'):\n        os.write(replies, b'x' * (1 << 20))\n")
    with start_sandboxed(echo, limits=QUICK) as session:
        assert session.send(b"hello\n") and session.receive_line(1024) == b"HELLO"
        assert session.send(b"again\n") and session.receive_line(1024) == b"AGAIN"
        result = session.finish()  # end of input: the server's loop ends, the program exits
    assert (result.status, result.stdout) == ("ok", "stdout stays separate\n")
    with start_sandboxed(echo, limits=QUICK) as session:
        assert session.send(b"flood\n") and session.receive_line(1024) == b"FLOOD"
        assert session.receive_line(4096) is None  # a reply longer than the cap kills the run
        assert not session.send(b"more\n")
        flooded = session.finish()
    assert flooded.status == "output_limit" and "reply" in flooded.reason
    host.assert_back_to_normal()


def test_a_missing_bubblewrap_is_refused_naming_the_fix() -> None:
    if os.geteuid() != 0:
        pytest.skip("hiding /usr/bin/bwrap needs a private mount namespace (root)")
    code = "import unirl.rewards.sandbox.core as s\ns.run_sandboxed('print(1)')"
    hide = f"mount --bind /dev/null $(command -v bwrap) && exec {sys.executable} -c \"{code}\""
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", hide],
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0
    assert "SandboxUnavailable" in probe.stderr and "apt-get install bubblewrap" in probe.stderr


def test_disabled_user_namespaces_are_refused_naming_the_fix() -> None:
    # A user namespace (ours, mapping root and nobody) with max_user_namespaces = 0: for nobody inside, user
    # namespaces are off, exactly as on a host with kernel.unprivileged_userns_clone=0.
    site = next((p for p in sys.path if p.endswith("site-packages") and p.startswith(sys.prefix)), None)
    if os.geteuid() != 0 or site is None or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root and a system Python an unprivileged user can run")
    attempt = "import unirl.rewards.sandbox.core as s; s.run_sandboxed('print(1)')"
    inner = (f"read go; exec sh -c \"echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --reuid=65534 "
             f"--regid=65534 --clear-groups env PYTHONPATH={REPO}:{site} /usr/bin/python3 -c \\\"{attempt}\\\"\"")
    # The second sh runs as the mapped root, with capabilities in the namespace; the first exec'd before the maps.
    holder = subprocess.Popen(["unshare", "--user", "sh", "-c", inner], stdin=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{holder.pid}/ns/user") == os.readlink("/proc/self/ns/user"):
            assert time.monotonic() < deadline, "unshare never created its user namespace"
            time.sleep(0.01)
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{holder.pid}/{name}").write_text("0 0 1\n65534 65534 1\n")
        _, stderr = holder.communicate("go\n", timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert "SandboxUnavailable" in stderr and "user namespaces are disabled" in stderr, stderr[-2000:]
    assert "max_user_namespaces" in stderr


def test_root_without_a_spare_uid_is_refused_not_run_unisolated() -> None:
    # Root of a user namespace that maps only itself (a rootless container) has no unprivileged uid.
    # The reward does not turn that into a score: SandboxUnavailable reaches the caller.
    code = ("import unirl\nfrom unirl.plugins.builtin_rewards.code_exec import code_tests\n"
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
    memfd = ("import os\ntry:\n    os.memfd_create('x')\n    print('memfd')\n"
             "except OSError as exc:\n    print(exc.strerror)")
    code = f"""
import json
from unirl.rewards.sandbox.core import SandboxLimits, check_isolation, run_sandboxed
report = check_isolation()
result = run_sandboxed({forks!r}, limits=SandboxLimits(max_processes=8, wall_seconds=5))
denied = run_sandboxed({memfd!r})
print(json.dumps({{"mode": report.mode, "uid": report.uid, "readonly": report.readonly_root, "forks": result.stdout,
                  "cgroup": result.isolation["cgroup"], "memfd": denied.stdout.strip(), "seccomp": report.seccomp}}))
"""
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", system_python, "-c", code],
                           capture_output=True, text=True, timeout=60, env={"PYTHONPATH": f"{REPO}:{site}"}, cwd="/")
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert (seen["mode"], seen["uid"], seen["readonly"], seen["seccomp"]) == ("userns", 65534, True, True)
    assert int(seen["forks"]) < 8  # the program itself counts, so fewer than 8 children
    if seen["cgroup"].startswith("none"):  # nobody cannot create cgroups here: per-process limits, memfd denied
        assert seen["memfd"] == "Operation not permitted", seen
    host.assert_back_to_normal()


def test_without_a_cgroup_runs_go_on_with_per_process_limits_and_say_so(host: HostWatch) -> None:
    # UNIRL_SANDBOX_CGROUP naming no usable cgroup v2 directory: the same as a machine without delegated cgroups.
    code = """
import json
from unirl.rewards.sandbox.core import SandboxLimits, run_sandboxed
hog = run_sandboxed("chunks = []\\nwhile True:\\n    chunks.append(bytearray(16 << 20))",
                    limits=SandboxLimits(memory_mb=128))
memfd = run_sandboxed("import os\\ntry:\\n    os.memfd_create('x')\\n    print('memfd')\\nexcept OSError as exc:\\n"
                      "    print(exc.strerror)")
print(json.dumps({"hog": hog.status, "memfd": memfd.stdout.strip(), "cgroup": memfd.isolation["cgroup"],
                  "peak": memfd.memory_peak_mb}))
"""
    probe = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "UNIRL_SANDBOX_CGROUP": "/nonexistent"})
    assert probe.returncode == 0, probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["cgroup"].startswith("none (UNIRL_SANDBOX_CGROUP=/nonexistent is not") and "RLIMIT_AS" in seen["cgroup"]
    assert (seen["hog"], seen["memfd"], seen["peak"]) == ("memory", "Operation not permitted", None)
    host.assert_back_to_normal()


def test_the_sandbox_module_is_what_code_tests_runs_on() -> None:
    # code_tests builds on the public API only (a refactor of the sandbox must keep it).
    assert {"run_sandboxed", "start_sandboxed", "SandboxLimits", "SandboxResult", "SandboxUnavailable",
            "SandboxOverloaded", "check_isolation", "IsolationReport"} <= set(dir(sandbox))
    assert issubclass(sandbox.SandboxOverloaded, InfrastructureError)
    assert issubclass(sandbox.SandboxUnavailable, InfrastructureError)
