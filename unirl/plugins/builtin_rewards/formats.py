"""Format and length rewards: the shape of the completion, independent of correctness."""

from __future__ import annotations

import functools
import re

import unirl

BARE_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?\s*$")
THINK_ANSWER = r"<think>.*?</think>\s*<answer>.*?</answer>"


@unirl.reward("bare_number", trusted=True)
def bare_number(sample: unirl.Sample) -> float:
    """1.0 when the completion is just a number and generation ended on its own (not cut at the limit)."""
    return 1.0 if BARE_NUMBER.match(sample.completion) and not sample.truncated else 0.0


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"format: pattern={pattern!r} is not a valid regular expression ({exc})") from None


def think_then_answer(text: str) -> bool:
    """``THINK_ANSWER.fullmatch(text)``, decided in one pass: the lazy pattern re-reads the rest of the text at every
    ``</think>``, quadratic in a completion that repeats it, and a completion is hostile."""
    opening, closing, start_answer, end_answer = "<think>", "</think>", "<answer>", "</answer>"
    if not (text.startswith(opening) and text.endswith(end_answer)):
        return False
    last_body_end = len(text) - len(end_answer)
    at = len(opening)
    while (found := text.find(closing, at)) >= 0:
        after = found + len(closing)
        rest = after
        while rest < len(text) and text[rest].isspace():
            rest += 1
        if text.startswith(start_answer, rest) and rest + len(start_answer) <= last_body_end:
            return True
        at = found + 1 if rest == after else rest  # whitespace already read is not read again
    return False


@unirl.reward("format", components=("finished",))
def format_match(sample: unirl.Sample, pattern: str = THINK_ANSWER) -> unirl.RewardResult:
    """1.0 when the whole completion matches ``pattern`` (default <think>...</think><answer>...</answer>).

    The default is checked in linear time; a pattern of the recipe's own runs as written, under the reward's
    per-call deadline in a worker process (a nested quantifier over model text can take exponential time)."""
    text = sample.completion.strip()
    matched = think_then_answer(text) if pattern == THINK_ANSWER else _compiled(pattern).fullmatch(text) is not None
    return unirl.RewardResult(1.0 if matched else 0.0, {"finished": 0.0 if sample.truncated else 1.0})


@unirl.reward("length_penalty", components=("length",), trusted=True)
def length_penalty(sample: unirl.Sample, max_length: int = 1024, buffer: int = 256, penalty: float = 1.0,
                   unit: str = "tokens") -> unirl.RewardResult:
    """DAPO's overlong shaping: 0 up to max_length - buffer, then falling linearly to -penalty at max_length.

    A truncated completion gets the full -penalty. ``unit`` is tokens (the backend's count) or chars.
    """
    if unit == "tokens":
        if sample.completion_tokens is None:
            raise ValueError("length_penalty(unit=tokens) needs the completion's token count, which this backend "
                             "did not pass; use unit=chars")
        length = sample.completion_tokens
    elif unit == "chars":
        length = len(sample.completion)
    else:
        raise ValueError(f"length_penalty: unit={unit!r}; allowed: ['tokens', 'chars']")
    if not 0 < buffer <= max_length:
        raise ValueError(f"length_penalty: buffer={buffer} must be in (0, max_length={max_length}]")
    soft_limit = max_length - buffer
    if sample.truncated or length >= max_length:
        score = -penalty
    elif length <= soft_limit:
        score = 0.0
    else:
        score = -penalty * (length - soft_limit) / buffer
    return unirl.RewardResult(score, {"length": float(length)})
