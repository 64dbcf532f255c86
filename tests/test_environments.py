"""The environment contract through ``unirl env test``: a user's environment file, scripted turns replayed through the
same episode loop a rollout engine drives, and everything an environment or a model can do wrong counted as what it
is (an observation the model sees, or an episode error by kind), never a silent zero."""

from __future__ import annotations

import json
import math
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli

ENV_FILE = textwrap.dedent('''
    import asyncio
    import math
    import os
    import time
    from pathlib import Path

    import unirl
    from unirl import Environment, Step, environment, tool

    CLOSED = Path(os.environ["ENV_TEST_CLOSED"])


    @environment("kv_lookup", metrics=("called",))
    class Lookup(Environment):
        """Answer with the value stored under the prompt's key."""

        max_turns = 3
        made = 0

        def reset(self, task):
            type(self).made += 1
            self.instance = type(self).made
            self.value = str(task.seed % 10)  # hidden state drawn per episode
            self.key = task.prompt
            self.history = []  # would leak between episodes if an instance were reused
            return f"what is stored under {task.prompt}?"

        def step(self, action):
            self.history.append(action)
            if "<tool_call>" in action:  # the default step runs the call; this one adds a small call reward
                answer = super().step(action)
                return Step(observation=answer.observation, reward=0.0 if answer.done else 0.1, done=answer.done,
                            metrics={"called": 1.0})
            return Step(reward=1.0 if action.strip() == self.value else 0.0, done=True, metrics={"called": 0.0})

        def final(self):
            return 0.5 if len(self.history) == 1 else 0.0  # a bonus for answering without a lookup

        def close(self):
            with CLOSED.open("a") as f:
                f.write(f"{self.instance} {len(self.history)}\\n")

        @tool
        def get(self, key: str) -> str:
            """Return the value stored under key."""
            return self.value if key == self.key else "no such key"


    @environment("raises")
    class Raises(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            raise RuntimeError("the grader crashed")

        def close(self):
            CLOSED.open("a").write("raises closed\\n")


    @environment("hangs")
    class Hangs(Environment):
        def reset(self, task):
            return "go"

        async def step(self, action):
            await asyncio.sleep(3600)


    @environment("nan_reward")
    class NanReward(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(reward=math.nan)


    @environment("undeclared_metric")
    class Undeclared(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(metrics={"secret": 1.0})


    @environment("exits")
    class Exits(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            import sys
            sys.exit(0)  # a library giving up: status 0 must not read as success


    @environment("tool_interrupts")
    class ToolInterrupts(Environment):
        def reset(self, task):
            return "go"

        @tool
        def stop(self) -> str:
            """Stop."""
            raise KeyboardInterrupt


    @environment("huge_rewards")
    class HugeRewards(Environment):
        max_turns = 3

        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(observation="more", reward=1e308)  # each finite; their sum is not


    @environment("huge_metric")
    class HugeMetric(Environment):
        max_turns = 3

        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(observation="more", metrics={"size": 1e308})


    @environment("huge_final")
    class HugeFinal(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(reward=1e308, done=True)

        def final(self):
            return 1e308


    @environment("huge_observation")
    class HugeObservation(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(observation="x" * (50 << 20))


    @environment("image_observation")
    class ImageObservation(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(observation=[{"role": "user", "content": [{"type": "image_url", "image_url": "x.png"}]}])


    @environment("roleless_opening")
    class RolelessOpening(Environment):
        def reset(self, task):
            return [{"content": "go"}]


    @environment("empty_opening")
    class EmptyOpening(Environment):
        def reset(self, task):
            return []


    @environment("numeric_done")
    class NumericDone(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(done=1)


    @environment("wrong_type")
    class WrongType(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            return 1.0


    @environment("close_fails")
    class CloseFails(Environment):
        def reset(self, task):
            return "go"

        def step(self, action):
            return Step(done=True)

        def close(self):
            raise OSError("the container would not stop")
''')


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def env_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENV_TEST_CLOSED", str(tmp_path / "closed.txt"))
    path = tmp_path / "envs.py"
    path.write_text(ENV_FILE)
    return path


def replay(tmp_path: Path, env_file: Path, name: str, tasks: list[dict[str, Any]], turns: list[list[str]],
           *extra: str) -> tuple[int, list[dict[str, Any]], str]:
    write_jsonl(tmp_path / "tasks.jsonl", tasks)
    write_jsonl(tmp_path / "actions.jsonl", [{"turns": t} for t in turns])
    out = run_cli("env", "test", name, "--file", str(env_file), "--tasks", str(tmp_path / "tasks.jsonl"),
                  "--actions", str(tmp_path / "actions.jsonl"), "--json", *extra, cwd=tmp_path)
    return out.returncode, [json.loads(line) for line in out.stdout.splitlines() if line.strip()], out.stderr


