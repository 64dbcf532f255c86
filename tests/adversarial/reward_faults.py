"""Reward faults: what a buggy reward author's code does to the reward runtime. Nothing may hang, crash the host,
lose a call or score a failure as a number; every failure is counted under its kind and explained."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

import unirl
from tests.adversarial import Case
from tests.adversarial import fault_rewards as fr
from unirl.rewards.contract import RewardFunction
from unirl.rewards.executor import RewardExecutor, RewardRuntimeError, ScoredSample
from unirl.rewards.spec import RewardEntry, RewardPolicy, RewardRuntimeSpec, entry_for

AREA = "reward faults (a buggy author's reward)"
DEADLINE_S = 60.0  # every case must end well within this; the executor's own deadlines are a few seconds here


def policy(**changes: object) -> RewardPolicy:
    return RewardPolicy(**{"timeout_s": 2.0, "workers": 1, "startup_timeout_s": 20.0, "max_error_rate": 1.0,
                           **changes})  # type: ignore[arg-type]


def score(rewards: list[RewardFunction | RewardEntry], completions: list[str], pol: RewardPolicy | None = None,
          **metadata: object) -> tuple[list[ScoredSample], RewardExecutor]:
    """Score under a watchdog: a call that does not return within DEADLINE_S fails the case instead of hanging it."""
    entries = tuple(r if isinstance(r, RewardEntry) else entry_for(r) for r in rewards)
    executor = RewardExecutor(RewardRuntimeSpec(entries, pol or policy()))
    batch = [unirl.Sample(prompt="q", completion=c, reference="1", metadata=metadata) for c in completions]
    out: list[object] = []
    thread = threading.Thread(target=lambda: out.append(_catch(lambda: executor.score(batch))), daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    if thread.is_alive():
        raise AssertionError(f"score() did not return within {DEADLINE_S:g} s")
    result = out[0]
    if isinstance(result, BaseException):
        executor.close()
        raise result
    return result, executor  # type: ignore[return-value]


def _catch(fn: Callable[[], object]) -> object:
    try:
        return fn()
    except BaseException as exc:
        return exc


def scored_ok(rewards: list[RewardFunction | RewardEntry], completions: list[str],
              **metadata: object) -> list[ScoredSample]:
    scored, executor = score(rewards, completions, **metadata)
    executor.close()
    return scored


def assert_failed(scored: ScoredSample, name: str, kind: str, text: str = "") -> None:
    assert scored.scores[name] is None, f"{name} scored {scored.scores[name]!r}; expected a counted failure"
    assert scored.error_kinds.get(name) == kind, f"{name}: kind {scored.error_kinds.get(name)!r}, expected {kind!r}"
    assert text in scored.errors[name], f"{name}: {text!r} not in {scored.errors[name][:300]!r}"
    assert scored.total is None, "a failed call must never leave a total that looks real"


def runtime_fails(rewards: list[RewardFunction | RewardEntry], text: str, pol: RewardPolicy) -> None:
    start = time.monotonic()
    try:
        score(rewards, ["a", "b"], pol)[1].close()
    except RewardRuntimeError as exc:
        assert text in str(exc), f"{text!r} not in the error: {exc}"
    else:
        raise AssertionError("the runtime failure was not reported")
    took = time.monotonic() - start
    assert took < DEADLINE_S, f"the failure took {took:.0f} s to be reported: the executor waited past every deadline"


# --- info that cannot cross a pipe ---------------------------------------------------------------------------------

def info_case(kind: str, expect: Callable[[dict], bool]) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        scored, executor = score([fr.odd_info], [kind, kind])
        try:
            assert [s.scores["odd_info"] for s in scored] == [0.5, 0.5], [s.errors for s in scored]
            assert executor.stats.worker_restarts == 0, "the worker died on the result"
            info = scored[0].info["odd_info"]
            json.dumps(info)  # plain: it reaches trajectories.jsonl as JSON
            assert expect(info), info
        finally:
            executor.close()
    return check


INFO_CASES = [
    Case("info holds a lambda", info_case("lambda", lambda i: "lambda" in i["fn"])),
    Case("info holds a threading lock", info_case("lock", lambda i: "lock" in i["lock"])),
    Case("info holds a generator", info_case("generator", lambda i: "generator" in i["gen"])),
    Case("info holds an object of a plugin-file class",
         info_case("local_class", lambda i: i["thing"] == "LocalThing()")),
    Case("info holds a 50 MB string", info_case("huge", lambda i: len(json.dumps(i)) < 70_000)),
    Case("info is nested 100,000 deep", info_case("deep", lambda i: "deeper than" in json.dumps(i))),
    Case("info has non-string keys", info_case("tuple_keys", lambda i: set(i) == {"(1, 2)", "3"})),
    Case("info holds an object whose repr raises", info_case("repr_raises", lambda i: "repr raised" in i["bad"])),
    Case("info is a list, not a dict", info_case("not_a_dict", lambda i: i == {"info": [1, 2, 3]})),
    Case("info holds a module", info_case("module", lambda i: "module 'sys'" in i["module"])),
]


# --- return values -------------------------------------------------------------------------------------------------

def numpy_scalars(tmp: Path) -> None:
    scored = scored_ok([fr.numpy_scores], ["float32", "int64", "bool_"])
    assert [s.scores["numpy_scores"] for s in scored] == [0.5, 1.0, 1.0], [s.errors for s in scored]
    assert all(s.components["numpy_scores/part"] == 0.25 for s in scored)


def numpy_array(tmp: Path) -> None:
    assert_failed(scored_ok([fr.numpy_array], ["a"])[0], "numpy_array", "invalid", "ndarray")


def total_overflows(tmp: Path) -> None:
    scored = scored_ok([entry_for(fr.huge_score, weight=10.0), entry_for(fr.fine)], ["a"])[0]
    assert scored.total is None and scored.error_kinds.get("total") == "invalid", scored
    assert "overflowed" in scored.errors["total"]


def components_not_a_dict(tmp: Path) -> None:
    assert_failed(scored_ok([fr.bad_components], ["a"])[0], "bad_components", "invalid", "components must be a dict")


def hundred_thousand_undeclared_components(tmp: Path) -> None:
    scored = scored_ok([fr.many_components], ["a"])[0]
    assert_failed(scored, "many_components", "invalid", "did not declare")
    assert len(scored.errors["many_components"]) < 10_000


def twenty_megabyte_exception(tmp: Path) -> None:
    scored = scored_ok([fr.huge_error], ["a"])[0]
    assert_failed(scored, "huge_error", "exception", "characters cut")
    assert len(scored.errors["huge_error"]) < 10_000


def calls_sys_exit(tmp: Path) -> None:
    scored, executor = score([fr.calls_exit, fr.fine], ["a", "b"])
    try:
        assert_failed(scored[0], "calls_exit", "exception", "SystemExit")
        assert scored[1].scores["fine"] == 1.0 and executor.stats.worker_restarts == 0
    finally:
        executor.close()


def inline_sys_exit(tmp: Path) -> None:
    """Scored in the caller's thread (marked inline), sys.exit is still the reward's failure, not the host's exit."""
    assert_failed(scored_ok([entry_for(fr.calls_exit, inline=True)], ["a"])[0], "calls_exit", "exception", "SystemExit")


