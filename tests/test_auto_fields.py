"""One recipe plans on every backend: the fields backends differ on default to ``auto``, each backend resolves them
for itself and the machine, and the plan says ``auto -> value (why)``; a value the user set is never changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import run_dirs

FRAMEWORKS = ("trl", "verl", "openrlhf", "nemo_rl", "slime", "vime")
AUTO_FIELDS = ("resources.gpus_per_node", "rollout.engine", "data.chat_template", "eval.before_training",
               "eval.greedy", "eval.stop_after_plateau", "eval.stop_at_accuracy")
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # no GPU visible, whatever the test machine has (as CUDA itself reads it)


def plan_json(*args: str, env: dict[str, str] | None = None) -> dict:
    out = run_cli("plan", "--json", *args, env={**NO_GPU, **(env or {})})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def fake_gpus(tmp: Path, count: int) -> dict[str, str]:
    """A PATH whose nvidia-smi lists ``count`` GPUs the way ``nvidia-smi -L`` prints them: the contract unirl counts
    by (unirl.backend.environment.count_gpus), on a machine that has no GPU to ask."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    lines = "\n".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d})" for i in range(count))
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{lines}\nEOF\n")
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(count))}


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_default_recipe_plans_on_every_backend_with_nothing_left_at_auto(framework: str) -> None:
    plan = plan_json(f"+framework={framework}", "recipe=grpo_math")
    resolved = {a["field"]: a for a in plan["auto"]}
    assert set(resolved) == set(AUTO_FIELDS)
    assert all(a["why"] for a in plan["auto"])
    assert "auto" not in json.dumps(plan["recipe"]["resources"]["gpus_per_node"])
    for dotted, entry in resolved.items():  # the recipe the backend runs holds exactly what the plan says
        group, name = dotted.split(".")
        assert plan["recipe"][group][name] == entry["value"]


def test_each_backend_resolves_auto_its_own_way_and_says_why() -> None:
    values = {f: {a["field"]: a["value"] for a in plan_json(f"+framework={f}", "recipe=grpo_math")["auto"]}
              for f in FRAMEWORKS}
    assert {f: v["rollout.engine"] for f, v in values.items()} == {
        "trl": "hf", "verl": "vllm", "openrlhf": "vllm", "nemo_rl": "vllm", "slime": "sglang", "vime": "vllm"}
    # verl and NeMo RL always render the chat template; the builtin model is trained on raw text everywhere else
    assert {f: v["data.chat_template"] for f, v in values.items()} == {
        "trl": False, "verl": True, "openrlhf": False, "nemo_rl": True, "slime": False, "vime": False}
    assert [f for f, v in values.items() if not v["eval.before_training"]] == ["openrlhf"]
    assert [f for f, v in values.items() if not v["eval.greedy"]] == ["nemo_rl"]
    # early stopping: TRL's runner alone has it; every other backend resolves it to null (it refuses a value)
    assert {f: (v["eval.stop_after_plateau"], v["eval.stop_at_accuracy"]) for f, v in values.items()} == {
        "trl": (6, 1.0), **{f: (None, None) for f in FRAMEWORKS if f != "trl"}}
    # no GPU here: TRL trains on the CPU, every GPU backend assumes one GPU and says so
    assert {f: v["resources.gpus_per_node"] for f, v in values.items()} == {
        "trl": 0, "verl": 1, "openrlhf": 1, "nemo_rl": 1, "slime": 1, "vime": 1}


def test_the_plan_prints_auto_arrow_value_and_why() -> None:
    out = run_cli("plan", "+framework=nemo_rl", "recipe=grpo_math", env=NO_GPU)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "auto: resources.gpus_per_node: auto -> 1 (assumed: no GPU found on this machine" in text
    assert "auto: eval.greedy: auto -> false (nemo_rl supports eval.greedy=false: NeMo RL 0.7 validates by " \
           "sampling" in text
    assert "expects 1 node(s) x 1 GPU(s)" in text


@pytest.mark.parametrize(("framework", "override", "refusal"), [
    ("verl", "rollout.engine=hf", "rollout.engine='hf': not supported by verl"),
    ("verl", "data.chat_template=false", "data.chat_template=False: not supported by verl"),
    ("verl", "resources.gpus_per_node=0", "resources.gpus_per_node=0: not supported by verl"),
    ("openrlhf", "eval.before_training=true", "eval.before_training=True: not supported by openrlhf"),
    ("nemo_rl", "eval.greedy=true", "eval.greedy=True: not supported by nemo_rl"),
    ("slime", "rollout.engine=vllm", "rollout.engine='vllm': not supported by slime"),
])
def test_a_value_set_explicitly_that_the_backend_cannot_honour_is_an_error(framework: str, override: str,
                                                                          refusal: str) -> None:
    out = run_cli("plan", f"+framework={framework}", "recipe=grpo_math", override, env=NO_GPU)
    assert out.returncode == 2
    assert refusal in out.stderr


