"""Resume: a run killed mid-training continues from its newest checkpoint, and its directory reads as one run."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import read_jsonl
from unirl.launch.resume import latest_trainer_checkpoint, resume_overrides
from unirl.record.layout import append_jsonl, truncate_after
from unirl.record.layout import read_jsonl as read_jsonl_of_run

STEPS = 12
PROMPTS = 2
SAMPLES = 4
CHECKPOINT_EVERY = 4
EVAL_EVERY = 3
RUN = ["algorithm.steps=12", "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=4",
       "algorithm.mini_batches_per_step=2", "run.checkpoint_every=4", "eval.every_steps=3", "data.eval_rows=3",
       "logging.progress=false", "logging.plot=false", "logging.trajectories_every=1"]
# A step of the tiny model takes ~40 ms: too quick to kill between two checkpoints. A hook that sleeps after each
# logged step gives the test a window of a few hundred ms per step, and changes nothing else about the run.
SLOW_STEPS = ("import time\n\nimport unirl\n\n\n"
              "@unirl.hookimpl\n"
              "def unirl_metrics(run, step, metrics):\n"
              "    time.sleep(0.3)\n")


def _steps(path: Path) -> list[int]:
    return [r["step"] for r in read_jsonl(path)]


def _kill_after_first_checkpoint(cwd: Path, run_dir: Path) -> None:
    """Start the run as the user would and SIGKILL its whole process group once it has logged past a checkpoint."""
    proc = subprocess.Popen([sys.executable, "-m", "unirl.cli.main", *RUN, f"hydra.run.dir={run_dir}"], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    metrics = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if metrics.exists() and max(_steps(metrics), default=0) > CHECKPOINT_EVERY:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "the run never logged past its first checkpoint"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # no chance to clean up: what a lost node or the OOM killer does
        proc.wait(timeout=60)


@pytest.mark.train
@pytest.mark.slow
def test_a_killed_run_resumes_from_its_checkpoint_without_duplicated_or_torn_lines(isolated: Path) -> None:
    (isolated / "unirlfile.py").write_text(SLOW_STEPS)
    run_dir = isolated / "runs" / "killed"
    _kill_after_first_checkpoint(isolated, run_dir)
    assert not (run_dir / "summary.json").exists()
    checkpoint = latest_trainer_checkpoint(run_dir / "trl")
    assert checkpoint is not None
    # mini_batches_per_step=2: TRL's global_step counts two optimizer updates per unirl step
    checkpoint_step = checkpoint.global_step // 2
    assert checkpoint_step % CHECKPOINT_EVERY == 0 and checkpoint_step < STEPS
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "trainer_state.json", "model.safetensors"):
        assert (checkpoint.path / name).is_file(), name
    assert max(_steps(run_dir / "metrics.jsonl")) > checkpoint_step, "the kill left steps after the checkpoint"
    # What else a kill can leave: a checkpoint folder cut off mid-save, and a line cut off mid-write.
    (run_dir / "trl" / "checkpoint-22").mkdir()
    (run_dir / "trl" / "checkpoint-22" / "optimizer.pt").write_bytes(b"partial")
    with (run_dir / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 7, "reward/total/me')

    overrides = resume_overrides(run_dir)
    assert overrides[-2:] == ["run.resume=true", f"hydra.run.dir={run_dir.resolve()}"]
    out = run_cli(*overrides, cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]

    metrics = read_jsonl(run_dir / "metrics.jsonl")  # every line parses
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    trajectories = read_jsonl(run_dir / "trajectories.jsonl")
    per_step = collections.Counter(t["step"] for t in trajectories)
    # each logged step's completions once (the recipe may log only some steps: logging.trajectories_every)
    assert per_step and set(per_step.values()) == {PROMPTS * SAMPLES} and set(per_step) <= set(range(1, STEPS + 1))
    per_prompt = collections.Counter((t["step"], t["prompt"]) for t in trajectories)
    assert all(count % SAMPLES == 0 for count in per_prompt.values())
    evals = [e for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "summary"]
    # before training once (the resume does not evaluate the start again), then every 3 steps and at the end
    assert [e["step"] for e in evals] == [0, *range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed"
    assert summary["resumed_from"]["step"] == checkpoint_step
    assert summary["resumed_from"]["checkpoint"] == str(checkpoint.path)
    assert summary["accuracy_before"] == evals[0]["accuracy"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["resumed_from"]["global_step"] == checkpoint.global_step
    last = latest_trainer_checkpoint(run_dir / "trl")
    assert last is not None and last.global_step == STEPS * 2

    # TRL restores weights, optimizer, scheduler and RNG: on the CPU the resumed run is the uninterrupted one, exactly
    (isolated / "unirlfile.py").unlink()
    whole = run_cli(*RUN, "hydra.run.dir=runs/whole", cwd=isolated)
    assert whole.returncode == 0, whole.stderr[-3000:]
    reference = read_jsonl(isolated / "runs/whole/metrics.jsonl")
    assert [(m["reward/total/mean"], m["loss"]) for m in metrics] == [(m["reward/total/mean"], m["loss"])
                                                                       for m in reference]
    whole_trajectories = read_jsonl(isolated / "runs/whole/trajectories.jsonl")
    assert per_step == collections.Counter(t["step"] for t in whole_trajectories)  # the same steps, once each
    assert [t["completion"] for t in trajectories] == [t["completion"] for t in whole_trajectories]

    # The resume says so, measured: the steps the killed run logged after its checkpoint came out the same.
    assert summary["resumed_from"]["bit_identical"] is True
    assert summary["resumed_from"]["compared_steps"] >= 1
    assert summary["resumed_from"]["not_bit_identical_because"] == []
    assert summary["resumed_from"]["skipped_checkpoints"][0]["reason"].startswith("no trainer_state.json")
    assert not (run_dir / "trl" / "checkpoint-22").exists()  # the torn save was set aside, out of TRL's way
    assert not (run_dir / ".unirl.lock").exists()

    # A completed run resumed: it says so, runs nothing, and leaves every file as it was (no final eval again).
    whole_dir = isolated / "runs/whole"
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in whole_dir.rglob("*") if p.is_file()}
    again = run_cli("resume", str(whole_dir), cwd=isolated)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already completed" in again.stdout and "nothing was run again" in again.stdout
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in whole_dir.rglob("*") if p.is_file()} == before


# Kills the run (its whole process group, no cleanup) once the final held-out eval is done: after the last
# checkpoint, before summary.json.
KILL_IN_FINAL_EVAL = ("import os\nimport signal\n\nimport unirl\n\n\n"
                      "@unirl.hookimpl\n"
                      "def unirl_eval_done(run, step, summary, records):\n"
                      "    final = run.recipe['algorithm']['steps']\n"
                      "    if os.environ.get('UNIRL_TEST_KILL_FINAL_EVAL') and step == final:\n"
                      "        os.killpg(0, signal.SIGKILL)\n")


@pytest.mark.train
@pytest.mark.slow
def test_a_run_killed_in_its_final_eval_resumes_without_training_again(isolated: Path) -> None:
    (isolated / "unirlfile.py").write_text(KILL_IN_FINAL_EVAL)
    run_dir = isolated / "runs" / "final"
    proc = subprocess.run([sys.executable, "-m", "unirl.cli.main", *RUN, f"hydra.run.dir={run_dir}"], cwd=isolated,
                          capture_output=True, text=True, timeout=600, start_new_session=True,
                          env={**os.environ, "UNIRL_TEST_KILL_FINAL_EVAL": "1"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert not (run_dir / "summary.json").exists()
    trained = {name: (run_dir / name).read_bytes() for name in ("metrics.jsonl", "trajectories.jsonl")}

    out = run_cli("resume", str(run_dir), cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    # Nothing left to train: the final eval runs once more, on the last checkpoint's weights, and nothing else.
    assert {name: (run_dir / name).read_bytes() for name in trained} == trained
    evals = [e["step"] for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "summary"]
    assert evals == [0, *range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["resumed_from"]["step"] == STEPS
    assert summary["updates"] == STEPS * 2
    last = latest_trainer_checkpoint(run_dir / "trl")
    assert last is not None and last.global_step == STEPS * 2  # no extra update


@pytest.mark.train
@pytest.mark.slow
def test_resume_of_a_run_stopped_before_its_first_checkpoint_starts_it_again(isolated: Path) -> None:
    fresh = run_cli(*RUN[:3], "run.resume=true", "hydra.run.dir=runs/fresh", cwd=isolated)
    assert fresh.returncode == 2, fresh.stderr[-3000:]  # nothing there at all: refused, naming the directory
    assert "run.resume=true: no complete checkpoint" in fresh.stderr and "runs/fresh" in fresh.stderr

    # an earlier run killed before its first complete save (its only checkpoint cut off mid-save, two steps logged):
    # the resume starts it again from step 0 in its own directory, and says so
    partial = isolated / "runs" / "partial"
    (partial / ".hydra").mkdir(parents=True)
    (partial / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in RUN[:3]))
    (partial / "trl" / "checkpoint-4").mkdir(parents=True)
    (partial / "trl" / "checkpoint-4" / "model.safetensors").write_bytes(b"partial")
    (partial / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.4}\n')
    resumed = run_cli(*resume_overrides(partial), cwd=isolated)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "the run was stopped before its first save; it starts again from step 0" in resumed.stderr
    summary = json.loads((partial / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["steps"] == STEPS
    restart = summary["resumed_from"]
    assert restart["checkpoint"] is None and restart["step"] == 0 and "restarted" in restart
    assert restart["skipped_checkpoints"][0]["reason"].startswith("no trainer_state.json")
    # the two steps logged before the kill were compared with the new run's (they differ: made-up numbers)
    assert restart["compared_steps"] == 2 and restart["bit_identical"] is False
    assert restart["first_difference"]["step"] == 1
    assert [m["step"] for m in read_jsonl(partial / "metrics.jsonl")] == list(range(1, STEPS + 1))  # once each


def test_truncate_after_drops_later_steps_and_a_torn_last_line_atomically(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": 0, "kind": "summary"}, {"step": 1}, {"step": 2}, {"note": "no step"}, {"step": 3}, {"step": 2.0}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"step": 4, "loss": 0.')
    inode = path.stat().st_ino

    assert truncate_after(path, 2) == 2  # step 3, and the torn line
    assert read_jsonl(path) == [{"step": 0, "kind": "summary"}, {"step": 1}, {"step": 2}, {"note": "no step"},
                                {"step": 2.0}]
    assert path.stat().st_ino != inode  # replaced, not rewritten in place
    assert not list(tmp_path.glob("*.tmp"))

    assert truncate_after(path, 2) == 0  # nothing more to drop: the file is left alone
    assert truncate_after(tmp_path / "missing.jsonl", 2) == 0
    unusual = tmp_path / "trajectories.jsonl"  # JSON leaves these line separators raw inside strings
    append_jsonl(unusual, [{"step": 1, "completion": "a\u2028b\x85c\rd"}, {"step": 2, "completion": "e"}])
    assert truncate_after(unusual, 1) == 1
    assert read_jsonl_of_run(unusual) == [{"step": 1, "completion": "a\u2028b\x85c\rd"}]
    complete_but_unterminated = tmp_path / "eval.jsonl"
    complete_but_unterminated.write_text('{"step": 1}\n{"step": 1}')
    assert truncate_after(complete_but_unterminated, 5) == 0
    assert complete_but_unterminated.read_text() == '{"step": 1}\n{"step": 1}\n'  # the next append starts a line
    assert truncate_after(complete_but_unterminated, 0) == 2
    assert complete_but_unterminated.read_text() == ""


def test_resume_overrides_repeat_the_runs_command_with_resume_and_its_directory(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "my run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "overrides.yaml").write_text(
        "- algorithm.steps=12\n- run.resume=false\n- rewards=[{name:math_answer}]\n")
    assert resume_overrides(run_dir) == ["algorithm.steps=12", "rewards=[{name:math_answer}]", "run.resume=true",
                                         f"hydra.run.dir='{run_dir.resolve()}'"]


@pytest.mark.train
def test_a_resume_in_a_later_epoch_draws_the_prompts_the_uninterrupted_run_drew(isolated: Path) -> None:
    """8 prompts, 4 a step: an epoch every 2 steps. Resumed from step 4 (the third epoch), the run trains on the
    third epoch's order, not the first's again (TRL's sampler alone restarts its shuffle: the default recipe resumed
    from checkpoint-300 used to diverge from step 301), and says so, measured."""
    import shutil

    short = ["algorithm.steps=6", "algorithm.prompts_per_step=4", "data.train_rows=8", "run.checkpoint_every=2",
             "eval.every_steps=0", "logging.progress=false", "logging.plot=false", "logging.trajectories_every=1"]
    whole = run_cli(*short, "hydra.run.dir=runs/whole", cwd=isolated)
    assert whole.returncode == 0, whole.stderr[-3000:]
    cut = isolated / "runs" / "cut"
    shutil.copytree(isolated / "runs" / "whole", cut)
    shutil.rmtree(cut / "trl" / "checkpoint-6")  # as if stopped after step 6 was logged, before its save
    for name in ("summary.json", "outcome.json"):
        (cut / name).unlink()
    resumed = run_cli("resume", str(cut), cwd=isolated)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["resumed_from"]["step"] == 4
    assert summary["resumed_from"]["bit_identical"] is True and summary["resumed_from"]["compared_steps"] == 2
    prompts = [[t["prompt"] for t in read_jsonl(d / "trajectories.jsonl") if t["step"] > 4] for d in
               (isolated / "runs" / "whole", cut)]
    assert prompts[0] == prompts[1]
