"""Math answer correctness: extract the final answer and compare it with the reference exactly.

Accepted answer forms, in order of precedence: the last ``\\boxed{...}``, a ``#### x`` line (GSM8K),
otherwise the last number in the text. A reference is reduced to its final answer the same way
(:func:`reference_answer`), so a GSM8K solution given as the reference compares by its ``#### 72``, on every
backend (each adapter calls these functions); a reference with no answer to find is a failed reward call,
counted by the executor, never a score of 0. Numbers compare as exact fractions, so ``0.5``, ``1/2`` and
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


@functools.lru_cache(maxsize=65536)  # one reference per prompt, scored once per completion
def reference_answer(reference: str) -> str:
    """The final answer of a reference, reduced the way a completion is: the last ``\\boxed{...}``, else a ``#### x``
    line (a GSM8K solution ends ``#### 72``), else the whole reference when it is one number or one line of text
    (``72``, ``\\frac{1}{2}``, ``x^2+1``), else the last number of a worked solution.

    Raises ValueError when there is none (empty, ``####`` with nothing after it, an unbalanced ``\\boxed{``, or the
    text of a dict, which is what a nested answer column becomes when ``data.answer_key`` names the column above
    it): the executor counts that as a failed call, never as a wrong completion scoring 0."""
    text = reference.strip()
    if not text:
        raise ValueError("the reference is empty: the row has no answer to compare with")
    if "\\boxed" in text:
        boxed = last_boxed(text)
        if boxed is None or not boxed.strip():
            raise ValueError(f"the reference has an empty or unbalanced \\boxed{{}}: {_clip(text)}")
        return boxed.strip()
    if "####" in text:
        after = text.rsplit("####", 1)[1].strip()
        if not after:
            raise ValueError(f"the reference ends with '####' and no answer after it: {_clip(text)}")
        return after.splitlines()[0].strip()
    if text.startswith("{") and text.endswith("}") and ":" in text:
        raise ValueError(f"the reference is the text of an object, not an answer: {_clip(text)}; point "
                         "data.answer_key at the field inside it (dotted, e.g. reward_model.ground_truth)")
    if as_number(text) is not None or "\n" not in text:
        return text
    numbers = NUMBER.findall(text)
    if not numbers:
        raise ValueError(f"the reference has several lines, no \\boxed{{}}, no '####' line and no number: "
                         f"{_clip(text)}")
    return str(numbers[-1])


def _clip(text: str, limit: int = 120) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


MAX_NUMBER_CHARS = 4300
"""Python's own limit on the digits of an integer written in text: a longer "number" compares as text."""
MAX_EXPONENT = 1000
"""``1e999999999`` would make Fraction compute a billion-digit power: a larger exponent compares as text."""
EXPONENT = re.compile(r"[eE]([-+]?[0-9_]+)\Z")


@functools.lru_cache(maxsize=65536)
def as_number(text: str) -> Fraction | int | None:
    """The exact value of a number written as text (integer, decimal, fraction, ``\\frac{a}{b}``, scientific), or
    None. A completion is hostile, so this is bounded and never raises: numbers past :data:`MAX_NUMBER_CHARS` digits
    or :data:`MAX_EXPONENT` are not numbers here."""
    cleaned = text.strip()
    if len(cleaned) > MAX_NUMBER_CHARS:
        return None
    if INTEGER.fullmatch(cleaned):  # the common case, ~20x cheaper than Fraction parsing
        return int(cleaned)
    if "\\" in cleaned:
        cleaned = FRAC.sub(r"\1/\2", cleaned)
    cleaned = cleaned.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    exponent = EXPONENT.search(cleaned)
    if exponent is not None and abs(int(exponent.group(1).replace("_", "") or 0)) > MAX_EXPONENT:
        return None
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
    """1.0 when the completion's final answer equals the reference's (each boxed, ####, or last number)."""
    if sample.reference is None:
        raise ValueError("math_answer needs a reference answer (data.answer_key)")
    if verifier not in VERIFIERS:
        raise ValueError(f"math_answer: verifier={verifier!r}; allowed: {list(VERIFIERS)}")
    reference = reference_answer(str(sample.reference))
    if verifier == "math_verify":
        correct, predicted = math_verify_match(sample.completion, reference)
    else:
        predicted = extract_answer(sample.completion)
        correct = predicted is not None and answers_match(predicted, reference)
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
    r = as_number(reference_answer(str(sample.reference)))
    predicted = extract_answer(sample.completion)
    p = None if predicted is None else as_number(predicted)
    if r is None:
        raise ValueError(f"numeric_closeness needs a numeric reference, got {sample.reference!r}")
    if p is None:
        return 0.0
    try:
        distance = float(abs(p - r))
    except OverflowError:  # beyond a float: as far from the reference as anything gets
        return 0.0
    return max(0.0, 1.0 - distance / scale)
