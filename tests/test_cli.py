"""The command line as users type it: grammar, defaults, errors, and what it must not import."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_cli, run_console
from tests.support.helpers import run_dirs


def plan_json(*overrides: str) -> dict:
    out = run_cli("plan", "--json", *overrides)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_plus_framework_form_works_exactly_as_written() -> None:
    plan = plan_json("+framework=trl", "recipe=grpo_math")
    assert plan["framework"] == "trl"
    assert plan["entrypoint"] == "unirl.plugins.trl.runner:run"


def test_framework_without_plus_and_no_framework_at_all_give_the_same_plan() -> None:
    with_plus = plan_json("+framework=trl", "recipe=grpo_math")
    assert plan_json("framework=trl", "recipe=grpo_math") == with_plus
    assert plan_json("recipe=grpo_math") == with_plus  # the configured default is TRL
    assert plan_json() == with_plus  # and the default recipe is grpo_math


def test_unknown_framework_fails_before_anything_loads_and_lists_installed(isolated: Path) -> None:
    out = run_cli("+framework=nope", "recipe=grpo_math")
    assert out.returncode == 2
    assert "unknown framework 'nope'" in out.stderr
    assert "installed frameworks: " in out.stderr and "trl" in out.stderr and "verl" in out.stderr
    assert not (isolated / "runs").exists()  # no run directory was made


def test_unknown_framework_inside_a_sweep_is_caught_too() -> None:
    out = run_cli("-m", "+framework=trl,nope", "algorithm.steps=1")
    assert out.returncode == 2
    assert "unknown framework 'nope'" in out.stderr


def test_plan_prints_the_native_launch_in_human_form() -> None:
    out = run_console("plan", "algorithm.lr=1e-4")  # the installed console script, as its own process
    assert out.returncode == 0, out.stderr
    for text in ("learning_rate", "0.0001", "num_generations", "per_device_train_batch_size", "math_answer",
                 "builtin:arith@train"):
        assert text in out.stdout


def test_plan_is_pure_same_recipe_same_bytes() -> None:
    first = run_cli("plan", "--json", "seed=7")
    second = run_cli("plan", "--json", "seed=7")
    assert first.stdout == second.stdout


LIGHT_COMMANDS = [["--help"], ["plan"], ["plan", "--json"], ["plugins"], ["frameworks"]]


@pytest.fixture(scope="module")
def heavy_imports() -> dict[str, str]:
    """Each light command's exit status and the heavy packages imported once it ran, "0 []" when none.

    A fresh interpreter (this one has imported everything), shared by the commands in turn: a heavy import shows
    at the first command that makes it, as it would in an interpreter of its own.
    """
    probe = (
        "import sys, io, contextlib\n"
        "from unirl.cli.main import main\n"
        f"for args in {LIGHT_COMMANDS!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        rc = main(args)\n"
        "    heavy = sorted(m for m in ('torch', 'transformers', 'trl', 'ray', 'datasets', 'verl', 'openrlhf', 'vllm')"
        " if m in sys.modules)\n"
        "    print(' '.join(args), '|', rc, heavy, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    found = dict(line.split(" | ", 1) for line in out.stdout.splitlines() if " | " in line)
    return {" ".join(args): found.get(" ".join(args), f"did not run:\n{out.stderr[-2000:]}") for args in LIGHT_COMMANDS}


@pytest.mark.parametrize("args", LIGHT_COMMANDS)
def test_help_and_plan_import_no_heavy_package(args: list[str], heavy_imports: dict[str, str]) -> None:
    assert heavy_imports[" ".join(args)] == "0 []"


def test_help_lists_verbs_and_installed_options() -> None:
    out = run_console("--help")  # the installed console script, as its own process
    assert out.returncode == 0
    assert "plan [--json]" in out.stdout
    assert re.search(r"framework=\{[a-z_,]*trl[a-z_,]*\}", out.stdout)
    assert "recipe={base,grpo_math,grpo_tool,gsm8k_grpo,math_grpo}" in out.stdout  # the shipped recipes, sorted


def test_quiet_keeps_only_warnings_and_errors_on_stderr(isolated: Path) -> None:
    """unirl's status lines are log records: -q (before the overrides) or UNIRL_LOG_LEVEL=WARNING leaves the error."""
    normal = run_cli("data.train=./missing.jsonl")
    assert normal.returncode == 2
    assert "unirl: checking the recipe, its data and model" in normal.stderr
    assert "unirl: error: invalid recipe" in normal.stderr and "missing.jsonl': no such file" in normal.stderr
    for quiet in (run_cli("-q", "data.train=./missing.jsonl"), run_cli("--quiet", "data.train=./missing.jsonl"),
                  run_cli("data.train=./missing.jsonl", env={"UNIRL_LOG_LEVEL": "WARNING"})):
        assert quiet.returncode == 2
        assert "checking the recipe" not in quiet.stderr
        assert quiet.stderr.startswith("unirl: error: invalid recipe")
        assert "missing.jsonl': no such file" in quiet.stderr
    assert not (isolated / "runs").exists()


