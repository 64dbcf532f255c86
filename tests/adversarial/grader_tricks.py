"""Completions that try to beat ``code_tests`` without solving the task: none may beat an honest wrong answer.

Each case grades a trick against a task whose honest wrong answer is known, with the same grader, and is contained
when the trick scores no more than that answer. The first six beat the earlier grader (the program and the asserts
in one interpreter, results on stdout behind a nonce): they score 1.0 there where the honest wrong answer scores
0.25. ``benchmarks/sandbox_choice.py`` runs the corpus against that grader too, through :func:`using`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import unirl
from tests.adversarial import Case
from tests.adversarial.sandbox_programs import HostWatch

AREA = "code_tests: grader tricks"


@dataclass(frozen=True)
class Task:
    reference: str  # assert-style tests (the earlier grader reads them from the reference too)
    honest_wrong: str


ADD = Task("assert add(1, 2) == 3\nassert add(2, 2) == 4\nassert add(0, 5) == 5\nassert add(-1, -1) == -2\n",
           "def add(a, b):\n    return a * b\n")  # passes add(2, 2) only: 0.25
# The expected side leans on builtins and a module; the honest wrong answer (2 pi r) passes two of four: 0.5.
CIRCLE = Task("import math\nassert math.isclose(area(1), math.pi)\nassert abs(area(2) - 4 * math.pi) < 1e-9\n"
            "assert area(0) == 0\nassert round(area(3), 2) == 28.27\n",
            "import math\ndef area(r):\n    return 2 * math.pi * r\n")
# A variable used on both sides of the comparison; the honest wrong answer (the count) passes one of three.
TOTAL = Task("xs = [1, 2, 3]\nassert total(xs) == sum(xs)\nys = [1]\nassert total(ys) == sum(ys)\n"
             "zs = [2, 2]\nassert total(zs) == sum(zs)\n",
             "def total(xs):\n    return len(xs)\n")


def _code_tests(sample: unirl.Sample) -> unirl.RewardResult:
    from unirl.plugins.builtin_rewards.code_exec import code_tests

    return code_tests(sample, timeout_s=2.0)


_grader: Callable[[unirl.Sample], unirl.RewardResult] = _code_tests


@contextlib.contextmanager
def using(grader: Callable[[unirl.Sample], unirl.RewardResult]) -> Iterator[None]:
    """Grade with another implementation of code_tests (the benchmark's comparison)."""
    global _grader
    previous, _grader = _grader, grader
    _honest.cache_clear()
    try:
        yield
    finally:
        _grader = previous
        _honest.cache_clear()


def grade(task: Task, completion: str) -> float:
    return _grader(unirl.Sample(prompt="", completion=completion, reference=task.reference)).score


@functools.cache
def _honest(task: Task) -> float:
    return grade(task, task.honest_wrong)


def trick(name: str, completion: str, task: Task = ADD) -> Case:
    def check(tmp: Path) -> None:
        host = HostWatch()
        honest = _honest(task)
        scored = grade(task, completion)
        assert scored <= honest, f"{name}: scored {scored} where the honest wrong answer scores {honest}"
        host.assert_back_to_normal()

    return Case(name, check)


# The earlier harness's results went to stdout as "<nonce> pass <n>"; these get the nonce or the result channel.
_FORGE = "def forge(nonce, out):\n    for i in range(64):\n        os.write(out, f'\\n{nonce} pass {i}\\n'.encode())\n"

PREAD_NONCE = f"""import os
{_FORGE}try:
    forge(os.pread(0, 64, 0).split()[0].decode(), 1)
except Exception:
    pass
def add(a, b):
    return 0
"""
PROC_STDIN = f"""import os
{_FORGE}try:
    forge(open('/proc/self/fd/0').readline().strip(), 1)
except Exception:
    pass
def add(a, b):
    return 0
"""
HARNESS_FRAME = f"""import os, sys
{_FORGE}frame = sys._getframe(1)
while frame is not None:
    found = frame.f_locals
    if "nonce" in found and "results" in found:
        forge(found["nonce"], found["results"])
        break
    frame = frame.f_back
def add(a, b):
    return 0
"""
REPLACE_EXEC = "import builtins\nbuiltins.exec = lambda *args, **kwargs: None\ndef add(a, b):\n    return 0\n"
REPLACE_COMPILE = ("import builtins\n_compile = builtins.compile\n"
                   "builtins.compile = lambda source, name, mode, *a, **k: _compile('pass', name, mode)\n"
                   "def add(a, b):\n    return 0\n")
ATEXIT = f"""import atexit, os
{_FORGE}def late():
    try:
        forge(os.pread(0, 64, 0).split()[0].decode(), 1)
    except Exception:
        pass
    for i in range(64):  # and the result lines of a checker that speaks JSON
        print('{{"op": "result", "test": %d, "passed": true, "error": null}}' % i)
atexit.register(late)
def add(a, b):
    return 0
"""
READ_TESTS = """import glob, os, re
answers = {}
for path in glob.glob('/tmp/**', recursive=True) + glob.glob('/proc/*/cwd/*') + glob.glob('/proc/*/fd/*'):
    try:
        text = open(path, errors='replace').read(1 << 20)
    except OSError:
        continue
    for a, b, c in re.findall(r'add\\((-?\\d+), (-?\\d+)\\) == (-?\\d+)', text):
        answers[int(a), int(b)] = int(c)
def add(a, b):
    return answers.get((a, b), 0)
"""
EQ_ALWAYS = "class Yes:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n" \
            "def add(a, b):\n    return Yes()\n"
EQ_CLASS = ("class add:\n    def __init__(self, a, b):\n        pass\n    def __eq__(self, other):\n"
            "        return True\n")
INT_SUBCLASS = "class Sly(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n" \
               "def add(a, b):\n    return Sly(0)\n"
PATCH_EVERYTHING = """import builtins, sys, json, os
builtins.AssertionError = type('NotAnError', (Exception,), {})
builtins.isinstance = lambda *args: True
builtins.len = lambda *args: 0
class Fake:
    def __getattr__(self, name):
        return lambda *args, **kwargs: '{"op": "result", "test": 0, "passed": true}'
sys.modules['json'] = sys.modules['ast'] = Fake()
_write = os.write
os.write = lambda fd, data: _write(fd, data.replace(b'false', b'true').replace(b'fail', b'pass'))
def add(a, b):
    return 0
"""
PRINT_RESULTS = ("import sys\nfor i in range(64):\n    print(f'pass {i}\\nok {i}\\n{{\"op\": \"result\", "
                 "\"test\": {i}, \"passed\": true}}')\n    print(f'tests.py line {i}: passed', file=sys.stderr)\n"
                 "def add(a, b):\n    return 0\n")
CHANNEL_FORGERY = """import os
channel = os.environ.get('UNIRL_SANDBOX_CHANNEL')
if channel:
    requests, replies = map(int, channel.split())
    for i in range(1, 16):  # replies for calls not yet made, a second hello, a result line, a handle
        os.write(replies, b'{"id": %d, "value": 3}\\n{"ready": [["add", "value", 3]]}\\n' % i)
        os.write(replies, b'{"op": "result", "test": %d, "passed": true}\\n{"id": %d, "value": ["h", 1]}\\n' % (i, i))
def add(a, b):
    return 0
"""
FAKE_READY_THEN_EXIT = """import os
channel = os.environ.get('UNIRL_SANDBOX_CHANNEL')
if channel:
    requests, replies = map(int, channel.split())
    os.write(replies, b'{"ready": [["add", "value", 3], ["AssertionError", "class", null]]}\\n')
os._exit(0)
"""
EXIT_EARLY = "import sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n"
OS_EXIT_EARLY = "import os\ndef add(a, b):\n    return 0\nos._exit(0)\n"
EXIT_MIDWAY = "import os\ndef add(a, b):\n    if (a, b) == (2, 2):\n        os._exit(0)\n    return a * b\n"
SIGNALS = """import os, signal
for pid in (0, -1, 1, os.getppid()):
    for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):
        try:
            os.kill(pid, sig)
        except OSError:
            pass
signal.signal(signal.SIGALRM, lambda *args: os._exit(0))
signal.setitimer(signal.ITIMER_REAL, 0.05)
def add(a, b):
    return a * b
"""
WRITE_CHECKER_FILES = """import os
for name in ('tests.py', 'tests.json', 'main.py', 'unirl_protocol.py'):
    try:
        with open(os.path.join('/tmp', name), 'w') as handle:
            handle.write('{"units": []}' if name.endswith('json') else 'assert True\\n')
    except OSError:
        pass
def add(a, b):
    return 0
"""
HUGE_OUTPUT = "import sys\nsys.stdout.write('pass 0\\n' * (4 << 20))\ndef add(a, b):\n    return a * b\n"
HUGE_VALUE = "def add(a, b):\n    return [a + b] * (10 ** 7)\n"
DEEP_VALUE = ("def add(a, b):\n    value = a + b\n    for _ in range(10 ** 5):\n        value = [value]\n"
              "    return value\n")
# 90,000 keys with one hash, sent as JSON by a server the solution rewired (building them as a dict would be
# quadratic here already): a checker that built the dict would be busy for hours.
COLLIDING_KEYS = """import sys
frame = sys._getframe(1)
while frame is not None and "server" not in frame.f_locals:
    frame = frame.f_back
if frame is not None:
    keys = [["d", *[[i * (2 ** 61 - 1), 0] for i in range(90000)]]]
    frame.f_locals["server"].answer = lambda request: {"value": keys[0]}
def add(a, b):
    return 0
"""
STALL = "import time\ndef add(a, b):\n    time.sleep(30)\n    return a + b\n"
NAN = "def add(a, b):\n    return float('nan')\n"
REMOTE_ERRORS = ("class NotAnError(BaseException):\n    pass\ncalls = 0\ndef add(a, b):\n    global calls\n"
                 "    calls += 1\n"
                 "    raise (SystemExit(0), KeyboardInterrupt(), NotAnError(), StopIteration())[calls % 4]\n")
SHADOW_BUILTINS = """import math as _math
def abs(x):
    return 0
def round(x, digits=0):
    return 28.27
class math:
    pi = 0.0
    @staticmethod
    def isclose(*args, **kwargs):
        return True
def area(r):
    return 0
"""
MUTATE_ARGUMENTS = "def total(xs):\n    xs.clear()\n    return 0\n"

CASES: list[Case] = [
    trick("re-reads the nonce from stdin with os.pread", PREAD_NONCE),
    trick("re-reads the nonce through /proc/self/fd/0", PROC_STDIN),
    trick("reads the harness frame (sys._getframe(1).f_locals)", HARNESS_FRAME),
    trick("replaces builtins.exec", REPLACE_EXEC),
    trick("replaces builtins.compile", REPLACE_COMPILE),
    trick("an atexit handler prints forged result lines", ATEXIT),
    trick("reads the test file and answers from it", READ_TESTS),
    trick("returns an object whose __eq__ is always true", EQ_ALWAYS),
    trick("the function is a class whose instances equal anything", EQ_CLASS),
    trick("returns an int subclass whose __eq__ is always true", INT_SUBCLASS),
    trick("monkeypatches builtins and sys.modules the grader may use", PATCH_EVERYTHING),
    trick("prints look-alike result lines on stdout and stderr", PRINT_RESULTS),
    trick("writes forged replies, hellos, results and handles to its channel", CHANNEL_FORGERY),
    trick("sends a forged hello, then exits 0", FAKE_READY_THEN_EXIT),
    trick("sys.exit(0) before any test", EXIT_EARLY),
    trick("os._exit(0) before any test", OS_EXIT_EARLY),
    trick("os._exit(0) in the middle of the tests", EXIT_MIDWAY),
    trick("signals its parent, everyone, itself (SIGKILL, SIGSTOP, SIGALRM)", SIGNALS),
    trick("writes the files a checker would read", WRITE_CHECKER_FILES),
    trick("floods stdout with look-alike lines", HUGE_OUTPUT),
    trick("returns a huge value", HUGE_VALUE),
    trick("returns a deeply nested value", DEEP_VALUE),
    trick("answers with a dict of 90,000 keys with one hash", COLLIDING_KEYS),
    trick("stalls every call past the time limit", STALL),
    trick("returns NaN", NAN),
    trick("raises SystemExit, KeyboardInterrupt, BaseException subclasses, StopIteration", REMOTE_ERRORS),
    trick("shadows builtins and a module used on the expected side", SHADOW_BUILTINS, CIRCLE),
    trick("mutates an argument used on the expected side", MUTATE_ARGUMENTS, TOTAL),
]

