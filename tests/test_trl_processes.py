"""TRL beyond one process: torchrun starts the training processes (gloo on this CPU), TRL trains data-parallel,
and the run directory is that of one run: rank 0 alone writes it, with every rank's completions, each scored once.

Semantic facts relied on (TRL 1.16, installed): each process generates and scores its own slice of the generation
batch and the rewards are gathered before the group advantages (trl/trainer/grpo_trainer.py:1681
``gather(rewards_per_func)``); the process's slice is the contiguous ``process_slice`` of the gathered batch
(grpo_trainer.py:2813); every process gets its own sampling seed (grpo_trainer.py:1103 ``set_seed(args.seed,
device_specific=True)``); the sampler is seeded alike on every process, so prompts are the same whatever the number
of processes (grpo_trainer.py:1309-1318 ``RepeatSampler(..., seed=self.args.seed)``).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import read_jsonl, run_dirs
from unirl.plugins.trl.framework import TrlFramework
from unirl.recipe.schema import Recipe, ResourcesConfig

SHORT = ["algorithm.steps=8", "eval.every_steps=4", "logging.trajectories_every=1", "logging.progress=false"]
GROUP = 8  # the embedded default's samples_per_prompt
COMPLETIONS = 16 * GROUP  # prompts_per_step x samples_per_prompt
HELD_OUT = 11


def train(root: Path, *overrides: str) -> Path:
    out = run_cli(*SHORT, *overrides, env={"UNIRL_RUNS_DIR": str(root / "runs")}, cwd=root)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    [run_dir] = run_dirs(root / "runs")
    return run_dir


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(tmp_path_factory.mktemp("two_ranks"), "resources.cpu_processes=2")


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(tmp_path_factory.mktemp("one_rank"))


def groups(trajectories: list[dict], step: int) -> list[tuple[str, int]]:
    """(prompt, completions) for each run of equal prompts at ``step``, in the recorded order."""
    return [(p, len(list(g))) for p, g in itertools.groupby(t["prompt"] for t in trajectories if t["step"] == step)]


@pytest.mark.train
def test_two_gloo_processes_write_the_record_of_one_run(two_ranks: Path) -> None:
    plan = json.loads((two_ranks / "plan.json").read_text())
    assert plan["recipe"]["algorithm"]["samples_per_prompt"] == GROUP
    assert plan["command"][:8] == ["python", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "2",
                                   "--standalone"]
    summary = json.loads((two_ranks / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["processes"] == 2
    assert (summary["steps"], summary["rollout_batches"], summary["updates"]) == (8, 8, 8)
    assert summary["completions"] == 8 * COMPLETIONS  # both ranks' halves of every generation batch
    assert json.loads((two_ranks / "manifest.json").read_text())["processes"] == 2
    native = json.loads((two_ranks / "native_config.json").read_text())["trainer_config"]
    assert native["per_device_train_batch_size"] == COMPLETIONS // 2 and native["use_cpu"] is True

    trajectories = read_jsonl(two_ranks / "trajectories.jsonl")
    assert len(trajectories) == 8 * COMPLETIONS
    for step in range(1, 9):  # each step whole: 128 completions, in groups of samples_per_prompt
        assert sum(n for _, n in groups(trajectories, step)) == COMPLETIONS
        assert all(n % plan["recipe"]["algorithm"]["samples_per_prompt"] == 0 for _, n in groups(trajectories, step))
    metrics = read_jsonl(two_ranks / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, 9))  # once each: rank 1 writes nothing
    for m in metrics:
        # TRL's logged mean reward is over the gathered batch: it equals the mean over the recorded completions
        recorded = [t["total"] for t in trajectories if t["step"] == m["step"]]
        assert m["reward/total/mean"] == pytest.approx(sum(recorded) / len(recorded), abs=1e-5)
    evals = [e for e in read_jsonl(two_ranks / "eval.jsonl") if e["kind"] == "summary"]
    assert [e["step"] for e in evals] == [0, 4, 8]
    # every completion scored once by each of the 3 rewards, on whichever rank generated it, plus rank 0's evals
    assert summary["reward_calls"] == (8 * COMPLETIONS + 3 * HELD_OUT) * 3


@pytest.mark.train
def test_the_prompts_of_each_step_are_those_of_a_one_process_run(two_ranks: Path, one_rank: Path) -> None:
    two, one = read_jsonl(two_ranks / "trajectories.jsonl"), read_jsonl(one_rank / "trajectories.jsonl")
    assert [groups(two, s) for s in range(1, 9)] == [groups(one, s) for s in range(1, 9)]
    # the same counts on one process
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (one_rank, two_ranks))
    for key in ("steps", "rollout_batches", "updates", "completions", "reward_calls"):
        assert s1[key] == s2[key], key


@pytest.mark.train
@pytest.mark.slow
def test_two_processes_learn_like_one(tmp_path: Path) -> None:
    """The learning test of tests/test_train.py (600 steps of the embedded default), on two gloo processes."""
    run_dir = train(tmp_path, "resources.cpu_processes=2", "seed=0", "algorithm.steps=600", "eval.every_steps=300",
                    "logging.trajectories_every=10")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["processes"] == 2
    assert summary["accuracy_before"] <= 0.1
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.25
    assert summary["distinct_completions"] >= 3
    rewards = [m["reward/total/mean"] for m in read_jsonl(run_dir / "metrics.jsonl")]
    assert sum(rewards[-50:]) / 50 > 2 * sum(rewards[:50]) / 50


@pytest.mark.train
@pytest.mark.slow
def test_two_nodes_meet_at_a_c10d_rendezvous(isolated: Path) -> None:
    """resources.nodes=2 as the sbatch script runs it (one torchrun per node, the plan's rendezvous filled in),
    both "nodes" on this machine's loopback."""
    from tests.support.ray_head import free_port
    from unirl.backend.environment import launch_command
    from unirl.cli.run import preflight
    from unirl.host.manager import get_host
    from unirl.host.planning import prepare_run
    from unirl.launch.scheduler import with_rendezvous

    host = get_host()
    plan = preflight(host, ["algorithm.steps=3", "resources.nodes=2", "eval.before_training=false",
                            "logging.trajectories_every=1", "logging.progress=false"])
    run_dir = isolated / "run"
    plan = prepare_run(host, plan, run_dir)
    command, env = launch_command(plan, run_dir)
    assert "{rdzv_endpoint}" in command
    command = with_rendezvous(command, f"127.0.0.1:{free_port()}", "unirl-test")
    nodes = [subprocess.Popen(command, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(2)]
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["processes"] == 2 and summary["steps"] == 3
    assert len(read_jsonl(run_dir / "trajectories.jsonl")) == 3 * COMPLETIONS
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert sum('"state": "completed"' in out for out in outputs) == 1  # one summary printed: by global rank 0


def test_the_local_scheduler_refuses_a_multi_node_torchrun_plan_before_anything_runs(tmp_path: Path) -> None:
    from unirl.errors import UnirlError
    from unirl.plugins.local.scheduler import LocalScheduler

    plan = TrlFramework().plan(Recipe(resources=ResourcesConfig(nodes=2, gpus_per_node=8))).resolve(str(tmp_path))
    with pytest.raises(UnirlError, match=r"resources.nodes=2: the local scheduler starts the run's command once.*"
                                         r"use scheduler=slurm"):
        LocalScheduler().submit(plan, tmp_path / "run", {})
    assert not (tmp_path / "run").exists()


def test_a_ray_job_runs_a_multi_node_torchrun_plan_through_its_per_node_driver(tmp_path: Path) -> None:
    from unirl.backend.environment import launch_command
    from unirl.plugins.ray.scheduler import RayScheduler, torchrun_across_nodes

    plan = TrlFramework().plan(Recipe(resources=ResourcesConfig(nodes=2, gpus_per_node=8))).resolve(str(tmp_path))
    command, _ = launch_command(plan, tmp_path)
    entrypoint = torchrun_across_nodes(plan, command, RayScheduler.options)
    assert entrypoint[:10] == [sys.executable, "-m", "unirl.plugins.ray.torchrun_nodes", "--nodes", "2",
                               "--gpus-per-node", "8", "--strategy", "STRICT_SPREAD", "--"]
    assert entrypoint[10:] == command and "{rdzv_endpoint}" in command  # filled in by the driver, per job
    one = TrlFramework().plan(Recipe(resources=ResourcesConfig(gpus_per_node=8))).resolve(str(tmp_path))
    one_command, _ = launch_command(one, tmp_path)
    assert torchrun_across_nodes(one, one_command, RayScheduler.options) == one_command  # one node: torchrun itself


@pytest.mark.train
@pytest.mark.slow
def test_ctrl_c_stops_every_rank_and_rank_0_records_the_interruption(isolated: Path) -> None:
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "unirl.cli", "algorithm.steps=3000", "resources.cpu_processes=2",
                             "eval.before_training=false", "logging.progress=false"], cwd=isolated,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "UNIRL_RUNS_DIR": str(isolated / "runs")})
    deadline = time.monotonic() + 180
    metrics: list[Path] = []
    while time.monotonic() < deadline and not metrics:
        metrics = [m for m in (isolated / "runs").rglob("metrics.jsonl") if m.read_text().count("\n") >= 3]
        time.sleep(0.5)
    assert metrics, "training never started"
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to unirl, which stops torchrun, which stops its workers
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-3000:]
    run_dir = metrics[0].parent
    assert json.loads((run_dir / "summary.json").read_text())["state"] == "interrupted"
    assert json.loads((run_dir / "job.json").read_text())["state"] == "interrupted"
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]  # every line parses: nothing torn
    assert steps == list(range(1, len(steps) + 1)) and 0 < len(steps) < 3000
