"""A verl-native compute_score (what a verl user writes by hand) with the benchmark's CPU-bound scorer.

Used by reward_throughput.py to time verl's own reward path on the same samples and the same scorer
as unirl's executor: verl calls it in its reward worker's thread pool.
"""

from typing import Any

from unirl.plugins.builtin_rewards.math_answer import math_answer
from unirl.rewards.contract import Sample


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    return math_answer.fn(Sample(prompt="", completion=solution_str, reference=ground_truth),
                          verifier="math_verify").score
