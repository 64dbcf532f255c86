"""scheduler=ray against a real Ray head on loopback (started by the fixture, stopped by its PID): the embedded
default runs as a Ray job with its logs streamed and its state recorded; `unirl stop` stops a job that was submitted
without waiting; an address nothing answers on is a clear error before anything is written."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import read_jsonl, require_module, run_dirs
from tests.support.ray_head import RAY_ENV, RayHead, free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]
SHORT = ["algorithm.steps=3", "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=4",
         "eval.before_training=false", "logging.progress=false"]


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    require_module("ray.job_submission", "pip install -e '.[ray,sweep]'")
    head = RayHead().start()
    try:
        yield head
    finally:
        head.stop()


def test_the_embedded_default_runs_as_a_ray_job(ray_head: RayHead, isolated: Path) -> None:
    out = run_cli("scheduler=ray", f"scheduler.address={ray_head.address}", *SHORT, env=RAY_ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    job = json.loads((run_dir / "job.json").read_text())
    assert job["scheduler"] == "ray" and job["job_id"].startswith("unirl-") and job["state"] == "completed"
    assert [h["state"] for h in job["history"]][-1] == "completed"
    assert "unirl.plugins.trl.runner" in job["submitted"]["entrypoint"]
    assert json.loads((run_dir / "summary.json").read_text())["state"] == "completed"
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_head.address)
    assert (run_dir / "backend.log").read_text() == client.get_job_logs(job["job_id"])  # every line was streamed
    info = client.get_job_info(job["job_id"])
    assert str(info.status).endswith("SUCCEEDED") and info.metadata["unirl_run_dir"] == str(run_dir)


@pytest.mark.train
def test_two_gloo_processes_train_as_one_ray_job(ray_head: RayHead, isolated: Path) -> None:
    """The job's entrypoint is the plan's torchrun command: both ranks run in the job, rank 0 writes the record."""
    out = run_cli("scheduler=ray", f"scheduler.address={ray_head.address}", *SHORT, "resources.cpu_processes=2",
                  "logging.trajectories_every=1", env=RAY_ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    job = json.loads((run_dir / "job.json").read_text())
    assert job["state"] == "completed"
    assert "-m torch.distributed.run --nnodes 1 --nproc_per_node 2 --standalone" in job["submitted"]["entrypoint"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["processes"] == 2 and summary["completions"] == 3 * 2 * 4
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert len(read_jsonl(run_dir / "trajectories.jsonl")) == 3 * 2 * 4


@pytest.mark.train
def test_two_nodes_as_a_ray_job_start_one_torchrun_per_placement_bundle(ray_head: RayHead, isolated: Path) -> None:
    """resources.nodes=2: the job's driver (unirl.plugins.ray.torchrun_nodes) reserves one bundle per node and runs a
    torchrun in each, meeting at the first bundle's node; PACK lets both bundles share this one-node head."""
    out = run_cli("scheduler=ray", f"scheduler.address={ray_head.address}", "scheduler.node_strategy=PACK", *SHORT,
                  "resources.nodes=2", "logging.trajectories_every=1", env=RAY_ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    job = json.loads((run_dir / "job.json").read_text())
    assert job["state"] == "completed"
    assert "-m unirl.plugins.ray.torchrun_nodes --nodes 2 --gpus-per-node 0 --strategy PACK --" in \
        job["submitted"]["entrypoint"]
    log = (run_dir / "backend.log").read_text()
    assert "torchrun(s) meeting at" in log and "torchrun exit statuses per node: [0, 0]" in log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["processes"] == 2
    assert len(read_jsonl(run_dir / "trajectories.jsonl")) == 3 * 2 * 4
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]


def test_unirl_stop_stops_a_submitted_ray_job(ray_head: RayHead, isolated: Path) -> None:
    out = run_cli("scheduler=ray", f"scheduler.address={ray_head.address}", "scheduler.wait=false",
                  "algorithm.steps=100000", "eval.before_training=false", "logging.progress=false", env=RAY_ENV)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = [p.parent for p in (isolated / "runs").rglob("job.json")]  # the job may not have started yet
    job = json.loads((run_dir / "job.json").read_text())
    assert job["state"] == "submitted" and "unirl stop" in out.stdout
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(ray_head.address)
    deadline = time.monotonic() + 120
    while not str(client.get_job_status(job["job_id"])).endswith("RUNNING") and time.monotonic() < deadline:
        time.sleep(0.5)
    stopped = run_cli("stop", str(run_dir), env=RAY_ENV)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped Ray job" in stopped.stdout
    assert str(client.get_job_status(job["job_id"])).endswith("STOPPED")
    assert json.loads((run_dir / "job.json").read_text())["state"] == "cancelled"


def test_an_address_nothing_answers_on_is_a_clear_error(isolated: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    out = run_cli("scheduler=ray", f"scheduler.address={dead}", *SHORT, env=RAY_ENV)
    assert out.returncode == 2
    assert f"scheduler.address='{dead}': no Ray job server answers there" in out.stderr
    assert not list((isolated / "runs").rglob("plan.json"))  # refused before the run directory was filled
