"""The same experiment on every native backend: schedules in the backend's own unit, one prompt budget, the eval
schedule honoured or refused, rollout engines that fit the GPUs, memory-safe micro-batches, overrides that can take
effect, and a recipe file's ``framework:`` options kept.

Where the backend is installed (verl 0.9.1, OpenRLHF 0.11.2 in their venvs) the learning rate of every optimizer
update is read from the backend's own scheduler code (tests/backends/schedule_harness.py); NeMo RL and slime are
checked against their documented rules (file:line in the plugins).
"""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.backend_recipes import gpu_recipe
from tests.support.cli import run_cli
from tests.support.helpers import REPO, backend_python, point_at_backend
from unirl.backend.native import DEFAULT_MICRO_BATCH, DEFAULT_PROMPT_TOKENS
from unirl.errors import RecipeInvalid, UnirlError
from unirl.host.manager import get_host
from unirl.plugins.nemo_rl.framework import NemoRlFramework
from unirl.plugins.openrlhf.framework import OpenRlhfFramework
from unirl.plugins.slime.framework import SlimeFramework, VimeFramework
from unirl.plugins.verl.framework import VerlFramework
from unirl.recipe.schema import EvalConfig, ModelConfig

VERL, OPENRLHF, NEMO, SLIME, VIME = VerlFramework(), OpenRlhfFramework(), NemoRlFramework(), SlimeFramework(), \
    VimeFramework()
MODEL_ARGS = {"model_args": ["--num-layers", "2"]}
EVERY = {"verl": (VERL, {}), "openrlhf": (OPENRLHF, {}), "nemo_rl": (NEMO, {}), "slime": (SLIME, MODEL_ARGS),
         "vime": (VIME, MODEL_ARGS)}


def recipe_for(name: str, **changes: Any) -> Any:
    """A recipe every backend accepts (NeMo RL validates by sampling, slime needs model args) plus ``changes``."""
    _, options = EVERY[name]
    eval_changes = changes.pop("eval", None)
    if name == "nemo_rl":  # the builtin model's whole context is 128 tokens there
        changes["algorithm"] = {"max_new_tokens": 64, **changes.get("algorithm", {})}
    engine = "sglang" if name == "slime" else "vllm"
    recipe = gpu_recipe(name, engine=engine, options={**options, **changes.pop("options", {})}, **changes)
    if name == "nemo_rl" or eval_changes:
        recipe = replace(recipe, eval=replace(recipe.eval, **{**({"greedy": False} if name == "nemo_rl" else {}),
                                                                **(eval_changes or {})}))
    return recipe


def plan(name: str, **changes: Any) -> Any:
    return EVERY[name][0].plan(recipe_for(name, **changes))


def rows(p: Any, recipe_field: str) -> list[Any]:
    return [r for r in p.mapping if r.recipe_field == recipe_field]


