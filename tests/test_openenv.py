"""OpenEnv environments through unirl's one adapter (unirl/environments/openenv.py), with an environment written
against OpenEnv 0.10's own base classes (tests/fixtures/openenv/kv_openenv.py): in process, and behind OpenEnv's own
server (``create_app``, served by uvicorn on loopback) reached with OpenEnv's own ``GenericEnvClient``."""

from __future__ import annotations

import importlib.util
import json
import random
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import run_cli, run_console
from tests.support.helpers import read_jsonl, require_module, run_dirs
from unirl.environments.contract import Task, spec_of
from unirl.environments.episode import play

require_module("openenv.core.env_server.http_server", 'pip install -e ".[openenv]"')
FIXTURE = Path(__file__).parent / "fixtures" / "openenv" / "kv_openenv.py"


def load_fixture(name: str = "kv_openenv_fixture"):
    spec = importlib.util.spec_from_file_location(name, FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """OpenEnv's own app for the fixture's environment, served on a free loopback port until the tests end."""
    import uvicorn
    from openenv.core.env_server.http_server import create_app

    module = load_fixture("kv_openenv_served")
    app = create_app(module.KvEnvironment, module.KvAction, module.KvObservation, env_name="kv",
                     max_concurrent_envs=16)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    served = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=served.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not served.started:
        assert time.monotonic() < deadline, "OpenEnv's server did not start within 30 s"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    served.should_exit = True
    thread.join(timeout=30)


def hidden(seed: int) -> str:
    return str(random.Random(seed).randrange(10))  # the fixture's digit for an episode's seed


def test_in_process_openenv_environment_plays_as_a_unirl_environment() -> None:
    module = load_fixture()
    spec = spec_of(module.KvOpenEnv)
    for seed in (0, 1, 2):
        episode = play(spec, {}, Task("3?", seed=seed), ["=", hidden(seed)], timeout_s=10)
        assert episode.return_ == pytest.approx(1.2) and episode.termination == "done"
        assert [t.observation for t in episode.turns] == [f"*{hidden(seed)}", None]
    guessed = play(spec, {}, Task("3?", seed=7), ["0"], timeout_s=10)
    assert guessed.return_ == (1.0 if hidden(7) == "0" else 0.0) and guessed.opening[0]["content"] == "3?"
    crashed = play(spec, {}, Task("3?", seed=0), ["crash"], timeout_s=10)
    assert crashed.error_kind == "exception" and "crashed on purpose" in (crashed.error or "")


def test_the_same_environment_behind_openenv_s_server(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KV_OPENENV_URL", server)
    module = load_fixture("kv_openenv_remote_fixture")
    spec = spec_of(module.KvOpenEnvRemote)
    # episodes at once, each in its own WebSocket session: none sees another's hidden digit
    results: dict[int, float] = {}

    def one(seed: int) -> None:
        results[seed] = play(spec, {}, Task("3?", seed=seed), ["=", hidden(seed)], timeout_s=30).return_

    threads = [threading.Thread(target=one, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == {seed: pytest.approx(1.2) for seed in range(8)}
    crashed = play(spec, {}, Task("3?", seed=0), ["crash"], timeout_s=30)
    assert crashed.error_kind == "exception"  # the server's failure reaches unirl as the episode's error


def test_unirl_env_test_replays_an_openenv_file(isolated: Path) -> None:
    seed = 0
    (isolated / "tasks.jsonl").write_text(json.dumps({"prompt": "5?", "seed": seed}) + "\n")
    (isolated / "actions.jsonl").write_text(json.dumps({"turns": ["=", hidden(seed)]}) + "\n")
    out = run_cli("env", "test", "kv_openenv", "--file", str(FIXTURE), "--tasks", "tasks.jsonl", "--actions",
                  "actions.jsonl", "--json", cwd=isolated)
    assert out.returncode == 0, out.stderr
    [episode] = [json.loads(line) for line in out.stdout.splitlines()]
    assert episode["return"] == pytest.approx(1.2)


@pytest.mark.train
def test_trl_trains_a_few_steps_on_the_openenv_environment(isolated: Path) -> None:
    out = run_console("recipe=grpo_tool", "environment.name=kv_openenv", f"environment.file={FIXTURE}",
                      "~environment.kwargs.tool", "~environment.kwargs.keyed", "algorithm.steps=3",
                      "algorithm.prompts_per_step=4", "algorithm.samples_per_prompt=4", "eval.every_steps=0",
                      "eval.before_training=false", "logging.progress=false", "logging.plot=false",
                      "logging.trajectories_every=1", cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert {r["episode"]["environment"] for r in records} == {"kv_openenv"}
    assert not [r for r in records if r["episode"]["error_kind"]]
