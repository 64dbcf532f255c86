"""``unirl import``: a recipe from a backend's native configuration, by inverting the plugin's mapping table.

Two properties per backend: a plan read back gives back its recipe (the fields the backend cannot express come back
as exactly the values listed here) and plans to the same native configuration; and an official example, saved under
tests/fixtures/native/ with its repository, commit and path, imports to a recipe whose plan reproduces the example's
configuration up to the keys listed (paths, unirl's reward wiring), each with why.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from tests.support.helpers import point_at_backend
from tests.test_translation_fuzz import accepted_plans, outcome, recipes
from unirl.backend.importing import Imported, hydra_values, verl_command
from unirl.backend.importing import import_native as import_with
from unirl.backend.native import micro_batch
from unirl.cli.main import main
from unirl.errors import RecipeInvalid
from unirl.host.manager import get_host
from unirl.recipe.schema import AlgorithmConfig, DataConfig, EvalConfig, Recipe, ResourcesConfig, recipe_from_dict
from unirl.rewards.spec import RewardPolicy

FIXTURES = Path(__file__).parent / "fixtures" / "native"
VERL_SCRIPT = FIXTURES / "verl_run_qwen2-7b_math.sh"


def import_native(backend: str, native: dict[str, Any], **options: Any) -> Imported:
    host = get_host()
    return import_with(host.frameworks.get(backend), native, host.rewards.names(), **options)


def comparable(recipe: Recipe) -> dict[str, Any]:
    """Every recipe field but the framework's own options (the import writes the backend's name and overrides) and the
    preset's name: the import says what each field is, and a recipe file cannot name a preset it did not compose
    (unirl.recipe.algorithm_presets), so the name is the default's whatever the fields."""
    fields = {k: v for k, v in dataclasses.asdict(recipe).items() if k not in ("framework", "scheduler")}
    a = fields["algorithm"] = {k: v for k, v in fields["algorithm"].items() if k != "name"}
    # fields that say nothing given others: no backend key carries them, so they come back as whatever
    moot = {"kl_placement": a["kl_coef"] == 0, "kl_estimator": a["kl_coef"] == 0,
            "rollout_correction_cap": a["rollout_correction"] == "none",
            "overlong_penalty": a["overlong_buffer"] is None}
    for field, says_nothing in moot.items():
        if says_nothing:
            a.pop(field)
    return fields


def verl_comes_back_as(recipe: Recipe) -> Recipe:
    """What verl's plan can say about ``recipe``: the fields its keys do not carry come back as these values."""
    a = recipe.algorithm
    default_data, default_eval = DataConfig(), EvalConfig()
    return dataclasses.replace(
        recipe,
        algorithm=dataclasses.replace(
            a,
            # null micro-batches are resolved in the plan (unirl.backend.native.micro_batch) and come back resolved
            micro_batch_size=micro_batch(recipe),
            logprob_micro_batch_size=a.logprob_micro_batch_size or micro_batch(recipe),
            # KL_TYPE sends k3 and low_var_kl alike as verl's low_var_kl; the first recipe name for it comes back;
            # without a KL term no estimator is sent
            kl_estimator=("k3" if a.kl_estimator == "low_var_kl" else a.kl_estimator) if a.kl_coef
            else AlgorithmConfig().kl_estimator),
        # data files are unirl's exports ({run_dir}/data/*.parquet): the sources come back as the defaults, and a
        # recipe without an eval set as one without (verl gets the train file as val_files, test_freq=-1)
        data=dataclasses.replace(recipe.data, train=default_data.train,
                                 eval=default_data.eval if recipe.data.eval else None,
                                 max_prompt_tokens=recipe.data.max_prompt_tokens or 512),
        # val_before_train is sent false without an eval set; trainer.device is always cuda (device=auto/cuda alike)
        eval=dataclasses.replace(recipe.eval, before_training=recipe.eval.before_training and bool(recipe.data.eval),
                                 every_steps=recipe.eval.every_steps if recipe.data.eval else default_eval.every_steps),
        resources=dataclasses.replace(recipe.resources, device=ResourcesConfig().device),
        # reward_policy is unirl's reward adapter's, not a verl key
        reward_policy=RewardPolicy(),
    )


