"""Model text: what a policy can write, fed to everything in unirl that parses it (tool calls, answers, code fences,
the think/answer format, the builtin environments' actions).

A policy finds a slow input in a few hundred tokens, and a parser holding the interpreter lock keeps every deadline
from firing. Each case runs one parser on every hostile family below at the context length (:data:`CONTEXT_CHARS`)
and at an eighth of it: it must return (never raise: a malformed action is the model's, never an error counted
against the run), and its time must grow linearly: the larger input may take at most :data:`MAX_GROWTH` times the
smaller one (linear is 8; the quadratic parsers this corpus found were 64 and worse), unless both are quick.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.adversarial import Case

AREA = "model text (parsers of what the policy writes)"
CONTEXT_CHARS = 131_072
"""About 32k tokens of text: a long context's worth of one completion."""
MAX_GROWTH = 24.0
QUICK_S = 0.05
"""Both sizes under this: nothing to measure, the parser is fast enough either way."""


def _repeat(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


FAMILIES: dict[str, Callable[[int], str]] = {
    "spaces after <tool_call>": lambda n: "<tool_call>" + " " * n,
    "newlines after <tool_call>": lambda n: "<tool_call>" + "\n" * n,
    "spaces inside a closed call": lambda n: "<tool_call>" + " " * n + "</tool_call>",
    "<tool_call> repeated": lambda n: _repeat("<tool_call>", n),
    "brackets nested deep": lambda n: "<tool_call>" + "[" * n + "]" * n + "</tool_call>",
    "objects nested deep": lambda n: "<tool_call>" + '{"a":' * (n // 5) + "</tool_call>",
    "a 5,000-digit number": lambda n: '<tool_call>{"name": "get", "arguments": {"key": ' + "9" * max(5000, n // 4)
                                      + "}}</tool_call>",
    "a huge string argument": lambda n: '<tool_call>{"name": "get", "arguments": {"key": "' + "a" * n
                                        + '"}}</tool_call>',
    "escapes in a string": lambda n: '<tool_call>{"name": "' + _repeat("\\u0041", n) + '"}</tool_call>',
    "digits": lambda n: "9" * n,
    "digits and commas": lambda n: _repeat("1,", n),
    "boxed, nested deep": lambda n: "\\boxed{" * (n // 7) + "}" * (n // 7),
    "boxed, opened repeatedly": lambda n: _repeat("\\boxed{", n),
    "a huge exponent": lambda n: "\\boxed{1e999999999}" + " " * n,
    "frac opened repeatedly": lambda n: _repeat("\\frac{1", n),
    "code fences opened repeatedly": lambda n: _repeat("```python\n", n),
    "think/answer tags repeated": lambda n: "<think>" + _repeat("</think><answer>", n) + "</answer>x",
    "#### repeated": lambda n: _repeat("####", n),
    "lookup calls": lambda n: _repeat("=3", n),
}


def _uncached() -> None:
    """The answer extraction caches by text (rollouts repeat answers): a timed repeat must not read the cache."""
    from unirl.plugins.builtin_rewards import math_answer

    for cached in (math_answer.extract_answer, math_answer.as_number, math_answer.reference_answer):
        cached.cache_clear()


def _time(parse: Callable[[str], object], text: str) -> float:
    best = float("inf")
    for _ in range(3):
        _uncached()
        start = time.perf_counter()
        parse(text)
        best = min(best, time.perf_counter() - start)
    return best


def linear(parse: Callable[[str], object]) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        slow = []
        for family, make in FAMILIES.items():
            small, large = make(CONTEXT_CHARS // 8), make(CONTEXT_CHARS)
            t_small, t_large = _time(parse, small), _time(parse, large)
            if t_large > QUICK_S and t_large > MAX_GROWTH * max(t_small, 1e-4):
                slow.append(f"{family}: {t_small * 1000:.1f} ms -> {t_large * 1000:.1f} ms")
        assert not slow, "super-linear on: " + "; ".join(slow)
    return check


# -- the parsers ----------------------------------------------------------------------------------------------------
def parse_tool_call(text: str) -> object:
    from unirl.environments.contract import ToolCall, ToolCallError
    from unirl.environments.contract import parse_tool_call as parse

    found = parse(text)
    assert found is None or isinstance(found, ToolCall | ToolCallError), found
    return found


def math_answer(text: str) -> object:
    import unirl
    from unirl.plugins.builtin_rewards.math_answer import math_answer as reward

    return reward(unirl.Sample(prompt="p", completion=text, reference="42"))


def numeric_closeness(text: str) -> object:
    import unirl
    from unirl.plugins.builtin_rewards.math_answer import numeric_closeness as reward

    return reward(unirl.Sample(prompt="p", completion=text, reference="42"))


def code_fences(text: str) -> object:
    from unirl.plugins.builtin_rewards.code_exec import extract_program

    return extract_program(text)


def think_answer_format(text: str) -> object:
    import unirl
    from unirl.plugins.builtin_rewards.formats import format_match

    return format_match(unirl.Sample(prompt="p", completion=text))


def bare_number(text: str) -> object:
    import unirl
    from unirl.plugins.builtin_rewards.formats import bare_number as reward

    return reward(unirl.Sample(prompt="p", completion=text))


def episode(name: str) -> Callable[[str], object]:
    """One turn of a builtin environment through the episode loop: whatever the action, the episode does not fail
    (a malformed tool call is the model's observation, counted as tool_malformed)."""
    def run(text: str) -> object:
        from unirl.environments.contract import Task
        from unirl.environments.episode import play
        from unirl.host.manager import get_host

        spec = get_host().environments.get(name)
        prompt = "3?" if name == "lookup" else "What is 6*7?"
        done = play(spec, {}, Task(prompt=prompt, reference="42", seed=1), [text], timeout_s=60)
        assert done.error_kind is None, f"{done.error_kind}: {done.error}"
        return done
    return run


def tool_calls_are_counted_as_malformed(tmp: Path) -> None:
    """Each malformed family, as an action of the builtin python environment: the model sees an error, the turn
    counts tool_malformed, the episode goes on; nothing counts against reward_policy.max_error_rate."""
    from unirl.environments.contract import Task
    from unirl.environments.episode import play
    from unirl.host.manager import get_host

    spec = get_host().environments.get("python")
    for family in ("spaces after <tool_call>", "brackets nested deep", "objects nested deep", "a 5,000-digit number",
                   "escapes in a string", "spaces inside a closed call"):
        text = FAMILIES[family](CONTEXT_CHARS)
        done = play(spec, {}, Task(prompt="q", reference="42", seed=1), [text, "42"], timeout_s=60)
        assert done.error_kind is None, f"{family}: {done.error_kind}: {done.error}"
        first = done.turns[0]
        if "</tool_call>" not in text:  # an opening tag alone is not a call: the turn is a (wrong) answer
            assert done.termination == "done" and len(done.turns) == 1, family
            continue
        assert first.metrics.get("tool_malformed") == 1.0, (family, first.metrics)
        assert first.observation and "error:" in first.observation[0]["content"], family
        assert done.return_ == 1.0, family  # the episode went on to the answer


CASES = [
    Case("parse_tool_call on every family", linear(parse_tool_call)),
    Case("math_answer (builtin, scored in the trainer's thread) on every family", linear(math_answer)),
    Case("numeric_closeness on every family", linear(numeric_closeness)),
    Case("code_tests' fenced-code extraction on every family", linear(code_fences)),
    Case("the format reward's default <think>/<answer> check on every family", linear(think_answer_format)),
    Case("bare_number on every family", linear(bare_number)),
    Case("the builtin lookup environment's step on every family", linear(episode("lookup"))),
    Case("the builtin python environment's step on every family", linear(episode("python"))),
    Case("malformed calls are tool_malformed, never an episode error", tool_calls_are_counted_as_malformed),
]