# --- the worker's process and connection ---------------------------------------------------------------------------

def kills_its_worker(tmp: Path) -> None:
    scored, executor = score([fr.kills_itself], ["ok", "die", "ok"])
    try:
        assert [s.scores["kills_itself"] for s in scored] == [1.0, None, 1.0]
        assert_failed(scored[1], "kills_itself", "crash", "signal 9")
    finally:
        executor.close()


def closes_its_connection(tmp: Path) -> None:
    scored, executor = score([fr.closes_connection], ["ok", "close", "ok", "ok"])
    try:
        assert [s.scores["closes_connection"] for s in scored] == [1.0, None, 1.0, 1.0], [s.errors for s in scored]
        assert_failed(scored[1], "closes_connection", "crash", "died twice")
        assert executor.stats.worker_restarts <= 3, executor.stats
    finally:
        executor.close()


def writes_garbage_frames(tmp: Path) -> None:
    scored, executor = score([fr.writes_garbage], ["ok", "garbage", "ok"])
    try:
        assert [s.scores["writes_garbage"] for s in scored][0::2] == [1.0, 1.0]
        assert scored[1].scores["writes_garbage"] is None and scored[1].error_kinds["writes_garbage"] == "crash"
        assert "corrupt" in scored[1].errors["writes_garbage"], scored[1].errors
    finally:
        executor.close()


