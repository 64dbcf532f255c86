"""Data the way real datasets ship it: hub configs (``hf:<name>:<config>@<split>``), nested columns, GSM8K's
``#### 72`` references, and the builtin tokenizer's warning about characters it does not know.

There is no hub here, so the hub's layout is rebuilt on disk: a dataset repository folder as openai/gsm8k has it
(``main/`` and ``socratic/`` parquet shards, a README.md whose YAML header lists ``configs:``), which
``datasets.load_dataset`` resolves with the same code as a downloaded repository (datasets 5.2.0,
src/datasets/load.py: ``LocalDatasetModuleFactory`` reads the card's ``configs`` through
``MetadataConfigs.from_dataset_card_data``; a folder with several configs and no name raises "Config name is
missing").
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

import unirl
from tests.support.datasets_layout import (
    MAIN,
    MAIN2,
    Q2,
    QUESTION,
    SOCRATIC,
    gsm8k_repo,
    verl_gsm8k_rows,
    write_parquet,
)
from tests.support.helpers import require_module
from unirl.backend.export import canonical_rows, write_export
from unirl.backend.plan import DataExport
from unirl.data.builtin import tiny_model
from unirl.data.checks import source_problems
from unirl.data.loading import load_rows, reference_of
from unirl.data.preflight import check_inputs, inspect_inputs
from unirl.errors import FieldError
from unirl.plugins.builtin_rewards.math_answer import math_answer, numeric_closeness, reference_answer
from unirl.recipe.schema import DataConfig, Recipe, hub_source, split_source
from unirl.rewards.executor import RewardExecutor, error_metrics
from unirl.rewards.spec import RewardEntry, RewardPolicy, RewardRuntimeSpec


@pytest.fixture
def gsm8k(isolated: Path) -> Path:
    return gsm8k_repo(isolated)


def recipe(**data: Any) -> Recipe:
    r = Recipe()
    r.algorithm.prompts_per_step = 1
    for key, value in data.items():
        setattr(r.data, key, value)
    return r


# --- the source syntax ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "name", "config", "split"), [
    ("hf:openai/gsm8k:main@train", "openai/gsm8k", "main", "train"),
    ("hf:openai/gsm8k@test", "openai/gsm8k", None, "test"),
    ("hf:openai/gsm8k:socratic", "openai/gsm8k", "socratic", ""),
    ("hf:gsm8k:main@train", "gsm8k", "main", "train"),
    ("hf:./data/gsm8k:main@train", "./data/gsm8k", "main", "train"),
])
def test_hub_sources_name_dataset_config_and_split(source: str, name: str, config: str | None, split: str) -> None:
    base, got_split = split_source(source)
    assert (hub_source(base), got_split) == ((name, config), split)


def test_a_malformed_hub_source_is_refused_with_the_syntax() -> None:
    for bad in ("hf:openai/gsm8k:@train", "hf:@train"):
        [problem] = source_problems("data.train", bad)
        assert "hf:<dataset>[:<config>]@<split>" in problem.allowed
    assert source_problems("data.train", "hf:openai/gsm8k:main@train") == []


# --- configs through datasets.load_dataset -------------------------------------------------------------------


def test_a_config_picks_its_own_files_through_datasets(gsm8k: Path) -> None:
    data = DataConfig(prompt_key="question")
    main = load_rows(f"hf:{gsm8k}:main@train", data, seed=0, default_split="train", key="data.train")
    socratic = load_rows(f"hf:{gsm8k}:socratic@test", data, seed=0, default_split="test", key="data.eval")
    assert [r["answer"] for r in main] == [MAIN, MAIN2]
    assert [r["answer"] for r in socratic] == [SOCRATIC]


def test_a_dataset_with_configs_and_none_named_lists_them(gsm8k: Path) -> None:
    with pytest.raises(FieldError) as info:
        load_rows(f"hf:{gsm8k}@train", DataConfig(prompt_key="question"), seed=0, default_split="train",
                  key="data.train")
    assert info.value.field == "data.train"
    assert "Config name is missing" in info.value.allowed and "['main', 'socratic']" in info.value.allowed
    assert f"hf:{gsm8k}:<config>@train" in info.value.allowed
    with pytest.raises(FieldError, match="BuilderConfig 'nope' not found"):
        load_rows(f"hf:{gsm8k}:nope@train", DataConfig(prompt_key="question"), seed=0, default_split="train",
                  key="data.train")


def test_the_preflight_reads_a_config_head_and_names_its_problems(gsm8k: Path) -> None:
    good = recipe(train=f"hf:{gsm8k}:main@train", eval=f"hf:{gsm8k}:socratic@test", prompt_key="question")
    assert inspect_inputs(good, network=False).problems == []
    bad = recipe(train=f"hf:{gsm8k}@train", eval=f"hf:{gsm8k}:main@validation", prompt_key="question")
    problems = {p.field: p.allowed for p in check_inputs(bad)}
    assert "['main', 'socratic']" in problems["data.train"]
    assert "validation" in problems["data.eval"] and "['test', 'train']" in problems["data.eval"]
    wrong_key = recipe(train=f"hf:{gsm8k}:main@train", eval=None)  # prompt_key defaults to "prompt"
    [problem] = check_inputs(wrong_key)
    assert problem.field == "data.prompt_key" and "['answer', 'question']" in problem.allowed


def test_export_for_a_native_backend_reads_the_config(gsm8k: Path, isolated: Path) -> None:
    import pyarrow.parquet as pq

    r = recipe(train=f"hf:{gsm8k}:main@train", eval=None, prompt_key="question")
    r.model.path = "Qwen/Qwen2.5-0.5B-Instruct"
    out = isolated / "train.parquet"
    assert write_export(r, DataExport("train", r.data.train, "verl_parquet", str(out), rows=2)) == 2
    written = pq.read_table(out).to_pylist()
    assert sorted(row["reward_model"]["ground_truth"] for row in written) == sorted([MAIN, MAIN2])
    assert {row["prompt"][0]["content"] for row in written} == {QUESTION, Q2}


# --- nested columns --------------------------------------------------------------------------------------------


def test_dotted_answer_key_reads_verls_nested_ground_truth(isolated: Path) -> None:
    path = write_parquet(isolated / "train.parquet", verl_gsm8k_rows())
    data = DataConfig(prompt_key="extra_info.question", answer_key="reward_model.ground_truth")
    rows = load_rows(str(path), data, seed=0, default_split="train", key="data.train")
    assert reference_of(rows[0], data) == "72"
    assert rows[0]["extra_info.question"] == QUESTION  # what the TRL runner's row[data.prompt_key] reads
    r = recipe(train=str(path), eval=None, prompt_key="prompt", answer_key="reward_model.ground_truth")
    r.model.path = "Qwen/Qwen2.5-0.5B-Instruct"
    [row] = canonical_rows(r, DataExport("train", str(path), "verl_parquet", "unused", rows=1))
    assert row.reference == "72" and row.messages[0]["content"] == QUESTION
    assert inspect_inputs(r, network=False).problems == []


def test_an_answer_key_naming_an_object_is_a_data_error_not_a_silent_zero(isolated: Path) -> None:
    path = write_parquet(isolated / "train.parquet", verl_gsm8k_rows())
    r = recipe(train=str(path), eval=None, answer_key="reward_model")
    [problem] = check_inputs(r)
    assert problem.field == "data.answer_key"
    assert "an object with keys ['ground_truth', 'style']" in problem.allowed
    assert "data.answer_key=reward_model.ground_truth" in problem.allowed
    r.data.answer_key = "reward_model.truth"
    [problem] = check_inputs(r)
    assert "no row" in problem.allowed and "reward_model.ground_truth" in problem.allowed
    # and should such a reference reach a reward anyway (a row built elsewhere), it is a failed call
    sample = unirl.Sample(prompt="q", completion="72", reference=str(verl_gsm8k_rows()[0]["reward_model"]))
    with pytest.raises(ValueError, match=r"point data\.answer_key at the field inside it"):
        math_answer(sample)


# --- references reduced to their final answer ------------------------------------------------------------------


@pytest.mark.parametrize(("reference", "answer"), [
    (MAIN, "72"), (SOCRATIC, "72"), ("72", "72"), ("the area is \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\frac{1}{2}", "\\frac{1}{2}"), ("1,234", "1,234"), ("x^2+1", "x^2+1"), ("Paris", "Paris"),
    ("First 3 apples.\nThen 4 more: 7", "7"),
])
def test_a_reference_is_reduced_like_a_completion(reference: str, answer: str) -> None:
    assert reference_answer(reference) == answer


def test_a_gsm8k_reference_scores_a_correct_completion() -> None:
    right = unirl.Sample(prompt=QUESTION, completion="48 + 24 = 72, so \\boxed{72}", reference=MAIN)
    wrong = unirl.Sample(prompt=QUESTION, completion="#### 24", reference=MAIN)
    assert math_answer(right).score == 1.0 and math_answer(wrong).score == 0.0
    assert numeric_closeness(right).score == 1.0  # it used to raise: "needs a numeric reference"
    assert numeric_closeness(wrong, scale=100).score == pytest.approx(1 - 48 / 100)


def test_a_reference_with_no_answer_is_a_counted_error() -> None:
    rewards = (RewardEntry("math_answer", "unirl.plugins.builtin_rewards.math_answer:math_answer",
                           components=("has_answer",), inline=True),
               RewardEntry("numeric_closeness", "unirl.plugins.builtin_rewards.math_answer:numeric_closeness",
                           weight=0.5, inline=True))
    spec = RewardRuntimeSpec(rewards, RewardPolicy(on_error="fallback", fallback_score=0.0, max_error_rate=1.0))
    samples = [unirl.Sample(prompt="q", completion="72", reference=ref)
               for ref in (MAIN, "Natalia sold 48/2 clips.\n####", "", "\\boxed{72")]
    with RewardExecutor(spec) as executor:
        scored = executor.score(samples)
    assert scored[0].scores == {"math_answer": 1.0, "numeric_closeness": 1.0} and not scored[0].errors
    for s in scored[1:]:
        assert s.scores == {"math_answer": None, "numeric_closeness": None}
        assert s.error_kinds == {"math_answer": "exception", "numeric_closeness": "exception"}
    assert "'####' and no answer after it" in scored[1].errors["math_answer"]
    assert error_metrics(scored)["reward/errors/exception"] == 6.0
    assert executor.stats.errors == 6


# --- the builtin tokenizer's unknown characters ----------------------------------------------------------------


def test_builtin_tokenizer_really_maps_word_problems_to_unk() -> None:
    require_module("transformers", "pip install -e '.[trl]'")  # the one helper: skip here, fail in CI
    tok = tiny_model.build_tokenizer()
    ids = tok("Natalia sold 48", add_special_tokens=False)["input_ids"]
    assert ids.count(tok.unk_token_id) == len("Natalia sold") - 1  # every letter; the space is known
    found = tiny_model.unknown_characters(["Natalia sold 48", "3+4="])
    assert (found.prompts, found.affected, found.first) == (2, 1, 0)
    assert sum(found.characters.values()) == ids.count(tok.unk_token_id)


def test_export_with_the_builtin_model_warns_once_about_unknown_characters(
        gsm8k: Path, isolated: Path, caplog: pytest.LogCaptureFixture) -> None:
    r = recipe(train=f"hf:{gsm8k}:main@train", eval=None, prompt_key="question")  # model: builtin:tiny-arith
    export = DataExport("train", r.data.train, "openrlhf_jsonl", str(isolated / "train.jsonl"), rows=4)
    with caplog.at_level(logging.WARNING, logger="unirl"):
        write_export(r, export)
        write_export(r, export)  # the same run's data again: said once
    warnings = [rec.getMessage() for rec in caplog.records if "<unk>" in rec.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"data.train=hf:{gsm8k}:main@train" in warnings[0]
    assert "4 of 4 prompts" in warnings[0] and "builtin:tiny-arith" in warnings[0]
    assert "Natalia sold clips" in warnings[0] or "Weng earns" in warnings[0]
    caplog.clear()
    arith = recipe()  # the builtin task only uses characters the tokenizer knows
    with caplog.at_level(logging.WARNING, logger="unirl"):
        write_export(arith, DataExport("train", arith.data.train, "openrlhf_jsonl", str(isolated / "a.jsonl"),
                                       rows=8))
    assert not [rec for rec in caplog.records if "<unk>" in rec.getMessage()]
    json.loads((isolated / "a.jsonl").read_text().splitlines()[0])