def test_a_verl_plan_imports_back_to_its_recipe() -> None:
    """The property over hypothesis' recipes (tests/test_translation_fuzz.py's strategy): every plan unirl accepts."""
    plans = accepted_plans("verl", 150)
    assert len(plans) >= 10
    for plan in plans:
        recipe = recipe_from_dict(plan.recipe)
        native = dict(plan.native_config["overrides"])
        imported = import_native("verl", native)
        assert imported.report.native == {}, "every key of a unirl plan is a recipe field or unirl's wiring"
        assert comparable(imported.recipe) == comparable(verl_comes_back_as(recipe))
        again = get_host().frameworks.get("verl").plan(imported.recipe)
        assert again.native_config["overrides"] == native


def openrlhf_comes_back_as(recipe: Recipe) -> Recipe:
    """What OpenRLHF's flags can say about ``recipe``."""
    a = recipe.algorithm
    return dataclasses.replace(
        recipe,
        algorithm=dataclasses.replace(
            a, micro_batch_size=micro_batch(recipe),  # resolved in the plan (unirl.backend.native.micro_batch)
            logprob_micro_batch_size=a.logprob_micro_batch_size or micro_batch(recipe),
            # KL_ESTIMATOR sends k3 and low_var_kl alike as --algo.kl.estimator k3
            kl_estimator="k3" if a.kl_estimator == "low_var_kl" else a.kl_estimator,
            # without a KL term (init_coef 0) where it would go is not said
            kl_placement=a.kl_placement if a.kl_coef else AlgorithmConfig().kl_placement),
        # --data.max_len is prompt + completion tokens: a null prompt budget comes back as unirl's default, 512
        data=dataclasses.replace(recipe.data, max_prompt_tokens=recipe.data.max_prompt_tokens or 512),
        # a null rollout.gpus (half the GPUs) comes back as the count (--vllm.num_engines x tensor parallel)
        rollout=dataclasses.replace(recipe.rollout, gpus=None if recipe.rollout.colocated else recipe.rollout_gpus),
        resources=dataclasses.replace(recipe.resources, device=ResourcesConfig().device),  # no device flag
        reward_policy=RewardPolicy(),
    )


def test_an_openrlhf_plan_imports_back_to_its_recipe() -> None:
    plans = accepted_plans("openrlhf", 150)
    assert len(plans) >= 10
    for plan in plans:
        recipe = recipe_from_dict(plan.recipe)
        native = dict(plan.native_config["flags"])
        imported = import_native("openrlhf", native)
        assert imported.report.native == {}
        assert comparable(imported.recipe) == comparable(openrlhf_comes_back_as(recipe))
        again = get_host().frameworks.get("openrlhf").plan(imported.recipe)
        assert again.native_config["flags"] == native


# Keys of verl's run_qwen2-7b_math.sh whose value the imported recipe's plan does not reproduce, and why.
VERL_SCRIPT_DIFFERS = {
    "data.train_files": "paths: unirl exports the recipe's data.train to {run_dir}/data/train.parquet",
    "data.val_files": "paths: unirl exports data.eval to {run_dir}/data/eval.parquet",
}


