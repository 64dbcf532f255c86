"""Parity: the same rewards on the same samples give the same scores and components through every adapter.

Here each adapter is called the way its backend calls it, in this interpreter. The backends' own code
paths (verl's reward manager, OpenRLHF's reward loading) run in their own virtual environments in
test_backend_verl.py and test_backend_openrlhf.py, against the same samples and expectations.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.adversarial.reward_server import close_server
from tests.support.parity import PARITY_SAMPLES, expected_rows, parity_spec, same
from unirl.adapters import common
from unirl.adapters.common import ERRORS_KEY, native_keys
from unirl.rewards.spec import RewardRuntimeSpec


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[RewardRuntimeSpec, Path]]:
    spec = parity_spec(tmp_path / "trajectories.jsonl")
    path = spec.write(tmp_path / "reward_spec.json")
    monkeypatch.setenv(common.SPEC_ENV, str(path))
    yield spec, path
    for runtime in common._RUNTIMES.values():
        runtime.executor.close()
    common._RUNTIMES.clear()


@pytest.fixture(scope="module")
def expected() -> list[dict[str, float]]:
    return expected_rows(parity_spec())


def assert_parity(rows: list[dict[str, Any]], expected: list[dict[str, float]]) -> None:
    assert len(rows) == len(expected)
    for i, (row, want) in enumerate(zip(rows, expected, strict=True)):
        assert same(row, want), f"sample {i} ({PARITY_SAMPLES[i].completion[:40]!r}): {row} != {want}"


def test_reference_rows_have_a_fixed_key_set_and_count_the_failure(expected: list[dict[str, float]]) -> None:
    spec = parity_spec()
    assert all(list(row) == native_keys(spec) for row in expected)
    assert [row[ERRORS_KEY] for row in expected].count(1.0) == 1  # "seven": numeric_closeness raised
    assert expected[0]["score"] == 1.0 + 0.5 * 1.0 + 0.2 * 1.0
    assert expected[7]["math_answer"] == 0.0  # prompt injection earns nothing


def test_verl_compute_score(spec_file: tuple[RewardRuntimeSpec, Path], expected: list[dict[str, float]]) -> None:
    from unirl.adapters.verl import PROMPT_KEY, compute_score

    _, path = spec_file
    rows = [compute_score(data_source=s.data_source, solution_str=s.completion, ground_truth=s.reference,
                          extra_info={PROMPT_KEY: s.prompt, "num_turns": 2, "index": i}, unirl_spec=str(path))
            for i, s in enumerate(PARITY_SAMPLES)]
    assert_parity(rows, expected)


def test_openrlhf_reward_func(spec_file: tuple[RewardRuntimeSpec, Path], expected: list[dict[str, float]]) -> None:
    from unirl.adapters.openrlhf import reward_func

    rows = []
    for s in PARITY_SAMPLES:  # OpenRLHF: one sample per call, query = decoded prompt + response + EOS text
        out = reward_func([s.prompt + s.completion + "</s>"], [s.prompt], [s.reference])
        assert out["rewards"] == out["scores"] or out["rewards"] != out["rewards"]  # equal, or both NaN
        rows.append({"score": out["rewards"], **out["extra_logs"]})
    assert_parity(rows, expected)


def test_openrlhf_http_server(spec_file: tuple[RewardRuntimeSpec, Path], expected: list[dict[str, float]]) -> None:
    from unirl.adapters.openrlhf_server import serve

    server = serve("127.0.0.1", 0)
    try:
        url = "http://{}:{}/get_reward".format(*server.server_address[:2])
        rows = []
        for s in PARITY_SAMPLES:
            body = json.dumps({"query": [s.prompt + s.completion + "<|im_end|>"], "prompts": [s.prompt],
                               "labels": [s.reference]}).encode()
            request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                out = json.loads(response.read())
            rows.append({"score": out["rewards"][0], **{k: v[0] for k, v in out["extra_logs"].items()}})
    finally:
        close_server(server)
    assert_parity(rows, expected)


@pytest.mark.parametrize("backend", ["slime", "vime"])
def test_slime_and_vime_async_reward(spec_file: tuple[RewardRuntimeSpec, Path], expected: list[dict[str, float]],
                                     backend: str) -> None:
    import importlib

    from tests.interfaces.slime_types import Sample as SlimeSample

    adapter = importlib.import_module(f"unirl.adapters.{backend}")
    natives = [SlimeSample(prompt=s.prompt, response=s.completion, label=s.reference,
                           status=SlimeSample.Status.COMPLETED) for s in PARITY_SAMPLES]
    args = SimpleNamespace()  # slime passes its argparse namespace; the adapter reads nothing from it

    async def score_all() -> tuple[list[dict[str, float]], list[dict[str, float]]]:
        one_by_one = [await adapter.reward(args, n) for n in natives]
        grouped = await adapter.batched_reward(args, natives)
        return one_by_one, grouped

    one_by_one, grouped = asyncio.run(score_all())
    assert_parity(one_by_one, expected)
    assert_parity(grouped, expected)
    # slime reads the training reward through --reward-key score (slime/utils/types.py:246-247)
    for native, row in zip(natives, one_by_one, strict=True):
        native.reward = row
    reward_key = SimpleNamespace(reward_key="score")
    assert [n.get_reward_value(reward_key) for n in natives] == [row["score"] for row in expected]
    # a custom generate function returning several samples makes slime pass a list even without --group-rm
    assert_parity(asyncio.run(adapter.reward(args, natives)), expected)


def test_slime_sample_fields_become_a_unirl_sample() -> None:
    from tests.interfaces.slime_types import Sample as SlimeSample
    from unirl.adapters.slime import sample_from_slime

    native = SlimeSample(prompt=[{"role": "user", "content": "1+1="}], response="2", label="2", response_length=3,
                         status=SlimeSample.Status.TRUNCATED, metadata={"data_source": "arith", "id": 4})
    sample = sample_from_slime(native)
    assert (sample.prompt, sample.completion, sample.reference, sample.data_source) == ("1+1=", "2", "2", "arith")
    assert sample.truncated and sample.completion_tokens == 3 and sample.prompt_messages[0]["role"] == "user"


def test_nemo_rl_environment_step(spec_file: tuple[RewardRuntimeSpec, Path], expected: list[dict[str, float]],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from tests.interfaces import nemo_rl as upstream

    upstream.install(monkeypatch)
    from unirl.adapters.nemo_rl import UnirlEnvironment

    _, path = spec_file
    env = UnirlEnvironment({"unirl_spec": str(path)})
    assert isinstance(env, upstream.EnvironmentInterface)
    # calculate_rewards passes role/content logs and extra_env_info (rollouts.py:724-749)
    logs = [[{"role": "user", "content": s.prompt}, {"role": "assistant", "content": s.completion}]
            for s in PARITY_SAMPLES]
    metadata = [{"ground_truth": s.reference, "data_source": s.data_source} for s in PARITY_SAMPLES]
    out = env.step(logs, metadata)
    assert isinstance(out, upstream.EnvironmentReturn)
    obs, meta, stops, rewards, terminateds, answers = out  # unpacked positionally upstream (rollouts.py:770-777)
    assert isinstance(rewards, torch.Tensor) and rewards.shape == (len(PARITY_SAMPLES),)
    assert terminateds.bool().all() and stops == [None] * len(PARITY_SAMPLES)
    assert all(set(o) == {"role", "content"} for o in obs)
    assert_parity([m["unirl"] for m in meta], expected)
    assert rewards.tolist() == pytest.approx([row["score"] for row in expected])
    assert answers == [s.completion for s in PARITY_SAMPLES]
    batch = upstream.BatchedDataDict({"rewards": rewards})
    assert env.global_post_process_and_metrics(batch) == (batch, {})


def test_nemo_rl_registration_satisfies_create_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.interfaces import nemo_rl as upstream

    modules = upstream.install(monkeypatch)
    from unirl.adapters import nemo_rl

    get_env = modules["nemo_rl.distributed.ray_actor_environment_registry"].get_actor_python_env
    with pytest.raises(ValueError, match="No actor environment registered"):
        get_env(nemo_rl.ACTOR_FQN)  # what create_env hits without the second registration
    assert nemo_rl.register() == "unirl"
    assert modules["nemo_rl.environments.utils"].ENV_REGISTRY["unirl"] == {"actor_class_fqn": nemo_rl.ACTOR_FQN}
    assert get_env(nemo_rl.ACTOR_FQN) == modules["nemo_rl.distributed.virtual_cluster"].PY_EXECUTABLES.SYSTEM
    assert nemo_rl.register() == "unirl"  # idempotent in one driver


def test_trl_reward_funcs(spec_file: tuple[RewardRuntimeSpec, Path], expected: list[dict[str, float]]) -> None:
    from unirl.adapters.trl import TrlRewardAdapter
    from unirl.rewards.executor import RewardExecutor

    spec, _ = spec_file
    records: list[dict[str, Any]] = []
    logged: dict[str, float] = {}
    with RewardExecutor(spec) as executor:
        adapter = TrlRewardAdapter(executor, eos_ids={0}, mini_batches=1,
                                   on_scored=lambda step, batch: records.extend(batch))
        kwargs = {"reference": [s.reference for s in PARITY_SAMPLES], "trainer_state": SimpleNamespace(global_step=0),
                  "data_source": [s.data_source for s in PARITY_SAMPLES], "log_metric": logged.__setitem__}
        prompts = [s.prompt for s in PARITY_SAMPLES]
        completions = [s.completion for s in PARITY_SAMPLES]
        ids = [[5, 0] for _ in PARITY_SAMPLES]  # every completion ended on EOS (id 0)
        columns = {f.__name__: f(prompts=prompts, completions=completions, completion_ids=ids, **kwargs)
                   for f in adapter.reward_funcs()}
    weights = {e.name: e.weight for e in spec.rewards}
    rows = []
    for i, record in enumerate(records):
        # TRL trains on the sum of weight x column (a failed call's column holds the fallback score); each reward's
        # own value, its components and its errors reach the trajectory records.
        rows.append({"score": sum(weights[n] * columns[n][i] for n in columns), **record["scores"],
                     **record["components"], ERRORS_KEY: float(len(record["errors"]))})
    assert_parity(rows, expected)
    assert logged["reward/errors"] == 1.0 and "reward/math_answer/has_answer" in logged


def test_failures_reach_the_trajectory_log_with_their_traceback(spec_file: tuple[RewardRuntimeSpec, Path]) -> None:
    from unirl.adapters.verl import compute_score

    spec, path = spec_file
    compute_score(data_source="words", solution_str="seven", ground_truth="seven", unirl_spec=str(path))
    record = json.loads(Path(spec.trajectory_log or "").read_text().splitlines()[-1])
    assert record["backend"] == "verl" and record["completion"] == "seven"
    assert record["scores"]["numeric_closeness"] is None and record["error_kinds"] == {"numeric_closeness": "exception"}
    assert "Traceback" in record["errors"]["numeric_closeness"]
    assert "needs a numeric reference" in record["errors"]["numeric_closeness"]


def test_exclude_is_refused_where_the_backend_needs_a_number(tmp_path: Path) -> None:
    from unirl.adapters.verl import compute_score
    from unirl.errors import FieldError
    from unirl.rewards.spec import RewardPolicy

    spec = RewardRuntimeSpec(parity_spec().rewards, RewardPolicy(on_error="exclude"))
    path = spec.write(tmp_path / "spec.json")
    with pytest.raises(FieldError, match=r"reward_policy\.on_error='exclude': fallback or abort on verl"):
        compute_score(data_source="", solution_str="7", ground_truth="7", unirl_spec=str(path))


@pytest.mark.parametrize(("query", "prompt", "completion", "truncated"), [
    ("Q: 1+1=2</s>", "Q: 1+1=", "2", False),
    ("<s>Q: 1+1=2<|im_end|><pad><pad>", "Q: 1+1=", "2", False),  # BOS text the prompt lacks, EOS then padding
    ("Q: 1+1=2 and on", "Q: 1+1=", "2 and on", True),  # cut at the length limit: no end text
    ("Q: </s> inside=a </s> b</s>", "Q: </s> inside=", "a </s> b", False),  # only the end is stripped
])
def test_openrlhf_query_split(query: str, prompt: str, completion: str, truncated: bool) -> None:
    from unirl.adapters.openrlhf import DEFAULT_END_TEXTS, split_query

    assert split_query(query, prompt, DEFAULT_END_TEXTS) == (completion, truncated)


def test_openrlhf_query_without_its_prompt_is_an_adapter_error() -> None:
    from unirl.adapters.openrlhf import DEFAULT_END_TEXTS, split_query

    with pytest.raises(ValueError, match="cannot find the prompt"):
        split_query("something else entirely", "Q: 1+1=", DEFAULT_END_TEXTS)


def test_http_server_rejects_a_malformed_request(spec_file: tuple[RewardRuntimeSpec, Path]) -> None:
    import urllib.error

    from unirl.adapters.openrlhf_server import serve

    server = serve("127.0.0.1", 0)
    try:
        url = "http://{}:{}/get_reward".format(*server.server_address[:2])
        request = urllib.request.Request(url, b'{"prompts": ["p"]}', {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=30)
        assert info.value.code == 422 and json.loads(info.value.read())["field"] == "query"
    finally:
        close_server(server)
