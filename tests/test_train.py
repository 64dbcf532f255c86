"""Real GRPO training through unirl on the CPU: the model learns, and the run directory records it all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli, run_console
from tests.support.helpers import read_jsonl, run_dirs

pytestmark = pytest.mark.train


@pytest.fixture(scope="module")
def learned_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default, shortened, with a fixed seed (CPU training is bit-for-bit deterministic)."""
    root = tmp_path_factory.mktemp("learn")
    out = run_cli("recipe=grpo_math", "seed=0", "algorithm.steps=600", "eval.every_steps=300",
                  "eval.stop_at_accuracy=null", "eval.stop_after_plateau=null",  # every step runs
                  "logging.progress=false", env={"UNIRL_RUNS_DIR": str(root / "runs")}, cwd=root)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (root / "stdout.txt").write_text(out.stdout)
    [run_dir] = run_dirs(root / "runs")
    return run_dir


def test_held_out_accuracy_rises_clearly_above_its_start(learned_run: Path) -> None:
    summary = json.loads((learned_run / "summary.json").read_text())
    assert summary["state"] == "completed"
    assert summary["accuracy_before"] <= 0.1  # a random model solves (almost) nothing
    # 600 steps (a fifth of the default) reach 5/11 with this seed; 3/11 leaves room for other CPUs' float order
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.25
    # not a collapse onto one answer: greedy answers differ across held-out prompts
    assert summary["distinct_completions"] >= 3
    rewards = [m["reward/total/mean"] for m in read_jsonl(learned_run / "metrics.jsonl")]
    assert sum(rewards[-50:]) / 50 > 2 * sum(rewards[:50]) / 50


def test_summary_printed_for_the_user(learned_run: Path) -> None:
    stdout = (learned_run.parents[2] / "stdout.txt").read_text()
    assert "held-out accuracy (11 prompts, greedy): 0.000 ->" in stdout
    assert "reward by tenth of training:" in stdout
    assert f"run directory: {learned_run}" in stdout


