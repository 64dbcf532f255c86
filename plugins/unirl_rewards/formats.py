"""Format rewards: shape of the completion, independent of correctness."""

from __future__ import annotations

import re

import unirl

BARE_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?\s*$")


@unirl.reward("bare_number")
def bare_number(sample: unirl.Sample) -> float:
    """1.0 when the completion is just a number and generation ended on its own (not cut at the limit)."""
    return 1.0 if BARE_NUMBER.match(sample.completion) and not sample.truncated else 0.0
