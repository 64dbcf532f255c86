"""A real third-party package (examples/unirl-reward-example), installed with pip, found by entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_console as run_cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "unirl-reward-example"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> str:
    """pip-install the example into its own target directory (the test venv stays untouched)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(target), str(EXAMPLE)], check=True, capture_output=True, text=True)
    return str(target)


def with_site(site: str, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH", "")) if p), **extra}


def test_installed_package_is_listed_with_its_distribution_and_version(site: str) -> None:
    out = run_cli("plugins", "--json", env=with_site(site))
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["reward_example"]["distribution"] == "unirl-reward-example"
    assert rows["reward_example"]["version"] == "0.2.0"
    assert rows["reward_example"]["hooks"] == ["unirl_add_rewards"]
    rewards = {r["name"]: r for r in json.loads(run_cli("rewards", "--json", env=with_site(site)).stdout)}
    assert rewards["brevity"]["plugin"] == "reward_example"
    assert (rewards["brevity"]["distribution"], rewards["brevity"]["version"]) == ("unirl-reward-example", "0.2.0")
    assert rewards["brevity"]["components"] == ["chars"]


def test_its_reward_scores_samples_with_recipe_kwargs(site: str, isolated: Path) -> None:
    samples = isolated / "s.jsonl"
    samples.write_text('{"completion": ""}\n{"completion": "four"}\n{"completion": "a much longer answer"}\n')
    out = run_cli("reward", "test", "brevity", "--samples", str(samples), "--kwargs", '{"brevity": {"limit": 8}}',
                  "--json", env=with_site(site))
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["scores"]["brevity"] for r in rows] == [1.0, 0.5, 0.0]
    assert [r["components"]["brevity/chars"] for r in rows] == [0.0, 4.0, 20.0]


def test_a_recipe_can_use_it_and_the_autoload_switch_keeps_it_out(site: str) -> None:
    recipe = ["plan", "--json", "rewards=[{name:math_answer},{name:brevity,weight:0.1,kwargs:{limit:8}}]"]
    plan = json.loads(run_cli(*recipe, env=with_site(site)).stdout)
    assert plan["native_config"]["reward_funcs"][1] == {"name": "brevity", "weight": 0.1, "kwargs": {"limit": 8}}
    assert plan["native_config"]["trainer_config"]["reward_weights"] == [1.0, 0.1]
    off = run_cli(*recipe, env=with_site(site, UNIRL_DISABLE_PLUGIN_AUTOLOAD="1"))
    assert off.returncode == 2 and "rewards[1].name='brevity'" in off.stderr
    named = run_cli(*recipe, env=with_site(site, UNIRL_DISABLE_PLUGIN_AUTOLOAD="1", UNIRL_PLUGINS="reward_example"))
    assert named.returncode == 0, named.stderr
    blocked = run_cli("rewards", "--json", env=with_site(site, UNIRL_PLUGINS_BLOCK="reward_example"))
    assert "brevity" not in [r["name"] for r in json.loads(blocked.stdout)]
