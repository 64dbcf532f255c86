"""Environments on verl and OpenRLHF, proven through each backend's own multi-turn code in its own venv.

The run directory is what ``unirl +framework=<backend>`` prepares before launching (the plan, the staged core, the
exported data, the builtin model, the environment and reward specs, the backend's agent file); the harness then runs
the backend's own loop over it with a scripted policy as the only stand-in (no vLLM or GPU here):
tests/backends/openrlhf_agent_harness.py (OpenRLHF's MultiTurnAgentExecutor and Experience assembly) and
tests/backends/verl_agent_harness.py (verl's AgentLoopWorker, from agent_loop_config_path to the padded batch).
slime and vime are not on the package index: their generate function runs here against a loopback HTTP engine that
speaks SGLang's ``/generate`` or the vLLM router's ``/inference/v1/generate`` (request and response shapes from
slime/rollout/sglang_rollout.py:152-220 @624b824a and vime/rollout/vllm_rollout.py ``generate`` @052693a8), filling
the ``Sample`` of tests/interfaces/slime_types.py (slime/utils/types.py:93-150).
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
from unirl.plugins.nemo_rl.framework import NemoRlFramework
from unirl.plugins.openrlhf.framework import OpenRlhfFramework
from unirl.plugins.slime.framework import SlimeFramework, VimeFramework
from unirl.plugins.verl.framework import VerlFramework
from unirl.recipe.schema import EnvironmentConfig, Recipe

FRAMEWORKS = {"verl": VerlFramework(), "openrlhf": OpenRlhfFramework(), "nemo_rl": NemoRlFramework(),
              "slime": SlimeFramework(), "vime": VimeFramework()}
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
    return gpu_recipe(backend, engine="sglang" if backend == "slime" else "vllm",
                      algorithm={"steps": 2, "prompts_per_step": 4, "max_new_tokens": max_new_tokens},
                      data={"train": "builtin:lookup@train", "chat_template": backend in ("verl", "nemo_rl")},
                      environment=EnvironmentConfig(**settings), rewards=[])


@pytest.fixture
def prepared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)  # no GPU here; the rest is real
    monkeypatch.setattr(unirl.backend.native, "check_environment", lambda *a: None)  # slime's image: no Docker here

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


def send_json(handler: Any, answer: dict[str, Any]) -> None:
    """An engine's 200 answer with a JSON body."""
    data = json.dumps(answer).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class ScriptedEngineServer:
    """A loopback rollout engine over the builtin tokenizer: SGLang's ``/generate`` and the vLLM router's
    ``/inference/v1/generate``, each answering with the scripted policy's turn in that engine's response shape."""

    def __init__(self, model_dir: Path, policy: str) -> None:
        import http.server
        import threading

        from transformers import AutoTokenizer

        from tests.backends.scripted_policy import scripted_turn

        tok = AutoTokenizer.from_pretrained(model_dir)
        self.requests: list[dict[str, Any]] = []
        requests = self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                requests.append({"path": self.path, **body})
                if self.path == "/generate":
                    ids = scripted_turn(tok, policy, body["input_ids"], body["sampling_params"]["max_new_tokens"])
                    answer: dict[str, Any] = {"text": tok.decode(ids), "meta_info": {
                        "output_token_logprobs": [[-0.5, t, None] for t in ids],
                        "finish_reason": {"type": "stop" if ids and ids[-1] == tok.eos_token_id else "length"}}}
                elif self.path == "/inference/v1/generate":
                    ids = scripted_turn(tok, policy, body["token_ids"], body["sampling_params"]["max_tokens"])
                    answer = {"choices": [{"token_ids": ids, "logprobs": {"content": [{"logprob": -0.5}] * len(ids)},
                                           "finish_reason": "stop" if ids and ids[-1] == tok.eos_token_id
                                           else "length"}]}
                else:
                    self.send_error(404)
                    return
                send_json(self, answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("backend", ["slime", "vime"])
def test_slime_and_vime_generate_function_fills_the_sample_slime_trains_on(backend: str, prepared,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    from argparse import Namespace

    from tests.interfaces.slime_types import Sample as SlimeSample
    from unirl.adapters import slime_environment

    run_dir = prepared(backend, lookup_recipe(backend))
    plan = json.loads((run_dir / "plan.json").read_text())
    flags = plan["command"][-1]
    generate_path = {"slime": "unirl.adapters.slime_environment.generate",
                     "vime": "unirl.adapters.slime_environment.vime_generate"}[backend]
    assert f"--custom-generate-function-path {generate_path}" in flags and "--apply-chat-template" not in flags
    monkeypatch.setenv("UNIRL_ENVIRONMENT_SPEC", plan["env"]["UNIRL_ENVIRONMENT_SPEC"])
    engine = ScriptedEngineServer(run_dir / "model", "solve")
    try:
        address = {"sglang_router_ip": "127.0.0.1", "sglang_router_port": engine.port} if backend == "slime" else \
            {"vllm_router_ip": "127.0.0.1", "vllm_router_port": engine.port}
        args = Namespace(hf_checkpoint=str(run_dir / "model"), **address)
        rows = [json.loads(line) for line in (run_dir / "data" / "train.jsonl").read_text().splitlines()][:3]
        generate = getattr(slime_environment, generate_path.rsplit(".", 1)[1])

        async def episode(row: dict[str, Any]) -> Any:
            try:
                return await generate(args, SlimeSample(prompt=row["prompt"], label=row["label"],
                                                        metadata=row["metadata"]),
                                      {"max_new_tokens": 12, "temperature": 1.0, "top_p": 1.0})
            finally:
                await slime_environment.close_client()

        samples = [asyncio.run(episode(row)) for row in rows]
    finally:
        engine.close()
    for sample in samples:
        assert sample.reward["score"] == pytest.approx(1.2) and sample.status == SlimeSample.Status.COMPLETED
        assert sample.response_length == len(sample.loss_mask) == len(sample.rollout_log_probs)
        assert sum(sample.loss_mask) == 4  # "=" + end and the digit + end; the observation "*v" masked
        assert sample.rollout_log_probs.count(-0.5) == 4 and sample.rollout_log_probs.count(0.0) == 2
        assert len(sample.tokens) == 3 + sample.response_length  # the BOS and "k?", then the response
    # turns were token ids in, token ids out, each capped by what the episode had left
    paths = {r["path"] for r in engine.requests}
    assert paths == ({"/generate"} if backend == "slime" else {"/inference/v1/generate"})
    budgets = [r["sampling_params"]["max_new_tokens" if backend == "slime" else "max_tokens"] for r in engine.requests]
    assert budgets[:2] == [12, 8]  # the first turn's 2 tokens and the observation's 2 are spent
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert [r["step"] for r in records] == [1, 1, 1] and {r["backend"] for r in records} == {backend}


def nemo_rl_rollout(env: Any, rows: list[dict[str, Any]], tok: Any, policy: str, max_turns: int) -> dict[str, Any]:
    """NeMo RL's multi-turn loop as the environment sees it (run_multi_turn_rollout, nemo_rl/experience/rollouts.py
    @ v0.7.0): every active sample's log reduced to role/content goes to ``step`` with its ``extra_env_info``
    (L482-485, L508), each turn's rewards are added to ``total_reward`` (L713), the observation is appended to the log
    whatever happens (L718-765), a sample ends when ``terminateds`` says so (L768), and a continuing sample's
    ``extra_env_info`` becomes the metadata the step returned (L783-789). Generation is the scripted policy's."""
    from tests.backends.scripted_policy import scripted_turn

    logs = [[{"role": "user", "content": row["input"]}] for row in rows]
    infos: list[dict[str, Any]] = [{"ground_truth": row["output"]} for row in rows]
    totals = [0.0] * len(rows)
    active = list(range(len(rows)))
    turns = 0
    while active and turns < max_turns:
        turns += 1
        for i in active:
            context = tok("".join(m["content"] for m in logs[i]), add_special_tokens=False)["input_ids"]
            ids = scripted_turn(tok, policy, context, None)
            logs[i].append({"role": "assistant", "content": tok.decode(ids, skip_special_tokens=True)})
        out = env.step([logs[i] for i in active], [infos[i] for i in active])
        still = []
        for k, i in enumerate(active):
            totals[i] += float(out.rewards[k])
            logs[i].append(out.observations[k])
            if not bool(out.terminateds[k]):
                infos[i] = out.metadata[k]
                still.append(i)
        active = still
    return {"totals": totals, "logs": logs, "unfinished": active, "table": env.table}


def test_nemo_rl_environment_actor_keeps_each_episode_and_sums_to_its_score(prepared,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoTokenizer

    from tests.backends.openrlhf_harness import build_tokenizer
    from tests.interfaces import nemo_rl as upstream

    run_dir = prepared("nemo_rl", lookup_recipe("nemo_rl", max_new_tokens=96))  # room for ChatML's glue
    # NeMo RL always renders prompts with the chat template, which the builtin character tokenizer lacks: the
    # scripted policy needs no weights, so the model directory gets a byte-level ChatML tokenizer (EOS <|im_end|>)
    build_tokenizer("<|im_end|>").save_pretrained(run_dir / "model")
    plan = json.loads((run_dir / "plan.json").read_text())
    overrides = plan["native_config"]["overrides"]
    assert overrides["grpo.max_rollout_turns"] == 10_000 and overrides["data.default.env_name"] == "unirl"
    upstream.install(monkeypatch)
    from unirl.adapters import nemo_rl

    env = nemo_rl.UnirlEnvironment({"unirl_spec": overrides["+env.unirl.unirl_spec"],
                                    "unirl_environment": overrides["+env.unirl.unirl_environment"],
                                    "tokenizer": overrides["+env.unirl.tokenizer"]})
    tok = AutoTokenizer.from_pretrained(run_dir / "model")
    rows = [json.loads(line) for line in (run_dir / "data" / "train.jsonl").read_text().splitlines()][:4]
    solved = nemo_rl_rollout(env, rows, tok, "solve", overrides["grpo.max_rollout_turns"])
    assert solved["totals"] == pytest.approx([1.2] * 4) and solved["unfinished"] == []
    assert solved["table"].open == {}  # every episode ended and was forgotten
    for log in solved["logs"]:
        assert [m["role"] for m in log] == ["user", "assistant", "environment", "assistant", "environment"]
        # the observation comes with the chat template's glue, since NeMo RL tokenizes it raw
        assert "<|im_start|>user\n*" in log[2]["content"]
        assert log[2]["content"].endswith("<|im_start|>assistant\n") and log[-1]["content"] == ""
    guessed = nemo_rl_rollout(env, rows, tok, "guess", 10)
    assert all(t in (0.0, 1.0) for t in guessed["totals"])  # "0" at once: right one time in ten, no lookup bonus
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(records) == 8 and {r["backend"] for r in records} == {"nemo_rl"}
    assert [r["episode"]["termination"] for r in records[:4]] == ["done"] * 4
    assert {r["step"] for r in records} == {1}  # NeMo RL's shuffle is off: the row's place is its step


def test_slime_turns_are_all_in_flight_at_once_not_capped_by_a_thread_pool() -> None:
    """A GPU node runs hundreds of episodes at once: every turn's request must reach the engine together. The engine
    here answers only once 64 requests are waiting (a thread per request would stop at the executor's few threads
    and never get there)."""
    import asyncio
    import http.server
    import threading
    from argparse import Namespace

    from unirl.adapters import slime_environment

    waiting = threading.Barrier(64, timeout=20)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            waiting.wait()
            send_json(self, {"meta_info": {"output_token_logprobs": [[-0.5, 5, None]]}})

        def log_message(self, *args: Any) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = 256  # 64 connections arrive at once

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    args = Namespace(sglang_router_ip="127.0.0.1", sglang_router_port=server.server_address[1])

    async def all_turns() -> list[Any]:
        try:
            return await asyncio.wait_for(asyncio.gather(*(slime_environment.sglang_turn(args, [1, i], 1, {})
                                                           for i in range(64))), timeout=30)
        finally:
            await slime_environment.close_client()
    try:
        turns = asyncio.run(all_turns())
    finally:
        server.shutdown()
        server.server_close()
    assert [t.token_ids for t in turns] == [[5]] * 64