def test_verbose_shows_debug_messages_and_leaves_stdout_alone() -> None:
    normal = run_cli("plan", "--json")
    assert normal.returncode == 0 and normal.stderr == ""
    for flag in ("-v", "--verbose"):
        verbose = run_cli(flag, "plan", "--json")
        assert verbose.returncode == 0, verbose.stderr
        assert "unirl: verb plan, arguments: --json" in verbose.stderr
        assert "unirl: planned a trl run: python -m unirl.plugins.trl.runner" in verbose.stderr
        assert verbose.stdout == normal.stdout  # the plan itself is the command's output, not a message
    assert "-v, --verbose" in run_cli("--help").stdout and "-q, --quiet" in run_cli("--help").stdout


def test_typo_in_a_key_is_an_error_naming_the_key(isolated: Path) -> None:
    out = run_cli("algorithm.lrr=1e-4")
    assert out.returncode == 2
    assert "algorithm.lrr" in out.stderr
    assert not (isolated / "runs").exists()


def test_wrong_type_is_an_error_naming_field_and_value(isolated: Path) -> None:
    out = run_cli("algorithm.lr=fast")
    assert out.returncode == 2
    assert "algorithm.lr" in out.stderr and "fast" in out.stderr
    assert not (isolated / "runs").exists()


def test_user_recipe_file_is_selectable_by_path(isolated: Path) -> None:
    recipe = isolated / "my_recipe.yaml"
    recipe.write_text("run:\n  name: mine\nalgorithm:\n  lr: 2.0e-4\n  steps: 7\n")
    plan = plan_json(f"recipe={recipe}")
    assert plan["native_config"]["trainer_config"]["learning_rate"] == 2e-4
    assert plan["native_config"]["trainer_config"]["max_steps"] == 7
    missing = run_cli("plan", "recipe=./nope.yaml")
    assert missing.returncode == 2 and "no such recipe file" in missing.stderr


def test_frameworks_matrix_reports_installed_version() -> None:
    out = run_cli("frameworks", "--json")
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    from importlib.metadata import version

    assert rows["trl"]["installed"] == version("trl")
    assert rows["trl"]["runs_on_cpu"] is True


@pytest.mark.slow
def test_multirun_sweeps_lr_with_the_basic_launcher(isolated: Path) -> None:
    out = run_cli("-m", "algorithm.lr=1e-4,3e-4", "algorithm.steps=2", "algorithm.prompts_per_step=2",
                  "algorithm.samples_per_prompt=2", "eval.before_training=false", "data.eval_rows=2",
                  "logging.progress=false", "logging.plot=false")
    assert out.returncode == 0, out.stderr[-2000:]
    dirs = run_dirs(isolated / "runs" / "multirun")
    assert len(dirs) == 2
    lrs = sorted(json.loads((d / "native_config.json").read_text())["trainer_config"]["learning_rate"] for d in dirs)
    assert lrs == [1e-4, 3e-4]
    assert all(json.loads((d / "summary.json").read_text())["state"] == "completed" for d in dirs)
    assert (dirs[0].parent / "multirun.yaml").exists()