CALL = '<tool_call>{"name": "get", "arguments": {"key": "k"}}</tool_call>'


def test_a_tool_episode_sums_turn_rewards_and_final_and_always_closes(tmp_path: Path, env_file: Path) -> None:
    tasks = [{"prompt": "k", "seed": 7}, {"prompt": "k", "seed": 3}]
    code, episodes, err = replay(tmp_path, env_file, "kv_lookup", tasks, [[CALL, "7"], ["5"]])
    assert code == 0, err
    first, second = episodes
    assert first["turns"][0]["observation"] == [{"role": "tool", "content": "7", "name": "get"}]  # the tool ran
    assert [t["reward"] for t in first["turns"]] == [0.1, 1.0] and first["final_reward"] == 0.0
    assert first["return"] == pytest.approx(1.1) and first["termination"] == "done"
    assert first["metrics"] == {"turns": 2.0, "truncated": 0.0, "called": 1.0}
    # a fresh instance per episode, each closed once, no history carried over
    assert second["return"] == pytest.approx(0.5) and second["turns"][0]["reward"] == 0.0  # 5 != 3
    assert (tmp_path / "closed.txt").read_text().splitlines() == ["1 2", "2 1"]


def test_running_out_of_turns_ends_the_episode_at_max_turns(tmp_path: Path, env_file: Path) -> None:
    code, [episode], _ = replay(tmp_path, env_file, "kv_lookup", [{"prompt": "k"}], [[CALL, CALL, CALL, CALL, "0"]])
    assert code == 0
    assert episode["termination"] == "max_turns" and len(episode["turns"]) == 3  # the class's max_turns


@pytest.mark.parametrize(("action", "says"), [
    ('<tool_call>{"name": "get", "arguments": {"key": 3}}</tool_call>', "key=3 is not str"),
    ('<tool_call>{"name": "get"', None),  # no closing tag: not a call at all, so an answer
    ('<tool_call>{"name": "get", "arguments": }</tool_call>', "not JSON"),
    ('<tool_call>{"name": "delete", "arguments": {}}</tool_call>', "no tool named 'delete'"),
    ('<tool_call>{"name": "get", "arguments": {"key": "k", "x": 1}}</tool_call>', "unknown arguments ['x']"),
    ('<tool_call>["get"]</tool_call>', '{"name": ..., "arguments": {...}}'),
])
def test_a_malformed_tool_call_is_an_observation_the_model_sees_not_a_failure(
        action: str, says: str | None, tmp_path: Path, env_file: Path) -> None:
    code, [episode], _ = replay(tmp_path, env_file, "kv_lookup", [{"prompt": "k"}], [[action, "0"]])
    assert code == 0 and episode["error_kind"] is None
    if says is None:
        assert episode["termination"] == "done" and len(episode["turns"]) == 1
    else:
        observation = episode["turns"][0]["observation"]
        assert observation[0]["role"] == "tool" and says in observation[0]["content"], observation


@pytest.mark.parametrize(("name", "kind", "says"), [
    ("raises", "exception", "RuntimeError: the grader crashed"),
    ("nan_reward", "invalid", "reward nan is not a finite number"),
    ("wrong_type", "invalid", "step() returned float; expected unirl.Step"),
    ("exits", "exit", "SystemExit(0) raised in Exits.step"),
    ("tool_interrupts", "exit", "KeyboardInterrupt() raised in ToolInterrupts.stop, called as Environment.step"),
    ("huge_rewards", "invalid", "the episode's turn rewards sum to a non-finite number"),
    ("huge_metric", "invalid", "the episode's metrics ['size'] sum to a non-finite number"),
    ("huge_final", "invalid", "final() 1e+308 plus the turn rewards is not a finite number"),
    ("huge_observation", "invalid", "step() observation is 52,428,800 characters; at most 1,048,576"),
    ("image_observation", "invalid", "step() observation message 0 content is list; only text reaches the model"),
    ("roleless_opening", "invalid", "reset() message 0 has role None; allowed: ['system', 'user', 'assistant', "
                                    "'tool']"),
    ("empty_opening", "invalid", "reset() returned []; expected the opening text or messages"),
    ("numeric_done", "invalid", "step() done=1 (int); expected True or False"),
])
def test_an_environment_failure_ends_its_episode_counted_by_kind_with_its_traceback(
        name: str, kind: str, says: str, tmp_path: Path, env_file: Path) -> None:
    turns = ['<tool_call>{"name": "stop", "arguments": {}}</tool_call>'] if name == "tool_interrupts" else ["a"] * 3
    code, [episode], _ = replay(tmp_path, env_file, name, [{"prompt": "p"}], [turns])
    assert code == 1  # a failed episode fails the command, like a failed reward call
    assert episode["termination"] == "error" and episode["error_kind"] == kind and says in episode["error"]
    assert "Traceback" in episode["traceback"]
    assert episode["final_reward"] == 0.0  # final() is not scored after a failure
    assert math.isfinite(episode["return"])
    if name == "raises":
        assert "raises closed" in (tmp_path / "closed.txt").read_text()  # close() ran anyway