def test_verls_official_math_script_imports_to_a_recipe_that_plans_the_same_config() -> None:
    overrides, other = verl_command(VERL_SCRIPT.read_text())
    script = hydra_values(overrides)
    assert other == [("$@", 'not a key=value override ("$@" passes the caller\'s arguments)')]
    imported = import_native("verl", script)
    r = imported.recipe
    # the script's numbers, in the recipe's units: train_batch_size=1024 prompts; ppo_mini_batch_size=256 prompts
    # -> 4 optimizer updates a step; kl_loss_coef with use_kl_loss=True is the recipe's kl_coef
    assert (r.algorithm.prompts_per_step, r.algorithm.samples_per_prompt, r.algorithm.mini_batches_per_step) == (
        1024, 5, 4)
    assert (r.algorithm.kl_coef, r.algorithm.kl_estimator, r.algorithm.micro_batch_size) == (0.001, "k3", 16)
    assert (r.resources.nodes, r.resources.gpus_per_node, r.rollout.tensor_parallel) == (1, 8, 2)
    assert (r.model.path, r.run.name, r.run.checkpoint_every, r.eval.every_steps) == (
        "Qwen/Qwen2-7B-Instruct", "qwen2_7b_function_rm", 20, 5)
    # verl's defaults for what the script leaves out (verl/trainer/config/actor/actor.yaml: weight_decay 0.01)
    assert r.algorithm.weight_decay == 0.01
    # the data files: the script's own variables expanded, $HOME (which it does not set) left as written, reported
    assert dict(imported.report.unresolved) == {
        "data.train_files": ["$HOME/data/gsm8k/train.parquet", "$HOME/data/math/train.parquet"],
        "data.val_files": ["$HOME/data/gsm8k/test.parquet", "$HOME/data/math/test.parquet"]}
    # what no recipe field says stays native, exactly
    assert imported.report.native == {
        "data.filter_overlong_prompts": True, "data.truncation": "error",
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.actor.fsdp_config.param_offload": False,
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
        "actor_rollout_ref.ref.fsdp_config.param_offload": True, "trainer.critic_warmup": 0,
        "trainer.logger": ["console", "wandb"], "trainer.project_name": "verl_grpo_example_gsm8k_math",
    }
    # the run's length: 15 passes over the two files, whose rows verl counts where it runs (they are not here)
    assert (r.algorithm.epochs, r.data.train) == (15, ["$HOME/data/gsm8k/train.parquet",
                                                       "$HOME/data/math/train.parquet"])
    planned = get_host().frameworks.get("verl").plan(imported.recipe).native_config["overrides"]
    differs = {k for k, v in script.items() if planned.get(k) != v}
    assert differs == set(VERL_SCRIPT_DIFFERS)


@pytest.mark.verl
def test_the_imported_verl_script_passes_verls_own_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    point_at_backend(monkeypatch, "verl")
    overrides, _ = verl_command(VERL_SCRIPT.read_text())
    imported = import_native("verl", hydra_values(overrides))
    framework = get_host().frameworks.get("verl")
    [result] = framework.check_in_backend([framework.plan(imported.recipe)])
    assert result["problems"] == []


def test_unirl_import_writes_a_recipe_file_and_reports_on_stderr(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "math.yaml"
    assert main(["import", "verl", str(VERL_SCRIPT), "-o", str(out)]) == 0
    document = yaml.safe_load(out.read_text())
    assert document["framework"]["name"] == "verl"
    assert "trainer.total_epochs" not in document["framework"]["overrides"]
    assert document["algorithm"]["epochs"] == 15 and document["algorithm"]["mini_batches_per_step"] == 4
    loaded = recipe_from_dict(document)
    assert loaded.algorithm.prompts_per_step == 1024
    err = capsys.readouterr().err
    assert "actor_rollout_ref.actor.ppo_mini_batch_size -> algorithm.mini_batches_per_step = 4" in err
    assert "stayed native, in framework.overrides (9)" in err
    assert "trainer.total_epochs -> algorithm.epochs = 15" in err
    assert "data.train_files = ['$HOME/data/gsm8k/train.parquet', '$HOME/data/math/train.parquet']" in err


def test_a_number_that_is_a_shell_reference_stays_native() -> None:
    imported = import_native("verl", hydra_values(["actor_rollout_ref.rollout.tensor_model_parallel_size=$TP",
                                                   "actor_rollout_ref.rollout.n=4",
                                                   "actor_rollout_ref.rollout.name=vllm"]))
    assert imported.report.native == {"actor_rollout_ref.rollout.tensor_model_parallel_size": "$TP"}
    assert imported.report.unresolved == [("actor_rollout_ref.rollout.tensor_model_parallel_size", "$TP")]
    # verl's own defaults for the keys left out: 8 GPUs on one node (verl/trainer/config/ppo_trainer.yaml)
    assert (imported.recipe.resources.gpus_per_node, imported.recipe.resources.nodes) == (8, 1)


def test_a_key_unirl_cannot_express_stays_native_and_the_field_keeps_its_default() -> None:
    imported = import_native("verl", hydra_values(["algorithm.adv_estimator=remax", "actor_rollout_ref.rollout.n=4",
                                                   "actor_rollout_ref.rollout.name=vllm"]))
    assert imported.report.native == {"algorithm.adv_estimator": "remax"}
    assert imported.recipe.algorithm.advantage_baseline == "group_mean"


def test_verls_estimators_import_as_the_advantage_fields() -> None:
    for estimator, baseline, norm in [("rloo", "leave_one_out", "none"), ("gae", "critic", "batch_whiten"),
                                      ("reinforce_plus_plus", "none", "batch_whiten"),
                                      ("reinforce_plus_plus_baseline", "group_mean", "batch_whiten")]:
        imported = import_native("verl", hydra_values([f"algorithm.adv_estimator={estimator}",
                                                       "actor_rollout_ref.rollout.n=4",
                                                       "actor_rollout_ref.rollout.name=vllm"]))
        a = imported.recipe.algorithm
        assert (a.advantage_baseline, a.advantage_norm) == (baseline, norm), estimator
        assert "algorithm.adv_estimator" not in imported.report.native


def test_unirl_import_refuses_an_unknown_backend(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "nemo_rl", "x"]) == 2
    assert "one of verl, openrlhf, trl" in capsys.readouterr().err


