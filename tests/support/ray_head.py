"""A private Ray head on loopback for tests and benchmarks: own temp dir, own ports, stopped by its PID.

Never ``ray stop``: it kills every Ray process on the machine (research infra.md §1.4). ``ray start --block``
puts the head in its own process group and reaps it on SIGTERM; leftovers are found by the unique temp dir in
their command line, so only processes this head started are ever signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",  # loopback only; an unset mode turns on token auth once ~/.ray/auth_token exists
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # keeps the node IP at 127.0.0.1 instead of eth0
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RayHead:
    def __init__(self, num_cpus: int = 2) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="unirl-ray-", dir="/tmp")  # short: Ray's socket paths are limited
        self.port, self.dashboard_port = free_port(), free_port()
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        ray = Path(sys.executable).parent / "ray"
        self.command = [str(ray), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
                        f"--port={self.port}", "--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}",
                        f"--dashboard-agent-listen-port={free_port()}", f"--ray-client-server-port={free_port()}",
                        f"--num-cpus={num_cpus}", "--num-gpus=0", "--include-dashboard=true",
                        "--disable-usage-stats", f"--temp-dir={self.temp_dir}", "--object-store-memory=536870912"]
        self.log = Path(self.temp_dir) / "head.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> RayHead:
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **RAY_ENV})
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                JobSubmissionClient(self.address).list_jobs()
                return self
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise
                time.sleep(1.0)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pid in leftover_pids(self.temp_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def leftover_pids(marker: str) -> list[int]:
    """Processes whose command line names this head's temp dir: started by it, nothing else."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(int(entry.name))
    return found
