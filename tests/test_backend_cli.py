"""The verbs that compare and choose backends, as users type them: diff, frameworks, advise, and the headline
command on a machine without the GPUs a backend needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import REPO, run_dirs

GPU = ["resources.gpus_per_node=8", "rollout.engine=vllm", "data.chat_template=true",
       "eval.before_training=false"]  # OpenRLHF 0.11 has no evaluation before training: refused, not dropped


def test_headline_command_on_a_machine_without_gpus_fails_at_once_naming_what_it_expected(isolated: Path) -> None:
    """The mission's command plans (the default recipe's auto fields resolve for OpenRLHF); on a machine without GPUs
    the run stops before anything is written, saying what it assumed and what it found."""
    out = run_cli("+framework=openrlhf", "recipe=grpo_math")
    assert out.returncode == 2, out.stderr
    assert ("openrlhf expects 1 GPU(s) on this node (resources.gpus_per_node=auto, assumed 1) and found 0"
            in out.stderr)
    assert not (isolated / "runs").exists() or run_dirs(isolated / "runs") == []  # no run directory at all
    explicit = run_cli("+framework=openrlhf", "recipe=grpo_math", "rollout.engine=hf")
    assert explicit.returncode == 2  # a value set explicitly that the backend cannot honour is still an error
    assert "rollout.engine='hf': not supported by openrlhf; openrlhf supports vllm" in explicit.stderr


@pytest.mark.parametrize("framework", ["verl", "openrlhf"])
def test_launch_without_the_gpus_fails_before_starting_and_says_what_it_expected(isolated: Path,
                                                                                framework: str) -> None:
    out = run_cli(f"+framework={framework}", "recipe=grpo_math", *GPU)
    assert out.returncode == 2, out.stderr
    assert f"{framework} expects 8 GPU(s) on this node (resources.gpus_per_node=8) and found 0" in out.stderr
    assert "nothing was started" in out.stderr
    assert not (isolated / "runs").exists() or run_dirs(isolated / "runs") == []  # before any directory is made


def test_diff_shows_each_field_on_both_backends_with_their_own_defaults() -> None:
    out = run_cli("diff", "verl", "openrlhf", "--json", *GPU, "algorithm.kl_coef=0.01")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    rows = {r["recipe_field"]: r for r in result["fields"]}
    lr = rows["algorithm.lr"]
    assert lr["verl"][0]["key"] == "actor_rollout_ref.actor.optim.lr" and lr["openrlhf"][0]["key"] == "actor.adam.lr"
    assert lr["verl"][0]["value"] == lr["openrlhf"][0]["value"] == 1e-3
    # Both set the KL coefficient from the recipe; left to themselves they would use different defaults.
    kl = rows["algorithm.kl_coef"]
    assert kl["defaults_differ"] is True
    assert {e["default"] for e in kl["verl"]} >= {0.001} and {e["default"] for e in kl["openrlhf"]} >= {0.01}
    batch = rows["algorithm.prompts_per_step"]
    assert batch["verl"][0]["key"] == "data.train_batch_size" and batch["openrlhf"][0]["key"] == "rollout.batch_size"
    assert result["left"]["refused"] == [] and result["right"]["refused"] == []
    assert "training_backends" in result["capabilities"]


def test_diff_says_what_one_backend_supports_and_the_other_refuses() -> None:
    out = run_cli("diff", "trl", "verl", "rollout.engine=hf")
    assert out.returncode == 2, out.stderr  # one side cannot run this recipe: not a clean comparison
    refusal = "verl refuses: rollout.engine='hf': not supported by verl; verl supports vllm and sglang"
    assert refusal in out.stdout
    assert out.stdout.index(refusal) < out.stdout.index("recipe field")  # shown before the table, not below it
    assert "trl refuses" not in out.stdout
    assert "learning_rate" in out.stdout and "actor_rollout_ref.actor.optim.lr" in out.stdout  # still compared
    json_out = run_cli("diff", "trl", "verl", "--json", "rollout.engine=hf")
    assert json_out.returncode == 2 and json.loads(json_out.stdout)["right"]["refused"]


def test_piped_diff_keeps_every_cell_whole_marks_unset_defaults_and_shows_the_notes() -> None:
    """Researchers pipe the table into grep or a file: every key and value whole, the `*` mark only where both
    backends have defaults of their own, and what each key counts (prompts or completions) in the text too."""
    json_out = json.loads(run_cli("diff", "trl", "verl", "--json").stdout)
    out = run_cli("diff", "trl", "verl")  # captured: not a terminal
    assert out.returncode == 0, out.stderr
    assert "…" not in out.stdout and "..." not in out.stdout
    rows = {r["recipe_field"]: r for r in json_out["fields"]}
    for row in rows.values():
        for side in ("trl", "verl"):
            for entry in row[side]:
                assert f"{entry['key']}=" in out.stdout, entry["key"]  # each native key on one line, uncut
    seed = rows["seed"]  # TRL's default is 42, verl's data.seed has none: not "defaults differ"
    assert seed["defaults_differ"] is False and seed["default_unset"] is True
    assert rows["algorithm.samples_per_prompt"]["defaults_differ"] is True  # 8 vs 1: both set, different
    lines = {line.split("│")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("│ ")
             and line.split("│")[1].strip()}
    assert "seed ?" in lines and "unset" in lines["seed ?"] and "algorithm.samples_per_prompt *" in lines
    assert "* the two backends' own defaults differ" in out.stdout and "? a backend has no default" in out.stdout
    assert "per_device_train_batch_size: TRL counts completions per device micro-batch, not prompts" in out.stdout
    assert "data.train_batch_size: verl counts prompts per step" in out.stdout


def test_diff_shows_the_model_on_trl_too() -> None:
    out = run_cli("diff", "trl", "verl", "--json", *GPU)
    rows = {r["recipe_field"]: r for r in json.loads(out.stdout)["fields"]}
    assert [e["value"] for e in rows["model.path"]["trl"]] == ["builtin:tiny-arith"]  # was "-": no TRL row
    assert rows["model.path"]["only_in"] is None


def test_diff_needs_two_known_frameworks() -> None:
    out = run_cli("diff", "verl")
    assert out.returncode == 2 and "usage: unirl diff" in out.stderr and "required: FRAMEWORK_B" in out.stderr
    out = run_cli("diff", "verl", "nope")
    assert out.returncode == 2 and "unknown framework 'nope'" in out.stderr


def test_frameworks_matrix_covers_every_backend_and_reads_installed_versions_where_pointed(tmp_path: Path) -> None:
    verl = REPO / ".venvs" / "verl" / "bin" / "python"  # built by scripts/backend_venv.sh (always in CI)
    env = {"UNIRL_VERL_PYTHON": str(verl)} if verl.exists() else {}
    out = run_cli("frameworks", "--json", env=env)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert set(rows) >= {"trl", "verl", "openrlhf", "nemo_rl", "slime", "vime"}
    for row in rows.values():
        for axis in ("placement", "modes", "training_backends", "rollout_engines", "multi_node", "native_algorithms",
                     "custom_reward"):
            assert row[axis], (row["name"], axis)
    assert rows["slime"]["rollout_engines"] == ["sglang"] and rows["vime"]["rollout_engines"] == ["vllm"]
    assert rows["trl"]["needs_gpu"] is False and rows["verl"]["needs_gpu"] is True
    if env:
        assert rows["verl"]["installed"] == "0.9.1"


@pytest.mark.parametrize(("args", "recommended", "tier"), [
    (["--gpus", "0", "--model-size", "0.01B"], "trl", "single-GPU learning"),
    (["--gpus", "8", "--model-size", "7B"], None, "single-node research"),
    (["--nodes", "4", "--gpus", "8", "--model-size", "70B", "--async"], None, "multi-node production"),
])
def test_advise_recommends_with_reasons_and_explains_refusals(args: list[str], recommended: str | None,
                                                              tier: str) -> None:
    out = run_cli("advise", *args, "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["situation"]["tier"] == tier
    if recommended:
        assert result["recommended"] == recommended
    best = result["ranking"][0]
    assert best["reasons"], best
    refused = {v["framework"]: v["refused"] for v in result["not_suitable"]}
    if tier != "single-GPU learning":
        # TRL launches several GPUs (and nodes) through torchrun: the GPU count is no reason to refuse it
        assert not any("resources.gpus_per_node" in r for r in refused.get("trl", []))
    if "--async" in args:
        assert any("asynchronous" in r for r in best["reasons"])
        assert any("no asynchronous mode" in r for r in refused["trl"])


def test_advise_refuses_a_model_that_cannot_fit() -> None:
    out = run_cli("advise", "--gpus", "1", "--model-size", "70B", "--gpu-memory", "80", "--json")
    result = json.loads(out.stdout)
    assert result["recommended"] is None
    assert all(any("needs about 1120 GB" in r for r in v["refused"]) for v in result["not_suitable"])
