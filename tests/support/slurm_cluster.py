"""The ``slurm_cluster`` fixture: a Slurm that answers for the test session (shared by every slurm test)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.helpers import REPO, missing

SLURM_SCRIPT = REPO / "scripts" / "slurm_local.sh"


def _sinfo_answers() -> bool:
    if shutil.which("sinfo") is None:
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=15).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _default_partition() -> str:
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=15).stdout.split()
    return next((p.rstrip("*") for p in out if p.endswith("*")), out[0].rstrip("*") if out else "")


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Slurm that answers: the one already running, else a private one for this session. Yields the partition."""
    if _sinfo_answers():
        yield _default_partition()
        return
    absent = [tool for tool in ("sbatch", "sinfo") if shutil.which(tool) is None]
    absent += [daemon for daemon in ("slurmctld", "slurmd", "munged")
               if shutil.which(daemon) is None and not Path("/usr/sbin", daemon).exists()]
    if absent:
        missing(f"Slurm is not installed ({', '.join(absent)} missing): apt-get install -y "
                "--no-install-recommends slurmctld slurmd slurm-client munge")
    state_dir = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "UNIRL_SLURM_DIR": str(state_dir)}
    started = subprocess.run(["bash", str(SLURM_SCRIPT), "start"], capture_output=True, text=True, env=env,
                             timeout=120)
    if started.returncode != 0:
        pytest.fail(f"scripts/slurm_local.sh start failed:\n{started.stdout}\n{started.stderr}")
    saved_conf = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(state_dir / "slurm.conf")  # clients (sbatch, squeue) find the private cluster
    try:
        yield started.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop"], capture_output=True, env=env, timeout=120)
        if saved_conf is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved_conf


