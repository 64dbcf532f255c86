"""Code correctness: run the completion's program in the sandbox against the sample's tests.

The program is the last fenced ```python block of the completion (```py and ```python3 count too),
otherwise the whole completion. Tests come from either or both of:

* ``sample.metadata["tests"]``: a list (or its JSON text) of ``{"input": stdin, "output": expected stdout}``
  cases. Each case is a separate sandboxed run; outputs compare line by line, ignoring trailing
  whitespace and trailing blank lines. After the first case that times out, the remaining cases are
  not run and count as failed, so an infinite loop costs one timeout rather than one per case.
* ``sample.reference`` holding assert-style test code: every top-level ``assert`` is one test. One run
  executes the program, then the reference's top-level statements in order; a failing non-assert
  statement (setup) fails the asserts after it. A reference without a top-level assert is not test
  code (a reference solution, say) and is ignored.

Recipe arguments: ``timeout_s`` (wall-clock and CPU limit of each run, default 5) and ``memory_mb``
(address-space limit, default 512).

The score is the fraction of tests passed. A program that misbehaves (does not compile, crashes, loops,
exhausts memory or output) scores 0 for the affected tests with the sandbox's status and reason in
``info``; only a sandbox that cannot isolate raises (:class:`unirl.sandbox.SandboxUnavailable`).

Assert-style results travel on stdout tagged with a per-run random nonce, so a program that exits
early or prints look-alike lines passes nothing; the program runs in the same interpreter as the test
statements, though, so deliberate introspection of the harness could forge results. Input/output
cases have no such channel: the expected output never enters the sandbox.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import unirl
from unirl.sandbox import SandboxLimits, SandboxResult, run_sandboxed

FENCED_PYTHON = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
# The harness's exit status when solution.py does not compile (before any of it ran). A program that
# exits with it on purpose is only scored as not compiling: it cannot gain from that.
NOT_COMPILED = 97

# Runs inside the sandbox as main.py; compiles solution.py itself so that a syntax error is told apart
# from a runtime failure without compiling untrusted text in the host process.
HARNESS = f"""
import ast, os, sys

def run_tests(program, namespace):
    nonce = sys.stdin.readline().strip()
    results = os.dup(1)  # the program may replace or close sys.stdout; the results still get through
    with open("tests.py", encoding="utf-8") as handle:
        statements = ast.parse(handle.read(), "tests.py").body
    try:
        exec(program, namespace)
    except SystemExit:
        pass  # an explicit exit ends the program, not the tests
    except BaseException as exc:
        print(f"solution.py raised {{type(exc).__name__}}: {{exc}}", file=sys.stderr)
    ordinal = 0  # the how-many-th assert: the host counts tests the same way
    for statement in statements:
        code = compile(ast.Module([statement], []), "tests.py", "exec")
        try:
            exec(code, namespace)
            passed = True
        except BaseException as exc:
            passed = False
            print(f"tests.py line {{statement.lineno}}: {{type(exc).__name__}}: {{exc}}", file=sys.stderr)
        if isinstance(statement, ast.Assert):
            if passed:
                os.write(results, f"\\n{{nonce}} pass {{ordinal}}\\n".encode())
            ordinal += 1
        elif not passed:
            break

with open("solution.py", encoding="utf-8") as handle:
    source = handle.read()
try:
    program = compile(source, "solution.py", "exec")
except (SyntaxError, ValueError) as exc:
    print(f"solution.py does not compile: {{type(exc).__name__}}: {{exc}}", file=sys.stderr)
    sys.exit({NOT_COMPILED})
namespace = {{"__name__": "__main__", "__file__": "solution.py", "__builtins__": __builtins__}}
if os.path.exists("tests.py"):
    run_tests(program, namespace)
else:
    exec(program, namespace)
