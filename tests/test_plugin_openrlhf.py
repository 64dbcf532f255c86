"""The OpenRLHF plugin: one recipe becomes OpenRLHF 0.11's dotted flags, always by their full names and rendered
from the installed version's own parser; the GPU demand its Ray placement groups would make is checked before
launch (a mismatch hangs the real run); and, in OpenRLHF's own venv, its parser and __main__ checks accept the
plan, and its PromptDataset reads the exported prompts, which the generated reward file scores."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.backend_recipes import gpu_recipe, preset
from tests.support.helpers import REPO, point_at_backend
from unirl.errors import FieldError, RecipeInvalid
from unirl.host.manager import get_host
from unirl.host.planning import prepare_run
from unirl.plugins.openrlhf.framework import OpenRlhfFramework, option_schema
from unirl.plugins.openrlhf.resources import gpu_demand

OPENRLHF = OpenRlhfFramework()
SCHEMA = option_schema("0.11.2")


def plan_for(**changes: object):
    return OPENRLHF.plan(gpu_recipe("openrlhf", **changes))


def argv_of(**changes: object) -> list[str]:
    return plan_for(**changes).command[3:]


def value(argv: list[str], flag: str) -> str | list[str]:
    i = argv.index(flag)
    values = []
    for token in argv[i + 1:]:
        if token.startswith("--"):
            break
        values.append(token)
    return values[0] if len(values) == 1 else values


def test_every_flag_is_a_full_option_name_of_the_installed_parser() -> None:
    """argparse accepts unique prefixes: a shortened or stale flag could silently become another option."""
    flags = {o["flag"] for o in SCHEMA.values()}
    argv = argv_of(algorithm={"kl_coef": 0.01, "entropy_coef": 0.001, "clip_high": 0.28})
    used = [t for t in argv if t.startswith("--")]
    assert used and all(t in flags for t in used), [t for t in used if t not in flags]
    assert "--n_samples_per_prompt" not in argv and "--pretrain" not in argv  # the removed flat names


def test_batches_count_prompts_per_rollout_and_completions_per_update() -> None:
    argv = argv_of(algorithm={"prompts_per_step": 16, "samples_per_prompt": 8, "mini_batches_per_step": 4,
                              "micro_batch_size": 2, "steps": 50})
    assert value(argv, "--rollout.batch_size") == "16"  # prompts
    assert value(argv, "--train.batch_size") == "32"  # completions per update: 16 x 8 / 4
    assert value(argv, "--train.micro_batch_size") == "2"  # completions per GPU
    assert value(argv, "--data.max_samples") == "800"  # steps x prompts: one pass over the exported file
    assert value(argv, "--train.num_episodes") == "1"


def test_switches_are_bare_flags_and_kl_is_a_loss_term() -> None:
    argv = argv_of(algorithm={"kl_coef": 0.01, "kl_estimator": "low_var_kl", "clip_high": 0.28})
    assert "--algo.kl.use_loss" in argv and value(argv, "--algo.kl.estimator") == "k3"
    assert value(argv, "--actor.eps_clip_low_high") == ["0.2", "0.28"]
    assert "--train.colocate_all" in argv and "--vllm.enable_sleep" in argv
    off = argv_of()
    assert "--algo.kl.use_loss" not in off and value(off, "--algo.kl.init_coef") == "0.0"


def test_advantage_normalisation_picks_the_estimator() -> None:
    assert value(argv_of(), "--algo.advantage.estimator") == "group_norm"
    assert value(argv_of(algorithm={"advantage_norm": "none"}), "--algo.advantage.estimator") == "dr_grpo"
    assert value(argv_of(algorithm={"advantage_norm": "batch_whiten"}),
                 "--algo.advantage.estimator") == "reinforce_baseline"
    for baseline, norm, estimator in [("leave_one_out", "none", "rloo"), ("none", "batch_whiten", "reinforce"),
                                      ("critic", "batch_whiten", "gae")]:
        argv = argv_of(algorithm={"advantage_baseline": baseline, "advantage_norm": norm})
        assert value(argv, "--algo.advantage.estimator") == estimator
    with pytest.raises(RecipeInvalid, match=r"algorithm\.advantage_norm='batch'.*group_mean\+group"):
        argv_of(algorithm={"advantage_norm": "batch"})  # a batch std that is not a whitening: none in OpenRLHF


def test_disaggregated_rollouts_get_their_own_gpus() -> None:
    argv = argv_of(rollout={"colocated": False, "gpus": 4, "tensor_parallel": 2}, algorithm={"prompts_per_step": 4})
    assert "--train.colocate_all" not in argv and "--train.colocate_actor_ref" in argv
    assert value(argv, "--vllm.num_engines") == "2" and value(argv, "--actor.num_gpus_per_node") == "4"
    flags = plan_for(rollout={"colocated": False, "gpus": 4, "tensor_parallel": 2},
                     algorithm={"prompts_per_step": 4}).native_config["flags"]
    assert gpu_demand(flags)[0] == 8


def test_what_openrlhf_cannot_do_is_refused_naming_each_field() -> None:
    with pytest.raises(RecipeInvalid) as info:
        OPENRLHF.plan(gpu_recipe("openrlhf", engine="sglang",
                                 algorithm={"loss_aggregation": "seq_mean_token_sum_norm"}))
    text = str(info.value)
    assert "rollout.engine='sglang': not supported by openrlhf; openrlhf supports vllm" in text
    assert "algorithm.loss_aggregation='seq_mean_token_sum_norm'" in text and "token_mean and seq_mean" in text


def test_flat_flag_releases_and_unknown_overrides_are_refused() -> None:
    with pytest.raises(RecipeInvalid, match=r"framework.version='0.10.1'.*dotted flags"):
        plan_for(options={"version": "0.10.1"})
    with pytest.raises(FieldError, match=r"OpenRLHF 0.11.2 has no option --rollout.n_sample"):
        plan_for(options={"overrides": {"rollout": {"n_sample": 4}}})


def test_a_placement_that_would_hang_is_refused_before_launch() -> None:
    """Without colocation OpenRLHF gives the reference model its own GPUs; 4 + 4 + 4 > 8 waits forever in Ray."""
    plan = plan_for(rollout={"colocated": False, "gpus": 4}, algorithm={"kl_coef": 0.01, "prompts_per_step": 4},
                    options={"overrides": {"train": {"colocate_actor_ref": False}}})
    problems = OPENRLHF.schema_problems(plan)
    assert problems and "ask Ray for 12 GPUs" in problems[0] and "wait forever" in problems[0]


def test_a_critic_outside_colocation_gets_half_the_training_gpus_and_is_counted() -> None:
    """PPO without colocate_all places the critic on GPUs of its own (train_ppo_ray.py:105-129): the training GPUs
    the rollout leaves are split half and half, as in OpenRLHF's own example (actor 2 + critic 2 + vLLM 4 = 8), and
    Ray's demand counts the critic, so a split that would need more GPUs than the recipe has is refused."""
    ppo = plan_for(rollout={"colocated": False, "gpus": 4}, algorithm=preset("ppo", prompts_per_step=4))
    argv = [str(a) for a in ppo.command]
    assert [value(argv, f"--{m}.num_gpus_per_node") for m in ("actor", "critic", "ref")] == ["2", "2", "2"]
    assert gpu_demand(ppo.native_config["flags"]) == (8, "actor 2 + vLLM engines x TP 4 + critic 2")
    with pytest.raises(RecipeInvalid) as info:  # 3 training GPUs cannot be shared evenly
        plan_for(rollout={"colocated": False, "gpus": 5}, algorithm=preset("ppo", prompts_per_step=4))
    assert "rollout.gpus=5" in str(info.value) and "half and half by the actor and the critic" in str(info.value)
    flags = plan_for(algorithm=preset("ppo")).native_config["flags"]  # colocated: one set of bundles for all
    assert gpu_demand(flags)[0] == 8
    need, how = gpu_demand({**flags, "train.colocate_all": False, "vllm.num_engines": 4})
    assert (need, how) == (20, "actor 8 + vLLM engines x TP 4 + critic 8")


