"""Hydra multirun sweeps through Hydra's own launchers, and `unirl compare` over the result: every member's
outcome is read back (also from worker processes), failed members are listed with their error, never dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli, run_console
from tests.support.helpers import require_module

SHORT = ["algorithm.steps=3", "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=4",
         "eval.before_training=false", "logging.progress=false"]


def sweep_dir(root: Path) -> Path:
    [found] = list((root / "runs" / "multirun").iterdir())
    return found


@pytest.mark.train
@pytest.mark.slow
def test_a_2x2_sweep_through_joblib_runs_in_parallel_workers_and_compares(isolated: Path) -> None:
    require_module("hydra_plugins.hydra_joblib_launcher", "pip install -e '.[ray,sweep]'")
    # Its own process: joblib's loky workers outlive the sweep for reuse, and must not become this process's.
    out = run_console("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "algorithm.lr=1e-4,3e-4",
                      "seed=0,1", *SHORT)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = sweep_dir(isolated)
    outcomes = [json.loads((sweep / str(i) / "outcome.json").read_text()) for i in range(4)]
    assert [o["state"] for o in outcomes] == ["completed"] * 4
    assert len({o["job_id"] for o in outcomes}) >= 2  # the members ran in more than one worker process
    compared = run_cli("compare", str(sweep), "--json")
    assert compared.returncode == 0, compared.stderr
    result = json.loads(compared.stdout)
    rows = result["members"]
    assert [r["state"] for r in rows] == ["completed"] * 4
    assert {tuple(sorted(o for o in r["overrides"] if o.startswith(("algorithm.lr", "seed")))) for r in rows} == {
        ("algorithm.lr=0.0001", "seed=0"), ("algorithm.lr=0.0001", "seed=1"), ("algorithm.lr=0.0003", "seed=0"),
        ("algorithm.lr=0.0003", "seed=1")}
    assert all(r["framework"] == "trl" and r["steps"] == 3 and r["final_reward"] is not None for r in rows)
    assert Path(result["png"]).stat().st_size > 10_000
    table = run_cli("compare", str(sweep))
    assert "algorithm.lr=0.0003 seed=1" in table.stdout and "every member:" in table.stdout


@pytest.mark.train
@pytest.mark.slow
def test_a_failed_member_is_listed_with_its_error_and_fails_the_sweep(isolated: Path) -> None:
    out = run_cli("-m", "algorithm.samples_per_prompt=4,1", *[a for a in SHORT if "samples" not in a])
    assert out.returncode == 2  # one member was invalid input
    sweep = sweep_dir(isolated)
    compared = run_cli("compare", str(sweep), "--json")
    assert compared.returncode == 1
    rows = {r["member"]: r for r in json.loads(compared.stdout)["members"]}
    assert rows["0"]["state"] == "completed"
    assert rows["1"]["state"] == "invalid" and "algorithm.samples_per_prompt=1" in rows["1"]["error"]
    (sweep / "1" / "outcome.json").unlink()  # a member that died without reporting is still listed, as failed
    rows = {r["member"]: r for r in json.loads(run_cli("compare", str(sweep), "--json").stdout)["members"]}
    assert rows["1"]["state"] == "failed" and "no outcome recorded" in rows["1"]["error"]


def test_compare_of_a_directory_without_members_is_a_clear_error(isolated: Path) -> None:
    out = run_cli("compare", str(isolated))
    assert out.returncode == 2 and "holds no Hydra multirun members" in out.stderr


@pytest.mark.slurm
@pytest.mark.train
@pytest.mark.slow
def test_a_2x2_sweep_through_submitit_on_slurm(isolated: Path, slurm_cluster: str) -> None:
    """Each member is its own Slurm job (submitit's sbatch array); outcomes come back from the compute node."""
    require_module("hydra_plugins.hydra_submitit_launcher", "pip install -e '.[ray,sweep]'")
    # Its own process, as every launcher sweep here: submitit's workers are the launching process's.
    out = run_console("-m", "hydra/launcher=submitit_slurm", f"hydra.launcher.partition={slurm_cluster}",
                      "hydra.launcher.timeout_min=10", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1",
                      "algorithm.lr=1e-4,3e-4", "seed=0,1", *SHORT, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = sweep_dir(isolated)
    outcomes = [json.loads((sweep / str(i) / "outcome.json").read_text()) for i in range(4)]
    assert [o["state"] for o in outcomes] == ["completed"] * 4
    assert len(list((sweep / ".submitit").rglob("*_log.out"))) == 4  # four Slurm tasks ran them
    rows = json.loads(run_cli("compare", str(sweep), "--json").stdout)["members"]
    assert all(r["state"] == "completed" and r["steps"] == 3 for r in rows)


@pytest.mark.train
@pytest.mark.slow
def test_a_sweep_through_submitit_local_processes(isolated: Path) -> None:
    require_module("hydra_plugins.hydra_submitit_launcher", "pip install -e '.[ray,sweep]'")
    # Its own process: submitit's local jobs are children of the launching process.
    out = run_console("-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10", "seed=0,1", *SHORT,
                      timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    sweep = sweep_dir(isolated)
    assert [json.loads((sweep / str(i) / "outcome.json").read_text())["state"] for i in range(2)] == ["completed"] * 2
