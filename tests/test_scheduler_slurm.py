"""The Slurm scheduler: its batch script (no Slurm needed), and real jobs on a single-node Slurm.

The ``slurm`` tests use a running cluster when ``sinfo`` answers, else start a private one with
scripts/slurm_local.sh for the session (and stop it after). Without the Debian packages they skip, or fail under CI.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import run_dirs
from unirl.backend.plan import LaunchPlan
from unirl.errors import UnirlError
from unirl.host.planning import prepare_run
from unirl.launch.scheduler import read_job_record
from unirl.plugins.slurm.scheduler import (
    EXIT_CODE_FILE,
    SCRIPT,
    SlurmScheduler,
    outcome_from_state,
    output_path,
    queue_state,
    render_script,
)

SHORT_TRL = ["algorithm.steps=2", "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=4",
             "eval.before_training=false", "logging.progress=false"]


def trl_plan(run_dir: Path, *overrides: str) -> LaunchPlan:
    """The embedded default TRL recipe, made very short, prepared in ``run_dir`` as the CLI would."""
    from unirl.cli.run import preflight
    from unirl.host.manager import get_host

    host = get_host()
    plan = preflight(host, [*SHORT_TRL, f"framework.python={sys.executable}", *overrides])
    return prepare_run(host, plan, run_dir)


def wait_for_running(job_id: str, timeout: float = 60.0) -> float:
    """Seconds until squeue says RUNNING."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if queue_state(job_id) == "RUNNING":
            return time.monotonic() - start
        time.sleep(0.1)
    raise AssertionError(f"Slurm job {job_id} was not RUNNING within {timeout} s")


# --- the batch script: no Slurm needed --------------------------------------------------------------------------


def test_two_node_ray_plan_gets_a_ray_cluster_before_its_command(tmp_path: Path) -> None:
    from tests.support.backend_recipes import gpu_recipe
    from unirl.plugins.verl.framework import VerlFramework

    run_dir = tmp_path / "run"
    plan = VerlFramework().plan(gpu_recipe("verl", nodes=2)).resolve(str(run_dir))
    options = {**SlurmScheduler.options, "partition": "gpu", "time": "04:00:00", "extra_sbatch": ["#SBATCH --qos=x"]}
    script = render_script(plan, run_dir, options, ray_based=True)

    for directive in ("--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8", "--partition=gpu", "--time=04:00:00",
                      "--qos=x", f"--output={run_dir}/slurm-%j.out", f"--chdir={run_dir}"):
        assert f"#SBATCH {directive}\n" in script
    assert "ray.scripts.scripts start --head" in script and "--block &" in script
    assert 'srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --gpus-per-node=8 --exclude="$ray_head_node"' in script
    assert "export RAY_ADDRESS=" in script and "ray_active_nodes) >= 2" in script
    # The plan's command runs after the Ray cluster is up, with the plan's environment exported.
    assert script.index("Ray cluster up") < script.index("-m verl.trainer.main_ppo")
    assert "export UNIRL_REWARD_SPEC=" in script and str(run_dir / "reward_spec.json") in script
    assert "trap " in script and EXIT_CODE_FILE in script


def test_single_node_trl_plan_has_no_ray(tmp_path: Path) -> None:
    plan = trl_plan(tmp_path / "run")
    script = render_script(plan, tmp_path / "run", dict(SlurmScheduler.options), ray_based=False)
    assert "ray.scripts" not in script and "RAY_ADDRESS" not in script and "srun" not in script
    assert "#SBATCH --nodes=1\n" in script and "--gpus-per-node" not in script
    assert f"{sys.executable} -m unirl.plugins.trl.runner --plan {tmp_path / 'run' / 'plan.json'}" in script


def test_a_one_process_plan_on_several_nodes_is_refused_before_anything_is_submitted(tmp_path: Path) -> None:
    plan = trl_plan(tmp_path / "run")  # one process, no torchrun: nothing would start on the other node
    plan = dataclasses.replace(plan, environment=dataclasses.replace(plan.environment, nodes=2))
    with pytest.raises(UnirlError, match=r"resources.nodes=2: .*one node"):
        SlurmScheduler().submit(plan, tmp_path / "run", {})
    assert not (tmp_path / "run" / SCRIPT).exists()


def test_trl_on_two_nodes_gets_one_torchrun_per_node_meeting_at_a_rendezvous(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    plan = trl_plan(run_dir, "resources.nodes=2", "resources.gpus_per_node=0", "resources.cpu_processes=2")
    script = render_script(plan, run_dir, dict(SlurmScheduler.options), ray_based=False)
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --ntasks-per-node=1\n" in script
    assert "ray.scripts" not in script
    assert 'unirl_rdzv_host=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)' in script
    assert 'export UNIRL_RDZV_ENDPOINT="$unirl_rdzv_host:${UNIRL_RDZV_PORT:-29500}"' in script
    start = f"srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 {sys.executable} -m " \
            "torch.distributed.run --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint " \
            '"$UNIRL_RDZV_ENDPOINT" --rdzv_id "$SLURM_JOB_ID" -m unirl.plugins.trl.runner --plan ' \
            f"{run_dir / 'plan.json'} --run-dir {run_dir} &\n"
    assert start in script
    assert script.index("export UNIRL_RDZV_ENDPOINT") < script.index(start)
    # the script is valid bash (the expansions are the shell's, at run time)
    import subprocess

    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_missing_sbatch_names_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = trl_plan(tmp_path / "run")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UnirlError, match=r"sbatch.*slurm-client"):
        SlurmScheduler().submit(plan, tmp_path / "run", {})