# --- in OpenRLHF's own environment --------------------------------------------------------------------------


@pytest.fixture
def openrlhf_python(monkeypatch: pytest.MonkeyPatch) -> Path:
    return point_at_backend(monkeypatch, "openrlhf")


VARIANTS = {
    "default": {},
    "kl_minibatches": {"algorithm": {"kl_coef": 0.001, "mini_batches_per_step": 4, "micro_batch_size": 2,
                                     "epochs_per_batch": 2, "warmup_steps": 5, "entropy_coef": 0.001}},
    "two_nodes_tp2": {"nodes": 2, "rollout": {"tensor_parallel": 2}, "algorithm": {"prompts_per_step": 16}},
    "disaggregated": {"rollout": {"colocated": False, "gpus": 4, "tensor_parallel": 2},
                      "algorithm": {"prompts_per_step": 4, "advantage_norm": "none"}},
    # every algorithm preset OpenRLHF maps (unirl algorithms), with a KL term so its placement is sent
    **{name: {"algorithm": preset(name, kl_coef=0.001)}
       for name in ("grpo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo")},
    # a reward clip only where OpenRLHF clips the reward itself: no group baseline before it
    "ppo_reward_clip": {"algorithm": preset("ppo", reward_clip=5.0)},
    "dapo_without_dynamic_sampling": {"algorithm": preset("dapo", dynamic_sampling=False, overlong_buffer=100)},
    "clips_and_corrections": {"algorithm": {"dual_clip": 3.0, "rollout_correction": "token",
                                            "rollout_correction_cap": 2.0, "lr_schedule": "cosine",
                                            "min_lr_ratio": 0.1}},
}


