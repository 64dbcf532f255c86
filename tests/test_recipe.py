"""Recipe validation: bad values fail before any model loads, naming field, value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("algorithm.samples_per_prompt=1", ["algorithm.samples_per_prompt=1",
                                            ">= 2 with advantage_baseline='group_mean'", "1 only with critic or none"]),
        ("algorithm.samples_per_prompt=0", ["algorithm.samples_per_prompt=0", "must be >= 1"]),
        ("algorithm.lr=0", ["algorithm.lr=0.0", "must be > 0"]),
        ("algorithm.lr=-1e-3", ["algorithm.lr=-0.001", "must be > 0"]),
        ("algorithm.mini_batches_per_step=3",
         ["algorithm.mini_batches_per_step=3", "must divide prompts_per_step x samples_per_prompt = 16 x 8 = 128"]),
        ("algorithm.micro_batch_size=5", ["algorithm.micro_batch_size=5", "divide the 128 completions"]),
        ("rewards=[{name:nope}]", ["rewards[0].name='nope'", "registered rewards are", "math_answer"]),
        ("data.train=/no/such/train.jsonl", ["data.train='/no/such/train.jsonl'", "no such file"]),
        ("data.train=train.csv", ["data.train='train.csv'", "must end in one of"]),
        ("model.path=/no/such/model", ["model.path='/no/such/model'", "no such directory"]),
        ("model.path=builtin:huge", ["model.path='builtin:huge'", "builtin models are"]),
        ("algorithm.loss_aggregation=seq_sum", ["algorithm.loss_aggregation='seq_sum'", "one of ['token_mean'"]),
        ("algorithm.top_p=1.5", ["algorithm.top_p=1.5", "must be in (0, 1]"]),
        ("data.options.holdout=odd", ["data.options.holdout='odd'", "one of ['swapped', 'random']"]),
        ("data.eval=builtin:arith@test", ["data.eval='builtin:arith@test'", "splits are ['train', 'heldout']"]),
        ("eval.accuracy_reward=bare", ["eval.accuracy_reward='bare'", "must be one of the recipe's rewards"]),
    ],
)
def test_invalid_values_fail_before_any_run_starts(override: str, expected: list[str], isolated: Path) -> None:
    out = run_cli(override)
    assert out.returncode == 2, out.stdout + out.stderr
    for text in expected:
        assert text in out.stderr, out.stderr
    assert not (isolated / "runs").exists()  # nothing was started, nothing written


def test_every_problem_is_reported_at_once() -> None:
    out = run_cli("plan", "algorithm.lr=0", "algorithm.samples_per_prompt=0", "algorithm.top_p=0")
    assert out.returncode == 2
    assert "3 problem(s)" in out.stderr


def test_model_dir_without_weights_or_config_is_rejected(isolated: Path) -> None:
    empty = isolated / "model"
    empty.mkdir()
    out = run_cli("plan", f"model.path={empty}")
    assert "has no config.json" in out.stderr
    (empty / "config.json").write_text("{}")
    out = run_cli("plan", f"model.path={empty}")
    assert "no *.safetensors or *.bin weights" in out.stderr


def test_hub_ids_are_accepted_for_later_loading() -> None:
    out = run_cli("plan", "--json", "model.path=Qwen/Qwen2.5-0.5B-Instruct")
    assert out.returncode == 0, out.stderr
