"""Math answer correctness: extract the final answer and compare it with the reference exactly.

Accepted answer forms, in order of precedence: the last ``\\boxed{...}``, a ``#### x`` line (GSM8K),
otherwise the last number in the text. Numbers compare as exact fractions, so ``0.5``, ``1/2`` and
``\\frac{1}{2}`` are equal; anything else compares as whitespace-normalised text. With
``verifier: math_verify`` (kwargs), expressions are compared symbolically by math-verify instead
(``pip install math-verify``); its SIGALRM timeouts are switched off, because they fail off the main
thread (verl scored every sample 0 that way) and unirl's executor kills an overrunning call instead.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

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


def math_verify_match(completion: str, reference: str) -> tuple[bool, str | None]:
    """Symbolic comparison by math-verify, without its signal-based timeouts (see the module docstring)."""
    try:
        from math_verify import parse, verify
    except ImportError as exc:
        raise RuntimeError("math_answer(verifier=math_verify) needs math-verify: pip install math-verify") from exc
    # It warns that timeouts are off; that is deliberate here (the executor enforces them), not the user's concern.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold = parse(reference if "\\boxed" in reference or "$" in reference else f"${reference}$", parsing_timeout=None)
    predicted = parse(completion, parsing_timeout=None)
    if not predicted:
        return False, None
    return bool(verify(gold, predicted, timeout_seconds=None)), str(predicted[-1])


VERIFIERS = ("builtin", "math_verify")


def builtin_verifier(kwargs: Mapping[str, Any]) -> bool:
    """The builtin comparison is a regex and a Fraction: bounded. sympy (math_verify) can run for minutes on a
    hostile expression, so that form is not trusted to score in the trainer's thread."""
    return bool(kwargs.get("verifier", "builtin") == "builtin")


@unirl.reward("math_answer", components=("has_answer",), trusted=builtin_verifier)
def math_answer(sample: unirl.Sample, verifier: str = "builtin") -> unirl.RewardResult:
    """1.0 when the completion's final answer equals the reference (boxed, ####, or last number)."""
    if sample.reference is None:
        raise ValueError("math_answer needs a reference answer (data.answer_key)")
    if verifier == "math_verify":
        correct, predicted = math_verify_match(sample.completion, str(sample.reference))
    elif verifier == "builtin":
        predicted = extract_answer(sample.completion)
        correct = predicted is not None and answers_match(predicted, str(sample.reference))
    else:
        raise ValueError(f"math_answer: verifier={verifier!r}; allowed: {list(VERIFIERS)}")
    return unirl.RewardResult(
        score=1.0 if correct else 0.0,
        components={"has_answer": 0.0 if predicted is None else 1.0},
        info={"extracted": predicted},
    )


@unirl.reward("numeric_closeness", trusted=True)
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
