"""The code_tests reward as recipes use it: stdin/stdout cases, MBPP-style assert lists, reference asserts.

Graders' attacks live in tests/adversarial/grader_tricks.py; these tests check the grades honest programs get,
and that the host is back to normal afterwards. Programs that must run into a limit sleep instead of spinning, so
a loaded machine cannot turn their timeout into a (correct) report of starvation.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

import unirl
from tests.adversarial.sandbox_programs import HostWatch
from unirl.host.manager import get_host
from unirl.plugins.builtin_rewards.code_exec import code_tests

ADDITION = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"},
            {"input": "-4 1\n", "output": "-3\n"}, {"input": "0 0\n", "output": "0\n"}]
NEVER_ENDS = "import time\nwhile True:\n    time.sleep(1)\n"


@pytest.fixture
def host() -> HostWatch:
    return HostWatch()


def score(completion: str, reference: str | None = None, metadata: Mapping[str, object] | None = None,
          **kwargs: float) -> unirl.RewardResult:
    if metadata is None:
        metadata = {"tests": ADDITION} if reference is None else {}
    sample = unirl.Sample(prompt="add two numbers", completion=completion, reference=reference, metadata=metadata)
    # 5 s a run: a correct program must not time out on a loaded machine (a sandboxed interpreter start is ~0.1 s
    # idle, seconds under load); the timeout tests pass their own short one.
    return code_tests(sample, **{"timeout_s": 5.0, **kwargs})


def test_stdin_stdout_cases_score_correct_wrong_and_partial_programs(host: HostWatch) -> None:
    correct = score("Here you go:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\nDone.")
    assert correct.score == 1.0
    assert correct.components == {"compiled": 1.0, "passed_fraction": 1.0, "timed_out": 0.0}
    wrong = score("```python\nprint(42)\n```")
    assert wrong.score == 0.0 and wrong.info["reason"] == "wrong answer on test 0"
    partial = score("```python\na, b = map(int, input().split())\nprint(a + b if a > 0 else 0)\n```")
    assert partial.score == 0.75 and partial.info["verdicts"] == ["pass", "pass", "wrong_answer", "pass"]
    broken = score("```python\ndef f(:\n```")
    assert broken.score == 0.0 and broken.components["compiled"] == 0.0
    assert "SyntaxError" in broken.info["reason"]
    assert set(broken.info) == {"status", "reason", "passed", "total", "verdicts", "stderr_tail"}
    host.assert_back_to_normal()


def test_a_program_that_never_ends_costs_one_timeout_not_one_per_case(host: HostWatch) -> None:
    looping = score(f"```python\n{NEVER_ENDS}```", timeout_s=1.0)
    assert looping.score == 0.0 and looping.components["timed_out"] == 1.0
    assert looping.info["status"] == "timeout" and "timeout" in looping.info["reason"]
    assert looping.info["verdicts"] == ["timeout", "not_run", "not_run", "not_run"]
    host.assert_back_to_normal()


def test_reference_asserts_score_the_fraction_that_holds(host: HostWatch) -> None:
    reference = "assert add(1, 2) == 3\nassert add(2, 2) == 4\nimport math\nassert add(-1, 1) == 0\n"
    assert score("def add(a, b):\n    return a + b", reference).score == 1.0
    wrong = score("def add(a, b):\n    return 3", reference)
    assert wrong.score == pytest.approx(1 / 3)
    assert wrong.info["verdicts"] == ["pass", "assertion_failed", "assertion_failed"]
    assert wrong.info["reason"].startswith("assertion failed on test 1")
    # Exiting early, or printing look-alike result lines, passes nothing.
    assert score("import sys\nprint('pass 0')\nprint('x pass 1')\nsys.exit(0)", reference).score == 0.0
    # A reference that holds no top-level assert is not test code.
    with pytest.raises(ValueError, match="needs"):
        score("def add(a, b):\n    return a + b", "def add(a, b):\n    return a + b")
    host.assert_back_to_normal()


def test_mbpp_style_assert_lists_with_setup(host: HostWatch) -> None:
    metadata = {"tests": ["assert hypotenuse(3, 4) == 5.0", "assert isclose(hypotenuse(1, 1), sqrt(2))",
                          "assert hypotenuse(0, 0) == 0"],
                "test_imports": ["from math import isclose, sqrt"]}
    solution = "import math\ndef hypotenuse(a, b):\n    return math.sqrt(a * a + b * b)\n"
    assert score(solution, metadata=metadata).score == 1.0
    # metadata["tests"] may be the JSON text of the list, as datasets often store it
    import json

    assert score(solution, metadata={**metadata, "tests": json.dumps(metadata["tests"])}).score == 1.0
    # a failing setup fails the tests after it (here all of them), with the reason shown
    broken = score(solution, metadata={**metadata, "test_setup": "import not_a_module"})
    assert broken.score == 0.0 and "setup failed" in broken.info["reason"]
    host.assert_back_to_normal()


def test_classes_of_the_solution_work_through_handles(host: HostWatch) -> None:
    solution = """
