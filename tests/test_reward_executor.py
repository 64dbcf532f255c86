"""The reward executor: parallel worker processes, per-call timeouts without SIGALRM, crash recovery, policy."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import unirl
from tests.support import reward_fixtures as fx
from unirl.errors import UnirlError
from unirl.rewards.contract import RewardFunction
from unirl.rewards.executor import RewardAbort, RewardExecutor, RewardRuntimeError
from unirl.rewards.spec import RewardPolicy, RewardRuntimeSpec, entry_for


def spec(*rewards: RewardFunction | tuple[RewardFunction, float, dict], **policy: object) -> RewardRuntimeSpec:
    entries = [entry_for(*r) if isinstance(r, tuple) else entry_for(r) for r in rewards]
    return RewardRuntimeSpec(tuple(entries), RewardPolicy(**{"timeout_s": 2.0, "workers": 2, **policy}))


def samples(*completions: str, reference: str = "7", **metadata: object) -> list[unirl.Sample]:
    return [unirl.Sample(prompt="q", completion=c, reference=reference, metadata=metadata) for c in completions]


@pytest.fixture
def executor_factory() -> Iterator[list[RewardExecutor]]:
    made: list[RewardExecutor] = []
    yield made
    for ex in made:
        ex.close()


def make(made: list[RewardExecutor], s: RewardRuntimeSpec) -> RewardExecutor:
    made.append(RewardExecutor(s))
    return made[-1]


def worker_pids() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_scores_in_order_across_processes_with_fixed_keys(executor_factory: list[RewardExecutor]) -> None:
    ex = make(executor_factory, spec((fx.exact, 2.0, {}), fx.sometimes, fx.char_count))
    batch = samples(*[str(i % 10) for i in range(200)] + ["x"])
    scored = ex.score(batch)
    assert [s.scores["exact"] for s in scored] == [1.0 if b.completion == "7" else 0.0 for b in batch]
    assert [s.scores["char_count"] for s in scored] == [float(len(b.completion)) for b in batch]
    assert {tuple(s.components) for s in scored} == {("exact/length", "sometimes/a", "sometimes/b")}
    assert scored[-1].components["sometimes/b"] is None  # declared but not returned: present, empty
    assert scored[7].total == 2.0 * 1.0 + 1.0 + 1.0
    assert ex.stats.calls == 3 * 201 and ex.stats.errors == 0


def test_work_is_spread_over_the_worker_processes(executor_factory: list[RewardExecutor]) -> None:
    ex = make(executor_factory, spec((fx.exact_slowly, 1.0, {"seconds": 0.01})))
    pids = {s.info["exact_slowly"]["pid"] for s in ex.score(samples(*["7"] * 100))}
    assert len(pids) == 2 and os.getpid() not in pids


@pytest.mark.parametrize(("reward", "kind", "message"), [
    (fx.explodes, "exception", "grader crashed on purpose"),
    (fx.nan_score, "invalid", "non-finite"),
    (fx.wrong_type, "invalid", "returned str"),
    (fx.drifts, "invalid", "did not declare"),
    (fx.short_batch, "invalid", "expected one per sample"),
])
def test_every_kind_of_failure_is_counted_and_explained(executor_factory: list[RewardExecutor],
                                                        reward: RewardFunction, kind: str, message: str) -> None:
    ex = make(executor_factory, spec(fx.exact, reward))
    scored = ex.score(samples("boom", "7"))
    first = scored[0]
    assert first.scores == {"exact": 0.0, reward.name: None}
    assert first.total is None  # excluded, never a partial sum that looks real
    assert message in first.errors[reward.name] and first.error_kinds[reward.name] == kind
    assert ex.stats.by_kind == {kind: ex.stats.errors} and ex.stats.errors >= 1


def test_exception_traceback_names_the_line(executor_factory: list[RewardExecutor]) -> None:
    ex = make(executor_factory, spec(fx.explodes))
    error = ex.score(samples("boom"))[0].errors["explodes"]
    assert "Traceback" in error and "reward_fixtures.py" in error and 'raise RuntimeError("grader crashed' in error


def test_a_hung_call_is_killed_by_timeout_and_the_rest_is_scored(executor_factory: list[RewardExecutor]) -> None:
    ex = make(executor_factory, spec(fx.exact, fx.hangs, timeout_s=0.5))
    batch = samples("1", "hang", "7", "2", "hang", "7")
    scored = ex.score(batch)
    assert [s.scores["hangs"] for s in scored] == [0.25, None, 0.25, 0.25, None, 0.25]
    assert [s.scores["exact"] for s in scored] == [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]  # the other reward still ran
    assert scored[1].error_kinds == {"hangs": "timeout"} and "0.5 s" in scored[1].errors["hangs"]
    assert ex.stats.worker_restarts == 2
    assert ex.score(samples("7"))[0].scores == {"exact": 1.0, "hangs": 0.25}  # the pool healed


def test_processes_a_hung_reward_started_die_with_its_worker(executor_factory: list[RewardExecutor],
                                                             tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    ex = make(executor_factory, spec(fx.spawns_and_hangs, timeout_s=1.0))
    scored = ex.score(samples("x", pid_file=str(pid_file)))
    assert scored[0].error_kinds == {"spawns_and_hangs": "timeout"}
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # the child would sleep 600 s: a hang guard, not a speed limit
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the reward's child process outlived its killed worker"
        time.sleep(0.05)


@pytest.mark.parametrize(("completion", "how"), [("segfault", "signal 11"), ("exit", "exit code 3")])
def test_a_crashed_worker_is_reported_and_replaced(executor_factory: list[RewardExecutor], completion: str,
                                                   how: str) -> None:
    ex = make(executor_factory, spec(fx.dies))
    scored = ex.score(samples("a", completion, "b"))
    assert [s.scores["dies"] for s in scored] == [0.75, None, 0.75]
    assert scored[1].error_kinds == {"dies": "crash"} and how in scored[1].errors["dies"]
    assert ex.score(samples("c"))[0].scores == {"dies": 0.75}


def test_async_rewards_run_concurrently_with_their_own_timeout(executor_factory: list[RewardExecutor]) -> None:
    slow = entry_for(fx.awaits, 1.0, {"delay_s": 0.2})
    ex = RewardExecutor(RewardRuntimeSpec((slow,), RewardPolicy(timeout_s=1.0, workers=1)))
    executor_factory.append(ex)
    scored = ex.score(samples(*["a"] * 20, "slow"))
    assert [s.scores["awaits"] for s in scored[:20]] == [2.0] * 20
    assert scored[-1].error_kinds == {"awaits": "timeout"}
    assert scored[0].components == {"awaits/waited": 0.2}
    # 20 awaits of 0.2 s each on one worker: concurrent, so well under their 4 s sum plus the 1 s timeout.
    assert ex.stats.worker_restarts == 0


def test_rewards_that_need_the_main_thread_work_from_any_caller_thread(executor_factory: list[RewardExecutor]) -> None:
    ex = make(executor_factory, spec(fx.main_thread_only))
    results: list[float | None] = []
    def call() -> None:
        results.extend(s.scores["main_thread_only"] for s in ex.score(samples("a")))

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert results == [1.0]


def test_concurrent_callers_each_get_their_own_results(executor_factory: list[RewardExecutor]) -> None:
    ex = make(executor_factory, spec(fx.char_count))
    out: dict[int, list[float | None]] = {}

    def call(n: int) -> None:
        out[n] = [s.scores["char_count"] for s in ex.score(samples(*["x" * n] * 30))]

    threads = [threading.Thread(target=call, args=(n,)) for n in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {n: [float(n)] * 30 for n in range(1, 9)}


def test_policy_fallback_scores_and_counts(executor_factory: list[RewardExecutor]) -> None:
    ex = make(executor_factory, spec(fx.exact, (fx.explodes, 2.0, {}), on_error="fallback", fallback_score=-1.0))
    scored = ex.score(samples("boom 7", "7"))
    assert scored[0].scores["explodes"] is None and scored[0].total == 0.0 + 2.0 * -1.0
    assert scored[1].total == 1.0 + 2.0 * 0.5
    assert ex.stats.errors == 1


def test_policy_abort_on_first_error_and_past_the_error_rate(executor_factory: list[RewardExecutor]) -> None:
    ex = make(executor_factory, spec(fx.explodes, on_error="abort"))
    scored = ex.score(samples("boom"))
    with pytest.raises(RewardAbort, match="on_error=abort"):
        ex.check_policy(scored)
    rate = make(executor_factory, spec(fx.explodes, max_error_rate=0.1, min_calls=20))
    rate.check_policy(rate.score(samples(*["ok"] * 18, "boom")))  # 1 of 19: below the rate, and too few calls
    with pytest.raises(RewardAbort, match=r"3 of 22 reward calls failed .*max_error_rate=0.1"):
        rate.check_policy(rate.score(samples("boom", "boom", "ok")))


def test_workers_are_gone_after_close() -> None:
    before = worker_pids()
    ex = RewardExecutor(spec(fx.exact))
    ex.score(samples("7"))
    started = worker_pids() - before
    assert len(started) == 2
    ex.close()
    assert not {p for p in started if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}


def test_a_reward_defined_in_main_is_refused_with_a_way_out() -> None:
    entry = entry_for(fx.exact)
    bad = RewardRuntimeSpec((type(entry)(**{**entry.__dict__, "ref": "__main__:exact"}),), RewardPolicy(workers=1))
    with RewardExecutor(bad) as ex, pytest.raises(UnirlError, match="defined in __main__"):
        ex.score(samples("7"))


def test_inline_rewards_score_in_the_calling_process_and_the_rest_in_workers() -> None:
    inline = entry_for(fx.exact, inline=True)
    with RewardExecutor(RewardRuntimeSpec((inline, entry_for(fx.exact_slowly)), RewardPolicy(workers=1))) as ex:
        scored = ex.score(samples("7", "1"))
    assert scored[0].info["exact"]["pid"] == os.getpid()
    assert scored[0].info["exact_slowly"]["pid"] != os.getpid()
    assert [s.total for s in scored] == [2.0, 0.0]


def test_only_trusted_rewards_default_to_the_callers_thread() -> None:
    from unirl.plugins.builtin_rewards.code_exec import code_tests
    from unirl.plugins.builtin_rewards.math_answer import math_answer

    assert entry_for(math_answer).inline and not entry_for(math_answer, kwargs={"verifier": "math_verify"}).inline
    assert not entry_for(fx.exact).inline and not entry_for(code_tests).inline
    assert not entry_for(math_answer, inline=False).inline and entry_for(fx.exact, inline=True).inline


def test_a_failing_dispatcher_fails_the_call_with_its_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """A defect in the dispatcher thread itself (here injected into its result handling) must reach the caller."""
    from unirl.rewards import executor as reward_executor
    def broken(*args: object) -> None:
        raise KeyError("injected defect")

    monkeypatch.setattr(reward_executor._Pool, "_receive", broken)
    with RewardExecutor(spec(fx.exact, workers=1)) as ex, pytest.raises(RewardRuntimeError, match="injected defect"):
        ex.score(samples("7"))


def test_a_call_that_makes_no_progress_fails_instead_of_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """If results stopped being recorded (a defect), the caller's deadline still ends the wait, with the workers'
    state in the message."""
    from unirl.rewards import executor as reward_executor
    # The stall limit is start-up + the longest call (its timeout + the async grace) + slack: all made short, as
    # this reward is neither async nor slow. That the wait ends at all is the point (else pytest-timeout ends it).
    monkeypatch.setattr(reward_executor, "STALL_SLACK_S", 0.5)
    monkeypatch.setattr(reward_executor, "ASYNC_GRACE_S", 0.5)
    monkeypatch.setattr(reward_executor._Pool, "_record", lambda self, task, idx, outcomes: None)
    with RewardExecutor(spec(fx.exact, workers=1, timeout_s=0.5, startup_timeout_s=2.0)) as ex, \
            pytest.raises(RewardRuntimeError, match=r"no reward result arrived .* workers: 0: pid \d+"):
        ex.score(samples("7"))


def test_the_error_rate_is_measured_over_a_window(executor_factory: list[RewardExecutor]) -> None:
    """A burst of failures late in a long run aborts it, however many calls succeeded before."""
    ex = make(executor_factory, spec(fx.explodes, max_error_rate=0.5, min_calls=10, error_window=20, workers=1))
    for _ in range(5):
        ex.check_policy(ex.score(samples(*["ok"] * 20)))  # 100 successful calls
    ex.check_policy(ex.score(samples(*["boom"] * 5, *["ok"] * 15)))  # 5 of the last 20: fine
    with pytest.raises(RewardAbort, match=r"20 of 20 reward calls failed .* over the last 20 calls"):
        ex.check_policy(ex.score(samples(*["boom"] * 20)))
    assert ex.stats.first_error is not None and ex.stats.first_error["reward"] == "explodes"
    assert "grader crashed on purpose" in ex.stats.first_error["message"]