def reference_lr(update: int, warmup: int, total: int, schedule: str) -> float:
    """The recipe's schedule: linear warm-up from 0 over ``warmup`` optimizer updates (algorithm.warmup_steps is in
    optimizer updates, unirl/recipe/schema.py), then constant or a half cosine to 0 over the remaining updates."""
    if update < warmup:
        return update / max(1, warmup)
    if schedule == "constant":
        return 1.0
    progress = (update - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def backend_rates(backend: str, payload: dict[str, Any]) -> list[float]:
    out = subprocess.run([str(backend_python(backend)), str(REPO / "tests" / "backends" / "schedule_harness.py"),
                          backend, json.dumps(payload)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return list(json.loads(out.stdout.strip().splitlines()[-1])["lr"])


# --- 2. warm-up and schedules in each backend's unit -----------------------------------------------------------


def test_verl_gets_its_warm_up_in_training_steps() -> None:
    o = plan("verl", algorithm={"warmup_steps": 8, "mini_batches_per_step": 4, "steps": 10}).native_config["overrides"]
    assert o["actor_rollout_ref.actor.optim.lr_warmup_steps"] == 2  # 8 optimizer updates = 2 steps of 4 updates
    with_epochs = plan("verl", algorithm={"warmup_steps": 8, "mini_batches_per_step": 2, "epochs_per_batch": 2})
    assert with_epochs.native_config["overrides"]["actor_rollout_ref.actor.optim.lr_warmup_steps"] == 2


def test_a_warm_up_verl_cannot_express_in_whole_steps_is_refused_by_field() -> None:
    with pytest.raises(RecipeInvalid, match=r"algorithm\.warmup_steps=6: not supported by verl.*divisible by "
                                            r"mini_batches_per_step x epochs_per_batch"):
        plan("verl", algorithm={"warmup_steps": 6, "mini_batches_per_step": 4})


def test_openrlhf_warm_up_ratio_rounds_back_to_exactly_the_recipes_updates() -> None:
    for warmup, steps in [(7, 25), (14, 25), (15, 29), (29, 35), (1, 3), (0, 10)]:
        flags = plan("openrlhf", algorithm={"warmup_steps": warmup, "steps": steps}).native_config["flags"]
        # OpenRLHF: num_warmup_steps = math.ceil(scheduler_steps * lr_warmup_ratio) (deepspeed.py:381 @ 0.11.2);
        # the plain quotient 7 / 25 gives 8
        assert math.ceil(steps * flags["actor.lr_warmup_ratio"]) == warmup, (warmup, steps)


def test_openrlhf_constant_schedule_with_a_warm_up_is_sent_as_constant_with_warmup() -> None:
    # transformers' get_scheduler("constant") returns before it reads num_warmup_steps (optimization.py, 4.x/5.x)
    assert plan("openrlhf", algorithm={"warmup_steps": 3}).native_config["flags"]["actor.lr_scheduler"] == \
        "constant_with_warmup"
    assert plan("openrlhf").native_config["flags"]["actor.lr_scheduler"] == "constant"


def test_nemo_rl_and_slime_schedules_keep_their_units() -> None:
    nemo = plan("nemo_rl", algorithm={"warmup_steps": 8, "mini_batches_per_step": 4, "lr_schedule": "cosine"})
    ramp, main, milestones = nemo.native_config["overrides"]["policy.scheduler"]
    assert ramp["kwargs"]["total_iters"] == 2 and milestones == {"milestones": [2]}  # GRPO steps (one step / step)
    assert main["kwargs"]["T_max"] == 10 - 2
    # slime: Megatron iterations are optimizer updates (train_iters = rollouts x batch // global batch, warm-up
    # lr_warmup_iters x global batch samples: slime/backends/megatron_utils/model.py get_optimizer_param_scheduler)
    argv = plan("slime", algorithm={"warmup_steps": 8, "mini_batches_per_step": 4}).native_config["args"]
    assert argv[argv.index("--lr-warmup-iters") + 1] == "8"


@pytest.mark.verl
@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_verls_own_scheduler_warms_up_over_the_recipes_optimizer_updates(schedule: str) -> None:
    steps, per_step, warmup = 6, 2, 4
    o = plan("verl", algorithm={"steps": steps, "mini_batches_per_step": per_step, "warmup_steps": warmup,
                                "lr_schedule": schedule, "prompts_per_step": 8}).native_config["overrides"]
    prefix = "actor_rollout_ref.actor.optim."
    optim = {k[len(prefix):]: v for k, v in o.items() if k.startswith(prefix)}
    rates = backend_rates("verl", {"optim": optim, "updates_per_step": per_step, "steps": steps})
    # full learning rate first at update 4 = the recipe's warm-up (verl counted 4 *training steps* before: update 8)
    assert rates.index(1.0) == warmup
    total = steps * per_step
    # verl holds the rate over a step's updates: it agrees with the recipe's schedule at each step's first update
    for update in range(0, total, per_step):
        assert rates[update] == pytest.approx(reference_lr(update, warmup, total, schedule), abs=1e-9), update


@pytest.mark.openrlhf
@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["constant", "cosine", "linear"])
def test_openrlhfs_own_scheduler_warms_up_over_exactly_the_recipes_updates(schedule: str) -> None:
    steps, warmup = 25, 7  # 7 / 25 x 25 rounds up to 8 in floating point
    flags = plan("openrlhf", algorithm={"steps": steps, "warmup_steps": warmup, "lr_schedule": schedule}
                 ).native_config["flags"]
    rates = backend_rates("openrlhf", {"flags": flags})
    assert len(rates) == steps  # one optimizer update per step here
    assert rates[warmup - 1] < 1.0 and rates[warmup] == pytest.approx(1.0)
    for update, rate in enumerate(rates):
        if schedule == "linear":
            want = update / warmup if update < warmup else (steps - update) / (steps - warmup)
        else:
            want = reference_lr(update, warmup, steps, schedule)
        assert rate == pytest.approx(want, abs=1e-9), update


# --- 3. one prompt budget ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EVERY))
def test_a_null_prompt_budget_is_resolved_once_and_the_plan_says_so(name: str) -> None:
    p = plan(name, algorithm={"max_new_tokens": 64})
    budget_row = rows(p, "data.max_prompt_tokens")[0]
    assert budget_row.value in (DEFAULT_PROMPT_TOKENS, DEFAULT_PROMPT_TOKENS + 64, None)
    assert "data.max_prompt_tokens=null resolved to unirl's default of 512 tokens" in budget_row.note
    native = p.native_config.get("overrides") or p.native_config.get("flags") or {}
    if name == "verl":
        assert native["data.max_prompt_length"] == DEFAULT_PROMPT_TOKENS and native["data.truncation"] == "left"
    elif name == "openrlhf":
        assert native["data.max_len"] == DEFAULT_PROMPT_TOKENS + 64  # not OpenRLHF's 2048 for prompt + completion
    elif name == "nemo_rl":
        assert native["policy.max_total_sequence_length"] == 128  # the builtin model's context wins: documented
        hub = NEMO.plan(replace(recipe_for(name, algorithm={"max_new_tokens": 64}),
                                model=ModelConfig(path="Qwen/Qwen2.5-0.5B")))
        assert hub.native_config["overrides"]["policy.max_total_sequence_length"] == DEFAULT_PROMPT_TOKENS + 64
    else:
        assert "--rollout-max-prompt-len" not in p.native_config["args"]  # slime would drop, not cut, a prompt


def test_an_explicit_prompt_budget_reaches_verl_and_openrlhf() -> None:
    o = plan("verl", data={"max_prompt_tokens": 1024}).native_config["overrides"]
    assert o["data.max_prompt_length"] == 1024
    assert "resolved" not in rows(plan("verl", data={"max_prompt_tokens": 1024}), "data.max_prompt_tokens")[0].note
    flags = plan("openrlhf", data={"max_prompt_tokens": 1024}, algorithm={"max_new_tokens": 4096}).native_config
    assert flags["flags"]["data.max_len"] == 1024 + 4096


def test_diff_shows_the_same_resolved_budget_on_both_sides() -> None:
    out = run_cli("diff", "verl", "openrlhf", "--json", "resources.gpus_per_node=8", "rollout.engine=vllm",
                  "data.chat_template=true", "eval.before_training=false", "algorithm.max_new_tokens=64")
    assert out.returncode == 0, out.stderr
    row = {r["recipe_field"]: r for r in json.loads(out.stdout)["fields"]}["data.max_prompt_tokens"]
    assert {e["key"]: e["value"] for e in row["verl"]}["data.max_prompt_length"] == 512
    assert {e["key"]: e["value"] for e in row["openrlhf"]}["data.max_len"] == 512 + 64


@pytest.mark.openrlhf
@pytest.mark.slow
def test_openrlhf_check_refuses_completions_that_cannot_fit_its_max_len(monkeypatch: pytest.MonkeyPatch) -> None:
    point_at_backend(monkeypatch, "openrlhf")
    fits = plan("openrlhf", algorithm={"max_new_tokens": 4096})
    squeezed = plan("openrlhf", algorithm={"max_new_tokens": 4096}, options={"overrides": {"data": {"max_len": 2048}}})
    a, b = OPENRLHF.check_in_backend([fits, squeezed])
    assert a["problems"] == [], a
    assert any("--rollout.max_new_tokens=4096 leaves no room for the prompt in --data.max_len=2048" in p
               for p in b["problems"]), b


# --- 4. the eval schedule ---------------------------------------------------------------------------------------


def test_every_steps_zero_still_evaluates_after_training_on_verl_and_openrlhf() -> None:
    o = plan("verl", algorithm={"steps": 10}).native_config["overrides"]
    # verl validates on the last step whenever test_freq > 0 (ray_trainer.py:1727-1728); -1 never validates
    assert o["trainer.test_freq"] == 10 and o["trainer.val_before_train"] is True
    flags = plan("openrlhf", algorithm={"steps": 10}).native_config["flags"]
    assert flags["eval.steps"] == 10  # global_step % eval.steps == 0 at the last step (ppo_trainer.py:563)
    assert plan("openrlhf", algorithm={"steps": 10}, eval={"every_steps": 5}).native_config["flags"]["eval.steps"] == 5


def test_openrlhf_refuses_an_eval_schedule_it_cannot_keep() -> None:
    with pytest.raises(RecipeInvalid) as info:
        OPENRLHF.plan(gpu_recipe("openrlhf", eval=EvalConfig(before_training=True, every_steps=3)))
    text = str(info.value)
    assert "eval.before_training=True: not supported by openrlhf" in text and "no option to evaluate first" in text
    assert "eval.every_steps=3: not supported by openrlhf" in text and "dividing algorithm.steps" in text
    no_eval = OPENRLHF.plan(gpu_recipe("openrlhf", data={"eval": None},
                                       eval=EvalConfig(before_training=True)))
    assert "eval.steps" not in no_eval.native_config["flags"]  # nothing to evaluate: nothing to refuse


# --- 5. rollout engines that fit ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EVERY))
def test_a_tensor_parallel_degree_beyond_the_gpus_is_refused_by_field(name: str) -> None:
    with pytest.raises(RecipeInvalid) as info:
        plan(name, gpus=2, algorithm={"prompts_per_step": 2}, rollout={"tensor_parallel": 4})
    assert f"rollout.tensor_parallel=4: must divide the 2 GPUs {name}'s rollout engines run on" in str(info.value)
    assert str(info.value).count("rollout.tensor_parallel=") == 1  # one check, in the native base class
    plan(name, gpus=4, rollout={"tensor_parallel": 4})  # a whole engine fits


# --- 6. a recipe file's framework options --------------------------------------------------------------------------


def write_recipe(path: Path, framework: dict[str, Any], engine: str = "vllm", model: str = "Qwen/Qwen2.5-0.5B"
                 ) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({
        "model": {"path": model}, "data": {"chat_template": True}, "eval": {"greedy": False},
        "rollout": {"engine": engine}, "resources": {"gpus_per_node": 1, "device": "cuda"},
        "algorithm": {"max_new_tokens": 256, "steps": 2, "prompts_per_step": 2, "samples_per_prompt": 2},
        "reward_policy": {"on_error": "fallback"}, "framework": framework}))
    return path


def planned(*args: str, cwd: Path) -> dict[str, Any]:
    out = run_cli("plan", "--json", *args, cwd=cwd)
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))


