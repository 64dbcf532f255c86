"""A GSM8K reference, as unirl exports it for verl and OpenRLHF, scored through each backend's own reward path.

The exporters pass the dataset's reference through unchanged (verl: ``reward_model.ground_truth``; OpenRLHF:
``label``), so each backend hands the whole worked solution to unirl's adapter, which calls the same reward
functions as every backend; the reduction to the ``#### 72`` answer happens there, in one place
(unirl/plugins/builtin_rewards/math_answer.py ``reference_answer``). Run in the backends' own venvs (verl 0.9.1,
OpenRLHF 0.11.2) through the harnesses of tests/backends/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import unirl.adapters.verl
from tests.support.datasets_layout import MAIN, QUESTION, gsm8k_repo
from tests.support.helpers import run_harness
from unirl.adapters.openrlhf import write_reward_file
from unirl.backend.export import write_export
from unirl.backend.plan import DataExport
from unirl.recipe.schema import Recipe
from unirl.rewards.spec import RewardEntry, RewardPolicy, RewardRuntimeSpec

pytestmark = [pytest.mark.slow]

REWARDS = (RewardEntry("math_answer", "unirl.plugins.builtin_rewards.math_answer:math_answer",
                       components=("has_answer",)),
           RewardEntry("numeric_closeness", "unirl.plugins.builtin_rewards.math_answer:numeric_closeness",
                       weight=0.5, kwargs={"scale": 100}))
COMPLETIONS = ("She sold 24 in May, 48 + 24 = 72 in all.\n#### 72", "#### 24")


def spec(tmp: Path) -> Path:
    policy = RewardPolicy(on_error="fallback", fallback_score=0.0, workers=1, max_error_rate=1.0)
    return RewardRuntimeSpec(REWARDS, policy, str(tmp / "trajectories.jsonl")).write(tmp / "reward_spec.json")


def exported(tmp: Path, fmt: str) -> list[dict]:
    """unirl's export of openai/gsm8k's main test split (a copy of the hub's layout) in ``fmt``."""
    recipe = Recipe()
    recipe.model.path = "Qwen/Qwen2.5-0.5B-Instruct"
    recipe.data.prompt_key = "question"
    recipe.data.train = recipe.data.eval = f"hf:{gsm8k_repo(tmp)}:main@test"
    out = tmp / ("eval.parquet" if fmt == "verl_parquet" else "eval.jsonl")
    write_export(recipe, DataExport("eval", recipe.data.eval, fmt, str(out)))
    if fmt == "verl_parquet":
        import pyarrow.parquet as pq

        return list(pq.read_table(out).to_pylist())
    return [json.loads(line) for line in out.read_text().splitlines()]


def samples_file(tmp: Path, reference: str, metadata: dict) -> Path:
    path = tmp / "samples.jsonl"
    path.write_text("".join(json.dumps({"prompt": QUESTION, "completion": c, "reference": reference,
                                        "data_source": "openai/gsm8k", "metadata": metadata}) + "\n"
                            for c in COMPLETIONS))
    return path


def assert_scored(rows: list[dict]) -> None:
    right, wrong = rows
    assert right["math_answer"] == 1.0 and right["numeric_closeness"] == 1.0
    assert wrong["math_answer"] == 0.0 and wrong["numeric_closeness"] == pytest.approx(1 - 48 / 100, rel=1e-6)
    assert right["unirl/reward_errors"] == 0.0 and wrong["unirl/reward_errors"] == 0.0


@pytest.mark.verl
def test_verl_scores_the_exported_gsm8k_ground_truth(tmp_path: Path) -> None:
    [row] = exported(tmp_path, "verl_parquet")
    assert row["reward_model"]["ground_truth"] == MAIN  # the whole solution reaches verl
    samples = samples_file(tmp_path, row["reward_model"]["ground_truth"],
                           {unirl.adapters.verl.PROMPT_KEY: row["extra_info"][unirl.adapters.verl.PROMPT_KEY]})
    out = tmp_path / "out.json"
    result = run_harness("verl", "--reward-file", unirl.adapters.verl.__file__, "--samples", str(samples),
                         "--out", str(out), "--reward-kwargs", json.dumps({"unirl_spec": str(spec(tmp_path))}))
    assert result.returncode == 0, result.stderr[-3000:]
    assert_scored([r["extra"] for r in json.loads(out.read_text())["results"]])


@pytest.mark.openrlhf
def test_openrlhf_scores_the_exported_gsm8k_label(tmp_path: Path) -> None:
    [row] = exported(tmp_path, "openrlhf_jsonl")
    from unirl.rewards.row_origin import untag_reference

    # the label carries the whole reference and the row's place; the adapter unwraps it before scoring
    assert untag_reference(row["label"]) == (MAIN, {"split": "eval", "index": 0})
    reward_file = write_reward_file(tmp_path / "openrlhf_reward.py", spec(tmp_path))
    out = tmp_path / "out.json"
    result = run_harness("openrlhf", "--reward-file", str(reward_file), "--samples",
                         str(samples_file(tmp_path, row["label"], {})), "--out", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert all(r["error"] is None for r in results), results
    assert_scored([{"score": r["reward"], **r["extra_logs"]} for r in results])


def test_a_reference_without_an_answer_is_counted_by_the_verl_adapter(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The adapter verl loads, called as verl calls it (naive.py:34-99 @ 0.9.1), in this interpreter."""
    from unirl.adapters import common

    monkeypatch.setenv(common.SPEC_ENV, str(spec(tmp_path)))
    try:
        row = unirl.adapters.verl.compute_score(data_source="openai/gsm8k", solution_str="#### 72",
                                                ground_truth="She sold 48 clips.\n####", extra_info={})
        assert row["unirl/reward_errors"] == 2.0 and row["score"] == 0.0  # fallback, and counted
        trajectory = json.loads((tmp_path / "trajectories.jsonl").read_text().splitlines()[-1])
        assert trajectory["error_kinds"] == {"math_answer": "exception", "numeric_closeness": "exception"}
    finally:
        for runtime in common._RUNTIMES.values():
            runtime.executor.close()
        common._RUNTIMES.clear()
