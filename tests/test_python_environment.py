"""The builtin ``python`` environment: the model's code runs in unirl's sandbox, every failed or malformed tool
call is the model's observation and a counted metric, hostile code is contained, and a broken sandbox ends the
episode as an infrastructure error instead of an answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from unirl.environments.contract import Task
from unirl.environments.episode import Episode, play
from unirl.host.manager import get_host
from unirl.rewards.sandbox.core import SandboxUnavailable

LIMITS = {"cpu_seconds": 1.0, "wall_seconds": 3.0, "memory_mb": 128}


def call(code: str, name: str = "run_python", **extra: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": {"code": code, **extra}}) + "</tool_call>"


def episode(turns: list[str], reference: str = "42") -> Episode:
    return play(get_host().environments.get("python"), LIMITS, Task("What is 6 * 7?", reference=reference), turns,
                timeout_s=30)


def observations(e: Episode) -> list[str]:
    return [t.observation[0]["content"] if isinstance(t.observation, list) else "" for t in e.turns]


def test_code_runs_and_the_final_answer_is_scored() -> None:
    e = episode([call("print(6 * 7)"), "The answer is \\boxed{42}"])
    assert observations(e)[0].strip() == "42" and e.return_ == 1.0 and e.termination == "done"
    assert e.metrics()["tool_calls"] == 1.0 and e.metrics()["correct"] == 1.0
    assert episode(["41"]).return_ == 0.0  # no tool, wrong answer


HOSTILE = {
    "endless loop": "while True: pass",
    "fork bomb": "import os\nwhile True: os.fork()",
    "memory hog": "x = bytearray(1 << 30)",
    "network": "import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)",
    "host secrets": "print(open('/etc/shadow').read())",
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_code_is_contained_and_the_episode_goes_on(attack: str) -> None:
    e = episode([call(HOSTILE[attack]), "42"])
    assert e.error_kind is None and e.termination == "done" and e.return_ == 1.0  # the model still answers
    assert observations(e)[0].startswith("error: run_python: ")
    assert e.metrics()["tool_failed"] == 1.0 and e.metrics()["tool_calls"] == 1.0


def test_code_cannot_write_the_host(tmp_path: Path) -> None:
    target = tmp_path / "planted"
    e = episode([call(f"open({str(target)!r}, 'w').write('x'); print('wrote')"), "42"])
    assert not target.exists() and observations(e)[0].startswith("error: run_python: ")  # no such path in there


def test_a_flood_of_output_is_cut_before_the_model_sees_it() -> None:
    e = episode([call("print('y' * 100000)"), "42"])
    assert len(observations(e)[0]) < 2100 and observations(e)[0].endswith("...(output cut)")


@pytest.mark.parametrize(("turn", "kind"), [
    ('<tool_call>{"name": "run_python"</tool_call>', "tool_malformed"),
    (call("print(1)", name="shell"), "tool_unknown"),
    (call("print(1)", timeout=5), "tool_bad_arguments"),
    (call("x" * 20_001), "tool_failed"),
])
def test_calls_that_cannot_run_are_observations_counted_by_kind(turn: str, kind: str) -> None:
    e = episode([turn, "42"])
    assert observations(e)[0].startswith("error: ") and e.metrics()[kind] == 1.0 and e.return_ == 1.0


def test_a_broken_sandbox_ends_the_episode_as_an_infrastructure_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import unirl.plugins.builtin_environments.python_tool as python_tool

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise SandboxUnavailable("bubblewrap is not installed")

    monkeypatch.setattr(python_tool, "run_sandboxed", unavailable)
    e = episode([call("print(6 * 7)"), "42"])
    assert e.error_kind == "infrastructure" and "bubblewrap is not installed" in (e.error or "")
    assert len(e.turns) == 1  # no answer was scored after the machine failed


def test_env_test_shows_the_python_environment(isolated: Path) -> None:
    (isolated / "t.jsonl").write_text('{"prompt": "What is 6 * 7?", "reference": "42"}\n')
    (isolated / "a.jsonl").write_text(json.dumps({"turns": [call("print(6 * 7)"), "42"]}) + "\n")
    out = run_cli("env", "test", "python", "--tasks", "t.jsonl", "--actions", "a.jsonl", "--kwargs",
                  json.dumps(LIMITS), "--json", cwd=isolated)
    assert out.returncode == 0, out.stderr
    [row] = [json.loads(line) for line in out.stdout.splitlines()]
    assert row["return"] == 1.0 and row["metrics"]["tool_calls"] == 1.0
