"""Environments on verl and OpenRLHF, proven through each backend's own multi-turn code in its own venv.

The run directory is what ``unirl +framework=<backend>`` prepares before launching (the plan, the staged core, the
exported data, the builtin model, the environment and reward specs, the backend's agent file); the harness then runs
the backend's own loop over it with a scripted policy as the only stand-in (no vLLM or GPU here):
tests/backends/openrlhf_agent_harness.py (OpenRLHF's MultiTurnAgentExecutor and Experience assembly) and
tests/backends/verl_agent_harness.py (verl's AgentLoopWorker, from agent_loop_config_path to the padded batch).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import unirl.backend.native
from tests.support.backend_recipes import gpu_recipe
from tests.support.helpers import read_jsonl, run_harness
from unirl.host.manager import build_host
from unirl.host.planning import check, run_inputs
from unirl.plugins.openrlhf.framework import OpenRlhfFramework
from unirl.plugins.verl.framework import VerlFramework
from unirl.recipe.schema import EnvironmentConfig, Recipe

FRAMEWORKS = {"verl": VerlFramework(), "openrlhf": OpenRlhfFramework()}
FAILING_ENV = '''
import unirl

@unirl.environment("flaky_lookup")
class Flaky(unirl.Environment):
    max_turns = 2
    def reset(self, task):
        return "x"
    def step(self, action):
        raise RuntimeError("the grader crashed")
'''


def lookup_recipe(backend: str, max_new_tokens: int = 12, **environment: Any) -> Recipe:
    settings = {"name": "lookup", "kwargs": {"tool": True, "keyed": False}, **environment}
    return gpu_recipe(backend, algorithm={"steps": 2, "prompts_per_step": 4, "max_new_tokens": max_new_tokens},
                      data={"train": "builtin:lookup@train", "chat_template": backend == "verl"},
                      environment=EnvironmentConfig(**settings), rewards=[])


@pytest.fixture
def prepared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)  # no GPU here; the rest is real

    def prepare(backend: str, recipe: Recipe) -> Path:
        host = build_host()
        check(host, recipe)  # unirl's own validation: registers environment.file, checks the engine runs episodes
        framework = FRAMEWORKS[backend]
        plan = framework.plan(recipe)
        run_dir = tmp_path / backend
        framework.prepare(plan, run_dir, run_inputs(host, plan))
        return run_dir

    return prepare


def through_openrlhf(run_dir: Path, policy: str) -> list[dict[str, Any]]:
    out = run_dir / "harness.json"
    done = run_harness("openrlhf", "--run-dir", str(run_dir), "--policy", policy, "--out", str(out),
                       script_name="openrlhf_agent_harness.py")
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())["results"]


@pytest.mark.openrlhf
@pytest.mark.slow
def test_openrlhf_runs_the_episode_and_trains_only_on_the_model_tokens(prepared) -> None:
    run_dir = prepared("openrlhf", lookup_recipe("openrlhf"))
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["native_config"]["flags"]["train.agent_func_path"].endswith("openrlhf_agent.py")
    assert "reward.remote_url" not in plan["native_config"]["flags"]
    results = through_openrlhf(run_dir, "solve")
    for r in results:
        # "=" then the looked-up digit: 0.2 for the lookup (of the key asked for), 1 for the right answer,
        # summed by OpenRLHF itself
        assert r["reward"] == pytest.approx(1.2) and r["score"] == pytest.approx(1.2)
        assert r["info"]["env/return"] == pytest.approx(1.2) and r["info"]["env/turns"] == 2
        # the model's tokens: "=" + end and the digit + end; the observation "*v" (and its glue) is masked
        assert r["action_tokens"] == 4 and [b - a for a, b in r["action_ranges"]] == [2, 2]
        assert not r["truncated"]
        assert len(r["logprobs"]) == r["sequence_tokens"]  # the engine's logprobs kept, 0.0 under observations
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(records) == len(results)
    for record in records:
        assert record["backend"] == "openrlhf" and record["scores"]["environment"] == pytest.approx(1.2)
        assert record["episode"]["turns"][0]["action"] == "="
        assert record["episode"]["tokens"] == {"model": 4, "environment": 2}
        assert record["split"] == "train" and record["step"] is None  # OpenRLHF shuffles: no step, never guessed


@pytest.mark.openrlhf
@pytest.mark.slow
def test_openrlhf_caps_the_episode_at_unirl_budget_and_marks_it_truncated(prepared) -> None:
    run_dir = prepared("openrlhf", lookup_recipe("openrlhf"))
    results = through_openrlhf(run_dir, "ramble")
    for r in results:
        # OpenRLHF offers --data.max_len minus the context; unirl's engine wrapper caps the turn at the episode's 12
        assert r["calls"][0]["max_tokens"] == 12 and r["action_tokens"] == 12
        assert r["info"]["env/truncated"] == 1.0 and r["reward"] == pytest.approx(0.0)
    episode = read_jsonl(run_dir / "trajectories.jsonl")[0]["episode"]
    assert episode["termination"] == "truncated"


@pytest.mark.openrlhf
@pytest.mark.slow
def test_openrlhf_counts_a_failing_environment_and_scores_the_fallback(prepared, tmp_path: Path) -> None:
    env_file = tmp_path / "flaky_env.py"
    env_file.write_text(FAILING_ENV)
    recipe = lookup_recipe("openrlhf", name="flaky_lookup", file=str(env_file), kwargs={})
    recipe = Recipe(**{**recipe.__dict__, "reward_policy": type(recipe.reward_policy)(
        on_error="fallback", fallback_score=-1.0, min_calls=1000)})
    run_dir = prepared("openrlhf", recipe)
    assert (run_dir / "environment" / "flaky_env.py").is_file()  # the file travels with the run
    results = through_openrlhf(run_dir, "guess")
    assert all(r["reward"] == pytest.approx(-1.0) and r["info"]["env/failed"] == 1.0 for r in results)
    for record in read_jsonl(run_dir / "trajectories.jsonl"):
        assert record["error_kinds"] == {"environment": "exception"}
        assert "the grader crashed" in record["episode"]["traceback"]
        assert record["scores"]["environment"] is None  # a failure, never a zero


def through_verl(run_dir: Path, policy: str) -> dict[str, Any]:
    out = run_dir / "harness.json"
    done = run_harness("verl", "--run-dir", str(run_dir), "--policy", policy, "--out", str(out),
                       script_name="verl_agent_harness.py", env={"PYTHONPATH": str(run_dir / "unirl_core")})
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.verl
@pytest.mark.slow
def test_verl_agent_loop_worker_runs_unirl_episodes(prepared) -> None:
    # ChatML's glue around an observation is ~30 byte-level tokens: a budget with room for it
    run_dir = prepared("verl", lookup_recipe("verl", max_new_tokens=96))
    out = through_verl(run_dir, "solve")
    assert len(out["results"]) == 2 * out["n"]
    for r in out["results"]:
        assert r["score"] == pytest.approx(1.2) and r["unirl_env_return"] == pytest.approx(1.2)
        assert r["unirl_env_turns"] == 2
        assert r["model_tokens"] == 4  # "=" + end and the digit + end; the observation's tokens are masked
        assert r["response_tokens"] > r["model_tokens"]
    # one request id per episode, so verl keeps an episode's turns on one server; turns capped by the budget left
    episodes = {c["request_id"] for c in out["calls"]}
    assert len(episodes) == len(out["results"]) and len(out["calls"]) == 2 * len(episodes)
    first = out["calls"][0]
    second = next(c for c in out["calls"][1:] if c["request_id"] == first["request_id"])
    used = second["context_tokens"] - first["context_tokens"]  # the first turn and the observation
    assert first["max_tokens"] == 96 and second["max_tokens"] == 96 - used
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(records) == len(out["results"])
    assert {r["step"] for r in records} == {1}  # verl reads unirl's file in order: the row's place is its step
