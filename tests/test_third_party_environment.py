"""A real third-party environment package (examples/unirl-env-example), installed with pip, found by entry point,
replayed by ``unirl env test`` and trained a few steps on TRL."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_console
from tests.support.helpers import read_jsonl, run_dirs

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "unirl-env-example"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> str:
    """pip-install the example into its own target directory (the test venv stays untouched)."""
    target = tmp_path_factory.mktemp("envsite")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(EXAMPLE)], check=True, capture_output=True, text=True)
    return str(target)


def with_site(site: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH", "")) if p)}


def test_installed_environment_is_listed_with_its_distribution(site: str, isolated: Path) -> None:
    out = run_console("environments", "--json", env=with_site(site), cwd=isolated)
    assert out.returncode == 0, out.stderr
    row = {r["name"]: r for r in json.loads(out.stdout)}["higher_lower"]
    assert (row["distribution"], row["version"], row["plugin"]) == ("unirl-env-example", "0.1.0", "env_example")
    assert row["metrics"] == ["guesses", "solved", "invalid"] and row["max_turns"] == 4


def test_env_test_replays_guesses_against_the_hidden_digit(site: str, isolated: Path) -> None:
    secret = random.Random(0).randrange(10)  # the episode's digit: the environment draws it from the task's seed
    wrong = "9" if secret != 9 else "0"
    (isolated / "tasks.jsonl").write_text('{"prompt": "?", "seed": 0}\n')
    (isolated / "actions.jsonl").write_text(json.dumps({"turns": [wrong, str(secret)]}) + "\n")
    out = run_console("env", "test", "higher_lower", "--tasks", "tasks.jsonl", "--actions", "actions.jsonl", "--json",
                      env=with_site(site), cwd=isolated)
    assert out.returncode == 0, out.stderr
    [episode] = [json.loads(line) for line in out.stdout.splitlines()]
    assert [t["observation"] for t in episode["turns"]] == ["-" if secret < int(wrong) else "+", None]
    assert episode["return"] == pytest.approx(0.9) and episode["termination"] == "done"
    assert episode["metrics"]["solved"] == 1.0 and episode["metrics"]["guesses"] == 2.0


@pytest.mark.train
def test_a_recipe_trains_a_few_steps_on_the_installed_environment(site: str, isolated: Path) -> None:
    # grpo_tool's lookup arguments do not apply: removed, as a user would (a leftover one is refused at plan time)
    refused = run_console("plan", "recipe=grpo_tool", "environment.name=higher_lower", env=with_site(site),
                          cwd=isolated)
    assert refused.returncode == 2 and "environment.kwargs=" in refused.stderr and "step_cost" in refused.stderr
    out = run_console("recipe=grpo_tool", "environment.name=higher_lower", "~environment.kwargs.tool",
                      "~environment.kwargs.keyed",
                      "algorithm.steps=3", "algorithm.prompts_per_step=4", "algorithm.samples_per_prompt=4",
                      "eval.every_steps=0", "eval.before_training=false", "logging.progress=false",
                      "logging.plot=false", "logging.trajectories_every=1", env=with_site(site), cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert {r["episode"]["environment"] for r in records} == {"higher_lower"}
    assert {r["step"] for r in records} == {1, 2, 3}
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert any("env/guesses" in m for m in metrics) and any("env/solved" in m for m in metrics)