def test_a_recipe_files_framework_options_win_over_the_group_defaults(tmp_path: Path) -> None:
    write_recipe(tmp_path / "mine.yaml", {"max_total_sequence_length": 512, "version": "0.7.0",
                                          "python": "/opt/venv/bin/python"})
    p = planned("recipe=./mine.yaml", "+framework=nemo_rl", cwd=tmp_path)
    assert p["recipe"]["framework"]["max_total_sequence_length"] == 512  # was 1023: the group's null won
    assert p["recipe"]["framework"]["version"] == "0.7.0" and p["recipe"]["framework"]["python"] == \
        "/opt/venv/bin/python"
    assert p["native_config"]["overrides"]["policy.max_total_sequence_length"] == 512
    # the command line wins over both
    p = planned("recipe=./mine.yaml", "+framework=nemo_rl", "framework.max_total_sequence_length=1000", cwd=tmp_path)
    assert p["native_config"]["overrides"]["policy.max_total_sequence_length"] == 1000
    # options the file does not set keep the group's defaults
    assert p["recipe"]["framework"]["repo"] == "/opt/nemo-rl"


def test_a_recipe_files_model_args_script_reaches_slime(tmp_path: Path) -> None:
    write_recipe(tmp_path / "mine.yaml", {"model_args_script": "scripts/models/qwen2.5-0.5B.sh"}, engine="sglang",
                 model="builtin:tiny-arith")
    p = planned("recipe=./mine.yaml", "+framework=slime", cwd=tmp_path)
    assert p["native_config"]["model_args_script"] == "scripts/models/qwen2.5-0.5B.sh"  # was refused, asking for it