def test_an_explicit_value_in_a_recipe_file_is_kept(tmp_path: Path) -> None:
    recipe = tmp_path / "mine.yaml"
    recipe.write_text("defaults:\n  - grpo_math\n  - _self_\neval:\n  greedy: false\ndata:\n  chat_template: true\n")
    plan = plan_json("+framework=trl", f"recipe={recipe}")
    assert (plan["recipe"]["eval"]["greedy"], plan["recipe"]["data"]["chat_template"]) == (False, True)
    assert {a["field"] for a in plan["auto"]} == {"resources.gpus_per_node", "rollout.engine", "eval.before_training",
                                                  "eval.stop_after_plateau", "eval.stop_at_accuracy"}


@pytest.mark.parametrize(("override", "allowed"), [
    ("resources.gpus_per_node=eight", "resources.gpus_per_node='eight': a number >= 0, or auto (the GPUs"),
    ("data.chat_template=maybe", "data.chat_template='maybe': true or false, or auto (true on verl"),
    ("rollout.engine=tensorrt", "rollout.engine='tensorrt': one of ['hf', 'sglang', 'vllm', 'auto']"),
])
def test_a_malformed_value_names_the_field_and_what_it_takes(override: str, allowed: str) -> None:
    out = run_cli("plan", "+framework=verl", "recipe=grpo_math", override, env=NO_GPU)
    assert out.returncode == 2
    assert allowed in " ".join(out.stderr.split())


def test_gpus_are_counted_on_this_machine_and_trl_takes_one_of_them(tmp_path: Path) -> None:
    four = fake_gpus(tmp_path, 4)
    verl = plan_json("+framework=verl", "recipe=grpo_math", env=four)
    gpus = next(a for a in verl["auto"] if a["field"] == "resources.gpus_per_node")
    assert gpus["value"] == 4 and "nvidia-smi -L" in gpus["why"]
    assert verl["environment"]["gpus_per_node"] == 4
    trl = plan_json("+framework=trl", "recipe=grpo_math", env=four)
    gpus = next(a for a in trl["auto"] if a["field"] == "resources.gpus_per_node")
    assert gpus["value"] == 1 and "resources.gpus_per_node=4" in gpus["why"]  # says how to use all four
    narrowed = plan_json("+framework=verl", "recipe=grpo_math", env={**four, "CUDA_VISIBLE_DEVICES": "2,3"})
    assert narrowed["recipe"]["resources"]["gpus_per_node"] == 2


def test_a_cluster_scheduler_assumes_instead_of_counting_this_machine(tmp_path: Path) -> None:
    plan = plan_json("+framework=verl", "recipe=grpo_math", "scheduler=slurm", env=fake_gpus(tmp_path, 4))
    gpus = next(a for a in plan["auto"] if a["field"] == "resources.gpus_per_node")
    assert gpus["value"] == 1 and "slurm" in gpus["why"]  # the login node's GPUs say nothing of the job's nodes


def test_a_local_run_with_assumed_gpus_stops_before_writing_anything(isolated: Path) -> None:
    out = run_cli("+framework=verl", "recipe=grpo_math", env=NO_GPU)
    assert out.returncode == 2, out.stderr
    assert "verl expects 1 GPU(s) on this node (resources.gpus_per_node=auto, assumed 1) and found 0" in out.stderr
    assert not (isolated / "runs").exists() or run_dirs(isolated / "runs") == []


def test_advise_no_longer_rules_backends_out_for_the_toy_recipes_defaults() -> None:
    out = run_cli("advise", "--gpus", "8", "--model-size", "7B", "--json", env=NO_GPU)
    assert out.returncode == 0, out.stderr
    verdicts = {v["framework"]: v for v in json.loads(out.stdout)["ranking"]}
    refused = {name: v["refused"] for name, v in verdicts.items() if v["refused"]}
    assert refused == {}, refused


def test_explain_says_what_auto_means() -> None:
    out = run_cli("explain", "eval.greedy")
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "or auto: true, except on NeMo RL" in text
    assert "nemo_rl false (nemo_rl supports eval.greedy=false" in text  # what each installed backend makes of it
    assert "verl true (held-out accuracy of the most likely completion)" in text