def trl_comes_back_as(recipe: Recipe) -> Recipe:
    """What TRL's GRPOConfig can say about ``recipe`` (given the GPUs, which GRPOConfig does not hold)."""
    a = recipe.algorithm
    default = Recipe()
    return dataclasses.replace(
        recipe,
        # TRL's micro-batch is per_device_train_batch_size: a null comes back as the whole per-device share
        # (Recipe.micro_batch); its KL is always k3 (the "(fixed k3)" row), so another estimator comes back as k3
        algorithm=dataclasses.replace(a, micro_batch_size=recipe.micro_batch(), kl_estimator="k3"),
        # model and data are not GRPOConfig keys (the plan's native_config["model"/"data"]): defaults come back, and
        # the prompt budget is unirl's dataset truncation ("(dataset truncation)" row), not a TRL key
        # LoRA is the trainer's peft_config argument (native_config["peft_config"]), not a GRPOConfig key
        model=dataclasses.replace(recipe.model, lora=default.model.lora,
                                  dtype="bfloat16" if recipe.model.dtype == "auto" else recipe.model.dtype),
        data=default.data,
        eval=default.eval,  # unirl's own evaluation, not TRL's
        resources=dataclasses.replace(recipe.resources, device=default.resources.device),  # use_cpu=False: auto
        reward_policy=RewardPolicy(),
    )


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(recipes("trl"))
def test_a_trl_plan_imports_back_to_its_recipe(recipe: Recipe) -> None:
    plan = outcome("trl", recipe)
    if plan is None:
        return  # refused before launch: nothing to import
    ACCEPTED.append(plan)
    native = dict(plan.native_config["trainer_config"])
    r = recipe
    given_fields = {"resources.nodes": r.resources.nodes, "resources.gpus_per_node": r.resources.gpus_per_node,
                    "rollout.gpus": r.rollout.gpus}
    imported = import_native("trl", native, given=given_fields)
    assert imported.report.native == {}
    assert comparable(imported.recipe) == comparable(trl_comes_back_as(recipe))
    again = get_host().frameworks.get("trl").plan(imported.recipe)
    assert again.native_config["trainer_config"] == native


ACCEPTED: list[Any] = []


def test_the_trl_property_reached_accepted_plans() -> None:
    if not ACCEPTED:
        test_a_trl_plan_imports_back_to_its_recipe()
    assert len(ACCEPTED) >= 10


