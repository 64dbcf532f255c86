"""The metrics bridge: native backends' own logs, read while they run, become one run record for every backend.

What is asserted is what a user sees in the run directory (metrics.jsonl, eval.jsonl, summary.json, curves.png,
manifest.json) when the backends' own logging code writes the logs: verl 0.9.1's ``Tracking`` (its ``file`` and
``tensorboard`` backends) in the verl venv, OpenRLHF 0.11.2's ``TensorboardLogger`` in its venv, torch's
``SummaryWriter`` as slime's logging path drives it from two processes (tests/backends/*_harness.py say which source
lines each reproduces). The runs go through unirl's real launch path: the verl plugin's plan and ``prepare_run``,
the local scheduler, ``launch_command`` wrapping the command in the follower.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

import unirl.backend.native
from tests.support.backend_recipes import gpu_recipe
from tests.support.helpers import REPO, backend_python, read_jsonl
from unirl.backend.environment import launch_command
from unirl.backend.plan import LaunchPlan
from unirl.host.manager import get_host
from unirl.host.planning import prepare_run
from unirl.launch.scheduler import JobResult
from unirl.plugins.local.scheduler import LocalScheduler
from unirl.plugins.openrlhf.framework import OpenRlhfFramework
from unirl.plugins.verl.framework import VerlFramework
from unirl.record.layout import RunInfo
from unirl.record.tb_events import EventFileReader, event_files

HARNESSES = REPO / "tests" / "backends"
VERL_FILE_KEY = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"


def native_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, framework: object, backend: str, python: Path,
               harness: list[str], steps: int, env: dict[str, str] | None = None, **recipe: object) -> LaunchPlan:
    """The backend plugin's own plan, prepared by unirl's launch code (light core, plugins, reward spec, data,
    plan.json), then its command swapped for a harness that logs through the backend's own logger."""
    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)  # no GPUs here; nothing uses them
    plan = framework.plan(gpu_recipe(backend, algorithm={"steps": steps, "prompts_per_step": 8},  # type: ignore[attr-defined]
                                     options={"python": str(python)}, **recipe))
    resolved = prepare_run(get_host(), plan, tmp_path / "run")
    return replace(resolved, command=["python", *harness], env={**resolved.env, **(env or {})})


def submit(plan: LaunchPlan, run_dir: Path) -> JobResult:
    return LocalScheduler().submit(plan, run_dir, {})


# --- the TensorBoard reader ---------------------------------------------------------------------------------------


def test_both_decoders_read_torch_summarywriter_files_alike_and_resume_after_a_torn_record(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    for step in range(1, 6):
        writer.add_scalar("train/a", 0.01 * step, step)
        writer.add_scalar("train/b", -3.5e7 + step, step)
    writer.add_text("train/text", "not a scalar", 1)
    writer.add_scalar("train/new_style", 2.5, 9, new_style=True)  # a tensor summary, not simple_value
    writer.close()
    [path] = event_files(tmp_path / "tb")
    reference = EventFileReader(path, use_tensorboard=True)
    assert reference.use_tensorboard, "tensorboard (unirl[tensorboard]) is the reference this test compares against"
    ours, theirs = EventFileReader(path, use_tensorboard=False).read(), reference.read()
    assert ours == theirs and len(ours) == 11
    assert ours[0].value == pytest.approx(0.01, rel=1e-6) and ours[0].value != 0.01  # TensorBoard stores float32
    assert ours[-1].tag == "train/new_style" and ours[-1].step == 9 and ours[-1].value == 2.5

    data = path.read_bytes()
    growing = tmp_path / "grow" / path.name
    growing.parent.mkdir()
    cut = len(data) - 10  # inside the last record, a scalar
    growing.write_bytes(data[:cut])
    readers = [EventFileReader(growing, use_tensorboard=False), EventFileReader(growing, use_tensorboard=True)]
    first = [reader.read() for reader in readers]
    assert first[0] == first[1] and len(first[0]) == 10
    growing.write_bytes(data)  # the writer finishes the record
    rest = [reader.read() for reader in readers]
    assert first[0] + rest[0] == ours and first[1] + rest[1] == ours


@pytest.mark.openrlhf
def test_both_decoders_read_openrlhfs_own_logger_alike(tmp_path: Path) -> None:
    python = backend_python("openrlhf")
    subprocess.run([str(python), str(HARNESSES / "openrlhf_tb_harness.py"), "--dir", str(tmp_path), "--steps", "3",
                    "--eval-steps", "2"], check=True, capture_output=True, timeout=300)
    [path] = event_files(tmp_path)
    assert path.parent.name == "ppo_0101T00:00"  # OpenRLHF writes <tensorboard_dir>/<wandb.run_name>/
    ours, theirs = EventFileReader(path, False).read(), EventFileReader(path, True).read()
    assert ours == theirs and {"train/policy_loss", "eval/eval_arith_pass1"} <= {s.tag for s in ours}


# --- verl: its own Tracking under the follower, through the local scheduler -----------------------------------------


@pytest.fixture
def verl_python() -> Path:
    return backend_python("verl")


def verl_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, python: Path, *args: str, steps: int = 4,
              loggers: str = "file") -> LaunchPlan:
    plan = native_run(tmp_path, monkeypatch, VerlFramework(), "verl", python,
                      [str(HARNESSES / "verl_tracking_harness.py"), "--steps", str(steps), "--loggers", loggers,
                       *args], steps)
    # What the plan sends through verl's Ray runtime env reaches the stand-in through its environment.
    overrides = json.loads((tmp_path / "run" / "plan.json").read_text())["native_config"]["overrides"]
    env = {"VERL_FILE_LOGGER_PATH": overrides[VERL_FILE_KEY], "TENSORBOARD_DIR": str(tmp_path / "run/native/tb")}
    return replace(plan, env={**plan.env, **env})


