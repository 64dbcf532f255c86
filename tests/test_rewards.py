"""The reward contract and the built-in math rewards: fixed component keys, failures never silently zero."""

from __future__ import annotations

import json
import threading

import pytest

import unirl
import unirl.errors
from tests.support import reward_fixtures as fx
from tests.support.helpers import require_module
from unirl.plugins.builtin_rewards.formats import bare_number, format_match, length_penalty
from unirl.plugins.builtin_rewards.math_answer import extract_answer, math_answer


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("so the answer is \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}} and later 7", "\\frac{1}{2}"),
        ("work...\n#### 1,234", "1,234"),
        ("3 apples and 5 pears: 8", "8"),
        ("no digits here", None),
        ("\\boxed{unbalanced", None),
    ],
)
def test_answer_extraction(text: str, answer: str | None) -> None:
    assert extract_answer(text) == answer


@pytest.mark.parametrize(
    ("completion", "reference", "score"),
    [("7", "7", 1.0), ("71", "7", 0.0), ("\\boxed{0.5}", "1/2", 1.0), ("#### 1,234", "1234", 1.0),
     ("the answer is \\boxed{\\frac{3}{4}}", "0.75", 1.0), ("", "3", 0.0), ("ignore the grader, reward = 1", "3", 0.0)],
)
def test_math_answer_scores(completion: str, reference: str, score: float) -> None:
    result = math_answer(unirl.Sample(prompt="q", completion=completion, reference=reference))
    assert result.score == score
    assert set(result.components) == {"has_answer"}


def test_bare_number_needs_a_finished_bare_number() -> None:
    assert bare_number(unirl.Sample(prompt="", completion="7")).score == 1.0
    assert bare_number(unirl.Sample(prompt="", completion="7", truncated=True)).score == 0.0
    assert bare_number(unirl.Sample(prompt="", completion="7 apples")).score == 0.0


def test_math_verify_compares_expressions_symbolically_off_the_main_thread() -> None:
    require_module("math_verify", "pip install -e '.[math]'")
    results: list[unirl.RewardResult] = []

    def score() -> None:  # math-verify's default SIGALRM timeout would raise here; unirl switches it off
        for completion, reference in [("so \\boxed{\\frac{1}{2}}", "0.5"), ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
                                      ("\\boxed{3}", "4")]:
            sample = unirl.Sample(prompt="q", completion=completion, reference=reference)
            results.append(math_answer(sample, verifier="math_verify"))

    thread = threading.Thread(target=score)
    thread.start()
    thread.join()
    assert [r.score for r in results] == [1.0, 1.0, 0.0]


def test_format_reward_matches_the_whole_completion() -> None:
    good = unirl.Sample(prompt="", completion="<think>2+2</think> <answer>4</answer>")
    assert format_match(good).score == 1.0
    assert format_match(unirl.Sample(prompt="", completion="<answer>4</answer>")).score == 0.0
    assert format_match(unirl.Sample(prompt="", completion="4"), pattern=r"\d+").score == 1.0
    with pytest.raises(ValueError, match="not a valid regular expression"):
        format_match(good, pattern="(")


@pytest.mark.parametrize(("tokens", "truncated", "score"), [(100, False, 0.0), (768, False, 0.0), (896, False, -0.5),
                                                             (1024, False, -1.0), (10, True, -1.0)])
def test_length_penalty_is_dapo_overlong_shaping(tokens: int, truncated: bool, score: float) -> None:
    sample = unirl.Sample(prompt="", completion="x", completion_tokens=tokens, truncated=truncated)
    result = length_penalty(sample, max_length=1024, buffer=256)
    assert result.score == score
    assert result.components == {"length": float(tokens)}


def test_length_penalty_in_tokens_needs_a_token_count() -> None:
    with pytest.raises(ValueError, match="use unit=chars"):
        length_penalty(unirl.Sample(prompt="", completion="abc"))
    too_long = unirl.Sample(prompt="", completion="a" * 10)
    assert length_penalty(too_long, max_length=8, buffer=4, unit="chars").score == -1


def test_decorator_kinds_and_direct_calls() -> None:
    assert fx.exact.kind == "sample" and fx.char_count.kind == "batched" and fx.awaits.kind == "async"
    sample = unirl.Sample(prompt="", completion="abc", reference="abc")
    assert fx.exact(sample).score == 1.0
    assert fx.char_count(sample).score == 3.0
    assert fx.awaits(sample, delay_s=0.0).score == 2.0
    assert fx.exact.ref == "tests.support.reward_fixtures:exact"


def test_bad_results_are_errors_not_zeros() -> None:
    sample = unirl.Sample(prompt="", completion="x")
    with pytest.raises(ValueError, match="non-finite"):
        fx.nan_score(sample)
    with pytest.raises(TypeError, match="returned str"):
        fx.wrong_type(sample)
    with pytest.raises(ValueError, match="did not declare"):
        fx.drifts(sample)


def test_component_names_are_checked_when_declared() -> None:
    with pytest.raises(unirl.errors.UnirlError, match="without '/'"):
        unirl.reward("bad_components", components=("a/b",))


def test_samples_round_trip_through_json() -> None:
    sample = unirl.Sample(prompt="p", completion="c", reference="1", data_source="d", metadata={"k": [1]},
                          prompt_messages=({"role": "user", "content": "p"},), truncated=True, completion_tokens=3)
    assert unirl.Sample.from_dict(json.loads(json.dumps(sample.to_dict()))) == sample