def test_run_directory_holds_every_artifact(learned_run: Path) -> None:
    for name in ("manifest.json", "plan.json", "native_config.json", "trajectories.jsonl", "metrics.jsonl",
                 "eval.jsonl", "summary.json", "curves.png", ".hydra/config.yaml", ".hydra/overrides.yaml"):
        assert (learned_run / name).is_file(), name
    assert (learned_run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    manifest = json.loads((learned_run / "manifest.json").read_text())
    assert manifest["versions"]["trl"] and manifest["versions"]["torch"] and manifest["versions"]["transformers"]
    assert len(manifest["model"]["weights_sha256"]) == 64
    assert len(manifest["data"]["train_sha256"]) == 64 and manifest["data"]["eval_rows"] == 11
    assert manifest["rewards"]["math_answer"]["plugin"] == "rewards"
    assert manifest["seed"] == 0 and "hostname" in manifest["host"]
    native = json.loads((learned_run / "native_config.json").read_text())
    assert native["trainer_config"]["use_cpu"] is True and native["trainer_config"]["learning_rate"] == 1e-3


def test_every_reward_component_reaches_trajectories_and_metrics(learned_run: Path) -> None:
    trajectories = read_jsonl(learned_run / "trajectories.jsonl")
    # the embedded recipe keeps step 1 and every 10th step (logging.trajectories_every=10), each whole
    kept_steps = {1, *range(10, 601, 10)}
    assert len(trajectories) == len(kept_steps) * 8 * 16  # no torn or missing lines
    keys = {tuple(sorted(t["scores"])) for t in trajectories}
    assert keys == {("bare_number", "math_answer", "numeric_closeness")}
    assert {tuple(t["components"]) for t in trajectories} == {("math_answer/has_answer",)}
    assert {t["step"] for t in trajectories} == kept_steps
    metrics = read_jsonl(learned_run / "metrics.jsonl")
    assert [m["step"] for m in metrics] == list(range(1, 601))
    for key in ("reward/total/mean", "reward/math_answer/mean", "reward/bare_number/mean",
                "reward/numeric_closeness/mean", "reward/math_answer/has_answer", "reward/errors", "loss", "entropy"):
        assert key in metrics[-1], key
    evals = [e for e in read_jsonl(learned_run / "eval.jsonl") if e["kind"] == "summary"]
    assert [e["step"] for e in evals] == [0, 300, 600]


def test_a_local_model_directory_and_jsonl_data_train_like_a_users_run(isolated: Path) -> None:
    """The real users' path: model.path=<local dir> via from_pretrained, data from JSONL with own keys."""
    from unirl.data.builtin import tiny_model

    model_dir = tiny_model.save("tiny-arith", seed=1, out_dir=isolated / "my-model")
    rows = [{"question": f"{a}+{b}=", "solution": str(a + b)} for a in range(5) for b in range(5)]
    (isolated / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (isolated / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    # The installed console script as its own process: one real training run exactly as a user starts it.
    out = run_console(f"model.path={model_dir}", "data.train=train.jsonl", "data.eval=test.jsonl",
                      "data.prompt_key=question", "data.answer_key=solution", "algorithm.steps=3",
                      "algorithm.prompts_per_step=4", "algorithm.samples_per_prompt=4", "algorithm.max_new_tokens=3",
                      cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "step 3/3  reward" in out.stderr  # progress, as plain lines when not on a terminal
    [run_dir] = run_dirs(isolated / "runs")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["model"]["id"] == str(model_dir)
    assert manifest["data"]["train_rows"] == 25 and manifest["data"]["eval_rows"] == 6
    assert {t["reference"] for t in read_jsonl(run_dir / "trajectories.jsonl")} <= {r["solution"] for r in rows}


def test_a_raising_reward_is_counted_and_logged_and_can_abort_the_run(isolated: Path) -> None:
    (isolated / "unirlfile.py").write_text(
        "import unirl\n\n"
        "@unirl.hookimpl\n"
        "def unirl_add_rewards(registry):\n"
        "    registry.add(flaky)\n\n"
        "@unirl.reward('flaky')\n"
        "def flaky(sample):\n"
        "    if sample.completion.startswith('1'):\n"
        "        raise ValueError('grader bug on ' + sample.completion)\n"
        "    return 0.0\n")
    common = ["rewards=[{name:math_answer},{name:flaky}]", "algorithm.steps=3", "algorithm.prompts_per_step=4",
              "algorithm.samples_per_prompt=4", "eval.before_training=false", "logging.progress=false"]
    out = run_cli(*common, "reward_policy.max_error_rate=1.0", cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    trajectories = read_jsonl(run_dir / "trajectories.jsonl")
    failed = [t for t in trajectories if t["errors"]]
    assert failed, "the random policy emits completions starting with 1"
    assert all(t["scores"]["flaky"] is None and t["total"] is None for t in failed)
    assert all("grader bug on" in t["errors"]["flaky"] for t in failed)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reward_errors"] == len(failed)
    assert sum(m["reward/errors"] for m in read_jsonl(run_dir / "metrics.jsonl")) == len(failed)

    aborted = run_cli(*common, "reward_policy.on_error=abort", "hydra.run.dir=runs/aborted", cwd=isolated)
    assert aborted.returncode == 1
    assert "reward 'flaky' failed and reward_policy.on_error=abort" in aborted.stderr
    assert json.loads((isolated / "runs/aborted/summary.json").read_text())["state"] == "failed"


def test_ctrl_c_stops_the_run_cleanly_and_keeps_what_was_written(isolated: Path) -> None:
    """Its own process: Ctrl-C (SIGINT) goes to the whole command, which this test process must not be."""
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "unirl.cli", "algorithm.steps=3000", "eval.before_training=false",
                             "logging.progress=false"], cwd=isolated, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "UNIRL_RUNS_DIR": str(isolated / "runs")})
    deadline = time.monotonic() + 120
    metrics: list[Path] = []
    while time.monotonic() < deadline and not metrics:
        metrics = list((isolated / "runs").rglob("metrics.jsonl"))
        time.sleep(0.5)
    assert metrics, "training never started"
    time.sleep(2)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]
    run_dir = metrics[0].parent
    assert json.loads((run_dir / "summary.json").read_text())["state"] == "interrupted"
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]  # every line parses: nothing torn
    assert steps == list(range(1, len(steps) + 1)) and 0 < len(steps) < 3000