@pytest.mark.verl
def test_verls_own_file_logger_becomes_metrics_eval_summary_and_curves(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        verl_python: Path) -> None:
    plan = verl_plan(tmp_path, monkeypatch, verl_python, "--val-steps", "0,4", "--score", "3")
    run_dir = tmp_path / "run"
    command, _ = launch_command(plan, run_dir)
    assert command[:6] == [str(verl_python), "-m", "unirl.adapters.follow", "--run-dir", str(run_dir), "--"]
    result = submit(plan, run_dir)
    assert result.state == "completed", result.log_tail
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]  # step 0 was validation only: eval.jsonl, not a training row
    first = rows[0]
    # verl's names in unirl's vocabulary (unirl/record/vocabulary.py VERL), every other one kept as native/<name>
    for name in ("loss", "policy_loss", "kl", "entropy", "clip_ratio", "grad_norm", "lr", "reward/total/mean",
                 "completion_len/mean", "completion_truncated/frac", "step_time_s", "tokens_per_s"):
        if name != "loss":  # the stand-in logs no actor/loss (verl's total loss comes from the engine)
            assert name in first, name
    assert first["lr"] == pytest.approx(1e-6) and first["grad_norm"] == pytest.approx(1.5)
    assert first["step_time_s"] == pytest.approx(0.51) and "native/actor/pg_clipfrac_lower" in first
    assert "native/training/global_step" not in first  # a step counter, not a metric
    assert rows[1]["kl"] is None  # verl wrote NaN as null: it stays a missing value (null in metrics.jsonl), not 0
    evals = [e for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "summary"]
    assert [e["step"] for e in evals] == [0, 4]
    assert evals[0]["accuracy"] == pytest.approx(0.25) and evals[1]["accuracy"] == pytest.approx(1.0)
    assert evals[0]["reward_mean"] == pytest.approx(0.5) and evals[0]["accuracy_reward"] == "math_answer"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["exit_code"] == 0 and summary["steps_logged"] == 4
    assert summary["rollout_batches"] == 4 and summary["native_logs"] == ["native/verl_metrics.1.jsonl"]
    # unirl's reward log, appended by the adapter verl calls, is merged: every scored completion is counted
    assert summary["reward_log_records"] == 4 * 3 and summary["reward_errors"] == 0
    assert (run_dir / "curves.png").stat().st_size > 10_000  # drawn by the host: the verl venv has no matplotlib
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["framework"] == "verl" and manifest["data"]["train"]["sha256"]
    assert manifest["rewards"]["math_answer"]["module"] == "unirl.plugins.builtin_rewards.math_answer"


@pytest.mark.verl
def test_verls_tensorboard_and_file_loggers_give_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              verl_python: Path) -> None:
    plan = verl_plan(tmp_path, monkeypatch, verl_python, steps=3, loggers="file,tensorboard")
    run_dir = tmp_path / "run"
    assert submit(plan, run_dir).state == "completed"
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]  # one row per step: both files fill the same rows
    [events] = event_files(run_dir / "native" / "tb")
    from_tb = {(s.step, s.tag): s.value for s in EventFileReader(events, False).read()}
    assert from_tb[(1, "actor/grad_norm")] == pytest.approx(rows[0]["grad_norm"])
    assert from_tb[(3, "timing_s/step")] == pytest.approx(rows[2]["step_time_s"], rel=1e-6)


@pytest.mark.verl
def test_a_failing_verl_run_keeps_what_it_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 verl_python: Path) -> None:
    plan = verl_plan(tmp_path, monkeypatch, verl_python, "--fail-after", "2", steps=5)
    run_dir = tmp_path / "run"
    result = submit(plan, run_dir)
    assert result.state == "failed" and result.exit_code == 3
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "failed" and summary["error"] == "the backend exited with status 3"
    assert not (run_dir / "curves.png").exists()


def signal_follower_mid_run(plan: LaunchPlan, run_dir: Path, signum: int) -> list[JobResult]:
    """Submit ``plan``, send ``signum`` to its follower once two steps are in metrics.jsonl, wait for the end."""
    results: list[JobResult] = []
    thread = threading.Thread(target=lambda: results.append(submit(plan, run_dir)))
    thread.start()
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (not metrics.exists() or len(read_jsonl(metrics)) < 2):
        time.sleep(0.2)
    follower = int(json.loads((run_dir / "job.json").read_text())["job_id"])
    os.kill(follower, signum)
    thread.join(120)
    assert results, f"the run did not end after signal {signum}"
    return results


@pytest.mark.verl
def test_sigterm_to_the_follower_mid_run_stops_the_backend_keeps_the_record_and_ends_cancelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verl_python: Path) -> None:
    run_dir = tmp_path / "run"
    results = signal_follower_mid_run(verl_plan(tmp_path, monkeypatch, verl_python, "--sleep", "1.0", steps=30),
                                      run_dir, signal.SIGTERM)
    metrics = run_dir / "metrics.jsonl"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "cancelled" and summary["signals"] == ["SIGTERM"]
    assert summary["exit_code"] == -signal.SIGTERM  # the backend got the forwarded signal and died of it
    steps = [r["step"] for r in read_jsonl(metrics)]
    assert 2 <= len(steps) < 30 and steps == list(range(1, len(steps) + 1))
    assert results[0].exit_code == -signal.SIGTERM  # the follower ended itself the same way


