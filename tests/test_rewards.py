"""The reward contract and the built-in math rewards: fixed component keys, failures never silently zero."""

from __future__ import annotations

import math

import pytest
from unirl_rewards.formats import bare_number
from unirl_rewards.math_answer import extract_answer, math_answer

import unirl
from unirl.rewards import RewardSet, WeightedReward


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


@unirl.reward("explodes")
def explodes(sample: unirl.Sample) -> float:
    raise RuntimeError("grader crashed")


@unirl.reward("nan_score")
def nan_score(sample: unirl.Sample) -> float:
    return math.nan


@unirl.reward("wrong_type")
def wrong_type(sample: unirl.Sample) -> str:
    return "1.0"


@pytest.mark.parametrize(("bad", "message"), [(explodes, "grader crashed"), (nan_score, "non-finite"),
                                              (wrong_type, "returned str")])
def test_a_failing_reward_is_counted_logged_and_never_a_silent_zero(bad: unirl.rewards.RewardFunction,
                                                                    message: str) -> None:
    rs = RewardSet([WeightedReward(math_answer, 1.0, {}), WeightedReward(bad, 1.0, {})])
    scored = rs.score(unirl.Sample(prompt="1+1=", completion="2", reference="2"))
    assert scored.scores == {"math_answer": 1.0, bad.name: None}
    assert scored.total is None  # a sample with a failed reward has no total, not a partial one
    assert message in scored.errors[bad.name]
    assert rs.error_count == 1 and rs.calls == 2
    assert scored.components == {"math_answer/has_answer": 1.0}


def test_components_keep_one_key_set_across_samples() -> None:
    @unirl.reward("sometimes", components=("a", "b"))
    def sometimes(sample: unirl.Sample) -> unirl.RewardResult:
        comps = {"a": 1.0} if sample.completion == "x" else {"a": 0.0, "b": 1.0}
        return unirl.RewardResult(1.0, comps)

    rs = RewardSet([WeightedReward(sometimes, 2.0, {})])
    first = rs.score(unirl.Sample(prompt="", completion="x"))
    second = rs.score(unirl.Sample(prompt="", completion="y"))
    assert set(first.components) == set(second.components) == {"sometimes/a", "sometimes/b"}
    assert first.components["sometimes/b"] is None
    assert second.total == 2.0


def test_undeclared_component_is_an_error_not_a_new_column() -> None:
    @unirl.reward("drifts", components=("a",))
    def drifts(sample: unirl.Sample) -> unirl.RewardResult:
        return unirl.RewardResult(1.0, {"a": 1.0, "surprise": 1.0})

    rs = RewardSet([WeightedReward(drifts, 1.0, {})])
    scored = rs.score(unirl.Sample(prompt="", completion=""))
    assert set(scored.components) == {"drifts/a"}
    assert "surprise" in scored.errors["drifts"]


def test_reward_kwargs_come_from_the_recipe() -> None:
    @unirl.reward("scaled")
    def scaled(sample: unirl.Sample, factor: float = 1.0) -> float:
        return factor

    rs = RewardSet([WeightedReward(scaled, 0.5, {"factor": 4.0})])
    assert rs.score(unirl.Sample(prompt="", completion="")).total == 2.0


def test_async_rewards_are_refused_with_a_clear_message() -> None:
    with pytest.raises(unirl.errors.UnirlError, match="async rewards are not supported yet"):
        @unirl.reward("later")
        async def later(sample: unirl.Sample) -> float:
            return 1.0