class Stack:
    def __init__(self, *items):
        self.items = list(items)
    def push(self, item):
        self.items.append(item)
        return self
    def pop(self):
        return self.items.pop()
    def __len__(self):
        return len(self.items)
    def __str__(self):
        return f"Stack{self.items}"
"""
    tests = ["s = Stack(1, 2)\nassert s.pop() == 2 and len(s) == 1",
             "s = Stack()\nassert s.push(3).push(4) is s and s.items == [3, 4]",  # a method may return the object
             "assert str(Stack(5)) == 'Stack[5]'",
             "s = Stack()\nassert s == s and s != Stack()",  # handles equal themselves only
             "assert Stack(1)",  # an object of the solution has no truth value in tests: fails
             ]
    result = score(solution, metadata={"tests": tests})
    assert result.info["verdicts"] == ["pass", "pass", "pass", "pass", "assertion_failed"], result.info
    assert "no truth value" in result.info["reason"]
    host.assert_back_to_normal()


def test_arguments_go_by_value_and_exceptions_come_back(host: HostWatch) -> None:
    solution = ("def sort_in_place(items):\n    items.sort()\n    return items\n"
                "def checked_sqrt(x):\n    if x < 0:\n        raise ValueError('negative')\n    return x ** 0.5\n"
                "def lookup(table, key):\n    return table[key]\n")
    tests = [# the solution sorts its copy: the result comes back, the test's own list stays as it was
             "items = [3, 1, 2]\nassert sort_in_place(items) == [1, 2, 3] and items == [3, 1, 2]",
             "try:\n    checked_sqrt(-1)\nexcept ValueError as exc:\n    assert str(exc) == 'negative'\n"
             "else:\n    raise AssertionError('no error')",
             "assert lookup({(1, 2): {'a', 'b'}, 'k': b'\\x00'}, (1, 2)) == {'a', 'b'}",
             "assert lookup({'k': float('inf')}, 'k') == float('inf')"]
    result = score(solution, metadata={"tests": tests})
    assert result.score == 1.0, result.info
    host.assert_back_to_normal()


def test_a_non_plain_result_fails_that_call_only(host: HostWatch) -> None:
    solution = "def gen(n):\n    return (i for i in range(n))\ndef listed(n):\n    return list(range(n))\n"
    result = score(solution, metadata={"tests": ["assert list(gen(3)) == [0, 1, 2]", "assert listed(3) == [0, 1, 2]"]})
    assert result.info["verdicts"] == ["assertion_failed", "pass"]
    assert "not a plain value" in result.info["reason"]
    host.assert_back_to_normal()


def test_a_program_that_dies_mid_tests_keeps_the_passes_before(host: HostWatch) -> None:
    solution = ("import os, sys\ndef add(a, b):\n    if a == 2:\n        os._exit(3)\n"
                "    print('called', file=sys.stderr)\n    return a + b\n")
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 5) == 5"]
    result = score(solution, metadata={"tests": tests})
    assert result.info["verdicts"] == ["pass", "exit_nonzero", "exit_nonzero"]
    assert result.info["status"] == "exit_nonzero" and "called" in result.info["stderr_tail"]
    host.assert_back_to_normal()


def test_a_call_that_never_returns_is_a_timeout(host: HostWatch) -> None:
    solution = ("import time\ndef add(a, b):\n    while a == 2:\n        time.sleep(1)\n    return a + b\n")
    result = score(solution, metadata={"tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]})
    assert result.info["verdicts"] == ["pass", "timeout"] and result.components["timed_out"] == 1.0
    host.assert_back_to_normal()


def test_stdin_cases_and_reference_asserts_together(host: HostWatch) -> None:
    solution = "def add(a, b):\n    return a + b\nif __name__ == '__main__':\n    import sys\n" \
               "    a, b = map(int, sys.stdin.read().split())\n    print(add(a, b))\n"
    result = score(solution, "assert add(1, 2) == 3\nassert add(-1, 1) == 0", metadata={"tests": ADDITION[:2]})
    assert result.info["verdicts"] == ["pass", "pass", "pass", "pass"]
    host.assert_back_to_normal()


def test_code_tests_is_registered_and_refuses_what_it_cannot_grade() -> None:
    assert get_host().rewards.get("code_tests") is code_tests
    with pytest.raises(ValueError, match="needs"):
        code_tests(unirl.Sample(prompt="", completion="print(1)", reference="42"))
    with pytest.raises(ValueError, match="assert strings"):
        code_tests(unirl.Sample(prompt="", completion="print(1)", metadata={"tests": [{"input": "1"}]}))
