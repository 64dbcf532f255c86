"""A run counted in passes over its data (algorithm.epochs), data given as a list of sources, and plans made on a
machine that does not hold the run's data or model: what each backend runs, and what the plan says."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from unirl.data.loading import load_rows
from unirl.errors import FieldError
from unirl.recipe.schema import AlgorithmConfig, DataConfig, Recipe

HUB = "data.train=hf:openai/gsm8k:main@train"
GPU = ("resources.gpus_per_node=8", "rollout.engine=vllm", "data.chat_template=true")


def write_rows(path: Path, n: int, offset: int = 0) -> Path:
    path.write_text("".join(json.dumps({"prompt": f"{i}+{offset}=", "answer": str(i + offset)}) + "\n"
                            for i in range(n)))
    return path


def plan(*args: str) -> dict[str, Any]:
    out = run_cli("plan", "--json", "recipe=grpo_math", "data.eval=null", *args)
    assert out.returncode == 0, out.stderr
    loaded: dict[str, Any] = json.loads(out.stdout)
    return loaded


def test_epochs_over_rows_the_plan_can_count_become_steps_with_the_arithmetic(isolated: Path) -> None:
    """Every backend drops a pass's incomplete last batch: 3 passes over 50 + 10 rows in steps of 16 are 9 steps."""
    write_rows(isolated / "fifty.jsonl", 50)
    write_rows(isolated / "ten.jsonl", 10, offset=100)
    p = plan("algorithm.epochs=3", "data.train=[fifty.jsonl,ten.jsonl]", "algorithm.prompts_per_step=16")
    assert p["recipe"]["algorithm"]["steps"] == 9 and p["native_config"]["trainer_config"]["max_steps"] == 9
    [auto] = [a for a in p["auto"] if a["field"] == "algorithm.steps"]
    assert auto["source"] == "algorithm.epochs=3"
    assert auto["why"].startswith("3 epochs x floor(60 rows / 16 prompts a step) = 3 x 3 = 9 steps")
    builtin = plan("algorithm.epochs=2")  # the builtin task's rows are counted too
    [auto] = [a for a in builtin["auto"] if a["field"] == "algorithm.steps"]
    assert auto["source"] == "algorithm.epochs=2" and builtin["recipe"]["algorithm"]["steps"] == auto["value"] > 0


def test_epochs_over_data_the_plan_cannot_count_go_to_each_backends_own_epoch_count() -> None:
    trl = plan("algorithm.epochs=3", HUB)["native_config"]["trainer_config"]
    assert (trl["max_steps"], trl["num_train_epochs"]) == (-1, 3)  # unirl's runner counts the rows at launch
    verl = [str(c) for c in plan("+framework=verl", "algorithm.epochs=3", HUB, *GPU)["command"]]
    assert "trainer.total_epochs=3" in verl and not any(c.startswith("trainer.total_training_steps") for c in verl)
    openrlhf = [str(c) for c in plan("+framework=openrlhf", "algorithm.epochs=3", HUB, *GPU[:1])["command"]]
    assert openrlhf[openrlhf.index("--train.num_episodes") + 1] == "3"


@pytest.mark.parametrize("backend", ["nemo_rl", "slime"])
def test_backends_that_take_only_a_step_count_refuse_uncounted_epochs_by_field(backend: str) -> None:
    out = run_cli("plan", f"+framework={backend}", "recipe=grpo_math", "algorithm.epochs=3", HUB, "data.eval=null",
                  *GPU)
    assert out.returncode == 2
    assert f"algorithm.epochs=3: not supported by {backend}" in out.stderr
    assert "epochs over rows the plan can count" in out.stderr


def test_trls_runner_counts_epochs_at_launch_where_the_plan_could_not(tmp_path: Path) -> None:
    """The data reached the machine the run starts on: the runner counts it as the plan would have."""
    from unirl.plugins.trl.runner import steps_at_launch

    data = write_rows(tmp_path / "rows.jsonl", 50)
    recipe = Recipe(data=DataConfig(train=str(data), eval=None),
                    algorithm=AlgorithmConfig(epochs=2, prompts_per_step=16, samples_per_prompt=4))
    launched, args = steps_at_launch(recipe, {"max_steps": -1, "num_train_epochs": 2})
    assert launched.algorithm.steps == 2 * (50 // 16) and args["max_steps"] == 6
    too_few = replace(recipe, algorithm=replace(recipe.algorithm, prompts_per_step=64))
    with pytest.raises(FieldError, match=r"algorithm\.epochs=2: a pass over the 50 training rows makes no step"):
        steps_at_launch(too_few, {"max_steps": -1})


def test_a_list_of_sources_is_read_one_after_the_other_each_row_naming_its_source(tmp_path: Path) -> None:
    first, second = write_rows(tmp_path / "gsm8k.jsonl", 3), write_rows(tmp_path / "math.jsonl", 2, offset=10)
    rows = load_rows([str(first), str(second)], DataConfig(), 0, "train", "data.train")
    assert [r["prompt"] for r in rows] == ["0+0=", "1+0=", "2+0=", "0+10=", "1+10="]
    assert [r["data_source"] for r in rows] == [str(first)] * 3 + [str(second)] * 2  # a reward tells them apart


def test_a_list_whose_total_fills_a_step_plans_and_one_that_does_not_is_refused(isolated: Path) -> None:
    write_rows(isolated / "ten.jsonl", 10)
    assert run_cli("plan", "recipe=grpo_math", "data.train=[ten.jsonl,ten.jsonl]", "data.eval=null",
                   "algorithm.prompts_per_step=16").returncode == 0  # 20 rows in all: one step's worth
    out = run_cli("plan", "recipe=grpo_math", "data.train=[ten.jsonl,ten.jsonl]", "data.eval=null",
                  "algorithm.prompts_per_step=32")
    assert out.returncode == 2
    assert "has 20 usable rows in all, fewer than one training step (algorithm.prompts_per_step=32)" in out.stderr


def test_a_plan_for_a_cluster_notes_its_absent_data_and_model_and_a_run_from_here_refuses_them(
        isolated: Path) -> None:
    """Planning on a laptop for a cluster run is the normal case; a run launched here stops before starting."""
    cluster = ("model.path=/cluster/models/Qwen2.5-7B", "data.train=/cluster/data/gsm8k/train.parquet",
               "data.eval=/cluster/data/gsm8k/test.parquet", "recipe=gsm8k_grpo")
    out = run_cli("plan", "+framework=verl", *cluster)
    assert out.returncode == 0, out.stderr
    note = ("model.path=/cluster/models/Qwen2.5-7B, data.train=/cluster/data/gsm8k/train.parquet, "
            "data.eval=/cluster/data/gsm8k/test.parquet: not on this machine, so the plan did not read them")
    assert note in out.stdout
    run = run_cli(*cluster, "resources.gpus_per_node=0", "resources.device=cpu", "rollout.engine=hf")
    assert run.returncode == 2
    for field in ("model.path='/cluster/models/Qwen2.5-7B': no such directory on this machine",
                  "data.train='/cluster/data/gsm8k/train.parquet': no such file on this machine"):
        assert field in run.stderr, run.stderr
    assert not (isolated / "runs").exists()  # refused before a run directory was made
