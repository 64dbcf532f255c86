"""The NeMo RL plugin: golden plans, honest batch semantics, refusals that name the field, the key schema with
NeMo RL's own cross-field checks, Hydra's override grammar on the base config, and the launcher's
register-then-run order (against a fake ``nemo_rl`` package: NeMo RL itself is not installable here).

Regenerate the golden plans after an intended change with ``UNIRL_UPDATE_GOLDEN=1 pytest tests/test_plugin_nemo_rl.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.golden import assert_golden
from unirl.backend.export import CanonicalRow, nemo_rl_row
from unirl.backend.plan import LaunchPlan
from unirl.errors import FieldError, RecipeInvalid, UnirlError
from unirl.host.registry import Registry
from unirl.plugins.nemo_rl.framework import CAPABILITIES, NemoRlFramework
from unirl.plugins.nemo_rl.schema import GRPO_MATH_1B_DEFAULTS, cross_field_problems, key_problems, merged_config
from unirl.recipe.schema import (
    AlgorithmConfig,
    DataConfig,
    EvalConfig,
    ModelConfig,
    Recipe,
    ResourcesConfig,
    RewardSpec,
    RolloutConfig,
    RunSection,
)
from unirl.rewards.row_origin import untag_reference
from unirl.rewards.spec import RewardPolicy

GOLDEN = Path(__file__).parent / "golden" / "nemo_rl"
REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def no_backend_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("UNIRL_NEMO_RL_PYTHON", raising=False)


def shipped_grpo_math(**changes: Any) -> Recipe:
    """recipes/grpo_math.yaml as dataclasses, made runnable on NeMo RL: 8 GPUs, vLLM, chat template, and sampled
    evaluation (NeMo RL 0.7 cannot validate greedily)."""
    recipe = Recipe(
        run=RunSection(name="grpo_math"),
        model=ModelConfig(path="builtin:tiny-arith"),
        data=DataConfig(train="builtin:arith@train", eval="builtin:arith@heldout", chat_template=True,
                        options={"max_operand": 9, "max_sum": 9, "holdout": "swapped", "holdout_fraction": 0.2}),
        algorithm=AlgorithmConfig(name="grpo", steps=3000, prompts_per_step=8, samples_per_prompt=16, lr=2.0e-4,
                                  lr_schedule="cosine", kl_coef=0.0, loss_aggregation="token_mean",
                                  advantage_norm="group", temperature=1.0, max_new_tokens=2),
        rewards=[RewardSpec("math_answer", 1.0), RewardSpec("numeric_closeness", 0.5), RewardSpec("bare_number", 0.2)],
        rollout=RolloutConfig(engine="vllm"),
        resources=ResourcesConfig(device="auto", cpu_threads=1, gpus_per_node=8),
        eval=EvalConfig(every_steps=500, accuracy_reward="math_answer", greedy=False),
        framework={"name": "nemo_rl", "image": CAPABILITIES.image},
    )
    return replace(recipe, **changes)


def with_algorithm(recipe: Recipe, **algorithm: Any) -> Recipe:
    return replace(recipe, algorithm=replace(recipe.algorithm, **algorithm))


VARIANTS: dict[str, Recipe] = {
    "grpo_math_8gpu": shipped_grpo_math(),
    "kl_minibatches": with_algorithm(
        shipped_grpo_math(model=ModelConfig(path="Qwen/Qwen2.5-0.5B-Instruct", dtype="bfloat16"),
                          framework={"name": "nemo_rl", "max_total_sequence_length": 1024}),
        steps=200, prompts_per_step=32, samples_per_prompt=8, mini_batches_per_step=4, micro_batch_size=4,
        kl_coef=0.04, kl_estimator="low_var_kl", clip_high=0.28, loss_aggregation="seq_mean_token_mean",
        lr=1e-6, lr_schedule="constant", warmup_steps=8, max_new_tokens=512, max_grad_norm=0.0),
    "multinode_disaggregated": with_algorithm(
        shipped_grpo_math(resources=ResourcesConfig(nodes=2, gpus_per_node=8, gradient_checkpointing=True),
                          rollout=RolloutConfig(engine="vllm", colocated=False, tensor_parallel=2,
                                                gpu_memory_fraction=0.85),
                          run=RunSection(name="multinode", checkpoint_every=50),
                          data=replace(shipped_grpo_math().data, eval=None)),
        steps=100, prompts_per_step=64, samples_per_prompt=8, mini_batches_per_step=2),
}


def plan(recipe: Recipe) -> LaunchPlan:
    return NemoRlFramework().plan(recipe)


def overrides(recipe: Recipe) -> dict[str, Any]:
    return plan(recipe).native_config["overrides"]


# --- golden plans ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_plan_matches_its_golden_file(variant: str) -> None:
    text = plan(VARIANTS[variant]).to_json() + "\n"
    assert_golden(GOLDEN / f"{variant}.json", text)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_golden_plan_fits_the_key_schema(variant: str) -> None:
    NemoRlFramework().validate(plan(VARIANTS[variant]))


def test_plan_is_pure() -> None:
    assert plan(VARIANTS["grpo_math_8gpu"]).to_json() == plan(VARIANTS["grpo_math_8gpu"]).to_json()


# --- what the plan says ---------------------------------------------------------------------------------------


def test_command_runs_unirls_launcher_on_the_base_config() -> None:
    built = plan(VARIANTS["grpo_math_8gpu"])
    assert built.command[:7] == ["python", "-m", "unirl.plugins.nemo_rl.launch", "--repo", "/opt/nemo-rl", "--config",
                                 "examples/configs/grpo_math_1B.yaml"]
    assert built.native_config["base_config"] == "examples/configs/grpo_math_1B.yaml"
    assert "+env.unirl.unirl_spec='{run_dir}/reward_spec.json'" in built.command
    assert built.environment.kind == "image" and built.environment.image == "nvcr.io/nvidia/nemo-rl:v0.7.0"
    assert built.target_version == "0.7.0" and built.framework_version is None


def test_repo_and_base_config_are_options() -> None:
    recipe = shipped_grpo_math(framework={"name": "nemo_rl", "repo": "/src/RL"})
    assert plan(recipe).command[4] == "/src/RL"


def test_data_exports_fill_every_step_and_point_the_dataset_at_them() -> None:
    built = plan(VARIANTS["grpo_math_8gpu"])
    train, held_out = built.data
    assert (train.split, train.format, train.path, train.rows) == ("train", "nemo_rl_jsonl",
                                                                   "{run_dir}/data/train.jsonl", 3000 * 8)
    assert (held_out.split, held_out.path, held_out.rows) == ("eval", "{run_dir}/data/eval.jsonl", None)
    native = built.native_config["overrides"]
    assert native["data.train.dataset_name"] == "ResponseDataset"
    assert native["+data.train.data_path"] == "{run_dir}/data/train.jsonl"
    assert native["data.train.split_validation_size"] == 0.0  # the base config would hold back 5% of the prompts
    assert native["data.validation"]["data_path"] == "{run_dir}/data/eval.jsonl"
    assert native["data.default.prompt_file"] is None and native["data.default.env_name"] == "unirl"
    assert native["data.shuffle"] is False


def test_batch_sizes_count_sequences_and_micro_batches_are_per_gpu() -> None:
    native = overrides(VARIANTS["kl_minibatches"])
    assert native["grpo.num_prompts_per_step"] == 32 and native["grpo.num_generations_per_prompt"] == 8
    assert native["policy.train_global_batch_size"] == 32 * 8 // 4  # four optimizer steps per GRPO step
    assert native["policy.train_micro_batch_size"] == 4
    # null micro-batch: unirl's memory-safe default (one training GPU's share of a mini-batch, 16, is split into 4s)
    assert overrides(shipped_grpo_math())["policy.train_micro_batch_size"] == 4
    # disaggregated on two nodes: one node generates, eight GPUs train
    assert overrides(VARIANTS["multinode_disaggregated"])["policy.train_micro_batch_size"] == 4  # share 32, split


def test_grpo_advantages_use_the_group_mean_not_nemo_rls_leave_one_out_default() -> None:
    native = overrides(shipped_grpo_math())
    assert native["grpo.use_leave_one_out_baseline"] is False
    assert native["grpo.adv_estimator.use_leave_one_out_baseline"] is False
    assert native["grpo.adv_estimator.normalize_rewards"] is True
    unnormalised = overrides(with_algorithm(shipped_grpo_math(), advantage_norm="none"))
    assert unnormalised["grpo.adv_estimator.normalize_rewards"] is False


def test_loss_kl_and_clip_translation() -> None:
    native = overrides(VARIANTS["kl_minibatches"])
    assert native["loss_fn.reference_policy_kl_penalty"] == 0.04
    assert native["loss_fn.reference_policy_kl_type"] == "k3"
    assert native["+grpo.skip_reference_policy_logprobs_calculation"] is False
    assert (native["loss_fn.ratio_clip_min"], native["loss_fn.ratio_clip_max"]) == (0.2, 0.28)
    assert native["loss_fn.token_level_loss"] is False
    assert native["policy.max_grad_norm"] is None  # 0 = no clipping; clip_grad_norm_(0) would zero the gradient
    assert overrides(shipped_grpo_math())["+grpo.skip_reference_policy_logprobs_calculation"] is True


def test_lr_schedule_is_a_sequential_list_with_warmup_in_grpo_steps() -> None:
    scheduler = overrides(VARIANTS["kl_minibatches"])["policy.scheduler"]
    # 8 warm-up updates at 4 updates per step = 2 GRPO steps
    assert scheduler[0]["name"] == "torch.optim.lr_scheduler.LinearLR"
    assert scheduler[0]["kwargs"]["total_iters"] == 2
    assert scheduler[1]["name"] == "torch.optim.lr_scheduler.ConstantLR"
    assert scheduler[-1] == {"milestones": [2]}
    cosine = overrides(shipped_grpo_math())["policy.scheduler"]
    assert cosine == [{"name": "torch.optim.lr_scheduler.CosineAnnealingLR", "kwargs": {"T_max": 3000, "eta_min": 0.0}},
                      {"milestones": []}]


def test_validation_and_checkpoints_follow_the_recipe() -> None:
    native = overrides(shipped_grpo_math())
    assert (native["grpo.val_period"], native["grpo.val_at_start"], native["grpo.val_at_end"]) == (500, True, True)
    assert native["checkpointing.save_period"] == 3000  # only at the end
    assert native["checkpointing.checkpoint_dir"] == "{run_dir}/checkpoints"
    assert native["logger.log_dir"] == "{run_dir}/logs"
    no_eval = overrides(VARIANTS["multinode_disaggregated"])
    assert (no_eval["grpo.val_period"], no_eval["grpo.val_at_start"], no_eval["grpo.val_at_end"]) == (0, False, False)
    assert "data.validation" not in no_eval
    assert no_eval["checkpointing.save_period"] == 50
    limited = replace(shipped_grpo_math(), data=replace(shipped_grpo_math().data, eval_rows=300))
    assert overrides(limited)["grpo.max_val_samples"] == 512  # two whole validation batches of 256


def test_builtin_model_is_written_into_the_run_and_fits_its_context() -> None:
    built = plan(shipped_grpo_math())
    native = built.native_config["overrides"]
    assert native["policy.model_name"] == "{run_dir}/model"
    assert native["policy.max_total_sequence_length"] == 128  # tiny-arith's max_position_embeddings
    assert "model/" in built.files


def test_disaggregated_generation_gets_its_own_gpus() -> None:
    native = overrides(VARIANTS["multinode_disaggregated"])
    assert native["policy.generation.colocated.enabled"] is False
    assert native["policy.generation.colocated.resources.gpus_per_node"] == 8
    assert native["policy.generation.colocated.resources.num_nodes"] == 1
    one_node = shipped_grpo_math(rollout=RolloutConfig(engine="vllm", colocated=False, tensor_parallel=2))
    one_node = with_algorithm(one_node, prompts_per_step=6)  # 96 sequences over 6 training GPUs
    native = overrides(one_node)
    assert native["policy.generation.colocated.resources.gpus_per_node"] == 2
    assert "policy.generation.colocated.resources.num_nodes" not in native


def test_raw_overrides_are_applied_last_and_shown() -> None:
    recipe = shipped_grpo_math(framework={"name": "nemo_rl", "overrides": {"policy": {"generation": {"top_k": 5}}}})
    built = plan(recipe)
    assert built.native_config["overrides"]["policy.generation.top_k"] == 5
    assert built.command[-1] == "policy.generation.top_k=5"
    assert any(row.recipe_field == "framework.overrides.policy.generation.top_k" for row in built.mapping)


def test_every_mapped_row_has_a_native_default_or_is_new() -> None:
    from unirl.plugins.nemo_rl.framework import MAPPING

    for row in MAPPING:
        key = row.native_key
        if key.startswith("(") or key.startswith("+"):
            continue
        assert key in GRPO_MATH_1B_DEFAULTS or key == "data.validation", key


def test_plugin_registers_the_framework() -> None:
    from unirl.plugins.nemo_rl.plugin import unirl_add_frameworks

    registry: Registry[Any] = Registry("framework")
    unirl_add_frameworks(registry)
    assert registry.get("nemo_rl").capabilities.tested_version == "0.7.0"


# --- refusals -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("recipe", "refused"), [
    (shipped_grpo_math(rollout=RolloutConfig(engine="sglang")), r"rollout\.engine='sglang': not supported by nemo_rl"),
    (shipped_grpo_math(rollout=RolloutConfig(engine="hf")), r"rollout\.engine='hf': not supported by nemo_rl"),
    (with_algorithm(shipped_grpo_math(), loss_aggregation="seq_mean_token_sum_norm"),
     r"algorithm\.loss_aggregation='seq_mean_token_sum_norm': not supported by nemo_rl; nemo_rl supports token_mean"),
    (with_algorithm(shipped_grpo_math(), advantage_norm="batch"), r"algorithm\.advantage_norm='batch'"),
    (with_algorithm(shipped_grpo_math(), epochs_per_batch=2), r"algorithm\.epochs_per_batch=2: .*epochs_per_batch=1"),
    (with_algorithm(shipped_grpo_math(), entropy_coef=0.01), r"algorithm\.entropy_coef=0\.01"),
    (with_algorithm(shipped_grpo_math(), mini_batches_per_step=2, warmup_steps=3), r"algorithm\.warmup_steps=3"),
    (shipped_grpo_math(data=DataConfig(chat_template=False)), r"data\.chat_template=False: .*chat template"),
    (shipped_grpo_math(data=DataConfig(chat_template=True, max_prompt_tokens=64)), r"data\.max_prompt_tokens=64"),
    (shipped_grpo_math(eval=EvalConfig(greedy=True)), r"eval\.greedy=True: .*greedy=False"),
    (shipped_grpo_math(model=ModelConfig(path="Qwen/Qwen2.5-0.5B", revision="abc123")), r"model\.revision='abc123'"),
    (shipped_grpo_math(framework={"name": "nemo_rl", "version": "0.5.0"}), r"framework\.version='0\.5\.0'"),
    (shipped_grpo_math(resources=ResourcesConfig(gpus_per_node=0)), r"resources\.gpus_per_node=0"),
    (shipped_grpo_math(reward_policy=RewardPolicy(on_error="exclude")), r"reward_policy\.on_error='exclude'"),
    (with_algorithm(shipped_grpo_math(), max_new_tokens=200), r"algorithm\.max_new_tokens=200: must be below"),
    (shipped_grpo_math(rollout=RolloutConfig(engine="vllm", colocated=False, tensor_parallel=8)),
     r"rollout\.colocated=False: .*leaves none"),
    (shipped_grpo_math(rollout=RolloutConfig(engine="vllm", tensor_parallel=3)),
     r"rollout\.tensor_parallel=3: must divide the 8 GPUs nemo_rl.s rollout engines run on"),
    (with_algorithm(shipped_grpo_math(resources=ResourcesConfig(gpus_per_node=6)), prompts_per_step=5,
                    samples_per_prompt=4), r"algorithm\.mini_batches_per_step=1: .*split evenly over the 6"),
], ids=lambda value: value if isinstance(value, str) else "")
def test_what_nemo_rl_cannot_do_is_refused_by_field(recipe: Recipe, refused: str) -> None:
    with pytest.raises(RecipeInvalid, match=refused):
        plan(recipe)


def test_greedy_eval_is_irrelevant_without_held_out_data() -> None:
    recipe = shipped_grpo_math(eval=EvalConfig(greedy=True), data=DataConfig(chat_template=True, eval=None))
    assert overrides(recipe)["grpo.val_period"] == 0


def test_every_refusal_is_reported_at_once() -> None:
    recipe = with_algorithm(shipped_grpo_math(rollout=RolloutConfig(engine="sglang")), epochs_per_batch=3)
    with pytest.raises(RecipeInvalid) as caught:
        plan(recipe)
    assert {p.field for p in caught.value.problems} >= {"rollout.engine", "algorithm.epochs_per_batch"}


# --- the key schema -------------------------------------------------------------------------------------------


def validate_with(raw: dict[str, Any]) -> None:
    NemoRlFramework().validate(plan(shipped_grpo_math(framework={"name": "nemo_rl", "overrides": raw})))


def test_misspelled_override_key_is_caught_with_a_hint() -> None:
    with pytest.raises(UnirlError, match=r"grpo\.num_prompt_per_step: not a key of NeMo RL 0\.7\.0"):
        validate_with({"grpo": {"num_prompt_per_step": 4}})
    with pytest.raises(UnirlError, match=r"keys with that name: policy\.generation\.vllm_cfg\.gpu_memory_utilization"):
        validate_with({"policy.vllm_cfg.gpu_memory_utilization": 0.3})


def test_plus_on_an_existing_key_and_wrong_types_are_caught() -> None:
    with pytest.raises(UnirlError, match=r"\+grpo\.seed: .* already has grpo\.seed; drop the '\+'"):
        validate_with({"+grpo.seed": 3})
    with pytest.raises(UnirlError, match=r"grpo\.val_period='often': NeMo RL's default is 10 \(int\)"):
        validate_with({"grpo.val_period": "often"})
    validate_with({"++grpo.brand_new_key": 1, "+grpo.another_new_key": True, "loss_fn.ratio_clip_c": 3.0})


def test_nemo_rls_cross_field_checks_run_before_launch() -> None:
    with pytest.raises(UnirlError, match=r"train_global_batch_size=100 must divide the 128 rollouts"):
        validate_with({"policy.train_global_batch_size": 100})
    with pytest.raises(UnirlError, match=r"async_grpo needs loss_fn\.use_importance_sampling_correction"):
        validate_with({"grpo.async_grpo.enabled": True})
    with pytest.raises(UnirlError, match=r"dynamic_batching and policy\.sequence_packing exclude each other"):
        validate_with({"policy.dynamic_batching.enabled": True})


def test_cross_field_checks_on_the_base_config_itself() -> None:
    base = merged_config({})
    assert cross_field_problems(base) == []  # grpo_math_1B.yaml is consistent: 32 x 16 = 512 on one GPU
    assert merged_config({"policy.max_total_sequence_length": 99})["policy.generation.max_new_tokens"] == 99
    problems = cross_field_problems(merged_config({"data.train.split_validation_size": 0.0}))
    assert any("no validation data" in p for p in problems)  # val_period=10 with nothing to validate on
    assert key_problems({"data.validation": {"data_path": "/x.jsonl"}}) == []


def test_hydra_applies_every_override_to_the_base_config() -> None:
    """NeMo RL applies the overrides with Hydra's parser on a struct config (nemo_rl/utils/config.py:168-188)."""
    import omegaconf
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    nested: dict[str, Any] = {}
    for key, value in GRPO_MATH_1B_DEFAULTS.items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    for variant in VARIANTS.values():
        built = plan(variant).resolve("/runs/2026 08 22/nemo rl")
        config = omegaconf.OmegaConf.create(nested)
        omegaconf.OmegaConf.set_struct(config, True)
        parsed = OverridesParser.create().parse_overrides(built.command[7:])
        ConfigLoaderImpl._apply_overrides_to_config(overrides=parsed, cfg=config)
        assert config.data.train.data_path == "/runs/2026 08 22/nemo rl/data/train.jsonl"
        assert config.env.unirl.unirl_spec == "/runs/2026 08 22/nemo rl/reward_spec.json"
        assert config.grpo.max_num_steps == variant.algorithm.steps