def test_trls_quick_start_config_imports_to_a_recipe_that_plans_the_same_config(
        capsys: pytest.CaptureFixture[str]) -> None:
    fixture = FIXTURES / "trl_grpo_quickstart.json"
    assert main(["import", "trl", str(fixture)]) == 0
    out, err = capsys.readouterr()
    document = yaml.safe_load(out)
    script = json.loads("\n".join(line for line in fixture.read_text().splitlines() if not line.startswith("#")))
    imported = import_native("trl", script)
    assert document == imported.document()
    r = imported.recipe
    # TRL 1.16's defaults for what the quick start leaves out (trl/trainer/grpo_config.py): 8 completions per device,
    # 8 generations, no accumulation -> one prompt of 8 completions a step on one process
    assert (r.algorithm.prompts_per_step, r.algorithm.samples_per_prompt, r.algorithm.micro_batch_size) == (1, 8, 8)
    assert (r.logging.every_steps, r.algorithm.lr_schedule, r.resources.gradient_checkpointing) == (10, "linear", True)
    assert imported.report.native == {}
    assert "output_dir = 'Qwen2-0.5B-GRPO': a path unirl sets itself" in err
    planned = get_host().frameworks.get("trl").plan(r).native_config["trainer_config"]
    # output_dir: unirl sets <run dir>/trl at launch (the plan leaves it out)
    assert {k for k, v in script.items() if planned.get(k) != v} == {"output_dir"}
    # keys the quick start leaves at TRL's default that the plan sets otherwise, each for a reason:
    assert {key for key, _, _ in imported.report.added} == {
        "seed",  # unirl's seed 0 (TRL's 42)
        "max_steps",  # TRL's -1 trains num_train_epochs=3 over the dataset; unirl counts steps (algorithm.steps)
        "steps_per_generation",  # TRL's None means gradient_accumulation_steps (1), sent explicitly
        "epsilon_high",  # TRL's None means epsilon (0.2), sent explicitly
        # the recipe's KL is the plain k3 estimator; TRL's default multiplies it by the importance ratio
        "use_bias_correction_kl",
        "reward_weights",  # unirl's reward wiring: one weight per recipe reward
        # rollout_correction=none sent explicitly: TRL's default (on, sequence_mask) acts only with vLLM
        "vllm_importance_sampling_correction",
    }


def test_openrlhf_flags_import_in_the_recipes_units(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--rollout.batch_size", "16", "--rollout.n_samples_per_prompt", "4", "--train.batch_size", "32",
            "--algo.kl.use_loss", "--algo.kl.init_coef", "0.001", "--actor.num_gpus_per_node", "4",
            "--ref.num_gpus_per_node", "4", "--train.colocate_all", "--vllm.enable_sleep", "--ds.enable_sleep",
            "--vllm.num_engines", "4", "--actor.eps_clip_low_high", "0.2", "0.28", "--vllm.enforce_eager",
            "--data.max_samples", "160", "--algo.advantage.estimator", "group_norm"]
    assert main(["import", "openrlhf", *argv]) == 0
    out, err = capsys.readouterr()
    a = yaml.safe_load(out)["algorithm"]
    # --train.batch_size counts completions per update: 16 x 4 / 32 = 2 updates a step; --data.max_samples 160 over
    # 16 prompts a step is 10 steps; OpenRLHF's default warm-up ratio 0.03 of 20 updates rounds up to 1
    # (openrlhf/utils/deepspeed/deepspeed.py:367-383 @ 0.11.2)
    assert (a["prompts_per_step"], a["mini_batches_per_step"], a["steps"], a["warmup_steps"]) == (16, 2, 10, 1)
    assert (a["kl_coef"], a["clip_high"]) == (0.001, 0.28)
    # the max_new_tokens the flags leave out stays out: a completion may use what its prompt leaves of max_len; and
    # OpenRLHF's default reward clip, which after group_norm clips the normalised advantage (no recipe field says
    # that), stays the command's
    assert yaml.safe_load(out)["framework"]["overrides"] == {"vllm.enforce_eager": True,
                                                             "rollout.max_new_tokens": None, "data.max_len": 2048,
                                                             "reward.clip_range": [-10, 10]}
    assert "train.batch_size -> algorithm.mini_batches_per_step = 2" in err


