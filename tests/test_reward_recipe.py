"""Rewards in a recipe: local reward files, the reward policy fields, and their errors before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.cli import run_cli


def test_a_reward_file_named_in_the_recipe_registers_its_rewards(isolated: Path) -> None:
    (isolated / "r.py").write_text("import unirl\n\n@unirl.reward('mine')\ndef mine(sample):\n    return 1.0\n")
    out = run_cli("plan", "--json", "rewards=[{name:mine,file:./r.py}]", "eval.accuracy_reward=mine")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["recipe"]["rewards"] == [{"name": "mine", "weight": 1.0, "kwargs": {},
                                                             "file": "./r.py", "inline": None}]


def test_a_missing_or_broken_reward_file_is_named(isolated: Path) -> None:
    missing = run_cli("plan", "rewards=[{name:mine,file:./nope.py}]")
    assert missing.returncode == 2
    assert "rewards[0].file='./nope.py': an existing Python file" in missing.stderr
    (isolated / "broken.py").write_text("raise RuntimeError('typo in my reward')\n")
    broken = run_cli("plan", "rewards=[{name:mine,file:./broken.py}]")
    assert broken.returncode == 2
    assert "rewards[0].file='./broken.py'" in broken.stderr and "typo in my reward" in broken.stderr
    (isolated / "other.py").write_text("import unirl\n\n@unirl.reward('other')\ndef other(sample):\n    return 1.0\n")
    unknown = run_cli("plan", "rewards=[{name:mine,file:./other.py}]")
    assert unknown.returncode == 2 and "rewards[0].name='mine'" in unknown.stderr and "other" in unknown.stderr


def test_reward_policy_values_are_checked_all_at_once() -> None:
    out = run_cli("plan", "reward_policy.on_error=zero", "reward_policy.timeout_s=0", "reward_policy.workers=-1")
    assert out.returncode == 2
    for expected in ("reward_policy.on_error='zero'", "reward_policy.timeout_s=0", "reward_policy.workers=-1"):
        assert expected in out.stderr
