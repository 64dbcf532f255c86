"""The algorithm config group: which value wins (default preset, recipe file, command-line preset, field override),
the schema's defaults being the grpo preset, the README's support table being ``unirl algorithms``' own output, and
every algorithm TRL runs learning the embedded task on a CPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.helpers import run_dirs
from unirl.recipe.algorithm_presets import preset_fields
from unirl.recipe.schema import ALGORITHMS, AlgorithmConfig

README = Path(__file__).resolve().parents[1] / "README.md"


def planned_algorithm(*overrides: str) -> dict[str, object]:
    out = run_cli("plan", *overrides, "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)["recipe"]["algorithm"]


def test_schema_defaults_are_the_grpo_preset() -> None:
    """A recipe that names no preset is GRPO field for field (config.yaml composes algorithm=grpo first)."""
    defaults = dataclasses.asdict(AlgorithmConfig())
    assert {field: defaults[field] for field in preset_fields("grpo")} == preset_fields("grpo")


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_preset_names_itself_and_sets_only_recipe_fields(name: str) -> None:
    fields = preset_fields(name)
    assert fields["name"] == name
    assert set(fields) <= {f.name for f in dataclasses.fields(AlgorithmConfig)}


def test_a_command_line_preset_wins_over_the_recipe_files_values() -> None:
    # grpo_math sets loss_aggregation=token_mean itself; Dr. GRPO's is the constant-normalised sequence sum
    assert planned_algorithm("recipe=grpo_math")["loss_aggregation"] == "token_mean"
    chosen = planned_algorithm("recipe=grpo_math", "algorithm=dr_grpo")
    assert (chosen["name"], chosen["loss_aggregation"], chosen["advantage_norm"]) == (
        "dr_grpo", "seq_mean_token_sum_norm", "none")
    assert chosen["lr"] == 1e-3  # what the preset does not define stays the recipe's


def test_a_field_override_wins_over_the_command_line_preset() -> None:
    chosen = planned_algorithm("recipe=grpo_math", "algorithm=dapo", "algorithm.clip_high=0.3",
                               "algorithm.dynamic_sampling=false")  # TRL has no dynamic sampling
    assert (chosen["name"], chosen["clip_high"], chosen["dynamic_sampling"]) == ("dapo", 0.3, False)
    assert chosen["clip_low"] == 0.2 and chosen["loss_aggregation"] == "token_mean"  # the rest is DAPO's


def test_a_recipe_naming_an_algorithm_it_did_not_select_is_refused(tmp_path: Path) -> None:
    recipe = tmp_path / "claims_rloo.yaml"
    recipe.write_text("algorithm:\n  name: rloo\n")
    out = run_cli("plan", f"recipe={recipe}")
    assert out.returncode == 2
    assert "algorithm.name='rloo'" in out.stderr and "pass algorithm=rloo" in out.stderr


def test_an_unknown_preset_is_refused_with_the_choices() -> None:
    out = run_cli("plan", "algorithm=grpo2")
    assert out.returncode == 2
    assert "grpo2" in out.stderr and "dr_grpo" in out.stderr


def test_the_readme_support_table_is_unirl_algorithms_output() -> None:
    out = run_cli("algorithms")
    assert out.returncode == 0, out.stderr
    table = [line for line in out.stdout.splitlines() if line.startswith("|")]
    readme = README.read_text()
    start = readme.index("| algorithm | nemo_rl |")
    documented = [line for line in readme[start:].splitlines()[:len(table)]]
    assert documented == table, "README's algorithm table is stale: paste `unirl algorithms` into it"


def test_unirl_algorithms_json_gives_every_cell_with_its_reasons() -> None:
    cells = json.loads(run_cli("algorithms", "--json").stdout)
    by = {(c["framework"], c["algorithm"]): c for c in cells}
    assert len(by) == 6 * (len(ALGORITHMS) + 1)  # the presets, then LoRA
    assert by[("trl", "rloo")]["support"] == "yes"  # TRL's own RLOOTrainer
    ppo = by[("trl", "ppo")]
    assert ppo["support"] == "no" and any("algorithm.advantage_baseline='critic'" in r
                                          for r in ppo["refusals_without_kl"])
    assert by[("nemo_rl", "rloo")]["support"] == "without KL"  # NeMo RL has no KL in the reward


# --- every algorithm TRL runs learns the embedded task (held-out accuracy, a fixed seed) ---------------------------
TRL_ALGORITHMS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo")


@pytest.mark.train
@pytest.mark.parametrize("name", TRL_ALGORITHMS)
def test_each_algorithm_trl_runs_learns_the_embedded_task(name: str, tmp_path: Path) -> None:
    out = run_cli("recipe=grpo_math", f"algorithm={name}", "algorithm.dynamic_sampling=false", "seed=0",
                  "logging.progress=false", "logging.plot=false", env={"UNIRL_RUNS_DIR": str(tmp_path / "runs")},
                  cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    [run_dir] = run_dirs(tmp_path / "runs")
    summary = json.loads((run_dir / "summary.json").read_text())
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["recipe"]["algorithm"]["name"] == name
    assert plan["native_config"]["trainer"] == ("RLOOTrainer" if name == "rloo" else "GRPOTrainer")
    assert summary["state"] == "completed" and summary["accuracy_before"] <= 0.1
    # seed 0 reaches 4/11 (grpo, gspo) to 9/11 (dapo) on this CPU; 3/11 is clearly above a start of 0
    assert summary["accuracy_after"] >= summary["accuracy_before"] + 0.25, summary