def test_kl_in_the_reward_imports_as_kl_placement_reward() -> None:
    """Without --algo.kl.use_loss OpenRLHF puts init_coef in each token's reward: the recipe says so with
    algorithm.kl_placement=reward, on OpenRLHF and on verl (algorithm.use_kl_in_reward + kl_ctrl.kl_coef)."""
    imported = import_native("openrlhf", {"algo.kl.init_coef": 0.01, "rollout.n_samples_per_prompt": 4,
                                          "rollout.batch_size": 8, "train.batch_size": 32})
    assert (imported.recipe.algorithm.kl_coef, imported.recipe.algorithm.kl_placement) == (0.01, "reward")
    # kept as the command has them: no max_new_tokens (max_len - prompt), and the default warm-up of 3% of a run
    # OpenRLHF counts from the data
    assert imported.report.native == {"rollout.max_new_tokens": None, "data.max_len": 2048,
                                      "actor.lr_warmup_ratio": 0.03}
    verl = import_native("verl", {"algorithm.use_kl_in_reward": True, "algorithm.kl_ctrl.kl_coef": 0.02,
                                  "algorithm.kl_penalty": "kl"})
    a = verl.recipe.algorithm
    assert (a.kl_coef, a.kl_placement, a.kl_estimator) == (0.02, "reward", "k1")


@pytest.mark.openrlhf
def test_imported_openrlhf_flags_pass_openrlhfs_own_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    point_at_backend(monkeypatch, "openrlhf")
    imported = import_native("openrlhf", {"rollout.batch_size": 16, "rollout.n_samples_per_prompt": 4,
                                          "train.batch_size": 32, "algo.kl.use_loss": True, "algo.kl.init_coef": 1e-3,
                                          "actor.num_gpus_per_node": 4, "ref.num_gpus_per_node": 4,
                                          "train.colocate_all": True, "vllm.num_engines": 4,
                                          "vllm.enforce_eager": True, "data.max_samples": 160})
    framework = get_host().frameworks.get("openrlhf")
    [result] = framework.check_in_backend([framework.plan(imported.recipe)])
    assert result["problems"] == []


# --- data, overrides and defaults the examples rely on (issue: faithful import) ------------------------------------


def verl_gsm8k_parquet(path: Path, rows: int = 64) -> Path:
    """Rows in the layout verl's examples/data_preprocess/gsm8k.py writes: chat prompt, reward_model.ground_truth."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([
        {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": f"What is {i} + 2?"}],
         "ability": "math", "reward_model": {"style": "rule", "ground_truth": str(i + 2)}, "extra_info": {"index": i}}
        for i in range(rows)]), path)
    return path


def test_a_verl_import_reads_the_reference_where_verls_reward_managers_do(tmp_path: Path) -> None:
    """verl's reward managers read reward_model.ground_truth (naive.py:43): the recipe names that column, and plans
    against the file's own rows; a plan read back (unirl's exports) keeps the recipe's column."""
    data = verl_gsm8k_parquet(tmp_path / "train.parquet")
    imported = import_native("verl", hydra_values([f"data.train_files={data}", f"data.val_files={data}",
                                                   "data.train_batch_size=16", "actor_rollout_ref.rollout.n=4",
                                                   "actor_rollout_ref.rollout.name=vllm"]))
    assert imported.recipe.data.answer_key == "reward_model.ground_truth"
    assert imported.recipe.data.prompt_key == "prompt"
    out = tmp_path / "imported.yaml"
    out.write_text(yaml.safe_dump(imported.document()))
    assert main(["plan", "framework=verl", f"recipe={out}"]) == 0  # the plan reads the file's head
    read_back = import_native("verl", {**hydra_values(["actor_rollout_ref.rollout.n=4",
                                                       "actor_rollout_ref.rollout.name=vllm"]),
                                       "data.train_files": "{run_dir}/data/train.parquet"})
    assert read_back.recipe.data.answer_key == DataConfig().answer_key