def test_a_hanging_environment_call_ends_at_its_deadline(tmp_path: Path, env_file: Path) -> None:
    start = time.monotonic()
    code, [episode], _ = replay(tmp_path, env_file, "hangs", [{"prompt": "p"}], [["a"]], "--timeout", "0.5")
    assert code == 1 and episode["error_kind"] == "timeout" and "within 0.5 s" in episode["error"]
    assert time.monotonic() - start < 60  # the command returned; the one-hour sleep did not hold it


def test_metrics_an_environment_did_not_declare_are_logged_with_one_warning(tmp_path: Path, env_file: Path) -> None:
    code, episodes, err = replay(tmp_path, env_file, "undeclared_metric", [{"prompt": "p"}, {"prompt": "q"}],
                                 [["a"], ["b"]])
    assert code == 0, err
    assert [e["metrics"]["secret"] for e in episodes] == [1.0, 1.0] and not any(e["error_kind"] for e in episodes)
    assert err.count("returned metrics it did not declare: ['secret']") == 1


def test_a_task_may_name_its_reference_answer_as_data_files_do(tmp_path: Path, env_file: Path) -> None:
    code, [episode], err = replay(tmp_path, env_file, "kv_lookup", [{"prompt": "k", "answer": "4"}], [["4"]])
    assert code == 0, err
    assert episode["task"]["reference"] == "4"
    code, _, err = replay(tmp_path, env_file, "kv_lookup", [{"prompt": "k", "answer": "4", "reference": "4"}],
                          [["4"]])
    assert code == 2 and "one of 'reference' and 'answer'" in err


NOISY_ENV = textwrap.dedent('''
    import os
    import unirl

    print("hello from the environment file's import")
    os.write(1, b"and from its file descriptor\\n")


    @unirl.environment("noisy")
    class Noisy(unirl.Environment):
        def reset(self, task):
            print("reset says hi")
            return "go"

        def step(self, action):
            print("step says hi")
            return unirl.Step(done=True)
''')