# --- the data row ---------------------------------------------------------------------------------------------


def test_nemo_rl_rows_carry_plain_text_input_and_the_reference_with_the_rows_place() -> None:
    chat = CanonicalRow(0, [{"role": "user", "content": "2+3="}], "5", "arith", "train")
    row = nemo_rl_row(chat)
    assert row["input"] == "2+3=" and row["data_source"] == "arith"
    # output is all NeMo RL hands the environment (as ground_truth): it carries the reference and the row's place
    assert untag_reference(row["output"]) == ("5", {"split": "train", "index": 0})
    assert untag_reference(nemo_rl_row(CanonicalRow(1, "4+4=", None, "arith", "eval"))["output"]) == (
        None, {"split": "eval", "index": 1})
    system = CanonicalRow(2, [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1="}], "2",
                          "arith", "train")
    with pytest.raises(FieldError, match=r"data\.train=.*one user message"):
        nemo_rl_row(system)


def test_the_plans_exports_write_rows_responsedataset_reads(tmp_path: Path) -> None:
    from unirl.backend.export import write_export
    from unirl.recipe.schema import recipe_from_dict

    built = plan(VARIANTS["grpo_math_8gpu"]).resolve(str(tmp_path / "run"))
    recipe = recipe_from_dict(built.recipe)
    written = {export.split: write_export(recipe, export) for export in built.data}
    assert written["train"] == 3000 * 8  # exactly steps x prompts: NeMo RL's loader drops a short last batch
    first = json.loads((tmp_path / "run" / "data" / "train.jsonl").read_text().splitlines()[0])
    assert set(first) == {"input", "output", "data_source"} and isinstance(first["input"], str)


# --- the launcher ---------------------------------------------------------------------------------------------

FAKE_NEMO_RL = {
    # The registries and interfaces unirl.adapters.nemo_rl touches, as tests/interfaces/nemo_rl.py describes them.
    "nemo_rl/__init__.py": "",
    "nemo_rl/environments/__init__.py": "",
    "nemo_rl/environments/interfaces.py": """
        import abc
        from typing import Any, NamedTuple

        class EnvironmentReturn(NamedTuple):
            observations: list
            metadata: list
            next_stop_strings: list
            rewards: Any
            terminateds: Any
            answers: Any

        class EnvironmentInterface(abc.ABC):
            @abc.abstractmethod
            def step(self, message_log_batch, metadata): ...

            @abc.abstractmethod
            def global_post_process_and_metrics(self, batch): ...
        """,
    "nemo_rl/environments/utils.py": """
        ENV_REGISTRY = {"math": {"actor_class_fqn": "nemo_rl.environments.math_environment.MathEnvironment"}}

        def register_env(env_name, actor_class_fqn):
            if env_name in ENV_REGISTRY:
                raise ValueError(f"Env name {env_name} already registered")
            ENV_REGISTRY[env_name] = {"actor_class_fqn": actor_class_fqn}
        """,
    "nemo_rl/distributed/__init__.py": "",
    "nemo_rl/distributed/ray_actor_environment_registry.py": """
        import sys
        ACTOR_ENVIRONMENT_REGISTRY = {"nemo_rl.environments.math_environment.MathEnvironment": sys.executable}
        """,
    "nemo_rl/distributed/virtual_cluster.py": """
        import sys

        class PY_EXECUTABLES:
            SYSTEM = sys.executable
        """,
}

FAKE_RUN_GRPO = """
    # Stands in for NeMo RL's examples/run_grpo.py: records what the real script would rely on.
    import json, os, sys
    from nemo_rl.distributed.ray_actor_environment_registry import ACTOR_ENVIRONMENT_REGISTRY
    from nemo_rl.environments.utils import ENV_REGISTRY

    if __name__ == "__main__":
        with open(os.environ["FAKE_RUN_GRPO_OUT"], "w") as out:
            json.dump({"env": ENV_REGISTRY.get("unirl"), "actors": ACTOR_ENVIRONMENT_REGISTRY, "argv": sys.argv,
                       "cwd": os.getcwd(), "pythonpath": os.environ.get("PYTHONPATH", "")}, out)
    """


def fake_nemo_rl(root: Path) -> Path:
    """A NeMo RL checkout with the registries and a run_grpo.py that reports what it saw."""
    for relative, source in FAKE_NEMO_RL.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    script = root / "examples" / "run_grpo.py"
    script.parent.mkdir(parents=True)
    script.write_text(textwrap.dedent(FAKE_RUN_GRPO), encoding="utf-8")
    (root / "examples" / "configs").mkdir()
    (root / "examples" / "configs" / "grpo_math_1B.yaml").write_text("grpo: {}\n", encoding="utf-8")
    return root


def run_launcher(repo: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FAKE_RUN_GRPO_OUT": str(out),
           "PYTHONPATH": os.pathsep.join([str(repo), str(REPO_ROOT)])}
    return subprocess.run([sys.executable, "-m", "unirl.plugins.nemo_rl.launch", "--repo", str(repo), *args],
                          capture_output=True, text=True, env=env, cwd=out.parent, timeout=120)


def test_launcher_registers_the_environment_before_running_the_script(tmp_path: Path) -> None:
    repo = fake_nemo_rl(tmp_path / "RL")
    out = tmp_path / "seen.json"
    overrides = ["grpo.seed=3", "+env.unirl.unirl_spec=/runs/x/reward_spec.json"]
    result = run_launcher(repo, out, "--config", "examples/configs/grpo_math_1B.yaml", *overrides)
    assert result.returncode == 0, result.stderr
    seen = json.loads(out.read_text())
    assert seen["env"] == {"actor_class_fqn": "unirl.adapters.nemo_rl.UnirlEnvironmentActor"}
    assert seen["actors"]["unirl.adapters.nemo_rl.UnirlEnvironmentActor"] == sys.executable
    # what `python examples/run_grpo.py --config ... <overrides>` from the repository would see
    assert seen["argv"] == [str(repo / "examples" / "run_grpo.py"), "--config", "examples/configs/grpo_math_1B.yaml",
                            *overrides]
    assert Path(seen["cwd"]) == repo
    assert str(REPO_ROOT) in seen["pythonpath"].split(os.pathsep)  # the Ray actor can import unirl


def test_launcher_names_an_old_checkout(tmp_path: Path) -> None:
    repo = tmp_path / "RL-0.4"
    (repo / "examples").mkdir(parents=True)
    (repo / "examples" / "run_grpo_math.py").write_text("", encoding="utf-8")
    result = run_launcher(repo, tmp_path / "seen.json")
    assert result.returncode != 0
    assert "older than 0.5" in result.stderr
