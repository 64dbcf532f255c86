"""Code correctness: run the completion's program in the sandbox against the sample's tests.

The program is the last fenced ```python block of the completion (```py and ```python3 count too),
otherwise the whole completion. Tests come from any of:

* ``sample.metadata["tests"]`` as a list (or its JSON text) of ``{"input": stdin, "output": expected stdout}``
  cases. Each case is a separate sandboxed run; outputs compare line by line, ignoring trailing whitespace and
  trailing blank lines. After the first case that times out, the remaining cases are not run and count as
  failed, so an infinite loop costs one timeout rather than one per case.
* ``sample.metadata["tests"]`` as a list of assert strings (MBPP's ``test_list``): each string is one test.
  ``metadata["test_setup"]`` / ``["test_setup_code"]`` (code) and ``["test_imports"]`` (a list of import
  lines) run first.
* ``sample.reference`` holding assert-style test code: every top-level ``assert`` is one test; the other
  top-level statements are setup, run in order (a failing one fails the asserts after it). A reference without
  a top-level assert is not test code (a reference solution, say) and is ignored.

Recipe arguments: ``timeout_s`` (wall-clock and CPU limit of each run, default 5) and ``memory_mb`` (memory of
each run as a whole, default 512).

How asserts are graded (nothing the program does can forge a pass): the program and the tests run in two
separate sandboxes. The *program* sandbox executes the solution and answers calls; the *checker* sandbox runs
the tests with every function and class of the solution replaced by a stand-in. A call from a test travels as
plain values (numbers, str, bytes, bool, None, lists, tuples, dicts and sets of them; tagged JSON with a size
and depth cap, never pickle) through this process to the program, and its result comes back the same way. The
expected values never enter the program's sandbox, the comparison runs in the checker with the checker's own
objects, and a function that returns anything but a plain value (an object whose ``__eq__`` is always true,
say) has that call fail. Objects made by calling a class of the solution stay in the program; the tests see
handles that equal only themselves. There is no result channel the program can write to: stdout, exit status,
files and frames of the program are not consulted for asserts at all.

The score is the fraction of tests passed. A program that misbehaves (does not compile, crashes, loops,
exhausts memory or output) scores 0 for the affected tests with the sandbox's status and reason in ``info``;
:class:`unirl.rewards.sandbox.SandboxUnavailable` (no isolation) and :class:`unirl.rewards.sandbox.SandboxOverloaded`
(the host
was too busy to judge the program) are raised, never scored: the reward executor counts them as
``infrastructure`` errors.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import unirl
from unirl.rewards.sandbox.core import (
    WORKDIR,
    SandboxLimits,
    SandboxResult,
    SandboxSession,
    run_sandboxed,
    start_sandboxed,
)

from . import code_protocol

FENCE = "```"
PYTHON_FENCE_INFO = re.compile(r"[ \t]*(?:python3?|py)[ \t]*\n", re.IGNORECASE)
# The harness's exit status when solution.py does not compile (before any of it ran). A program that
# exits with it on purpose is only scored as not compiled: it cannot gain from that.
NOT_COMPILED = 97
_MAX_TEST_SOURCE = 1 << 20  # test code larger than this is not test code we parse
_HERE = Path(__file__).parent

# Runs inside the sandbox as main.py for stdin/stdout cases; compiles solution.py itself so that a syntax error
# is told apart from a runtime failure without compiling untrusted text in the host process. The expected output
# never enters the sandbox, so sharing the interpreter with the program gives it nothing to forge.
HARNESS = f"""
import sys
with open("solution.py", encoding="utf-8") as handle:
    source = handle.read()
try:
    program = compile(source, "solution.py", "exec")
except (SyntaxError, ValueError) as exc:
    print(f"solution.py does not compile: {{type(exc).__name__}}: {{exc}}", file=sys.stderr)
    sys.exit({NOT_COMPILED})
