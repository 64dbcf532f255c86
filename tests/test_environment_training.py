"""Training with an environment: the recipe's ``environment`` on TRL through GRPOTrainer's rollout_func (token in,
token out, observation tokens masked), refused by field wherever it cannot run, and a failing environment counted
and acted on by the reward policy instead of training on fake zeros."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import read_jsonl, run_dirs

SHORT = ("recipe=grpo_tool", "algorithm.steps=4", "algorithm.prompts_per_step=4", "algorithm.samples_per_prompt=4",
         "eval.every_steps=0", "logging.progress=false", "logging.plot=false", "logging.trajectories_every=1")


# --- planning (no training) ------------------------------------------------------------------------------------------

def test_the_rollout_engine_registry_decides_where_an_environment_runs() -> None:
    """An engine registered without an episode loop for a backend (a plugin's, here vLLM's own declaration without
    NeMo RL) makes a recipe with an environment on that backend fail by field, before anything is planned."""
    from dataclasses import replace

    from tests.support.backend_recipes import gpu_recipe
    from unirl.host.manager import build_host
    from unirl.host.planning import engine_episode_problems
    from unirl.recipe.schema import EnvironmentConfig

    host = build_host()
    recipe = gpu_recipe("nemo_rl", environment=EnvironmentConfig(name="lookup"))
    assert engine_episode_problems(host, recipe) == []
    vllm = host.rollout_engines.get("vllm")
    host.rollout_engines.add(replace(vllm, episodes={k: v for k, v in vllm.episodes.items() if k != "nemo_rl"}),
                             replace=True)
    [problem] = engine_episode_problems(host, recipe)
    assert problem.field == "environment.name" and "null on nemo_rl: no rollout engine runs environments" in str(
        problem)


@pytest.mark.parametrize(("framework", "native_key", "files"), [
    ("verl", "actor_rollout_ref.rollout.agent.agent_loop_config_path", {"agent_loops.yaml", "environment_spec.json"}),
    ("openrlhf", "train.agent_func_path", {"openrlhf_agent.py", "environment_spec.json"}),
    ("slime", "--custom-generate-function-path", {"environment_spec.json"}),
    ("vime", "--custom-generate-function-path", {"environment_spec.json"}),
    ("nemo_rl", "+env.unirl.unirl_environment", {"environment_spec.json"}),
])
def test_native_backends_plan_their_episode_loop_and_say_what_it_loses(framework: str, native_key: str,
                                                                         files: set[str], isolated: Path) -> None:
    engine = ["rollout.engine=sglang"] if framework == "slime" else []
    out = run_cli("plan", "recipe=grpo_tool", f"framework={framework}", "data.chat_template=true", *engine, "--json",
                  cwd=isolated)
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout)
    rows = {(r["recipe_field"], r["native_key"]): r for r in plan["mapping"]}
    assert ("environment.name", native_key) in rows
    assert files <= set(plan["files"])
    assert any("per-turn rewards reach the advantage as their sum" in n for n in plan["notes"])


@pytest.mark.parametrize(("setting", "says"), [
    ("rollout.engine=vllm", "rollout.engine='vllm': one of ['hf'] on trl"),
    ("algorithm=rloo", "RLOOTrainer 1.16 takes no rollout_func"),
    ("environment.name=lookupp", "a registered environment"),
    ("environment.max_turns=0", "environment.max_turns"),
    ("environment.timeout_s=0", "environment.timeout_s"),
])
def test_what_cannot_run_an_environment_on_trl_is_refused_before_anything_starts(setting: str, says: str,
                                                                                  isolated: Path) -> None:
    out = run_cli("plan", "recipe=grpo_tool", setting, cwd=isolated)
    assert out.returncode == 2, out.stdout[-2000:]
    assert says in out.stderr, out.stderr


def test_environment_settings_without_a_name_are_refused(isolated: Path) -> None:
    out = run_cli("plan", "+environment.kwargs.tool=false", cwd=isolated)
    assert out.returncode == 2 and "environment.name" in out.stderr


def test_the_plan_shows_the_episode_loop_and_the_return_as_the_first_reward(isolated: Path) -> None:
    out = run_cli("plan", "recipe=grpo_tool", "--json", cwd=isolated)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    rows = {r["recipe_field"]: r for r in plan["mapping"]}
    assert plan["native_config"]["trainer_config"]["reward_weights"] == [1.0]  # the environment's return alone
    assert rows["environment.name"]["native_key"].startswith("(rollout_func") and rows["environment.name"]["value"] \
        == "lookup"


def test_unirl_environments_lists_the_builtin_lookup(isolated: Path) -> None:
    out = run_cli("environments", "--json", cwd=isolated)
    lookup = {r["name"]: r for r in json.loads(out.stdout)}["lookup"]
    assert lookup["tools"] == ["get"] and lookup["metrics"][:3] == ["called", "key_ok", "correct"]
    assert lookup["max_turns"] == 2


def test_episode_tokens_are_concatenated_as_generated_with_observations_masked() -> None:
    """The loop on the real tiny model: each turn's tokens as generated, the observation's tokens after them with
    mask 0, nothing decoded and encoded again."""
    import torch

    from unirl.adapters.trl_environment import TrlEpisodes
    from unirl.data.builtin.tiny_model import build
    from unirl.host.manager import get_host

    model, tok = build("tiny-arith", 0)
    torch.manual_seed(0)
    episodes = TrlEpisodes(get_host().environments.get("lookup"), {}, tok=tok, rows=[], chat_template=False,
                           max_new_tokens=12, temperature=1.0, top_p=1.0, timeout_s=30, max_turns=None, run_seed=0,
                           eos_ids={tok.eos_token_id}, suppress=None)
    # force a lookup: a model that always writes "=3" then end-of-sequence, whatever it is asked
    forced = [tok.convert_tokens_to_ids(c) for c in "=3"] + [tok.eos_token_id]

    class Scripted(torch.nn.Module):
        config = model.config
        device = torch.device("cpu")

        def generate(self, input_ids: torch.Tensor, **_: object) -> torch.Tensor:
            tail = torch.tensor([forced] * input_ids.shape[0])
            return torch.cat([input_ids, tail], dim=1)

    row = {"prompt": "3?", "reference": None, "metadata": {}}
    [item] = episodes.run(Scripted(), [row], [7], greedy=True)
    episode = item.episode
    assert episode is not None and [t.action for t in episode.turns] == ["=3", "=3"]
    value = episode.turns[0].observation
    observed = [tok.convert_tokens_to_ids(c) for c in f"{value}"]  # "*v", the environment's answer
    assert item.completion_ids == forced + observed + forced
    assert item.env_mask == [1, 1, 1] + [0] * len(observed) + [1, 1, 1]
    assert item.prompt_ids == tok("3?")["input_ids"]
    assert episode.termination == "max_turns" and episode.return_ == pytest.approx(0.2)  # the first lookup earns

    # the budget is the whole episode's: 3 tokens of lookup and 2 of observation leave none of 5 for another turn
    episodes.max_new_tokens = 5
    [short] = episodes.run(Scripted(), [row], [7], greedy=True)
    assert short.episode is not None and short.episode.termination == "truncated"
    assert len(short.episode.turns) == 1 and short.episode.turns[0].truncated
    assert short.completion_ids == forced  # the observation that did not fit is not appended


# --- training ------------------------------------------------------------------------------------------------------

@pytest.mark.train
def test_a_short_tool_run_records_every_turn_with_its_masks(tmp_path: Path) -> None:
    out = run_cli(*SHORT, env={"UNIRL_RUNS_DIR": str(tmp_path / "runs")}, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    [run_dir] = run_dirs(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["completions"] == 4 * 4 * 4
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(records) == 64
    for record in records:
        episode = record["episode"]
        assert record["scores"]["environment"] == pytest.approx(episode["return"])
        assert episode["tokens"]["model"] >= len(episode["turns"])  # every turn generated at least one token
        # "*v": one token per character, all masked; the last turn's observation is never appended (the episode
        # ended there), every earlier one is
        observed = sum(len(t["observation"] or "") for t in episode["turns"][:-1])
        assert episode["tokens"]["environment"] == observed
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert {"env/return", "env/turns", "env/called", "env/errors"} <= set(metrics[-1])
    evals = [e for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "summary"]
    assert evals[0]["n"] == 50 and evals[0]["accuracy_reward"] == "environment"


FAILING_ENV = textwrap.dedent('''
    import unirl


    @unirl.environment("flaky")
    class Flaky(unirl.Environment):
        max_turns = 1

        def reset(self, task):
            return task.prompt

        def step(self, action):
            raise RuntimeError("grader unavailable")
''')


@pytest.mark.train
def test_an_environment_that_keeps_failing_stops_the_run_saying_why(tmp_path: Path) -> None:
    env_file = tmp_path / "flaky.py"
    env_file.write_text(FAILING_ENV)
    out = run_cli(*SHORT, "environment.name=flaky", f"environment.file={env_file}", "reward_policy.min_calls=16",
                  env={"UNIRL_RUNS_DIR": str(tmp_path / "runs")}, cwd=tmp_path)
    assert out.returncode != 0
    assert "environment episodes failed" in out.stderr and "above reward_policy.max_error_rate" in out.stderr
    [run_dir] = run_dirs(tmp_path / "runs")
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert records and all(r["error_kinds"]["environment"] == "exception" for r in records)
    assert "RuntimeError: grader unavailable" in records[0]["episode"]["traceback"]
    assert all(r["scores"]["environment"] is None for r in records)  # no fake zero


SECRET_GAME = textwrap.dedent('''
    import unirl


    @unirl.environment("secret_digit")  # no metrics declared: the ones its steps return are logged anyway
    class SecretDigit(unirl.Environment):
        max_turns = 1

        def reset(self, task):
            self.secret, self.row = int(task.metadata["secret"]), int(task.metadata["row"])
            return task.prompt

        def step(self, action):
            solved = action.strip()[:1] == str(self.secret)
            return unirl.Step(reward=float(solved), done=True, metrics={"secret": float(self.secret),
                                                                        "row": float(self.row)})


    @unirl.reward("secret_seen", components=("secret",))
    def secret_seen(sample):  # what a reward sees of the same row
        return unirl.RewardResult(0.0, {"secret": float(sample.metadata["secret"])})
''')


@pytest.mark.train
def test_rows_that_share_a_prompt_keep_their_own_hidden_state(tmp_path: Path) -> None:
    """A game's rows share one prompt and differ only in a secret in their metadata (the usual way to write games
    and tool tasks): every episode, and every reward, sees its own row's secret, and undeclared metrics are logged."""
    game = tmp_path / "game.py"
    game.write_text(SECRET_GAME)
    data = tmp_path / "games.jsonl"
    data.write_text("".join(json.dumps({"prompt": "1?", "answer": "0", "secret": secret, "row": row}) + "\n"
                            for row, secret in enumerate([3, 7, 3, 5])))
    out = run_cli(*SHORT, "environment.name=secret_digit", f"environment.file={game}", "~environment.kwargs.tool",
                  "~environment.kwargs.keyed",
                  f"data.train={data}", "data.eval=null", f"rewards=[{{name:secret_seen,file:{game}}}]",
                  env={"UNIRL_RUNS_DIR": str(tmp_path / "runs")}, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "returned metrics it did not declare: ['secret', 'row']" in out.stderr
    [run_dir] = run_dirs(tmp_path / "runs")
    records = read_jsonl(run_dir / "trajectories.jsonl")
    assert len(records) == 64
    secrets = {0: 3.0, 1: 7.0, 2: 3.0, 3: 5.0}
    rows_seen = set()
    for record in records:
        metrics = record["episode"]["metrics"]
        rows_seen.add(int(metrics["row"]))
        assert metrics["secret"] == secrets[int(metrics["row"])]  # the episode got its own row's secret
        assert record["components"]["secret_seen/secret"] == metrics["secret"]  # and so did the reward
        assert record["episode"]["task"]["metadata"]["secret"] == metrics["secret"]  # replayable from the record
    assert rows_seen == set(secrets)
    assert {"env/secret", "env/row"} <= set(read_jsonl(run_dir / "metrics.jsonl")[-1])


def test_environment_kwargs_its_constructor_does_not_take_are_refused_at_plan_time(isolated: Path) -> None:
    out = run_cli("plan", "recipe=grpo_tool", "+environment.kwargs.tools=true", cwd=isolated)
    assert out.returncode == 2
    assert "environment.kwargs=" in out.stderr and "the arguments 'lookup' takes (tool, keyed)" in out.stderr


def test_episode_failures_abort_on_a_late_burst_over_the_recent_window() -> None:
    from unirl.adapters.common import EpisodeFailures
    from unirl.errors import UnirlError
    from unirl.rewards.spec import RewardPolicy

    failures = EpisodeFailures(RewardPolicy(on_error="fallback", max_error_rate=0.2, min_calls=10, error_window=10))
    failures.check([1.0] * 1000)  # a long healthy run
    failures.check([None, None])  # 2 of the last 10: at the limit, not above it
    with pytest.raises(UnirlError, match="3 of the last 10 environment episodes failed"):
        failures.check([None])  # 3 of the last 10, though only 3 of 1003 overall


@pytest.mark.parametrize("framework", ["verl", "openrlhf", "nemo_rl", "slime", "vime"])
def test_keep_best_is_refused_where_no_runner_selects_weights(framework: str, isolated: Path) -> None:
    engine = ["rollout.engine=sglang"] if framework == "slime" else []
    out = run_cli("plan", "recipe=grpo_tool", f"framework={framework}", "data.chat_template=true",
                  "eval.keep_best=true", *engine, cwd=isolated)
    assert out.returncode == 2 and "eval.keep_best=True: not supported by" in out.stderr, out.stderr[-2000:]


@pytest.mark.parametrize(("setting", "says"), [
    ("eval.every_steps=0", "eval.keep_best=True: needs data.eval and eval.every_steps >= 1"),
    ("resources.cpu_processes=2", "eval.keep_best=True: not supported by trl"),
    ("model.lora.rank=8", "eval.keep_best=True: not supported by trl"),
])
def test_keep_best_needs_evaluations_one_process_and_full_weights(setting: str, says: str, isolated: Path) -> None:
    out = run_cli("plan", "recipe=grpo_tool", "eval.keep_best=true", setting, cwd=isolated)
    assert out.returncode == 2 and says in out.stderr, out.stderr[-2000:]


@pytest.mark.train
def test_keep_best_ends_with_the_best_evaluation_s_weights_measured_on_fresh_episodes(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    out = run_cli("recipe=grpo_tool", "algorithm.steps=6", "algorithm.prompts_per_step=4",
                  "algorithm.samples_per_prompt=4", "eval.every_steps=2", "eval.keep_best=true",
                  "logging.progress=false", "logging.plot=false", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    evals = [e for e in read_jsonl(run_dir / "eval.jsonl") if e.get("kind") == "summary"]
    during = {e["step"]: e["accuracy"] for e in evals[:-1]}
    kept = summary["kept_best"]
    assert kept["step"] in during and kept["accuracy_when_chosen"] == max(during.values()) and kept["fresh_seeds"]
    # the first evaluation reaching the best is the one kept: a later equal one does not replace it
    assert kept["step"] == min(s for s, a in during.items() if a == kept["accuracy_when_chosen"])
    assert summary["accuracy_after"] == evals[-1]["accuracy"]
    samples = [r for r in read_jsonl(run_dir / "eval.jsonl") if r.get("kind") == "sample"]
    choosing = {r["episode"]["task"]["seed"] for r in samples if r["step"] < 6}
    final = {r["episode"]["task"]["seed"] for r in samples if r["step"] == 6}
    assert final and not final & choosing  # the kept weights are measured on episodes no choosing evaluation saw
    assert AutoModelForCausalLM.from_pretrained(run_dir / "best").num_parameters() > 0


def test_the_capability_matrix_shows_where_environments_run_and_what_they_lose(isolated: Path) -> None:
    out = run_cli("frameworks", "--json", cwd=isolated)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: {e["engine"]: e for e in r["environments"]} for r in json.loads(out.stdout)}
    assert {name: sorted(engines) for name, engines in rows.items()} == {
        "trl": ["hf"], "verl": ["sglang", "vllm"], "openrlhf": ["vllm"], "nemo_rl": ["vllm"], "slime": ["sglang"],
        "vime": ["vllm"]}
    assert rows["openrlhf"]["vllm"]["loop"] == "unirl.adapters.openrlhf_agent:AgentExecutor"
    assert "last step's extra_logs only" in rows["openrlhf"]["vllm"]["loses"]
    assert "reset's text is not shown" in rows["nemo_rl"]["vllm"]["loses"]
    table = run_cli("frameworks", cwd=isolated)  # the table has the column (its width depends on the terminal)
    assert table.returncode == 0 and "hf:" in table.stdout and "sglang:" in table.stdout