"""


def extract_program(completion: str) -> str:
    blocks = FENCED_PYTHON.findall(completion)
    return blocks[-1] if blocks else completion


def io_cases(metadata: Mapping[str, Any]) -> list[dict[str, str]]:
    tests = metadata.get("tests")
    if tests is None:
        return []
    if isinstance(tests, str):
        tests = json.loads(tests)
    if not isinstance(tests, Sequence) or not all(
        isinstance(t, Mapping) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str) for t in tests
    ):
        raise ValueError('code_tests: metadata["tests"] must be a list of {"input": str, "output": str} cases')
    return [{"input": t["input"], "output": t["output"]} for t in tests]


def assert_count(reference: str | None) -> int:
    """Top-level asserts in the reference; 0 when it is not Python test code."""
    if not reference:
        return 0
    try:
        statements = ast.parse(reference).body
    except SyntaxError:
        return 0
    return sum(isinstance(s, ast.Assert) for s in statements)


def same_output(actual: str, expected: str) -> bool:
    def lines(text: str) -> list[str]:
        stripped = [line.rstrip() for line in text.splitlines()]
        while stripped and not stripped[-1]:
            stripped.pop()
        return stripped

    return lines(actual) == lines(expected)


def test_verdict(result: SandboxResult, passed: bool, wrong: str) -> str:
    if result.exit_code == NOT_COMPILED:
        return "not_compiled"
    if passed:
        return "pass"
    return wrong if result.ok else result.status  # a run that ended badly is reported as what happened to it


@unirl.reward("code_tests", components=("compiled", "passed_fraction", "timed_out"))
def code_tests(sample: unirl.Sample, timeout_s: float = 5.0, memory_mb: int = 512) -> unirl.RewardResult:
    """Fraction of tests (stdin/stdout cases and/or reference asserts) the completion's program passes."""
    cases = io_cases(sample.metadata)
    asserts = assert_count(sample.reference)
    if not cases and not asserts:
        raise ValueError('code_tests needs metadata["tests"] (stdin/stdout cases) or asserts in the reference')
    program = extract_program(sample.completion)
    limits = SandboxLimits(cpu_seconds=timeout_s, wall_seconds=timeout_s, memory_mb=memory_mb)
    # Per test: its verdict ("pass", "wrong_answer", "assertion_failed", "not_compiled", a sandbox status
    # or "not_run") and the run that decided it.
    tests: list[tuple[str, SandboxResult | None]] = []

    def stopped() -> bool:
        return any(verdict in ("not_compiled", "timeout") for verdict, _ in tests)

    for case in cases:
        if stopped():
            tests.append(("not_run", None))
            continue
        result = run_sandboxed(HARNESS, files={"solution.py": program}, stdin=case["input"], limits=limits)
        tests.append((test_verdict(result, result.ok and same_output(result.stdout, case["output"]), "wrong_answer"),
                      result))
    if asserts and stopped():
        tests.extend([("not_run", None)] * asserts)
    elif asserts:
        nonce = secrets.token_hex(16)
        result = run_sandboxed(HARNESS, files={"solution.py": program, "tests.py": sample.reference or ""},
                               stdin=nonce + "\n", limits=limits)
        passed_ordinals = {words[2] for words in map(str.split, result.stdout.splitlines())
                           if len(words) == 3 and words[0] == nonce and words[1] == "pass"}
        # Asserts that passed before a timeout or a crash still count: they ran and held.
        tests.extend((test_verdict(result, str(i) in passed_ordinals, "assertion_failed"), result)
                     for i in range(asserts))

    verdicts = [verdict for verdict, _ in tests]
    failures = [(i, verdict, run) for i, (verdict, run) in enumerate(tests) if verdict != "pass" and run is not None]
    index, verdict, shown = failures[0] if failures else (len(tests) - 1, "pass", tests[-1][1])
    assert shown is not None
    if verdict == "not_compiled":
        reason = shown.stderr.strip().splitlines()[-1] if shown.stderr.strip() else "does not compile"
    elif verdict in ("wrong_answer", "assertion_failed"):
        reason = f"{verdict.replace('_', ' ')} on test {index}"
    else:
        reason = shown.reason
    fraction = verdicts.count("pass") / len(tests)
    return unirl.RewardResult(
        score=fraction,
        components={
            "compiled": 0.0 if verdict == "not_compiled" else 1.0,
            "passed_fraction": fraction,
            "timed_out": 1.0 if "timeout" in verdicts else 0.0,
        },
        info={
            "status": shown.status,
            "reason": reason,
            "passed": verdicts.count("pass"),
            "total": len(tests),
            "verdicts": verdicts,
            "stderr_tail": shown.stderr[-500:],
        },
    )