exec(program, {{"__name__": "__main__", "__file__": "solution.py", "__builtins__": __builtins__}})
"""


def _shipped(name: str) -> str:
    return (_HERE / name).read_text(encoding="utf-8")


def _harness(source: str, files: dict[str, str], limits: SandboxLimits) -> SandboxSession:
    """Start a harness (``main.py``) in a sandbox session, with the protocol module importable next to it."""
    # python -I leaves the script's directory off sys.path, so the harness's one import needs it put back.
    boot = f"import runpy, sys; sys.path.insert(0, {WORKDIR!r}); runpy.run_path('main.py', run_name='__main__')"
    return start_sandboxed(argv=[sys.executable, "-I", "-c", boot], limits=limits,
                           files={"main.py": source, "unirl_protocol.py": _shipped("code_protocol.py"), **files})


def extract_program(completion: str) -> str:
    """The last fenced Python block (```python ... ```), else the whole completion.

    A scan, not one lazy pattern over the text: ``.*?`` between fences re-reads the rest of the text from every
    unclosed opening fence, quadratic in a completion of openings. Here each fence is looked at once."""
    last, at = None, 0
    while (start := completion.find(FENCE, at)) >= 0:
        info = PYTHON_FENCE_INFO.match(completion, start + len(FENCE))
        if info is None:
            at = start + 1
            continue
        end = completion.find(FENCE, info.end())
        if end < 0:
            break  # no closing fence after this opening, so after no later one either
        last, at = completion[info.end():end], end + len(FENCE)
    return completion if last is None else last


def _tests_list(metadata: Mapping[str, Any]) -> list[Any]:
    tests = metadata.get("tests")
    if tests is None:
        return []
    if isinstance(tests, str):
        tests = json.loads(tests)
    if not isinstance(tests, Sequence) or isinstance(tests, str):
        raise ValueError('code_tests: metadata["tests"] must be a list of {"input", "output"} cases or of assert '
                         "strings")
    return list(tests)


def io_cases(metadata: Mapping[str, Any]) -> list[dict[str, str]]:
    """The stdin/stdout cases of ``metadata["tests"]`` (empty when it holds assert strings)."""
    tests = _tests_list(metadata)
    if all(isinstance(t, str) for t in tests):
        return []
    if not all(isinstance(t, Mapping) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)
               for t in tests):
        raise ValueError('code_tests: metadata["tests"] must be a list of {"input": str, "output": str} cases or '
                         "a list of assert strings")
    return [{"input": t["input"], "output": t["output"]} for t in tests]


def _statements(code: str) -> list[ast.stmt] | None:
    if len(code) > _MAX_TEST_SOURCE:
        return None
    try:
        return ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def assert_count(reference: str | None) -> int:
    """Top-level asserts in the reference; 0 when it is not Python test code."""
    statements = _statements(reference) if reference else None
    return sum(isinstance(s, ast.Assert) for s in statements or [])


@dataclass(frozen=True)
class Unit:
    code: str
    test: bool  # a test (counts) or setup (runs, fails the tests after it when it raises)


def assert_units(sample: unirl.Sample) -> list[Unit]:
    """The checker's program: setup and tests, in order, from metadata's assert list and the reference."""
    metadata = sample.metadata
    units: list[Unit] = []
    listed = [t for t in _tests_list(metadata) if isinstance(t, str)]
    if listed:
        imports = metadata.get("test_imports") or []
        if isinstance(imports, str):
            imports = [imports]
        for setup in (*imports, metadata.get("test_setup") or "", metadata.get("test_setup_code") or ""):
            if not isinstance(setup, str):
                raise ValueError("code_tests: metadata test_setup, test_setup_code and test_imports must be code")
            if setup.strip():
                units.append(Unit(setup, test=False))
        units += [Unit(test, test=True) for test in listed]
    statements = _statements(sample.reference) if sample.reference else None
    if statements and any(isinstance(s, ast.Assert) for s in statements):
        units += [Unit(ast.unparse(s), test=isinstance(s, ast.Assert)) for s in statements]
    return units


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


@dataclass
class _Graded:
    verdict: str
    run: SandboxResult | None  # the run that decided it
    error: str | None = None  # why the checker said it failed


def run_asserts(program: str, units: list[Unit], limits: SandboxLimits) -> list[_Graded]:
    """Grade the tests among ``units`` against ``program``; see the module docstring for how."""
    tests = sum(unit.test for unit in units)
    # The checker waits on the program, so its clock must outlast the program's; its own work is milliseconds.
    checker_limits = SandboxLimits(wall_seconds=limits.wall_seconds + 5, cpu_seconds=limits.cpu_seconds + 5,
                                   memory_mb=max(limits.memory_mb, 256), max_processes=8)
    results: dict[int, tuple[bool, str | None]] = {}
    compile_error = False
    tests_json = json.dumps({"units": [unit.__dict__ for unit in units]})
    with _harness(_shipped("code_program.py"), {"solution.py": program}, limits) as prog, \
            _harness(_shipped("code_checker.py"), {"tests.json": tests_json}, checker_limits) as checker:
        hello = prog.receive_line(code_protocol.MAX_LINE)
        try:
            compile_error = hello is not None and "compile_error" in code_protocol.loads(hello)
        except ValueError:
            hello = None  # not a message: the program has nothing to offer the tests
        if compile_error:
            checker.kill()
        else:
            relay(prog, checker, hello, results)
        program_run = prog.finish()
        checker_run = checker.finish()
    graded = []
    for index in range(tests):
        passed, error = results.get(index, (False, None))
        if compile_error:
            graded.append(_Graded("not_compiled", program_run))
        elif passed:
            graded.append(_Graded("pass", program_run))
        elif not program_run.ok:
            graded.append(_Graded(program_run.status, program_run, error))
        elif index not in results:
            graded.append(_Graded("checker_error", checker_run, checker_run.reason))
        else:
            graded.append(_Graded("assertion_failed", program_run, error))
    return graded


def relay(prog: SandboxSession, checker: SandboxSession, hello: bytes | None,
          results: dict[int, tuple[bool, str | None]]) -> None:
    """Carry the checker's calls to the program and the program's answers back, as opaque lines.

    Only the checker's messages are read here (to route them and to record verdicts); the program's answers
    go to the checker unopened, which accepts nothing but plain values from them.
    """
    ended = code_protocol.dumps({"ready": [], "ended": "the program is not running"})
    if not checker.send(hello + b"\n" if hello is not None else ended):
        return
    while True:
        line = checker.receive_line(code_protocol.MAX_LINE)
        if line is None:
            return
        try:
            message = code_protocol.loads(line)
        except ValueError:
            return  # the checker itself is broken (by the test code); the tests it did not report failed
        op = message.get("op")
        if op == "result":
            index = message.get("test")
            if type(index) is int and index not in results:
                error = message.get("error")
                results[index] = (message.get("passed") is True, str(error)[:1000] if error is not None else None)
            continue
        if op == "done":
            return
        reply = prog.receive_line(code_protocol.MAX_LINE) if prog.send(line + b"\n") else None
        if reply is None:
            reply = code_protocol.dumps({"id": message.get("id"), "error": [
                "ProgramEnded", "the program is not running any more"]}).rstrip(b"\n")
        if not checker.send(reply + b"\n"):
            return


@unirl.reward("code_tests", components=("compiled", "passed_fraction", "timed_out"))
def code_tests(sample: unirl.Sample, timeout_s: float = 5.0, memory_mb: int = 512) -> unirl.RewardResult:
    """Fraction of tests (stdin/stdout cases and/or asserts) the completion's program passes."""
    cases = io_cases(sample.metadata)
    units = assert_units(sample)
    asserts = sum(unit.test for unit in units)
    if not cases and not asserts:
        raise ValueError('code_tests needs metadata["tests"] (stdin/stdout cases or assert strings) or asserts '
                         "in the reference")
    program = extract_program(sample.completion)
    limits = SandboxLimits(cpu_seconds=timeout_s, wall_seconds=timeout_s, memory_mb=memory_mb)
    tests: list[_Graded] = []

    def stopped() -> bool:
        return any(t.verdict in ("not_compiled", "timeout") for t in tests)

    for case in cases:
        if stopped():
            tests.append(_Graded("not_run", None))
            continue
        result = run_sandboxed(HARNESS, files={"solution.py": program}, stdin=case["input"], limits=limits)
        verdict = test_verdict(result, result.ok and same_output(result.stdout, case["output"]), "wrong_answer")
        tests.append(_Graded(verdict, result))
    if asserts and stopped():
        tests.extend([_Graded("not_run", None)] * asserts)
    elif asserts:
        tests.extend(run_asserts(program, units, limits))

    verdicts = [t.verdict for t in tests]
    failures = [(i, t) for i, t in enumerate(tests) if t.verdict != "pass" and t.run is not None]
    index, shown = failures[0] if failures else (len(tests) - 1, tests[-1])
    run = shown.run
    assert run is not None
    verdict = shown.verdict
    if verdict == "not_compiled":
        reason = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "does not compile"
    elif verdict in ("wrong_answer", "assertion_failed"):
        reason = f"{verdict.replace('_', ' ')} on test {index}"
        if shown.error:
            reason += f" ({shown.error[:200]})"
    elif verdict == "checker_error":
        reason = f"the checker did not finish test {index}: {run.reason}"
    else:
        reason = run.reason
    fraction = verdicts.count("pass") / len(tests)
    return unirl.RewardResult(
        score=fraction,
        components={
            "compiled": 0.0 if verdict == "not_compiled" else 1.0,
            "passed_fraction": fraction,
            "timed_out": 1.0 if "timeout" in verdicts else 0.0,
        },
        info={
            "status": run.status,
            "reason": reason,
            "passed": verdicts.count("pass"),
            "total": len(tests),
            "verdicts": verdicts,
            "stderr_tail": run.stderr[-500:],
        },
    )