@pytest.mark.verl
def test_sigkill_to_the_follower_kills_the_backend_keeps_the_metrics_and_still_leaves_a_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verl_python: Path) -> None:
    """A SIGKILL cannot be caught: the backend dies with its follower (PR_SET_PDEATHSIG) and the scheduler writes
    the summary the follower could not, from what metrics.jsonl kept."""
    run_dir = tmp_path / "run"
    results = signal_follower_mid_run(verl_plan(tmp_path, monkeypatch, verl_python, "--sleep", "1.0", steps=30),
                                      run_dir, signal.SIGKILL)
    metrics = run_dir / "metrics.jsonl"
    assert results[0].state == "failed" and results[0].exit_code == -signal.SIGKILL
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [r["step"] for r in read_jsonl(metrics)]
    assert summary["state"] == "failed" and summary["error"] == "killed by signal SIGKILL"
    assert summary["steps_logged"] == len(steps) >= 2 and summary["last_step"] == steps[-1]
    assert json.loads((run_dir / "job.json").read_text())["state"] == "failed"


@pytest.mark.verl
def test_verl_rows_say_their_step_so_reward_columns_and_eval_samples_come_from_unirls_reward_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verl_python: Path) -> None:
    """unirl's exported parquet read by verl's RLHFDataset, every completion scored through unirl's verl adapter as
    NaiveRewardManager calls it (tests/backends/verl_tracking_harness.py --rows), verl's Tracking logging the steps:
    the row's extra_info (split, index) fixes its step, so the step's reward columns are unirl's, and the held-out
    rows become one eval.jsonl sample per prompt, per validation."""
    import statistics

    run_dir = tmp_path / "run"
    scores_out = tmp_path / "scores.json"
    plan = verl_plan(tmp_path, monkeypatch, verl_python, "--rows", str(run_dir), "--scores-out", str(scores_out),
                     "--val-steps", "0,2", steps=2)
    result = submit(plan, run_dir)
    assert result.state == "completed", result.log_tail
    returned = json.loads(scores_out.read_text())  # what compute_score gave verl, per step
    rows = {r["step"]: r for r in read_jsonl(run_dir / "metrics.jsonl")}
    assert sorted(rows) == [1, 2]
    for step in (1, 2):
        scores = returned["train"][str(step)]
        assert len(scores) == 8 * 8  # prompts_per_step x samples_per_prompt (verl's rollout.n)
        math_answer = [s["math_answer"] for s in scores]
        assert 0 < sum(math_answer) < len(math_answer)  # some right, some wrong: the mean says something
        assert rows[step]["reward/math_answer/mean"] == pytest.approx(statistics.fmean(math_answer))
        assert rows[step]["reward/total/mean"] == pytest.approx(statistics.fmean(s["score"] for s in scores))
        # TRL's reward_std: nanstd with Bessel's correction (trl/trainer/utils.py:1021-1043, trl 1.16)
        assert rows[step]["reward/total/std"] == pytest.approx(statistics.stdev(s["score"] for s in scores))
        assert rows[step]["reward/math_answer/has_answer"] == pytest.approx(
            statistics.fmean(s["math_answer/has_answer"] for s in scores))
        assert rows[step]["reward/errors"] == 0
        assert "native/critic/score/mean" in rows[step]  # verl's own number is kept, under its own name
    assert rows[1]["reward/math_answer/mean"] != rows[2]["reward/math_answer/mean"]  # not one pooled mean
    held_out = len(read_jsonl_parquet(run_dir / "data" / "eval.parquet"))
    eval_rows = read_jsonl(run_dir / "eval.jsonl")
    summaries = [e for e in eval_rows if e["kind"] == "summary"]
    assert [e["step"] for e in summaries] == [0, 2]
    for summary in summaries:
        samples = [e for e in eval_rows if e["kind"] == "sample" and e["step"] == summary["step"]]
        assert len(samples) == held_out == summary["n"]  # one row per held-out prompt
        assert sorted(e["index"] for e in samples) == list(range(held_out))
        returned_eval = returned["eval"][str(summary["step"])]
        solved = sum(s["math_answer"] >= 1.0 for s in returned_eval)  # eval.accuracy_threshold = 1.0
        assert summary["solved"] == solved and summary["accuracy"] == pytest.approx(solved / held_out)
        assert summary["accuracy_from"] == "reward_log" and summary["accuracy_reward"] == "math_answer"
        assert any(k.startswith("val-core/") for k in summary["native"])  # verl's own numbers kept
    assert summaries[0]["solved"] == 2 and summaries[1]["solved"] == 4
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reward_log_records"] == 2 * 64 + 2 * held_out
    assert summary["reward_log_records_stepless"] == 0 and summary["eval_records_unattached"] == 0


def read_jsonl_parquet(path: Path) -> list[dict[str, object]]:
    import pyarrow.parquet as pq

    return list(pq.read_table(path).to_pylist())


# --- OpenRLHF: its own TensorboardLogger under the follower -------------------------------------------------------


