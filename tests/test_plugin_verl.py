"""The verl plugin: one recipe becomes verl 0.9's Hydra overrides with honest batch semantics; what verl cannot
do is refused by field; and, in verl's own venv, the generated overrides compose with verl's shipped config, pass
its validate_config, load unirl's reward function, and the exported parquet goes through verl's RL dataset."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.backend_recipes import gpu_recipe, preset
from tests.support.helpers import REPO, point_at_backend
from unirl.backend.contract import translate
from unirl.errors import RecipeInvalid
from unirl.host.manager import get_host
from unirl.host.planning import prepare_run
from unirl.plugins.verl.framework import MAPPING, VerlFramework
from unirl.plugins.verl.schema import default_values, known_keys, unknown_keys
from unirl.recipe.schema import LoraConfig, ModelConfig, Recipe

VERL = VerlFramework()


def overrides(**changes: object) -> dict[str, object]:
    return VERL.plan(gpu_recipe("verl", **changes)).native_config["overrides"]


def test_batches_count_prompts_for_verl_and_completions_per_gpu() -> None:
    o = overrides(algorithm={"prompts_per_step": 32, "samples_per_prompt": 8, "mini_batches_per_step": 4,
                             "micro_batch_size": 4})
    assert o["data.train_batch_size"] == 32  # prompts
    assert o["actor_rollout_ref.rollout.n"] == 8
    assert o["actor_rollout_ref.actor.ppo_mini_batch_size"] == 8  # 32 prompts / 4 mini-batches, still prompts
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 4  # completions on one GPU
    assert o["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == 4
    default_micro = overrides(algorithm={"prompts_per_step": 32, "samples_per_prompt": 8, "mini_batches_per_step": 4})
    # null: not the whole per-GPU share (256 completions / 4 mini-batches / 8 GPUs = 8) but at most 4 per pass
    assert default_micro["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 4


def test_the_reward_goes_under_reward_custom_reward_function_never_the_ignored_legacy_keys() -> None:
    o = overrides()
    assert o["reward.custom_reward_function.path"] == "pkg://unirl.adapters.verl"
    assert o["+reward.custom_reward_function.reward_kwargs.unirl_spec"] == "{run_dir}/reward_spec.json"
    assert not any(k.startswith("custom_reward_function") for k in o)
    # The version gate: translating for verl 0.8 picks the top-level keys that version reads.
    _, legacy, _ = translate(gpu_recipe("verl"), MAPPING, "verl", "0.8.5")
    assert "custom_reward_function.path" in legacy and "reward.custom_reward_function.path" not in legacy


def test_kl_and_clip_and_loss_follow_verl_names() -> None:
    o = overrides(algorithm={"kl_coef": 0.01, "kl_estimator": "k3", "clip_high": 0.28,
                             "loss_aggregation": "seq_mean_token_sum_norm", "advantage_norm": "none"})
    assert o["actor_rollout_ref.actor.use_kl_loss"] is True
    assert o["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl"
    assert o["actor_rollout_ref.actor.clip_ratio_high"] == 0.28
    assert o["actor_rollout_ref.actor.loss_agg_mode"] == "seq-mean-token-sum-norm"
    assert o["algorithm.norm_adv_by_std_in_grpo"] is False
    assert o["algorithm.use_kl_in_reward"] is False


def test_what_verl_cannot_do_is_refused_naming_each_field() -> None:
    recipe = gpu_recipe("verl", engine="hf", gpus=0, algorithm={"advantage_norm": "batch", "lr_schedule": "linear"},
                        rollout={"colocated": False}, data={"chat_template": False})
    with pytest.raises(RecipeInvalid) as info:
        VERL.plan(recipe)
    text = str(info.value)
    for field in ("rollout.engine='hf'", "resources.gpus_per_node=0", "algorithm.advantage_norm='batch'",
                  "algorithm.lr_schedule='linear'", "rollout.colocated=False", "data.chat_template=False"):
        assert field in text
    assert "vllm and sglang" in text and "constant and cosine" in text and "group_mean+none" in text


def cpu_recipe(**changes: Any) -> Recipe:
    recipe = gpu_recipe("verl", gpus=0, **{"model": ModelConfig(path="builtin:tiny-arith-h32"), **changes})
    return replace(recipe, resources=replace(recipe.resources, device="cpu"))


def test_no_gpu_is_verls_cpu_mode_through_its_platform_registry_with_a_ray_head_of_its_own() -> None:
    """resources.device=cpu: verl's own trainer on the CPU. The plan names every setting a CPU run needs and the
    environment that loads unirl's cpu platform into each verl process (unirl/adapters/verl_cpu.py). Without a GPU
    and without resources.device=cpu the plan stays a GPU run's (auto assumes one GPU)."""
    plan = VERL.plan(cpu_recipe())
    o = plan.native_config["overrides"]
    assert o["trainer.device"] == "cpu" and o["trainer.n_gpus_per_node"] == 1  # one logical GPU a process
    assert o["+ray_kwargs.ray_init.num_gpus"] == 1
    assert o["transfer_queue.backend.SimpleStorage.num_data_storage_units"] == 1
    assert o["+actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    assert o["actor_rollout_ref.model.use_remove_padding"] is False
    assert o["actor_rollout_ref.actor.strategy"] == "fsdp2"
    assert o["+actor_rollout_ref.rollout.enable_sleep_mode"] is False
    env = "+ray_kwargs.ray_init.runtime_env.env_vars"
    assert o[f"{env}.VERL_USE_EXTERNAL_MODULES"] == plan.env["VERL_USE_EXTERNAL_MODULES"] == "unirl.adapters.verl_cpu"
    assert plan.env["VERL_PLATFORM"] == "cpu" and plan.env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    assert unknown_keys(o) == []  # every key is one of verl 0.9.1's
    with pytest.raises(RecipeInvalid, match=r"resources.cpu_processes=2.*1 in verl's CPU mode"):
        VERL.plan(replace(cpu_recipe(), resources=replace(cpu_recipe().resources, cpu_processes=2)))
    gpu = VERL.plan(gpu_recipe("verl"))
    assert gpu.native_config["overrides"]["trainer.device"] == "cuda" and "VERL_PLATFORM" not in gpu.env
    assert not any(k.startswith("+ray_kwargs.ray_init.num_gpus") for k in gpu.native_config["overrides"])


def test_a_builtin_model_never_samples_its_special_tokens_on_verl_as_on_trl(tmp_path: Path) -> None:
    """verl's rollout config cannot say it: unirl's single-turn loop, registered through verl's agent-loop config,
    hands vLLM an allow-list without pad, bos and unk (TRL: suppress_tokens with hf, the same list with vLLM)."""
    plan = VERL.plan(cpu_recipe())
    o = plan.native_config["overrides"]
    assert o["actor_rollout_ref.rollout.agent.default_agent_loop"] == "unirl_single_turn"
    VERL.write_files(plan, tmp_path)
    [entry] = json.loads((tmp_path / "agent_loops.yaml").read_text())
    assert entry["_target_"] == "unirl.adapters.verl_single_turn.UnirlSingleTurnAgentLoop"
    assert entry["allowed_token_ids"] == [2, *range(4, 20)]  # not pad, bos, unk, nor the two Qwen tokens
    # any model: the same loop, which tells the rewards which completions were cut (no allow-list but a builtin's)
    hub = VERL.plan(gpu_recipe("verl", model=ModelConfig(path="Qwen/Qwen2.5-0.5B-Instruct")))
    assert hub.native_config["overrides"]["actor_rollout_ref.rollout.agent.default_agent_loop"] == "unirl_single_turn"
    VERL.write_files(hub, tmp_path)
    [entry] = json.loads((tmp_path / "agent_loops.yaml").read_text())
    assert "allowed_token_ids" not in entry


def test_verl_rewards_know_which_completions_were_cut_at_the_token_limit() -> None:
    """verl's compute_score has no truncation flag: unirl's single-turn loop puts one in the row's extra fields, which
    verl merges into extra_info; a reward reads it as Sample.truncated, as on TRL (bare_number scores a cut one 0)."""
    from unirl.adapters.verl import TRUNCATED_KEY, sample_from_verl

    row = {"unirl_prompt": "2+2=", "index": 3, "num_turns": 2, "raw_prompt": [{"role": "user", "content": "2+2="}]}
    cut = sample_from_verl("arith", "4", "4", {**row, TRUNCATED_KEY: True})
    ended = sample_from_verl("arith", "4", "4", {**row, TRUNCATED_KEY: False})
    assert cut.truncated and not ended.truncated and not sample_from_verl("arith", "4", "4", row).truncated
    assert cut.metadata == {"index": 3}  # what verl added is not the row's metadata


def test_what_a_cpu_run_cannot_do_is_refused_by_field() -> None:
    """vLLM's CPU build is the only engine there, and it computes only some head sizes; GPUs in a CPU run are a
    contradiction."""
    with pytest.raises(RecipeInvalid) as info:
        VERL.plan(cpu_recipe(model=ModelConfig(path="builtin:tiny-arith")))
    assert "model.path='builtin:tiny-arith'" in str(info.value) and "16 wide" in str(info.value)
    with pytest.raises(RecipeInvalid, match=r"rollout.engine='sglang'.*vLLM's CPU build"):
        VERL.plan(cpu_recipe(engine="sglang"))
    cpu_with_gpus = cpu_recipe()
    cpu_with_gpus = replace(cpu_with_gpus, resources=replace(cpu_with_gpus.resources, gpus_per_node=2))
    with pytest.raises(RecipeInvalid, match=r"resources.gpus_per_node=2.*0 with resources.device=cpu"):
        VERL.plan(cpu_with_gpus)


def test_an_unsupported_verl_version_is_refused() -> None:
    with pytest.raises(RecipeInvalid, match=r"framework.version='0.10.0'.*verl supports versions >=0.9,<0.10"):
        VERL.plan(gpu_recipe("verl", options={"version": "0.10.0"}))


def test_the_key_schema_catches_a_misspelled_override_without_verl() -> None:
    """At plan time, by field: verl's Hydra would refuse the command only after launch."""
    with pytest.raises(RecipeInvalid) as info:
        VERL.plan(gpu_recipe("verl", options={"overrides": {"actor_rollout_ref": {"actor": {"kl_loss_coeff": 1}}}}))
    [problem] = info.value.problems
    assert (problem.field, problem.value) == ("framework.overrides.actor_rollout_ref.actor.kl_loss_coeff", 1)
    assert unknown_keys({"actor_rollout_ref.actor.kl_loss_coeff": 1}) == [
        "actor_rollout_ref.actor.kl_loss_coeff: not a key of verl 0.9.1's ppo_trainer config"]
    assert unknown_keys(overrides()) == []
    assert "actor_rollout_ref.actor.kl_loss_coef" in known_keys()


def test_the_launch_command_is_main_ppo_with_hydra_overrides() -> None:
    plan = VERL.plan(gpu_recipe("verl"))
    assert plan.command[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    assert "trainer.logger=[console,file]" in plan.command  # the file logger the follower reads
    assert "data.train_files='{run_dir}/data/train.parquet'" in plan.command
    assert [d.format for d in plan.data] == ["verl_parquet", "verl_parquet"]
    assert plan.data[0].rows == 10 * 8  # steps x prompts_per_step, in the seeded order
    resolved = plan.resolve("/runs/x")
    assert "data.train_files='/runs/x/data/train.parquet'" in resolved.command


def test_launch_fails_before_starting_when_the_gpus_are_missing(tmp_path: Path) -> None:
    plan = VERL.plan(gpu_recipe("verl"))
    with pytest.raises(Exception, match=r"verl expects 8 GPU\(s\) on this node .* and found 0"):
        prepare_run(get_host(), plan, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing was written


# --- in verl's own environment ------------------------------------------------------------------------------


@pytest.fixture
def verl_python(monkeypatch: pytest.MonkeyPatch) -> Path:
    return point_at_backend(monkeypatch, "verl")


VARIANTS = {
    "default": {},
    "kl_minibatches": {"algorithm": {"kl_coef": 0.001, "mini_batches_per_step": 4, "micro_batch_size": 2,
                                     "epochs_per_batch": 2, "lr_schedule": "cosine", "warmup_steps": 16}},
    "two_nodes_sglang": {"nodes": 2, "engine": "sglang", "rollout": {"tensor_parallel": 2},
                         "algorithm": {"prompts_per_step": 16}},
    "dr_grpo_like": {"algorithm": {"loss_aggregation": "seq_mean_token_sum_norm", "advantage_norm": "none",
                                   "clip_high": 0.28}, "data": {"max_prompt_tokens": 1024}},
    # every algorithm preset (verl maps all eight), with a KL term so its placement is sent
    **{name: {"algorithm": preset(name, kl_coef=0.001, overlong_buffer=100 if name == "dapo" else None)}
       for name in ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo")},
    "clips_and_corrections": {"algorithm": {"dual_clip": 3.0, "rollout_correction": "token",
                                            "rollout_correction_cap": 2.0, "lr_schedule": "cosine",
                                            "min_lr_ratio": 0.1}},
}


@pytest.mark.verl
@pytest.mark.slow
def test_generated_overrides_compose_and_pass_verls_own_validation(verl_python: Path, tmp_path: Path) -> None:
    from unirl.data.builtin import tiny_model

    plans = [VERL.plan(gpu_recipe("verl", **changes)) for changes in VARIANTS.values()]
    # PPO's critic config is instantiated by validate_config, which reads the model's config.json: a real one
    tiny_model.save("tiny-arith", 0, tmp_path / "model")
    results = VERL.check_in_backend(plans, run_dir=str(tmp_path))
    for name, result in zip(VARIANTS, results, strict=True):
        assert result["problems"] == [], (name, result)
        assert any("validate_config" in c for c in result["checked"])
        assert any("reward function loaded by verl: unirl.adapters.verl" in c for c in result["checked"])
        assert result["version"] == "0.9.1"


@pytest.mark.verl
@pytest.mark.slow
def test_verl_rejects_what_it_would_reject_at_launch(verl_python: Path) -> None:
    """verl's own Hydra refuses a key its config lacks, as unirl's plan does from the snapshot of that config."""
    with pytest.raises(RecipeInvalid, match=r"framework.overrides.trainer.n_gpu_per_node=8: not a key of verl"):
        VERL.plan(gpu_recipe("verl", options={"overrides": {"trainer": {"n_gpu_per_node": 8}}}))
    misspelled = VERL.plan(gpu_recipe("verl"))  # the same key put into a plan by hand, past unirl's refusal
    misspelled.command = [*misspelled.command, "trainer.n_gpu_per_node=8"]
    too_big = VERL.plan(gpu_recipe("verl", options={"overrides": {
        "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": 64}}}}))
    bad, big = VERL.check_in_backend([misspelled, too_big])
    assert "Could not override 'trainer.n_gpu_per_node'" in bad["problems"][0]
    assert any("validate_config" in p for p in big["problems"]), big
    with pytest.raises(Exception, match="rejected the generated configuration"):
        VERL.validate(too_big)


def lora(rank: int) -> ModelConfig:
    return ModelConfig(lora=LoraConfig(rank=rank))


def test_a_lora_rank_vllm_cannot_serve_is_refused_before_verl_starts() -> None:
    VERL.plan(gpu_recipe("verl", model=lora(512)))
    with pytest.raises(RecipeInvalid, match=r"model.lora.rank=1024.*at most 512 with vLLM rollouts"):
        VERL.plan(gpu_recipe("verl", model=lora(1024)))


@pytest.mark.verl
@pytest.mark.slow
def test_verl_checks_a_lora_rank_without_vllm_installed(verl_python: Path) -> None:
    # validate_config's rank check imports vLLM (verl/utils/config.py:205-215); without vLLM the same rule runs
    # in the check and the rest of validate_config still runs, so neither a missing vLLM nor a bad rank passes.
    fine = VERL.plan(gpu_recipe("verl", model=lora(16)))
    forced = VERL.plan(gpu_recipe("verl", model=lora(16), options={"overrides": {
        "actor_rollout_ref": {"model": {"lora_rank": 1024}}}}))
    ok, bad = VERL.check_in_backend([fine, forced])
    assert ok["problems"] == [] and any(c.split(".")[-1] == "validate_config" for c in ok["checked"]), ok
    assert any("rank at most 512" in p for p in bad["problems"]), bad


@pytest.mark.verl
@pytest.mark.slow
def test_key_snapshot_matches_the_installed_verl(verl_python: Path) -> None:
    import subprocess

    out = subprocess.run([str(verl_python), "-m", "unirl.plugins.verl.native_check", "--keys"], capture_output=True,
                         text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300)
    live = json.loads(out.stdout)
    assert live["verl"] == "0.9.1"
    assert set(live["keys"]) == set(known_keys())
    assert live["defaults"] == default_values()  # what the effective run of a verl command reads


@pytest.mark.verl
@pytest.mark.slow
def test_prepared_run_directory_is_read_and_scored_by_verls_own_code(verl_python: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare() writes the parquet, the builtin model, the reward spec and the light core; verl's RLHFDataset
    reads the parquet with the exported tokenizer, and verl's loaded reward function scores a row."""
    import unirl.backend.native

    # this machine has no GPU; the rest is real
    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)
    plan = VERL.plan(gpu_recipe("verl", algorithm={"steps": 3, "prompts_per_step": 8}))
    run_dir = tmp_path / "run"
    resolved = prepare_run(get_host(), plan, run_dir)
    assert (run_dir / "data" / "train.parquet").is_file() and (run_dir / "model" / "config.json").is_file()
    assert (run_dir / "unirl_core" / "unirl" / "adapters" / "verl.py").is_file()
    assert json.loads((run_dir / "reward_spec.json").read_text())["policy"]["on_error"] == "fallback"
    [result] = VERL.check_in_backend([resolved], run_dir=str(run_dir), load_data=True)
    assert result["problems"] == [], result
    read = next(c for c in result["checked"] if c.startswith("verl RLHFDataset read"))
    assert read.startswith("verl RLHFDataset read 24 rows")  # steps x prompts_per_step
    scored = next(c for c in result["checked"] if c.startswith("reward of row 0"))
    assert "{'score': 1.0, 'math_answer': 1.0" in scored  # the reference answer is right by math_answer