def killed_from_outside_while_fed(tmp: Path) -> None:
    """SIGKILL of workers at random moments while the dispatcher streams work to them: every call still resolves."""
    executor = RewardExecutor(RewardRuntimeSpec((entry_for(fr.fine),), policy(workers=2)))
    stop = threading.Event()
    me = psutil.Process()

    def sniper() -> None:
        while not stop.is_set():
            for child in me.children():
                with contextlib.suppress(psutil.Error):
                    if "unirl.rewards.worker" in " ".join(child.cmdline()):
                        child.send_signal(signal.SIGKILL)
                        break
            time.sleep(0.15)

    thread = threading.Thread(target=sniper, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 8
        rounds = 0
        while time.monotonic() < deadline or rounds < 3:  # 8 s of sniping, and 3 rounds however slow the machine
            batch = [unirl.Sample(prompt="q", completion=str(i)) for i in range(64)]
            done: list[object] = []
            caller = threading.Thread(target=lambda b=batch, d=done: d.append(_catch(lambda: executor.score(b))),
                                      daemon=True)
            caller.start()
            caller.join(DEADLINE_S)
            assert not caller.is_alive(), "score() hung while its workers were being killed"
            result = done[0]
            assert not isinstance(result, BaseException), result
            assert len(result) == 64 and all(  # type: ignore[arg-type]
                s.scores["fine"] == 1.0 or s.error_kinds.get("fine") == "crash" for s in result)  # type: ignore[union-attr]
            rounds += 1
        assert executor.stats.worker_restarts >= 1, (rounds, executor.stats)
    finally:
        stop.set()
        thread.join()
        executor.close()


# --- deadlines -----------------------------------------------------------------------------------------------------

def sleeps_past_timeout(tmp: Path) -> None:
    scored, executor = score([fr.sleeps, fr.fine], ["a"], policy(timeout_s=0.5))
    try:
        assert_failed(scored[0], "sleeps", "timeout", "0.5 s")
        assert scored[0].scores["fine"] == 1.0
    finally:
        executor.close()


def scored_with(rewards: list[RewardFunction | RewardEntry], completions: list[str], pol: RewardPolicy,
                **metadata: object) -> list[ScoredSample]:
    """score(), with the executor closed afterwards."""
    scored, executor = score(rewards, completions, pol, **metadata)
    executor.close()
    return scored


def async_ignores_cancellation(tmp: Path) -> None:
    assert_failed(scored_with([fr.stubborn_async], ["a"], policy(timeout_s=0.5))[0], "stubborn_async", "timeout")


def async_raises_its_own_timeout(tmp: Path) -> None:
    assert_failed(scored_ok([fr.own_timeout], ["a"])[0], "own_timeout", "exception", "did not answer")


def batched_call_hangs(tmp: Path) -> None:
    scored = scored_with([fr.batched_hangs], ["a", "b", "c"], policy(timeout_s=0.3))
    for s in scored:
        assert_failed(s, "batched_hangs", "timeout")


def fork_bomb(tmp: Path) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    scored, executor = score([fr.fork_bomb], ["a"], policy(timeout_s=0.5))
    executor.close()
    assert_failed(scored[0], "fork_bomb", "timeout")
    deadline = time.monotonic() + 10
    while True:
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before
                and p.status() != psutil.STATUS_ZOMBIE]
        if not left:
            break
        assert time.monotonic() < deadline, f"{len(left)} processes of the fork bomb survived"
        time.sleep(0.1)


def reward_file(tmp: Path, body: str, name: str = "rf", returns: str = "return 1.0") -> RewardEntry:
    path = tmp / f"{name}.py"
    path.write_text("import unirl\n" + body + f"\n@unirl.reward('{name}')\ndef {name}(sample):\n    {returns}\n")
    return RewardEntry(name=name, ref=f"unirl_not_a_module_{name}:{name}", file=str(path))


def import_hangs(tmp: Path) -> None:
    # The error names startup_timeout_s: the start-up deadline ended the 600 s import, nothing later did.
    runtime_fails([reward_file(tmp, "import time\ntime.sleep(600)")], "startup_timeout_s", policy(startup_timeout_s=3))


def import_raises(tmp: Path) -> None:
    runtime_fails([reward_file(tmp, "raise ImportError('no judge model here')")], "no judge model here", policy())