def test_what_an_environment_prints_never_corrupts_json_output(tmp_path: Path) -> None:
    from tests.support.cli import run_console

    (tmp_path / "noisy.py").write_text(NOISY_ENV)
    write_jsonl(tmp_path / "tasks.jsonl", [{"prompt": "p"}])
    write_jsonl(tmp_path / "actions.jsonl", [{"turns": ["a"]}])
    out = run_console("env", "test", "noisy", "--file", str(tmp_path / "noisy.py"), "--tasks",
                      str(tmp_path / "tasks.jsonl"), "--actions", str(tmp_path / "actions.jsonl"), "--json",
                      cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [episode] = [json.loads(line) for line in out.stdout.splitlines()]  # every stdout line is a result
    assert episode["termination"] == "done"
    assert "hello from the environment file's import" in out.stderr and "step says hi" in out.stderr


def test_an_environment_file_that_allocates_gigabytes_at_import_is_refused(tmp_path: Path) -> None:
    (tmp_path / "hog.py").write_text("blob = b'x' * (6 << 30)\n")
    write_jsonl(tmp_path / "tasks.jsonl", [{"prompt": "p"}])
    write_jsonl(tmp_path / "actions.jsonl", [{"turns": ["a"]}])
    out = run_cli("env", "test", "hog", "--file", str(tmp_path / "hog.py"), "--tasks", str(tmp_path / "tasks.jsonl"),
                  "--actions", str(tmp_path / "actions.jsonl"), cwd=tmp_path)
    assert out.returncode == 2
    assert "--file" in out.stderr and "worker_memory_mb=2048 MiB" in out.stderr and "was stopped" in out.stderr


def test_a_failing_close_is_reported_without_hiding_the_episode(tmp_path: Path, env_file: Path) -> None:
    code, [episode], _ = replay(tmp_path, env_file, "close_fails", [{"prompt": "p"}], [["a"]])
    assert code == 1 and episode["termination"] == "done"
    assert episode["close_error"] == "OSError: the container would not stop"


@pytest.mark.parametrize(("tasks", "turns", "flag", "says"), [
    ([{"question": "k"}], [["a"]], "--tasks", "unknown fields ['question']"),
    ([{"prompt": 3}], [["a"]], "--tasks", "text, or a non-empty list"),
    ([{"prompt": "k", "seed": "x"}], [["a"]], "--tasks", "an integer"),
    ([{"prompt": "k"}], [["a"], ["b"]], "--actions", "one line per task: 1 tasks, 2 lines"),
    ([{"prompt": "k"}], [[1]], "--actions", '{"turns": ["assistant text", ...]}'),
])
def test_bad_task_and_action_files_are_refused_naming_the_flag_and_line(
        tasks: list[dict[str, Any]], turns: list[list[Any]], flag: str, says: str, tmp_path: Path,
        env_file: Path) -> None:
    code, _, err = replay(tmp_path, env_file, "kv_lookup", tasks, turns)
    assert code == 2, err
    assert flag in err and says in err


def test_an_unknown_environment_names_the_registered_ones(tmp_path: Path, env_file: Path) -> None:
    code, _, err = replay(tmp_path, env_file, "kv_lookupp", [{"prompt": "k"}], [["a"]])
    assert code == 2 and "kv_lookupp" in err and "kv_lookup" in err


def test_unirl_environments_lists_a_plugin_files_environments(tmp_path: Path, env_file: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    out = run_cli("environments", "--json", env={"UNIRL_PLUGIN_FILE": str(env_file)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    lookup = rows["kv_lookup"]
    # its own metrics, then what the default step counts about tool calls (declared for every environment with tools)
    assert lookup["tools"] == ["get"] and lookup["max_turns"] == 3
    assert lookup["metrics"] == ["called", "tool_calls", "tool_malformed", "tool_unknown", "tool_bad_arguments",
                                 "tool_failed", "tool_raised"]
    assert lookup["description"] == "Answer with the value stored under the prompt's key."


def test_a_plugin_registers_an_environment_through_its_hook() -> None:
    import unirl
    from unirl.environments.contract import spec_of
    from unirl.host.manager import build_host

    @unirl.environment("hooked_echo")
    class Echo(unirl.Environment):
        max_turns = 1

        def reset(self, task: unirl.Task) -> str:
            return str(task.prompt)

    class Plugin:
        @unirl.hookimpl
        def unirl_add_environments(self, registry: object) -> None:
            registry.add(spec_of(Echo))  # type: ignore[attr-defined]

    host = build_host([Plugin()])
    assert host.environments.get("hooked_echo").cls is Echo
    with pytest.raises(unirl.errors.UnirlError, match="not decorated"):
        spec_of(type("Plain", (unirl.Environment,), {}))


def test_env_test_random_policy_samples_a_builtin_model_reproducibly(isolated: Path) -> None:
    pytest.importorskip("torch")
    (isolated / "tasks.jsonl").write_text("".join(json.dumps({"prompt": f"{k}?", "seed": k}) + "\n" for k in range(6)))
    def sampled(seed: int):
        return run_cli("env", "test", "lookup", "--tasks", "tasks.jsonl", "--policy", "random", "--seed", str(seed),
                       "--kwargs", '{"keyed": false}', "--max-new-tokens", "12", "--json", cwd=isolated)

    first, again = sampled(3), sampled(3)
    assert first.returncode == 0, first.stderr
    episodes = [json.loads(line) for line in first.stdout.splitlines()]
    assert first.stdout == again.stdout  # the same weights and the same samples for the same --seed
    assert len(episodes) == 6 and all(e["turns"] and e["termination"] in ("done", "max_turns", "truncated")
                                      for e in episodes)
    assert all(len(e["turns"][0]["action"]) <= 12 for e in episodes)  # the episode's budget holds
    other = sampled(4)
    assert other.returncode == 0 and other.stdout != first.stdout


@pytest.mark.parametrize(("extra", "says"), [
    (("--policy", "random", "--actions", "a.jsonl"), "--actions='a.jsonl': none with --policy random"),
    ((), "--actions=None: a JSONL file of scripted turns, or --policy random"),
    (("--policy", "random", "--max-new-tokens", "0"), "--max-new-tokens=0"),
])
def test_env_test_policy_flags_are_checked(extra: tuple[str, ...], says: str, isolated: Path) -> None:
    (isolated / "tasks.jsonl").write_text('{"prompt": "1?"}\n')
    out = run_cli("env", "test", "lookup", "--tasks", "tasks.jsonl", *extra, cwd=isolated)
    assert out.returncode == 2 and says in out.stderr, out.stderr