@pytest.mark.parametrize(("flags", "train"), [
    (["--data.prompt_dataset", "OpenRLHF/prompt-collection-v0.1"], "hf:OpenRLHF/prompt-collection-v0.1@train"),
    (["--data.prompt_dataset", "org/a,org/b", "--data.prompt_split", "test"], ["hf:org/a@test", "hf:org/b@test"]),
    (["--data.prompt_dataset", "/data/prompts.jsonl"], "/data/prompts.jsonl"),
])
def test_openrlhf_datasets_import_as_sources_unirl_plans(flags: list[str], train: Any, tmp_path: Path) -> None:
    """OpenRLHF reads a name without a data-file suffix as a hub dataset and selects --data.prompt_split
    (openrlhf/datasets/utils.py:29-80): the recipe says so in its own form, which plans."""
    from unirl.backend.importing import openrlhf_flags

    imported = import_native("openrlhf", openrlhf_flags(flags)[0])
    assert imported.recipe.data.train == train
    assert "data.prompt_dataset" not in imported.report.native
    out = tmp_path / "imported.yaml"
    out.write_text(yaml.safe_dump(imported.document()))
    assert main(["plan", "framework=openrlhf", f"recipe={out}"]) == 0


@pytest.mark.parametrize("flags", [
    ["--data.prompt_dataset", "org/a,org/b", "--data.prompt_probs", "0.7,0.3"],  # sampled, not concatenated
    ["--data.prompt_dataset", "org/a@subset"],  # a data_dir
    ["--data.prompt_dataset", "/data/saved_to_disk"],  # a local folder (save_to_disk) unirl does not read
])
def test_openrlhf_datasets_the_recipe_cannot_hold_are_refused_by_key_until_given(flags: list[str]) -> None:
    """unirl exports the recipe's rows to the backend, so a dataset it cannot read is not kept native (it would be
    replaced silently): the import names the key and asks for the data in a form unirl reads."""
    from unirl.backend.importing import openrlhf_flags

    with pytest.raises(RecipeInvalid) as info:
        import_native("openrlhf", openrlhf_flags(flags)[0])
    [problem] = info.value.problems
    assert (problem.field, problem.value) == ("data.prompt_dataset", flags[1])
    assert "--set data.train=..." in problem.allowed
    given = import_native("openrlhf", openrlhf_flags(flags)[0], given={"data.train": "hf:org/a@train"})
    assert given.recipe.data.train == "hf:org/a@train"


def test_a_key_verl_does_not_have_is_dropped_by_the_import_and_refused_by_plan(
        capsys: pytest.CaptureFixture[str]) -> None:
    """An example written for an older verl (critic.model.fsdp_config.* is critic.fsdp.* in 0.9.1) fails in verl's
    Hydra after launch: the import reports it by key with the keys of that name, and a plan refuses it up front."""
    imported = import_native("verl", hydra_values(["critic.model.fsdp_config.param_offload=False",
                                                   "actor_rollout_ref.rollout.n=4",
                                                   "actor_rollout_ref.rollout.name=vllm"]))
    [(key, value, why)] = imported.report.dropped
    assert (key, value) == ("critic.model.fsdp_config.param_offload", False)
    assert "not a key of verl 0.9.1's ppo_trainer config" in why and "critic.fsdp.param_offload" in why
    assert "critic.model.fsdp_config.param_offload" not in imported.recipe.framework["overrides"]
    gpu = ["resources.gpus_per_node=8", "rollout.engine=vllm", "data.chat_template=true"]
    for override, message in [
            ("+framework.overrides.critic.model.fsdp_config.param_offload=false",
             "framework.overrides.critic.model.fsdp_config.param_offload=False: not a key of verl 0.9.1's"),
            ("+framework.overrides={+trainer.logger:[console]}",
             "verl 0.9.1 already has trainer.logger; drop the '+'")]:
        assert main(["plan", "+framework=verl", *gpu, override]) == 2
        assert message in capsys.readouterr().err
    assert main(["plan", "+framework=verl", *gpu, "+framework.overrides.trainer.logger=[console]",
                 "+framework.overrides.actor_rollout_ref.model.override_config.attention_dropout=0.0"]) == 0


def test_a_trl_config_without_data_says_so_and_compares_runs_on_the_recipes_data(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A GRPOConfig holds no dataset: the report says what the recipe trains on and how to name yours, and the
    command's epochs and the plan's counted steps are compared over the same rows."""
    assert main(["import", "trl", str(FIXTURES / "trl_grpo_quickstart.json")]) == 0
    err = capsys.readouterr().err
    assert "data: the configuration names no training data, so the recipe trains on unirl's default" in err
    assert "--set data.train=FILE" in err
    assert "the imported recipe's plan runs the same" in err