def import_exits(tmp: Path) -> None:
    runtime_fails([reward_file(tmp, "import sys\nsys.exit(4)")], "SystemExit: 4", policy())


def import_os_exits(tmp: Path) -> None:
    runtime_fails([reward_file(tmp, "import os\nos._exit(5)")], "exit code 5", policy())


def import_kills_itself(tmp: Path) -> None:
    """A signal on every try is the module's own doing: after a few replacements the run is refused, naming it."""
    runtime_fails([reward_file(tmp, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")], "signal 9", policy())


def killed_from_outside_while_loading(tmp: Path) -> None:
    """One SIGKILL from outside (the OOM killer, say) while a worker imports the rewards: it is replaced, no failure."""
    entry = reward_file(tmp, "import time\ntime.sleep(1.5)")
    me = psutil.Process()
    killed: list[int] = []

    def sniper() -> None:
        deadline = time.monotonic() + DEADLINE_S
        while not killed and time.monotonic() < deadline:
            for child in me.children():
                with contextlib.suppress(psutil.Error):
                    if "unirl.rewards.worker" in " ".join(child.cmdline()):
                        child.send_signal(signal.SIGKILL)
                        killed.append(child.pid)
                        break
            time.sleep(0.05)

    thread = threading.Thread(target=sniper, daemon=True)
    thread.start()
    scored, executor = score([entry], ["a", "b"], policy(timeout_s=10))
    executor.close()
    thread.join(5)
    assert killed, "the sniper never saw a worker"
    assert [s.total for s in scored] == [1.0, 1.0], scored
    assert executor.stats.worker_restarts >= 1, executor.stats


def dies_soon_after_loading(tmp: Path) -> None:
    """Every worker dies 0.3 s after it starts, whatever it is doing: each call it was running is blamed once."""
    body = "import os, threading, time\nthreading.Thread(target=lambda: (time.sleep(0.3), os._exit(6))).start()"
    entry = reward_file(tmp, body, returns="import time; time.sleep(5); return 1.0")
    scored, executor = score([entry], ["a", "b", "c"], policy(timeout_s=10))
    executor.close()
    for s in scored:
        assert_failed(s, "rf", "crash", "exit code 6")
    assert executor.stats.worker_restarts <= 6, executor.stats


# --- resources -----------------------------------------------------------------------------------------------------

def leaks_memory(tmp: Path) -> None:
    scored, executor = score([fr.leaks], [str(i) for i in range(12)], policy(worker_memory_mb=256))
    try:
        assert all(s.scores["leaks"] == 1.0 for s in scored), [s.errors for s in scored]
        assert executor.stats.worker_recycles >= 1, executor.stats
        pids = [p for p in psutil.Process().children() if "unirl.rewards.worker" in " ".join(p.cmdline())]
        assert pids and all(p.memory_info().rss < 600 * 2**20 for p in pids), "a leaking worker was kept"
    finally:
        executor.close()


def balloons_in_one_call(tmp: Path) -> None:
    scored = scored_with([fr.balloons], ["a"], policy(worker_memory_mb=128, timeout_s=20), mib=600)
    assert_failed(scored[0], "balloons", "memory", "worker_memory_mb")


def daemon_dies_with_executor(tmp: Path) -> None:
    pid_file = tmp / "daemon.pid"
    scored, executor = score([fr.spawns_daemon], ["a"], pid_file=str(pid_file))
    assert scored[0].scores["spawns_daemon"] == 1.0, scored[0].errors
    daemon = int(pid_file.read_text())
    assert psutil.pid_exists(daemon)
    executor.close()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(daemon) and psutil.Process(daemon).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "a reward's setsid daemon outlived the executor"
        time.sleep(0.05)


# --- the CLI ---------------------------------------------------------------------------------------------------------

def reward_test(tmp: Path, name: str, *extra: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``unirl reward test NAME --json`` as its own process: what these cases test is its real stdout, a pipe that a
    reader waits on until every process holding it is gone."""
    samples = tmp / "samples.jsonl"
    samples.write_text('{"completion": "1", "reference": "1", "metadata": {"pid_file": "%s"}}\n' % (tmp / "d.pid"))
    return subprocess.run([sys.executable, "-m", "unirl.cli.main", "reward", "test", name, "--file",
                           str(Path(fr.__file__)), "--samples", str(samples), "--json", *extra],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp)


def prints_do_not_corrupt_json(tmp: Path) -> None:
    out = reward_test(tmp, "prints")
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip()]
    assert [r["scores"]["prints"] for r in rows] == [1.0], out.stdout
    assert "reward talking" in out.stderr


def daemon_does_not_hold_stdout(tmp: Path) -> None:
    """`unirl reward test | jq` must end: a daemon the reward left holding stdout would keep the pipe open."""
    try:
        out = reward_test(tmp, "spawns_daemon", timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        raise AssertionError("`unirl reward test` never closed its stdout: the reward's daemon held it") from None
    assert out.returncode == 0, out.stderr[-2000:]
    daemon = int((tmp / "d.pid").read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(daemon) and psutil.Process(daemon).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the reward's daemon survived `unirl reward test`"
        time.sleep(0.05)


# --- a user's reward in a recipe that scores the built-ins in-thread -------------------------------------------------

def user_reward_in_default_recipe_gets_a_timeout(tmp: Path) -> None:
    from unirl.host.manager import get_host, reset_host
    from unirl.host.planning import compose, spec_from_recipe
    from unirl.recipe.compose import to_recipe

    reset_host()
    (tmp / "mine.py").write_text("import time, unirl\n@unirl.reward('mine')\ndef mine(sample):\n"
                                 "    time.sleep(600)\n    return 1.0\n")
    host = get_host()
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        recipe = to_recipe(compose(host, ["rewards=[{name:mine,file:./mine.py}]", "reward_policy.timeout_s=0.5"]))
        spec = spec_from_recipe(recipe, host.rewards, can_exclude=True)  # TRL leaves a failed reward out
    finally:
        os.chdir(cwd)
    assert not spec.rewards[0].inline, "a user's reward must not inherit in-thread scoring"
    with RewardExecutor(spec) as executor:
        scored = executor.score([unirl.Sample(prompt="q", completion="1", reference="1")])
    assert_failed(scored[0], "mine", "timeout")
    reset_host()


CASES = [
    *INFO_CASES,
    Case("numpy float32 / int64 / bool_ scores and components", numpy_scalars),
    Case("a numpy array as the score", numpy_array),
    Case("the weighted total overflows to inf", total_overflows),
    Case("components is a list, not a dict", components_not_a_dict),
    Case("100,000 undeclared components", hundred_thousand_undeclared_components),
    Case("an exception with a 20 MB message", twenty_megabyte_exception),
    Case("the reward calls sys.exit", calls_sys_exit),
    Case("an inline reward calls sys.exit", inline_sys_exit),
    Case("the reward SIGKILLs its own worker", kills_its_worker),
    Case("the reward closes its worker's connection", closes_its_connection),
    Case("the reward writes a garbage frame into the connection", writes_garbage_frames),
    Case("workers SIGKILLed from outside while work is streamed to them", killed_from_outside_while_fed,
         marks=("slow",)),
    Case("the reward sleeps past its timeout", sleeps_past_timeout),
    Case("an async reward blocks its event loop", async_ignores_cancellation),
    Case("an async reward raises its own TimeoutError", async_raises_its_own_timeout),
    Case("a batched reward hangs", batched_call_hangs),
    Case("the reward starts a fork bomb", fork_bomb),
    Case("the reward module hangs at import", import_hangs),
    Case("the reward module raises at import", import_raises),
    Case("the reward module calls sys.exit at import", import_exits),
    Case("the reward module calls os._exit at import", import_os_exits),
    Case("the reward module SIGKILLs itself at import", import_kills_itself),
    Case("a worker SIGKILLed from outside while it imports the rewards", killed_from_outside_while_loading),
    Case("every worker dies 0.3 s after it starts", dies_soon_after_loading),
    Case("the reward leaks 50 MB a call", leaks_memory),
    Case("the reward allocates far over the memory cap in one call", balloons_in_one_call),
    Case("the reward leaves a setsid daemon behind", daemon_dies_with_executor),
    Case("the reward prints to stdout under reward test --json", prints_do_not_corrupt_json),
    Case("a daemon holding stdout under reward test", daemon_does_not_hold_stdout),
    Case("a user's hanging reward in the embedded recipe", user_reward_in_default_recipe_gets_a_timeout),
]
