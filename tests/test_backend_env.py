"""Launching into a backend's environment: the light core staged into the run directory is enough for a bare
interpreter to import unirl's adapters; the command is wrapped for an interpreter, docker or apptainer with the
run directory, reward files and a local model bound at the same paths; data exports are each backend's shape."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.backend_recipes import gpu_recipe
from tests.support.helpers import missing
from unirl.backend.environment import CORE_DIR, launch_command, stage_light_core
from unirl.backend.export import canonical_rows, write_export
from unirl.backend.native import CORE_PACKAGES
from unirl.backend.plan import BackendEnvironment, DataExport, LaunchPlan


def bare_python() -> str:
    """An interpreter with neither unirl nor pluggy installed (the system one here; CI's machine is the same)."""
    for candidate in ("/usr/bin/python3", shutil.which("python3") or ""):
        if candidate and subprocess.run([candidate, "-c", "import pluggy"], capture_output=True).returncode != 0:
            return candidate
    missing("no interpreter without pluggy on this machine (the system python3 of a Debian image has none)")


@pytest.mark.parametrize("adapter", ["unirl.adapters.verl", "unirl.adapters.openrlhf", "unirl.adapters.slime",
                                     "unirl.plugins.verl.native_check", "unirl.plugins.openrlhf.parser_schema"])
def test_the_staged_light_core_is_all_a_bare_interpreter_needs(tmp_path: Path, adapter: str) -> None:
    core = stage_light_core(tmp_path / CORE_DIR, [*CORE_PACKAGES, "unirl.plugins.verl", "unirl.plugins.openrlhf"])
    out = subprocess.run([bare_python(), "-I", "-c", f"import sys; sys.path.insert(0, {str(core)!r}); "
                          f"import {adapter}, unirl; print(unirl.__file__)"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(core))  # the staged copy, not an installed unirl


def plan_in(kind: str, **env: object) -> LaunchPlan:
    spec = BackendEnvironment(kind=kind, **{"python": "python3", **env})  # type: ignore[arg-type]
    return LaunchPlan("verl", "0.9.1", "unirl.plugins.verl:verl", {},
                      command=["python", "-m", "verl.trainer.main_ppo", "a=1"],
                      env={"UNIRL_REWARD_SPEC": "/runs/r/reward_spec.json"}, environment=spec)


def test_an_interpreter_launch_runs_the_backends_python_with_the_core_on_its_path() -> None:
    command, env = launch_command(plan_in("interpreter", python="/opt/verl/bin/python"), Path("/runs/r"))
    assert command == ["/opt/verl/bin/python", "-m", "verl.trainer.main_ppo", "a=1"]
    assert env["PYTHONPATH"] == "/runs/r/unirl_core" and env["UNIRL_REWARD_SPEC"] == "/runs/r/reward_spec.json"


def test_a_docker_launch_binds_the_run_dir_reward_files_and_local_model_at_the_same_paths() -> None:
    plan = plan_in("image", image="unirl-verl", container_runtime="docker", reward_paths=["/home/u/rewards"],
                   mounts=["/models/qwen"])
    command, env = launch_command(plan, Path("/runs/r"))
    assert env == {}
    assert command[:3] == ["docker", "run", "--rm"] and "--gpus" in command
    for path in ("/runs/r", "/home/u/rewards", "/models/qwen"):
        assert f"{path}:{path}" in command
    assert "PYTHONPATH=/runs/r/unirl_core:/home/u/rewards" in command
    assert command[-5:] == ["unirl-verl", "python3", "-m", "verl.trainer.main_ppo", "a=1"]


def test_an_apptainer_launch_uses_nv_and_binds() -> None:
    command, _ = launch_command(plan_in("image", image="verl.sif", container_runtime="apptainer"), Path("/runs/r"))
    assert command[:4] == ["apptainer", "exec", "--nv", "--cleanenv"]
    assert command[4:6] == ["--bind", "/runs/r:/runs/r"]
    assert "verl.sif" in command


def test_a_missing_interpreter_or_runtime_is_named_before_launch(tmp_path: Path) -> None:
    from unirl.backend.environment import check_environment
    from unirl.errors import UnirlError

    with pytest.raises(UnirlError, match=r"framework\.python='/nope/python': no such interpreter"):
        check_environment(BackendEnvironment(kind="interpreter", python="/nope/python"))
    if shutil.which("apptainer") is None:
        with pytest.raises(UnirlError, match="needs apptainer, which is not on PATH"):
            check_environment(BackendEnvironment(kind="image", image="x.sif", container_runtime="apptainer"))


# --- data export --------------------------------------------------------------------------------------------


def test_the_train_export_is_steps_times_prompts_in_one_seeded_order_for_every_backend(tmp_path: Path) -> None:
    recipe = gpu_recipe("verl", algorithm={"steps": 20, "prompts_per_step": 8})
    rows = 20 * 8
    orders = []
    for fmt in ("verl_parquet", "openrlhf_jsonl", "slime_jsonl", "nemo_rl_jsonl"):
        export = DataExport("train", recipe.data.train, fmt, str(tmp_path / fmt), rows=rows)
        assert write_export(recipe, export) == rows
        orders.append([r.text for r in canonical_rows(recipe, export)])
    assert all(o == orders[0] for o in orders)  # the same prompts in the same order on every backend
    assert len(set(orders[0])) < rows  # 44 training prompts cycled: every pass reshuffled with the seed
    other_seed = replace(recipe, seed=1)
    assert [r.text for r in canonical_rows(other_seed, export)] != orders[0]


def test_each_backend_gets_its_own_row_shape(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    recipe = gpu_recipe("verl")
    paths = {}
    for fmt in ("verl_parquet", "openrlhf_jsonl", "slime_jsonl", "nemo_rl_jsonl"):
        paths[fmt] = tmp_path / fmt
        write_export(recipe, DataExport("eval", recipe.data.eval or "", fmt, str(paths[fmt])))
    verl = pq.read_table(paths["verl_parquet"]).to_pylist()[0]
    assert verl["prompt"] == [{"role": "user", "content": verl["extra_info"]["unirl_prompt"]}]
    assert verl["reward_model"]["style"] == "rule" and verl["data_source"] == "unirl/arith"
    openrlhf = json.loads(paths["openrlhf_jsonl"].read_text().splitlines()[0])
    assert set(openrlhf) == {"input", "label", "datasource"}
    slime = json.loads(paths["slime_jsonl"].read_text().splitlines()[0])
    assert set(slime) == {"prompt", "label", "metadata"} and slime["metadata"]["data_source"] == "unirl/arith"
    nemo = json.loads(paths["nemo_rl_jsonl"].read_text().splitlines()[0])
    assert isinstance(nemo["input"], str) and nemo["output"] == openrlhf["label"]


def test_a_local_jsonl_with_chat_messages_and_extra_columns_exports_its_metadata(tmp_path: Path) -> None:
    source = tmp_path / "mine.jsonl"
    source.write_text(json.dumps({"prompt": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": "2+2?"}],
                                  "answer": "4", "difficulty": 3}) + "\n")
    recipe = replace(gpu_recipe("verl"), data=replace(gpu_recipe("verl").data, train=str(source), eval=None))
    export = DataExport("train", str(source), "slime_jsonl", str(tmp_path / "out.jsonl"), rows=3)
    assert write_export(recipe, export) == 3
    row = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])
    assert row["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert row["metadata"]["difficulty"] == 3 and row["metadata"]["data_source"] == str(source)
