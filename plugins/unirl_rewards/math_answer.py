"""Math answer correctness: extract the final answer and compare it with the reference exactly.

Accepted answer forms, in order of precedence: the last ``\\boxed{...}``, a ``#### x`` line (GSM8K),
otherwise the last number in the text. Numbers compare as exact fractions, so ``0.5``, ``1/2`` and
``\\frac{1}{2}`` are equal; anything else compares as whitespace-normalised text.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

import unirl

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
INTEGER = re.compile(r"-?\d+")
FRAC = re.compile(r"\\d?frac\{([^{}]+)\}\{([^{}]+)\}")


def last_boxed(text: str) -> str | None:
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1:j]
    return None  # unbalanced: no answer rather than a guess


@functools.lru_cache(maxsize=65536)  # rollouts repeat answers a lot; extraction is pure
def extract_answer(text: str) -> str | None:
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    if "####" in text:
        after = text.rsplit("####", 1)[1].strip()
        return after.splitlines()[0].strip() if after else None
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else None


@functools.lru_cache(maxsize=65536)
def as_number(text: str) -> Fraction | int | None:
    cleaned = text.strip()
    if INTEGER.fullmatch(cleaned):  # the common case, ~20x cheaper than Fraction parsing
        return int(cleaned)
    if "\\" in cleaned:
        cleaned = FRAC.sub(r"\1/\2", cleaned)
    cleaned = cleaned.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def answers_match(predicted: str, reference: str) -> bool:
    p, r = as_number(predicted), as_number(reference)
    if p is not None and r is not None:
        return p == r
    return " ".join(predicted.split()) == " ".join(reference.split())


@unirl.reward("math_answer", components=("has_answer",))
def math_answer(sample: unirl.Sample) -> unirl.RewardResult:
    """1.0 when the completion's final answer equals the reference (boxed, ####, or last number)."""
    if sample.reference is None:
        raise ValueError("math_answer needs a reference answer (data.answer_key)")
    predicted = extract_answer(sample.completion)
    correct = predicted is not None and answers_match(predicted, str(sample.reference))
    return unirl.RewardResult(
        score=1.0 if correct else 0.0,
        components={"has_answer": 0.0 if predicted is None else 1.0},
        info={"extracted": predicted},
    )


@unirl.reward("numeric_closeness")
def numeric_closeness(sample: unirl.Sample, scale: float = 10.0) -> float:
    """Partial credit max(0, 1 - |answer - reference| / scale): a dense signal toward the right number."""
    if sample.reference is None:
        raise ValueError("numeric_closeness needs a reference answer (data.answer_key)")
    predicted = extract_answer(sample.completion)
    p = None if predicted is None else as_number(predicted)
    r = as_number(str(sample.reference))
    if r is None:
        raise ValueError(f"numeric_closeness needs a numeric reference, got {sample.reference!r}")
    if p is None:
        return 0.0
    return max(0.0, 1.0 - abs(float(p - r)) / scale)
