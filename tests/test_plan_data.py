"""``unirl plan`` checks the data keys (prompt and answer, train and eval) the way a run's preflight does, cheaply:
every problem at once, exit 2, nothing written; a hub dataset it may not ask the hub about is said to be unchecked.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tests.support.cli import run_cli
from tests.support.datasets_layout import gsm8k_repo, verl_gsm8k_rows, write_parquet

RECIPE = Path(__file__).resolve().parents[1] / "unirl" / "recipe" / "recipes" / "grpo_math.yaml"


def test_plan_reports_wrong_prompt_and_answer_keys_in_train_and_eval_at_once(isolated: Path) -> None:
    out = run_cli("plan", "data.prompt_key=question", "data.answer_key=solution")  # the builtin data
    assert out.returncode == 2, out.stdout + out.stderr
    for source in ("builtin:arith@train", "builtin:arith@heldout"):
        assert f"data.prompt_key='question': row 0 of {source} has no such column" in out.stderr
        assert f"data.answer_key='solution': no row of {source} has this column" in out.stderr
    assert "(4 problem(s))" in out.stderr and out.stdout == ""
    assert not (isolated / "runs").exists()


def test_plan_reads_the_head_of_local_files_and_folders(isolated: Path) -> None:
    (isolated / "train.jsonl").write_text(json.dumps({"question": "1+1=", "answer": "2"}) + "\n")
    repo = gsm8k_repo(isolated)
    out = run_cli("plan", "data.train=./train.jsonl", f"data.eval=hf:{repo}@test", "algorithm.prompts_per_step=1")
    assert out.returncode == 2
    assert "data.prompt_key='prompt': row 0 of ./train.jsonl has no such column" in out.stderr
    assert "Config name is missing" in out.stderr and f"hf:{repo}:<config>@test" in out.stderr
    good = run_cli("plan", "--json", "data.train=./train.jsonl", f"data.eval=hf:{repo}:main@test",
                   "data.prompt_key=question", "algorithm.prompts_per_step=1")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["recipe"]["data"]["eval"] == f"hf:{repo}:main@test"


def test_plan_names_an_answer_key_that_holds_an_object(isolated: Path) -> None:
    write_parquet(isolated / "verl.parquet", verl_gsm8k_rows())
    base = ["plan", "data.train=./verl.parquet", "data.eval=null", "algorithm.prompts_per_step=1"]
    out = run_cli(*base, "data.answer_key=reward_model")
    assert out.returncode == 2
    assert "e.g. data.answer_key=reward_model.ground_truth" in out.stderr
    assert run_cli(*base, "data.answer_key=reward_model.ground_truth").returncode == 0


def test_a_hub_dataset_plan_cannot_resolve_offline_is_named_not_failed(isolated: Path) -> None:
    out = run_cli("plan", "--json", "data.train=hf:unirl-test/not-on-this-machine:main@train", "data.eval=null",
                  "data.prompt_key=question", env={"HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["framework"] == "trl"  # stdout is still the plan alone
    assert "data.train='hf:unirl-test/not-on-this-machine:main@train': not checked (a hub dataset" in out.stderr


def hint_arguments() -> list[str]:
    """The GSM8K command in the shipped recipe's comment, as a shell would split it."""
    lines = RECIPE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#   unirl "))
    command = " ".join(line.lstrip("# ").strip() for line in lines[start:] if line.startswith("#  "))
    return shlex.split(command)[1:]


def test_the_shipped_gsm8k_hint_plans(isolated: Path) -> None:
    args = hint_arguments()
    assert "data.train=hf:openai/gsm8k:main@train" in args and "data.prompt_key=question" in args
    offline = run_cli("plan", *args, env={"HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stderr
    assert offline.stderr.count("not checked (a hub dataset") == 2
    # the same command on a copy of the hub's layout of openai/gsm8k: every key checked, and it holds
    repo = gsm8k_repo(isolated)
    local = [re.sub(r"^(data\.\w+)=hf:openai/gsm8k", rf"\1=hf:{repo}", a) for a in args]
    out = run_cli("plan", "--json", *local, "algorithm.prompts_per_step=1")
    assert out.returncode == 0, out.stderr
    assert "not checked" not in out.stderr
    plan = json.loads(out.stdout)
    assert plan["recipe"]["data"]["train"] == f"hf:{repo}:main@train"