def test_a_backend_in_another_interpreter_runs_as_a_child_process(isolated: Path) -> None:
    """framework.python points at the backend's interpreter: the local scheduler launches the plan's command there."""
    import sys

    out = run_cli(f"framework.python={sys.executable}", "algorithm.steps=2", "algorithm.prompts_per_step=2",
                  "algorithm.samples_per_prompt=4", "eval.before_training=false", "logging.progress=false",
                  cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["in_process"] is False and plan["environment"]["python"] == sys.executable
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["argv"][0].endswith("unirl/plugins/trl/runner.py")  # it ran in the child, not in unirl's process
    assert json.loads((run_dir / "summary.json").read_text())["state"] == "completed"


def test_a_reward_file_named_in_the_recipe_trains_and_a_hung_call_times_out(isolated: Path) -> None:
    (isolated / "my_rewards.py").write_text(
        "import unirl\n\n"
        "@unirl.reward('shape', components=('digits', 'chars'))\n"
        "def shape(sample):\n"
        "    if '3' in sample.completion:\n"
        "        while True:  # a grader stuck in a loop: only killing its process stops it\n"
        "            pass\n"
        "    digits = sum(c.isdigit() for c in sample.completion)\n"
        "    return unirl.RewardResult(float(digits == 1), {'digits': float(digits),\n"
        "                              'chars': float(len(sample.completion))})\n")
    out = run_cli("rewards=[{name:math_answer},{name:shape,weight:0.5,file:./my_rewards.py}]",
                  "reward_policy.workers=2", "reward_policy.timeout_s=1", "reward_policy.max_error_rate=1.0",
                  "algorithm.steps=3",
                  "algorithm.prompts_per_step=4", "algorithm.samples_per_prompt=4", "eval.before_training=false",
                  "logging.progress=false", cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    trajectories = read_jsonl(run_dir / "trajectories.jsonl")
    assert {tuple(t["components"]) for t in trajectories} == {("math_answer/has_answer", "shape/digits", "shape/chars")}
    hung = [t for t in trajectories if t["errors"]]
    assert hung and all("3" in t["completion"] for t in hung), "the random policy (seed 0) writes some 3s"
    assert all(t["error_kinds"] == {"shape": "timeout"} and "within 1 s" in t["errors"]["shape"] for t in hung)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert all("reward/shape/digits" in m and "reward/shape/chars" in m for m in metrics)
    assert sum(m["reward/errors/timeout"] for m in metrics) == len(hung)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["reward_errors_by_kind"] == {"timeout": len(hung)}
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["rewards"]["shape"]["file"] == str(isolated / "my_rewards.py")


def test_the_runs_messages_reach_its_cli_log_and_the_terminal(isolated: Path) -> None:
    """unirl's messages go to stderr as always and, through Hydra's job logging, into the run directory's cli.log,
    those from before Hydra started (the preflight) included; -q quiets the terminal, not the record."""
    short = ("algorithm.steps=2", "eval.every_steps=0")
    messages = ("checking the recipe, its data and model, and the backend's own validation",
                "loading rewards: math_answer, numeric_closeness, bare_number",
                "loading the model builtin:tiny-arith")
    out = run_cli(*short, "hydra.run.dir=runs/logged", cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    log = (isolated / "runs/logged/cli.log").read_text()
    for message in messages:
        assert f"unirl: {message}\n" in out.stderr
        assert f"[INFO] - {message}\n" in log
    assert "][unirl.plugins.trl.runner][INFO] - loading the model builtin:tiny-arith" in log
    assert "[INFO]" not in out.stdout and "[INFO]" not in out.stderr  # the file's format stays in the file
    assert "run directory:" in out.stdout  # the summary is the command's output

    quiet = run_cli("-q", *short, "hydra.run.dir=runs/quiet", cwd=isolated)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert not any(message in quiet.stderr for message in messages)
    quiet_log = (isolated / "runs/quiet/cli.log").read_text()
    assert all(f"[INFO] - {message}\n" in quiet_log for message in messages)

    verbose = run_cli("-v", *short, "hydra.run.dir=runs/verbose", cwd=isolated)
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    assert "unirl: submitting the trl run to the local scheduler in" in verbose.stderr
    assert "][unirl.cli.run][DEBUG] - submitting the trl run to the local scheduler in" in \
        (isolated / "runs/verbose/cli.log").read_text()


def test_a_backend_child_process_inherits_the_verbosity(isolated: Path) -> None:
    """-q reaches the backend's own interpreter through UNIRL_LOG_LEVEL: its status lines are left out there too."""
    import sys

    child = (f"framework.python={sys.executable}", "algorithm.steps=1", "algorithm.prompts_per_step=2",
             "algorithm.samples_per_prompt=4", "eval.before_training=false", "eval.every_steps=0")
    out = run_cli(*child, "hydra.run.dir=runs/child", cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "unirl: loading the model builtin:tiny-arith" in (isolated / "runs/child/backend.log").read_text()
    quiet = run_cli("-q", *child, "hydra.run.dir=runs/child_quiet", cwd=isolated)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert "loading the model" not in quiet.stdout + quiet.stderr
    assert "loading the model" not in (isolated / "runs/child_quiet/backend.log").read_text()


def test_epochs_per_batch_reuse_each_rollout_batch_instead_of_skipping_steps(isolated: Path) -> None:
    """algorithm.steps counts rollout batches on every backend (`unirl explain algorithm.steps`). TRL generates once
    every steps_per_generation x num_iterations micro-steps (trl 1.16 trl/trainer/grpo_trainer.py:1538-1539), so 6
    steps at epochs_per_batch=2 are 12 optimizer updates and 6 generations of 8 x 16 completions, at steps 1..6."""
    out = run_cli("algorithm.steps=6", "algorithm.epochs_per_batch=2", "logging.trajectories_every=1",
                  "eval.before_training=false", "logging.progress=false", cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    trajectories = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(trajectories) == 6 * 8 * 16
    assert [sum(t["step"] == s for t in trajectories) for s in range(1, 7)] == [128] * 6
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed"
    assert (summary["steps"], summary["rollout_batches"], summary["updates"]) == (6, 6, 12)
    assert summary["completions"] == 768 and summary["updates_expected"] == 12
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    native = json.loads((run_dir / "native_config.json").read_text())["trainer_config"]
    assert (native["max_steps"], native["num_iterations"]) == (12, 2)


def test_a_run_cut_short_by_a_raw_max_steps_says_what_ran(isolated: Path) -> None:
    """The summary counts what happened: 2 of 6 rollout batches, not the recipe's 6."""
    out = run_cli("algorithm.steps=6", "algorithm.epochs_per_batch=2", "+framework.overrides.max_steps=4",
                  "eval.before_training=false", "logging.progress=false", cwd=isolated)
    assert out.returncode == 1
    [run_dir] = run_dirs(isolated / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "failed"
    assert (summary["steps"], summary["steps_expected"], summary["rollout_batches"], summary["updates"]) == (2, 6, 2, 4)
    assert "4 of 12 optimizer updates" in summary["error"] and "2 of 6 rollout batches" in summary["error"]