# --- 7. micro-batches ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EVERY))
def test_a_null_micro_batch_is_memory_safe_and_the_plan_says_what_it_became(name: str) -> None:
    p = plan(name, algorithm={"prompts_per_step": 16, "samples_per_prompt": 16})  # 32 completions per GPU
    [row] = [r for r in rows(p, "algorithm.micro_batch_size") if not r.native_key.startswith(("(", "critic."))]
    assert row.value == DEFAULT_MICRO_BATCH  # not the whole per-GPU share (OpenRLHF's own default is 1)
    assert f"null resolved to {DEFAULT_MICRO_BATCH} completions per GPU per pass" in row.note
    odd = plan(name, algorithm={"prompts_per_step": 8, "samples_per_prompt": 3})  # 3 per GPU: 4 would not divide
    assert [r.value for r in rows(odd, "algorithm.micro_batch_size")
            if not r.native_key.startswith(("(", "critic."))] == [3]


def test_the_log_prob_micro_batch_can_differ_where_the_backend_has_a_key() -> None:
    algorithm = {"micro_batch_size": 2, "logprob_micro_batch_size": 8}
    o = plan("verl", algorithm=algorithm).native_config["overrides"]
    assert o["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"] == 2
    assert o["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] == 8
    assert o["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] == 8
    flags = plan("openrlhf", algorithm=algorithm).native_config["flags"]
    assert flags["train.micro_batch_size"] == 2 and flags["rollout.micro_batch_size"] == 8
    nemo = plan("nemo_rl", algorithm=algorithm).native_config["overrides"]
    assert nemo["policy.train_micro_batch_size"] == 2 and nemo["policy.logprob_batch_size"] == 8
    assert plan("verl").native_config["overrides"]["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu"] \
        == plan("verl").native_config["overrides"]["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    for name in ("slime", "vime"):
        with pytest.raises(RecipeInvalid, match=r"algorithm\.logprob_micro_batch_size=8: not supported by "
                                                rf"{name}.*no count of its own"):
            plan(name, algorithm=algorithm)


# --- 8. overrides that cannot take effect ---------------------------------------------------------------------------


def test_nemo_rl_leave_one_out_override_sets_both_keys_it_reads() -> None:
    p = plan("nemo_rl", options={"overrides": {"grpo": {"use_leave_one_out_baseline": True}}})
    o = p.native_config["overrides"]
    assert o["grpo.use_leave_one_out_baseline"] is True and o["grpo.adv_estimator.use_leave_one_out_baseline"] is True
    [row] = rows(p, "framework.overrides.grpo.use_leave_one_out_baseline")
    assert "sets grpo.adv_estimator.use_leave_one_out_baseline too" in row.note
    with pytest.raises(RecipeInvalid, match=r"framework\.overrides\.grpo\.use_leave_one_out_baseline=True: .*must "
                                            r"agree"):
        plan("nemo_rl", options={"overrides": {"grpo": {"use_leave_one_out_baseline": True,
                                                        "adv_estimator": {"use_leave_one_out_baseline": False}}}})


@pytest.mark.parametrize("key", ["rm-type", "--rm-type", "rm_type"])
def test_slime_refuses_an_rm_type_override_that_its_custom_rm_path_would_ignore(key: str) -> None:
    for name in ("slime", "vime"):
        with pytest.raises(RecipeInvalid, match=rf"framework\.overrides\.{key}='math': .*calls the --custom-rm-path "
                                                "function before it ever reads --rm-type"):
            plan(name, options={"overrides": {key: "math"}})



def test_a_recipe_files_framework_name_cannot_pick_another_backend_than_the_command_line(tmp_path: Path) -> None:
    write_recipe(tmp_path / "mine.yaml", {"name": "nemo_rl"})
    out = run_cli("plan", "recipe=./mine.yaml", "+framework=verl", cwd=tmp_path)
    assert out.returncode == 2
    assert "framework.name='nemo_rl': 'verl', the framework selected with framework=verl" in out.stderr


@pytest.mark.parametrize("backend", ["verl", "openrlhf", "nemo_rl", "slime", "vime"])
def test_resources_sharding_is_refused_where_it_is_not_mapped(backend: str) -> None:
    """A sharding the backend would not apply is a refusal by field, never silently dropped."""
    base = gpu_recipe(backend)
    recipe = replace(base, resources=replace(base.resources, sharding="zero3"))
    with pytest.raises(UnirlError, match=r"resources\.sharding"):
        get_host().frameworks.get(backend).plan(recipe)