@pytest.mark.openrlhf
@pytest.mark.slow
def test_openrlhfs_own_parser_and_checks_accept_every_variant(openrlhf_python: Path) -> None:
    results = OPENRLHF.check_in_backend([plan_for(**changes) for changes in VARIANTS.values()])
    for name, result in zip(VARIANTS, results, strict=True):
        assert result["problems"] == [], (name, result)
        assert result["version"] == "0.11.2"
        assert any("OpenRLHF's own parser" in c for c in result["checked"])


@pytest.mark.openrlhf
@pytest.mark.slow
def test_openrlhf_rejects_what_would_fail_or_hang_after_ray_starts(openrlhf_python: Path) -> None:
    engines = plan_for(options={"overrides": {"vllm": {"num_engines": 4}}})
    batches = plan_for(options={"overrides": {"rollout": {"micro_batch_size": 64}}})
    stale = plan_for()
    stale.command = [*stale.command, "--n_samples_per_prompt", "8"]  # a flat flag from OpenRLHF <= 0.10.1
    a, b, c = OPENRLHF.check_in_backend([engines, batches, stale])
    assert "must equal vllm_num_engines * vllm_tensor_parallel_size" in a["problems"][0]
    assert "effective number of actor processes" in b["problems"][0]
    assert "unrecognized arguments: --n_samples_per_prompt" in c["problems"][0]


@pytest.mark.openrlhf
@pytest.mark.slow
def test_parser_snapshot_matches_the_installed_openrlhf(openrlhf_python: Path) -> None:
    out = subprocess.run([str(openrlhf_python), "-m", "unirl.plugins.openrlhf.parser_schema"], capture_output=True,
                         text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300, check=True)
    live = json.loads(out.stdout)
    shipped = json.loads((REPO / "unirl" / "plugins" / "openrlhf" / "schema_0.11.2.json").read_text())
    assert live == shipped


@pytest.mark.openrlhf
@pytest.mark.slow
def test_prepared_prompts_go_through_openrlhfs_dataset_and_the_reward_file(openrlhf_python: Path, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import unirl.backend.native

    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)  # no GPU here; everything else is real
    plan = plan_for(algorithm={"steps": 3, "prompts_per_step": 8})
    run_dir = tmp_path / "run"
    resolved = prepare_run(get_host(), plan, run_dir)
    assert (run_dir / "openrlhf_reward.py").is_file() and (run_dir / "data" / "train.jsonl").is_file()
    [result] = OPENRLHF.check_in_backend([resolved], run_dir=str(run_dir))
    assert result["problems"] == [], result
    assert any(c.startswith("OpenRLHF PromptDataset read 24 rows") for c in result["checked"]), result["checked"]
    assert any(c.startswith("reward of row 0's reference answer (unirl/arith): 1.0") for c in result["checked"])