@pytest.mark.openrlhf
def test_openrlhfs_own_tensorboard_logger_becomes_metrics_and_eval(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    python = backend_python("openrlhf")
    plugin = OpenRlhfFramework()
    probe = plugin.plan(gpu_recipe("openrlhf"))
    flag = probe.command.index("--logger.tensorboard_dir")
    assert probe.command[flag + 1] == "{run_dir}/native/tb"
    plan = native_run(tmp_path, monkeypatch, plugin, "openrlhf", python,
                      [str(HARNESSES / "openrlhf_tb_harness.py"), "--dir", "{tb}", "--steps", "4",
                       "--eval-steps", "2", "--sleep", "0.3"], 4)
    run_dir = tmp_path / "run"
    plan = replace(plan, command=[c.replace("{tb}", str(run_dir / "native" / "tb")) for c in plan.command])
    result = submit(plan, run_dir)
    assert result.state == "completed", result.log_tail
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert rows[1]["policy_loss"] == pytest.approx(0.05) and rows[1]["reward/total/mean"] == pytest.approx(0.2)
    assert rows[1]["step_time_s"] == pytest.approx(1.75) and rows[1]["native/train/timing/generation"] == 1.0
    assert "native/train/generated_samples" not in rows[1]  # text, not a scalar
    evals = [e for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "summary"]
    assert [(e["step"], round(e["accuracy"], 3)) for e in evals] == [(2, 0.4), (4, 0.8)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["steps_logged"] == 4
    assert (run_dir / "curves.png").exists()


@pytest.mark.openrlhf
def test_openrlhf_labels_say_their_row_so_eval_samples_come_from_unirls_reward_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """unirl's exported JSONL through OpenRLHF's own ``prepare_datasets`` (its shuffled train loader, its eval
    loader), every completion scored by the generated reward file as OpenRLHF's engines call it, its
    TensorboardLogger logging the steps (tests/backends/openrlhf_tb_harness.py --rows): the label carries the row's
    place, so each validation becomes one eval.jsonl sample per held-out prompt with unirl's accuracy. Train rows
    are known by index but get no step (OpenRLHF shuffles its loader), so the reward columns stay OpenRLHF's."""
    from unirl.recipe.schema import EvalConfig, ModelConfig

    python = backend_python("openrlhf")
    plan = native_run(tmp_path, monkeypatch, OpenRlhfFramework(), "openrlhf", python,
                      [str(HARNESSES / "openrlhf_tb_harness.py"), "--dir", "{tb}", "--steps", "4",
                       "--eval-steps", "2", "--rows", "{run}", "--scores-out", str(tmp_path / "scores.json")], 4,
                      model=ModelConfig(path="builtin:tiny-arith"), eval=EvalConfig(before_training=False,
                                                                                    every_steps=2))
    run_dir = tmp_path / "run"
    plan = replace(plan, command=[c.replace("{tb}", str(run_dir / "native" / "tb")).replace("{run}", str(run_dir))
                                  for c in plan.command])
    result = submit(plan, run_dir)
    assert result.state == "completed", result.log_tail
    returned = json.loads((tmp_path / "scores.json").read_text())
    held_out = len(read_jsonl(run_dir / "data" / "eval.jsonl"))
    eval_rows = read_jsonl(run_dir / "eval.jsonl")
    summaries = [e for e in eval_rows if e["kind"] == "summary"]
    assert [e["step"] for e in summaries] == [2, 4]
    for summary in summaries:
        samples = [e for e in eval_rows if e["kind"] == "sample" and e["step"] == summary["step"]]
        assert len(samples) == held_out == summary["n"]  # one row per held-out prompt
        assert sorted(e["index"] for e in samples) == list(range(held_out))
        assert all(not str(e["reference"]).startswith("unirl-row:") for e in samples)  # the reference, unwrapped
        solved = sum(s["math_answer"] >= 1.0 for s in returned["eval"][str(summary["step"])])
        assert summary["solved"] == solved == summary["step"]  # the harness answers the first `step` right
        assert summary["accuracy"] == pytest.approx(solved / held_out) and summary["accuracy_from"] == "reward_log"
        assert any(k.startswith("eval/eval_") for k in summary["native"])  # OpenRLHF's own pass1, kept
    records = read_jsonl(run_dir / "trajectories.jsonl")
    train = [r for r in records if r.get("split") == "train"]
    assert len(train) == 4 * 8 * 8 and all(r["step"] is None for r in train)  # known rows, no guessed step
    assert sorted({r["index"] for r in train}) == list(range(4 * 8))  # each exported train prompt drawn once
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reward_log_records"] == 4 * 64 + 2 * held_out and summary["eval_records_unattached"] == 0
    assert summary["reward_log_records_stepless"] == 4 * 64 and summary["reward_log_records_unidentified"] == 0
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and "reward/total/mean" in rows[0]  # OpenRLHF's own number


# --- slime: two processes, two step axes, one directory --------------------------------------------------------------


def test_slimes_two_writers_are_read_file_by_file_and_rebased_to_rollouts(tmp_path: Path) -> None:
    """slime's actor logs per optimizer update, its rollout manager per rollout, both into TENSORBOARD_DIR."""
    from unirl.adapters.common import trajectory_record
    from unirl.record.follow import Follower
    from unirl.record.layout import ROLE_SCORER, RunInfo
    from unirl.record.run_recorder import RunRecorder
    from unirl.rewards.contract import Sample
    from unirl.rewards.executor import ScoredSample

    run_dir = tmp_path / "run"
    tb = run_dir / "native" / "tb"
    script = HARNESSES / "slime_tb_harness.py"
    recipe = {"algorithm": {"steps": 3, "mini_batches_per_step": 2}, "rewards": [{"name": "math_answer"}]}
    both = (f"{sys.executable} {script} --role actor --rollouts 3 --steps-per-rollout 2 --sleep 0.2 & "
            f"{sys.executable} {script} --role rollout --rollouts 3 --eval-every 2 --sleep 0.2; wait")
    # unirl's reward log, where its records say which step they scored (no native adapter knows its step today;
    # written here through the run record's own writer, as a scorer would): those columns win over slime's
    run_dir.mkdir(parents=True)
    scored = [ScoredSample(scores={"math_answer": v}, components={"math_answer/has_answer": 1.0}, errors={}, info={},
                           total=v) for v in (1.0, 0.0)]
    records = [trajectory_record(Sample(prompt="1+2=", completion=c), r, step=2)
               for c, r in zip(("3", "4"), scored, strict=True)]
    RunRecorder(RunInfo(run_dir, "slime", recipe, role=ROLE_SCORER), get_host().lifecycle).rollouts_scored(2, records)
    follower = Follower(RunInfo(run_dir, "slime", recipe), ["bash", "-c", both], get_host().lifecycle,
                        interval=0.1, env={**os.environ, "TENSORBOARD_DIR": str(tb)})
    assert follower.run_child() == 0
    assert len(event_files(tb)) == 2  # one writer per process
    rows = {r["step"]: r for r in read_jsonl(run_dir / "metrics.jsonl")}
    assert sorted(rows) == [1, 2, 3]
    # train/step = rollout_id x 2 + step_id: the two updates of each rollout are averaged into its step
    assert rows[1]["loss"] == 0.5 and rows[2]["loss"] == 2.5 and rows[3]["grad_norm"] == 5.5
    assert rows[1]["reward/total/mean"] == pytest.approx(0.1) and rows[3]["step_time_s"] == 4.0
    assert rows[2]["reward/total/mean"] == 0.5 and rows[2]["reward/math_answer/mean"] == 0.5  # from unirl's log
    assert rows[2]["reward/math_answer/has_answer"] == 1.0 and rows[2]["reward/errors"] == 0
    assert rows[1]["native/rollout/rewards"] == 0.0 and "native/train/step" not in rows[1]
    evals = [e for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "summary"]
    assert [(e["step"], round(e["accuracy"], 2)) for e in evals] == [(1, 0.25), (3, 0.75)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["steps_logged"] == 3


def test_slime_samples_say_their_step_through_unirls_slime_adapter(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """slime's Sample as its Dataset builds it from unirl's exported JSONL (metadata = the row's metadata column,
    slime/utils/data.py:237, 270-274 @624b824; deep-copied per sample, data_source.py:107-118), scored through unirl's
    slime adapter: the records carry their step, so the bridge's reward columns and eval samples are unirl's."""
    import asyncio
    import copy
    import statistics
    from types import SimpleNamespace

    import unirl.adapters.slime as slime_adapter
    from unirl.plugins.slime.framework import SlimeFramework
    from unirl.record.follow import Follower

    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)
    plan = SlimeFramework().plan(gpu_recipe("slime", engine="sglang", algorithm={"steps": 3, "prompts_per_step": 4,
                                                                                 "samples_per_prompt": 2},
                                            options={"model_args": "--num-layers 2"}))
    run_dir = tmp_path / "run"
    resolved = prepare_run(get_host(), plan, run_dir)
    monkeypatch.setenv("UNIRL_REWARD_SPEC", resolved.env["UNIRL_REWARD_SPEC"])

    def dataset(name: str) -> list[SimpleNamespace]:  # slime's Dataset: --input-key prompt --label-key label
        lines = read_jsonl(run_dir / "data" / f"{name}.jsonl")
        return [SimpleNamespace(prompt=d["prompt"], label=d["label"], metadata=d.get("metadata") or {},
                                response="", status=None, response_length=0) for d in lines]

    def completion(native: SimpleNamespace, right: bool) -> SimpleNamespace:
        sample = copy.deepcopy(native)
        sample.response = native.label if right else "no"
        return sample

    train, held_out = dataset("train"), dataset("eval")
    assert len(train) == 3 * 4 and all(t.metadata["split"] == "train" for t in train)
    returned: dict[int, list[dict[str, float]]] = {}

    async def rollouts() -> None:
        for step in (1, 2, 3):
            for position in range((step - 1) * 4, step * 4):
                group = [completion(train[position], right=(position + k) % step == 0) for k in range(2)]
                returned.setdefault(step, []).extend(await slime_adapter.batched_reward(None, group))
            if step in (1, 3):  # the held-out pass of rollouts 0 and 2 (--eval-every 2 below)
                for position, native in enumerate(held_out):
                    await slime_adapter.reward(None, completion(native, right=position < step))

    asyncio.run(rollouts())
    tb = run_dir / "native" / "tb"
    script = HARNESSES / "slime_tb_harness.py"
    both = (f"{sys.executable} {script} --role actor --rollouts 3 --steps-per-rollout 1 & "
            f"{sys.executable} {script} --role rollout --rollouts 3 --eval-every 2; wait")
    recipe = json.loads((run_dir / "plan.json").read_text())["recipe"]
    follower = Follower(RunInfo(run_dir, "slime", recipe), ["bash", "-c", both], get_host().lifecycle, interval=0.1,
                        env={**os.environ, "TENSORBOARD_DIR": str(tb)})
    assert follower.run_child() == 0
    rows = {r["step"]: r for r in read_jsonl(run_dir / "metrics.jsonl")}
    assert sorted(rows) == [1, 2, 3]
    for step in (1, 2, 3):
        assert rows[step]["reward/math_answer/mean"] == pytest.approx(
            statistics.fmean(r["math_answer"] for r in returned[step]))
        assert rows[step]["reward/total/mean"] == pytest.approx(statistics.fmean(r["score"] for r in returned[step]))
    assert rows[1]["reward/math_answer/mean"] == 1.0 and rows[2]["reward/math_answer/mean"] == 0.5
    eval_rows = read_jsonl(run_dir / "eval.jsonl")
    summaries = [e for e in eval_rows if e["kind"] == "summary"]
    assert [(e["step"], e["n"], e["solved"]) for e in summaries] == [(1, len(held_out), 1), (3, len(held_out), 3)]
    assert summaries[0]["native"] == {"eval/arith": 0.25}  # slime's own number, kept
    for summary in summaries:
        samples = [e for e in eval_rows if e["kind"] == "sample" and e["step"] == summary["step"]]
        assert sorted(e["index"] for e in samples) == list(range(len(held_out)))


def test_nemo_rl_ground_truth_says_its_row_so_reward_columns_and_eval_samples_are_unirls(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """unirl's exported JSONL as NeMo RL hands it to an environment (ResponseDataset keeps ``output``, which
    math_hf_data_processor passes as ``extra_env_info["ground_truth"]``, processors.py:389-392 @ v0.7.0; with
    ``data.shuffle=false`` step N draws rows ``(N-1) x num_prompts_per_step`` on), scored through unirl's NeMo RL
    environment on the upstream interface (tests/interfaces/nemo_rl.py), NeMo RL's TensorBoard logging path writing
    the steps (tests/backends/nemo_rl_tb_harness.py): the reward columns and the eval samples are unirl's."""
    import statistics

    from tests.interfaces import nemo_rl as upstream
    from unirl.plugins.nemo_rl.framework import NemoRlFramework
    from unirl.record.follow import Follower
    from unirl.rewards.row_origin import untag_reference

    upstream.install(monkeypatch)
    from unirl.adapters.nemo_rl import UnirlEnvironment

    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)
    plan = NemoRlFramework().plan(gpu_recipe("nemo_rl", algorithm={"steps": 3, "prompts_per_step": 4,
                                                                   "samples_per_prompt": 2},
                                             options={"max_total_sequence_length": 1024}))
    assert plan.native_config["overrides"]["data.shuffle"] is False
    run_dir = tmp_path / "run"
    resolved = prepare_run(get_host(), plan, run_dir)
    env = UnirlEnvironment({"unirl_spec": resolved.env["UNIRL_REWARD_SPEC"]})
    train, held_out = read_jsonl(run_dir / "data" / "train.jsonl"), read_jsonl(run_dir / "data" / "eval.jsonl")
    assert len(train) == 3 * 4

    def score(rows: list[dict[str, object]], right: list[bool]) -> list[dict[str, float]]:
        logs = [[{"role": "user", "content": r["input"]},
                 {"role": "assistant", "content": untag_reference(r["output"])[0] if ok else "no"}]
                for r, ok in zip(rows, right, strict=True)]
        out = env.step(logs, [{"ground_truth": r["output"]} for r in rows])
        return [m["unirl"] for m in out.metadata]

    returned: dict[int, list[dict[str, float]]] = {}
    for step in (1, 2, 3):
        rows = [r for r in train[(step - 1) * 4: step * 4] for _ in range(2)]  # each num_generations_per_prompt times
        returned[step] = score(rows, [i % step == 0 for i in range(len(rows))])
        if step == 2:  # val_period 2: every held-out prompt once, before the validation's log
            score(held_out, [i < 3 for i in range(len(held_out))])
    assert returned[1] and all(r["math_answer"] == 1.0 for r in returned[1])  # scored against the unwrapped reference
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert all(not str(r["reference"]).startswith("unirl-row:") for r in records)
    log_dir = run_dir / "logs"
    harness = [sys.executable, str(HARNESSES / "nemo_rl_tb_harness.py"), "--log-dir", str(log_dir), "--steps", "3",
               "--val-steps", "2", "--accuracy", "2:0.125"]
    recipe = json.loads((run_dir / "plan.json").read_text())["recipe"]
    follower = Follower(RunInfo(run_dir, "nemo_rl", recipe), harness, get_host().lifecycle, interval=0.1)
    assert follower.run_child() == 0
    metrics = {r["step"]: r for r in read_jsonl(run_dir / "metrics.jsonl")}
    assert sorted(metrics) == [1, 2, 3]
    for step in (1, 2, 3):
        assert metrics[step]["reward/math_answer/mean"] == pytest.approx(
            statistics.fmean(r["math_answer"] for r in returned[step]))
        assert metrics[step]["native/train/reward"] == pytest.approx(0.1 * step)  # NeMo RL's own, kept
        assert metrics[step]["loss"] == pytest.approx(0.5 / step)
    assert metrics[1]["reward/math_answer/mean"] == 1.0 and metrics[2]["reward/math_answer/mean"] == 0.5
    eval_rows = read_jsonl(run_dir / "eval.jsonl")
    [summary] = [e for e in eval_rows if e["kind"] == "summary"]
    assert (summary["step"], summary["n"], summary["solved"]) == (2, len(held_out), 3)
    assert summary["native"] == {"validation/accuracy": 0.125}
    samples = [e for e in eval_rows if e["kind"] == "sample"]
    assert sorted(e["index"] for e in samples) == list(range(len(held_out)))
    found = json.loads((run_dir / "summary.json").read_text())
    assert found["reward_log_records_stepless"] == 0 and found["eval_records_unattached"] == 0


def test_a_reference_carries_its_rows_place_and_a_forged_or_broken_tag_stays_a_plain_reference() -> None:
    from unirl.rewards.row_origin import tag_reference, untag_reference

    for reference in ("5", None, "", "unirl-row:{}", 'quote " and \u00e9', "x" * 10_000):
        assert untag_reference(tag_reference(reference, "eval", 7)) == (reference, {"split": "eval", "index": 7})
    with pytest.raises(ValueError, match="split 'test'"):
        tag_reference("5", "test", 0)
    for label in ("5", 5, None, "", "unirl-row:", "unirl-row:{", "unirl-row:[1]", "unirl-row:null",
                  'unirl-row:{"index": 1, "reference": "5"}',  # a key missing
                  'unirl-row:{"index": 1, "reference": "5", "split": "train", "step": 9}',  # a key more
                  'unirl-row:{"index": -1, "reference": "5", "split": "train"}',
                  'unirl-row:{"index": true, "reference": "5", "split": "train"}',
                  'unirl-row:{"index": 1.0, "reference": "5", "split": "train"}',
                  'unirl-row:{"index": 1, "reference": 5, "split": "train"}',
                  'unirl-row:{"index": 1, "reference": "5", "split": "test"}'):
        assert untag_reference(label) == (label, None), label


def test_rows_that_are_not_unirls_stay_step_less_and_are_counted(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's own file (framework.overrides) or a malformed row: no step is guessed; the scorer and the bridge
    count them."""
    from unirl.adapters.common import row_tags, runtime_for
    from unirl.adapters.verl import PROMPT_KEY, compute_score
    from unirl.record.metrics_bridge import MetricsBridge
    from unirl.record.run_recorder import RunRecorder

    assert row_tags({"split": "train", "index": 9}, 4, 3) == {"step": 3, "split": "train", "index": 9}
    assert row_tags({"split": "eval", "index": 9}, 4, 3) == {"step": None, "split": "eval", "index": 9}
    for bad in ({}, {"split": "train"}, {"index": 3}, {"split": "train", "index": "3"},
                {"split": "train", "index": True}, {"split": "train", "index": -1}, {"split": "train", "index": 12},
                {"split": "test", "index": 0}, {"split": "train", "index": 2.0}):
        assert row_tags(bad, 4, 3) is None, bad
    assert row_tags({"split": "train", "index": 0}, None, 3) is None  # no prompts_per_step: nothing to count with

    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)
    plan = VerlFramework().plan(gpu_recipe("verl", algorithm={"steps": 3, "prompts_per_step": 4}))
    run_dir = tmp_path / "run"
    spec = prepare_run(get_host(), plan, run_dir).env["UNIRL_REWARD_SPEC"]
    calls = [{PROMPT_KEY: "1+2=", "split": "train", "index": 5},  # unirl's row 5: step 2
             {PROMPT_KEY: "1+2=", "split": "train", "index": "5"},  # malformed
             {PROMPT_KEY: "1+2="},  # no split, no index
             {"split": "train", "index": 5},  # verl's own preprocessing (no unirl_prompt): not unirl's row
             None]
    for extra_info in calls:
        compute_score(data_source="arith", solution_str="3", ground_truth="3", extra_info=extra_info, unirl_spec=spec)
    assert runtime_for("verl", spec).rows_unidentified == 4
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert [r["step"] for r in records] == [2, None, None, None, None]
    assert [bool(r.get("row_unidentified")) for r in records] == [False, True, True, True, True]
    bridge = MetricsBridge(run_dir, "verl", {"algorithm": {"steps": 3}}, RunRecorder(
        RunInfo(run_dir, "verl", {}), get_host().lifecycle))
    bridge.poll()
    found = bridge.summary()
    assert found["reward_log_records"] == 5 and found["reward_log_records_stepless"] == 4
    assert found["reward_log_records_unidentified"] == 4


# --- the wiring: every native backend logs into the run directory, and its command runs under the follower ----------


def test_every_native_plan_switches_its_own_logger_on_into_the_run_directory() -> None:
    from unirl.plugins.nemo_rl.framework import NemoRlFramework
    from unirl.plugins.slime.framework import SlimeFramework, VimeFramework

    verl = VerlFramework().plan(gpu_recipe("verl"))
    assert "trainer.logger=[console,file]" in verl.command
    assert (f"{VERL_FILE_KEY}='{{run_dir}}/native/verl_metrics.{{attempt}}.jsonl'" in verl.command)
    assert not any("TENSORBOARD_DIR" in arg for arg in verl.command)  # only when logging.trackers asks for it
    assert not any("reads verl's console" in row.note for row in verl.mapping)
    from unirl.recipe.schema import LoggingConfig

    tracked = VerlFramework().plan(gpu_recipe("verl", logging=LoggingConfig(trackers=["tensorboard"])))
    assert "trainer.logger=[console,file,tensorboard]" in tracked.command
    assert ("+ray_kwargs.ray_init.runtime_env.env_vars.TENSORBOARD_DIR='{run_dir}/native/tb'" in tracked.command)
    openrlhf = OpenRlhfFramework().plan(gpu_recipe("openrlhf"))
    assert openrlhf.native_config["flags"]["logger.tensorboard_dir"] == "{run_dir}/native/tb"
    nemo = NemoRlFramework().plan(gpu_recipe("nemo_rl", options={"max_total_sequence_length": 1024}))
    assert "logger.tensorboard_enabled=true" in nemo.command and "logger.log_dir='{run_dir}/logs'" in nemo.command
    for family in (SlimeFramework(), VimeFramework()):
        plan = family.plan(gpu_recipe(family.name, engine="sglang" if family.name == "slime" else "vllm",
                                      options={"model_args": "--num-layers 2"}))
        assert " --use-tensorboard" in plan.command[2]
        assert "export TENSORBOARD_DIR='{run_dir}/native/tb' && " in plan.command[2]
    for plan in (verl, openrlhf, nemo):
        assert plan.record_follower


def test_the_launch_wraps_native_commands_in_the_follower_and_leaves_trl_alone(tmp_path: Path) -> None:
    from unirl.plugins.trl.framework import TrlFramework
    from unirl.recipe.schema import Recipe

    verl = VerlFramework().plan(gpu_recipe("verl")).resolve(str(tmp_path))
    command, _ = launch_command(verl, tmp_path)
    assert command[:6] == ["python", "-m", "unirl.adapters.follow", "--run-dir", str(tmp_path), "--"]
    assert command[6:] == verl.command
    trl = TrlFramework().plan(Recipe())
    assert not trl.record_follower and launch_command(trl, tmp_path)[0][:1] == [sys.executable]


@pytest.mark.verl
@pytest.mark.ray
@pytest.mark.slow
def test_verls_own_logger_under_the_follower_as_a_ray_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         verl_python: Path) -> None:
    """The same launch through scheduler=ray: the follower is the job's entrypoint on a real head (loopback)."""
    from tests.support.helpers import require_module
    from tests.support.ray_head import RayHead
    from unirl.plugins.ray.scheduler import RayScheduler

    require_module("ray.job_submission", "pip install -e '.[ray,sweep]'")
    plan = verl_plan(tmp_path, monkeypatch, verl_python, "--val-steps", "3", steps=3)
    head = RayHead().start()
    try:
        result = RayScheduler().submit(plan, tmp_path / "run", {"address": head.address, "poll_s": 0.5})
    finally:
        head.stop()
    run_dir = tmp_path / "run"
    assert result.state == "completed", result.log_tail
    assert "unirl.adapters.follow" in json.loads((run_dir / "job.json").read_text())["submitted"]["entrypoint"]
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert json.loads((run_dir / "summary.json").read_text())["state"] == "completed"
    assert (run_dir / "curves.png").exists()


def test_a_slurm_script_runs_only_the_backend_under_the_follower_never_ray_start(tmp_path: Path) -> None:
    from unirl.plugins.slurm.scheduler import SlurmScheduler, render_script

    run_dir = tmp_path / "run"
    plan = VerlFramework().plan(gpu_recipe("verl", nodes=2)).resolve(str(run_dir))
    script = render_script(plan, run_dir, dict(SlurmScheduler.options), ray_based=True)
    ray_lines = [line for line in script.splitlines() if "ray.scripts.scripts" in line]
    assert ray_lines and not any("unirl.adapters.follow" in line for line in ray_lines)
    [start] = [line for line in script.splitlines() if "unirl.adapters.follow" in line]
    assert start.startswith(f"python -m unirl.adapters.follow --run-dir {run_dir} -- python -m verl.trainer.main_ppo")


@pytest.mark.verl
@pytest.mark.slurm
@pytest.mark.slow
def test_verls_own_logger_under_the_follower_as_a_slurm_job(slurm_cluster: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, verl_python: Path) -> None:
    """The same launch through scheduler=slurm: the batch script runs the follower, which runs the backend."""
    from unirl.plugins.slurm.scheduler import SlurmScheduler

    plan = verl_plan(tmp_path, monkeypatch, verl_python, steps=3)
    plan = replace(plan, environment=replace(plan.environment, gpus_per_node=0))  # the stand-in needs no GPU
    run_dir = tmp_path / "run"
    result = SlurmScheduler().submit(plan, run_dir, {**SlurmScheduler.options, "poll_s": 0.5})
    assert result.state == "completed", (result.error, result.log_tail)
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    assert json.loads((run_dir / "summary.json").read_text())["state"] == "completed"
    assert (run_dir / "curves.png").exists()


def test_a_resumed_verl_attempt_records_its_own_steps_only(tmp_path: Path) -> None:
    """A resumed run's follower reads its own attempt's verl file log: the steps of the attempt before are in
    metrics.jsonl already, and reading that attempt's file again wrote them twice (found by a resumed CPU run)."""
    from unirl.record.metrics_bridge import MetricsBridge
    from unirl.record.run_recorder import RunRecorder

    run_dir = tmp_path / "run"
    (run_dir / "native").mkdir(parents=True)
    lines = {1: [{"step": 1, "data": {"actor/pg_loss": 0.5}}, {"step": 2, "data": {"actor/pg_loss": 0.4}}],
             2: [{"step": 3, "data": {"actor/pg_loss": 0.3}}]}
    for attempt, rows in lines.items():
        (run_dir / "native" / f"verl_metrics.{attempt}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows))
    for attempt in (1, 2):
        bridge = MetricsBridge(run_dir, "verl", {"algorithm": {"steps": 3}},
                               RunRecorder(RunInfo(run_dir, "verl", {}), get_host().lifecycle), attempt=attempt)
        bridge.drain()
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