def test_bad_extra_sbatch_entry_names_the_field(tmp_path: Path) -> None:
    plan = trl_plan(tmp_path / "run")
    with pytest.raises(UnirlError, match=r"scheduler\.extra_sbatch"):
        render_script(plan, tmp_path / "run", {**SlurmScheduler.options, "extra_sbatch": ["exclusive"]}, False)


@pytest.mark.parametrize(("state", "status", "signal", "expected"), [
    ("COMPLETED", 0, 0, ("completed", 0, "")),
    ("CANCELLED", 0, 15, ("cancelled", 143, "cancelled")),
    ("FAILED", 3, 0, ("failed", 3, "exit status 3")),
    ("TIMEOUT", 0, 0, ("failed", 1, "time limit")),
    ("OUT_OF_MEMORY", 0, 9, ("failed", 137, "out of memory")),
    ("NODE_FAIL", 0, 0, ("failed", 1, "node")),
])
def test_final_slurm_states_map_onto_unirl_states(state: str, status: int, signal: int,
                                                  expected: tuple[str, int, str]) -> None:
    outcome = outcome_from_state(state, status, signal, "scontrol")
    assert (outcome.state, outcome.exit_code) == expected[:2]
    assert expected[2] in outcome.error


# --- real jobs on a single-node Slurm ---------------------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.train
def test_short_trl_run_completes_as_a_slurm_job(slurm_cluster: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    result = SlurmScheduler().submit(trl_plan(run_dir), run_dir, {"poll_s": 0.5})

    assert result.state == "completed", (result.error, result.log_tail)
    assert result.job_id.isdigit() and result.summary.get("steps") == 2
    record = read_job_record(run_dir)
    assert record is not None
    assert (record["scheduler"], record["state"], record["job_id"]) == ("slurm", "completed", result.job_id)
    assert [h["state"] for h in record["history"]] == ["submitted", "running", "completed"]
    assert record["submitted"]["script"] == str(run_dir / SCRIPT)
    assert (run_dir / "summary.json").exists()
    assert (run_dir / EXIT_CODE_FILE).read_text().strip() == "0"
    assert "starting the backend" in capsys.readouterr().out  # the job's output was streamed


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.train
def test_two_gloo_processes_train_as_a_slurm_job(slurm_cluster: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = SlurmScheduler().submit(trl_plan(run_dir, "resources.cpu_processes=2"), run_dir, {"poll_s": 0.5})
    assert result.state == "completed", (result.error, result.log_tail)
    assert "torch.distributed.run --nnodes 1 --nproc_per_node 2 --standalone" in (run_dir / SCRIPT).read_text()
    assert result.summary["processes"] == 2 and result.summary["steps"] == 2
    assert result.summary["completions"] == 2 * 2 * 4  # SHORT_TRL: 2 steps of 2 prompts x 4 samples


@pytest.mark.slurm
@pytest.mark.slow
def test_stop_cancels_a_running_job(slurm_cluster: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    scheduler = SlurmScheduler()
    submitted_at = time.monotonic()
    result = scheduler.submit(trl_plan(run_dir, "algorithm.steps=100000"), run_dir, {"wait": False})
    assert result.state == "submitted" and result.job_id.isdigit()
    to_running = wait_for_running(result.job_id)
    output = output_path(run_dir, result.job_id)
    while not (output.exists() and output.read_text().strip()):
        assert time.monotonic() - submitted_at < 60, "no output line within 60 s"
        time.sleep(0.1)
    to_first_line = time.monotonic() - submitted_at

    record = read_job_record(run_dir)
    assert record is not None
    stopped_at = time.monotonic()
    assert "scancel sent" in scheduler.stop(record)
    # follow() returns when the job has ended, and 100,000 steps would take hours: its end is the cancel's (the
    # times are printed for the record, not asserted: a deadline fails on a loaded machine with nothing wrong).
    final = scheduler.follow(run_dir, poll_s=0.2, stream=False)
    to_cancelled = time.monotonic() - stopped_at

    print(f"sbatch->RUNNING {to_running:.2f}s, sbatch->first output line {to_first_line:.2f}s, "
          f"scancel->cancelled {to_cancelled:.2f}s")
    assert final.state == "cancelled", (final.error, final.log_tail)
    assert read_job_record(run_dir)["state"] == "cancelled"  # type: ignore[index]
    assert "no longer queued" in scheduler.stop(read_job_record(run_dir) or {})


@pytest.mark.slurm
def test_invalid_partition_is_a_clear_error(slurm_cluster: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(UnirlError, match=r"scheduler.partition='no-such-partition': Slurm rejected .*partition"):
        SlurmScheduler().submit(trl_plan(run_dir), run_dir, {"partition": "no-such-partition"})


@pytest.mark.slurm
@pytest.mark.slow
@pytest.mark.train
def test_cli_runs_the_default_recipe_on_slurm(slurm_cluster: str, tmp_path: Path) -> None:
    from unirl.host.manager import get_host

    assert "slurm" in get_host().schedulers.names()  # registered through the entry point, like any plugin
    # No framework.python: the in-process default, which the batch job runs as a child of its own.
    result: Any = run_cli("scheduler=slurm", "scheduler.poll_s=0.5", *SHORT_TRL)
    assert result.returncode == 0, result.stdout + result.stderr
    (run_dir,) = run_dirs(tmp_path / "runs")
    record = read_job_record(run_dir)
    assert record is not None and (record["scheduler"], record["state"]) == ("slurm", "completed")
