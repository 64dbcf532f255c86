"""The frameworks' official GRPO examples (tests/fixtures/native/, each with its repository, commit and path):
``unirl import`` then ``unirl plan`` reproduces the example's native configuration up to paths and reward wiring,
checked key by key here and, where the backend is installed, through the backend's own config composition.
benchmarks/official_examples.py prints the same comparison as a table."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks.official_examples import (
    FIXTURES,
    ORACLE,
    compare_effective,
    compare_import,
    compare_nemo,
    compare_slime,
    imported,
)
from tests.support.helpers import backend_python, point_at_backend
from unirl.backend.importing import OPENRLHF_FLAT, hydra_values, openrlhf_flags, script_commands, verl_command
from unirl.cli.main import main
from unirl.host.manager import get_host

KEPT_UNSET = {"rollout.max_new_tokens": None, "data.max_len": 2048}
"""An OpenRLHF command without --rollout.max_new_tokens lets each completion take what its prompt leaves of
--data.max_len: kept so (OpenRLHF's import_defaults)."""
VERL = ["verl_run_qwen2-7b_math.sh", "verl_run_qwen2-7b.sh", "verl_run_qwen2_5-3b_gsm8k_grpo_lora.sh",
        "verl_test_gspo_3b_math.sh"]
OPENRLHF = ["openrlhf_train_dapo_ray_hybrid_engine.sh", "openrlhf_train_reinforce_baseline_hybrid_engine.sh"]


@pytest.mark.parametrize("name", VERL + OPENRLHF + ["trl_grpo_quickstart.json", "trl_dapo_paper_index.json"])
def test_an_official_example_plans_back_to_its_own_values_but_paths_and_reward(name: str) -> None:
    result = compare_import(name)
    assert result["different"] == 0, result["rows"]["different"]
    assert result["refused"] == 0, result["rows"]["refused"]
    for key, why in result["rows"]["dropped"]:
        assert "path" in why or "reward" in why, (key, why)


def test_the_gspo_script_reads_its_own_variables() -> None:
    """verl's examples/gspo_trainer/test_gspo_3b_math.sh sets every value in shell variables first, with
    $((1024 * 2)) arithmetic, $(basename ...) and a Slurm variable it does not set."""
    overrides, other = verl_command((FIXTURES / "verl_test_gspo_3b_math.sh").read_text())
    script = hydra_values(overrides)
    assert script["data.max_prompt_length"] == 2048 and script["data.max_response_length"] == 8192
    assert script["actor_rollout_ref.rollout.max_num_batched_tokens"] == 10240
    assert script["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"] == 20480  # ((2048 + 8192) * 2))
    assert script["trainer.experiment_name"] == "gspo-epslow-0.0003-epshigh-0.0004-Qwen2.5-3B-Instruct-RL"
    assert script["trainer.nnodes"] == "$SLURM_JOB_NUM_NODES"  # left as written: no ${} interpolation for Hydra
    assert other == [("$@", 'not a key=value override ("$@" passes the caller\'s arguments)')]
    _backend, _, result = imported("verl_test_gspo_3b_math.sh")  # with --env SLURM_JOB_NUM_NODES=1
    r = result.recipe
    # train_batch_size 512 prompts, ppo_mini_batch_size 128 -> 4 updates a step; n 16; 10 epochs under verl's cap of
    # 500 steps, which also sizes its LR schedule: verl runs min(500, 10 x floor(rows / 512)) = 140 on GSM8K
    assert (r.algorithm.prompts_per_step, r.algorithm.mini_batches_per_step, r.algorithm.samples_per_prompt,
            r.algorithm.epochs) == (512, 4, 16, 10)
    assert result.report.native["trainer.total_training_steps"] == 500
    assert (r.algorithm.clip_low, r.algorithm.clip_high, r.algorithm.loss_aggregation) == (
        0.0003, 0.0004, "seq_mean_token_mean")
    # GSPO's loss mode is the recipe's sequence-level importance ratio
    assert r.algorithm.importance_sampling_level == "sequence"
    assert "actor_rollout_ref.actor.policy_loss.loss_mode" not in result.report.native


def test_shell_defaults_arrays_and_several_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ('N=${N:-4}\nLR=1e-6\nif [ -n "$X" ]; then\n  LR=9\nfi\nARGS=(\n  --rollout.batch_size $((N * 2))\n'
            '  # --rollout.temperature 0.5\n  --actor.adam.lr "$LR"\n)\n'
            'python3 -m openrlhf.cli.train_ppo_ray ${ARGS[@]} --rollout.n_samples_per_prompt $N\n')
    flags, _ = openrlhf_flags([text])
    # ${N:-4}: the default; LR set inside an `if` is not taken; the commented array line is no flag
    assert flags == {"rollout.batch_size": 8, "actor.adam.lr": 1e-6, "rollout.n_samples_per_prompt": 4}
    assert openrlhf_flags([text], {"N": "2"})[0]["rollout.batch_size"] == 4
    two = tmp_path / "two.sh"
    two.write_text((FIXTURES / "verl_run_qwen2-7b.sh").read_text() * 2)
    assert main(["import", "verl", str(two)]) == 2
    assert "2 `verl.trainer.main_ppo` commands in the script (lines 6, 49)" in capsys.readouterr().err
    assert main(["import", "verl", str(two), "--command", "2"]) == 0
    assert len(script_commands(two.read_text(), "verl.trainer.main_ppo")) == 2


def test_openrlhf_flat_names_before_0_10_2_import_as_the_dotted_example() -> None:
    """The same official scripts at v0.10.1 (flat names) and v0.11.0 (dotted) import to one recipe."""
    for name in ("train_dapo_ray_hybrid_engine.sh", "train_reinforce_baseline_hybrid_engine.sh"):
        _, _flat, old = imported(f"openrlhf_v0.10.1_{name}")
        _, _dotted, new = imported(f"openrlhf_{name}")
        assert old.document() == new.document()
        assert old.report.native == new.report.native


def test_openrlhf_0_11_0_importance_sampling_switch_becomes_0_11_2s() -> None:
    _, flags, result = imported("openrlhf_train_reinforce_baseline_hybrid_engine.sh")
    # --algo.advantage.is_correction_enable --algo.advantage.is_correction_type icepop (0.11.0): ICEPOP is
    # "token mask" in 0.11.2's own comment (openrlhf/cli/train_ppo_ray.py:256-259 @ 0.11.2)
    assert (flags["algo.advantage.is_correction_level"], flags["algo.advantage.is_correction_mode"]) == (
        "token", "mask")
    assert "algo.advantage.is_correction_enable" not in result.report.native


def test_a_key_the_installed_version_lacks_is_kept_and_reported_as_refused() -> None:
    host = get_host()
    from unirl.backend.importing import import_native

    result = import_native(host.frameworks.get("openrlhf"), {"rollout.batch_size": 16,
                                                             "rollout.n_samples_per_prompt": 4,
                                                             "train.batch_size": 32, "ptx_coef": 0.05},
                           host.rewards.names())
    # kept, never silently dropped; the max_new_tokens the command leaves out stays out (max_len - prompt); and its
    # default warm-up, 3% of a run whose length OpenRLHF counts from the data, stays a ratio
    assert result.report.native == {"ptx_coef": 0.05, **KEPT_UNSET, "actor.lr_warmup_ratio": 0.03}
    assert [k for k, _, _ in result.report.refused] == ["ptx_coef"]


def test_nemo_rl_and_slime_hand_written_recipes_plan() -> None:
    nemo = compare_nemo()
    assert nemo["matched"] >= 30 and nemo["refused"] == 0
    slime = compare_slime()
    assert slime["matched"] >= 30 and slime["refused"] == 0


VERL_COMPOSE = r"""
import json, sys
from importlib.resources import files
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
args = json.load(sys.stdin)
out = []
for overrides in args:
    with initialize_config_dir(config_dir=str(files("verl.trainer") / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    out.append(OmegaConf.to_container(cfg, resolve=False))
print(json.dumps(out, default=str))
"""


def flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}{key}.").items()}
    return {prefix[:-1]: tree}


@pytest.mark.verl
@pytest.mark.parametrize("name", VERL)
def test_verls_own_composition_of_the_imported_plan_equals_the_scripts(name: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """verl 0.9.1's shipped ppo_trainer config composed with the script's overrides and with the plan's: every key
    of the composed config agrees but the paths, unirl's reward wiring and the keys unirl sets on purpose."""
    point_at_backend(monkeypatch, "verl")
    _, script, result = imported(name)
    framework = get_host().frameworks.get("verl")
    plan = framework.plan(result.recipe)
    script_args = [f"{k}={json.dumps(v) if not isinstance(v, str) else repr(v)}" for k, v in script.items()]
    plan_args = list(plan.command[3:])
    done = subprocess.run([str(backend_python("verl")), "-c", VERL_COMPOSE], input=json.dumps([script_args, plan_args]),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    mine, theirs = (flat(c) for c in json.loads(done.stdout))
    differs = {k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k)}
    added = {k for k, _, _ in result.report.added}
    paths = {"data.train_files", "data.val_files", "trainer.default_local_dir", "actor_rollout_ref.model.path"}
    reward = {k for k in differs if k.startswith(("reward.", "ray_kwargs.", "reward_model.reward_kwargs"))}
    assert differs - added - paths - reward == set(), sorted(differs - added - paths - reward)
    [check] = framework.check_in_backend([plan])
    # a LoRA actor makes verl's validate_config ask for an installed vLLM (verl/workers/config/rollout.py @ 0.9.1):
    # this machine has none, so that one is the machine's, not the configuration's
    assert [p for p in check["problems"] if "vllm version None not supported" not in p] == []


@pytest.mark.openrlhf
def test_every_flat_name_maps_to_a_flag_of_the_installed_openrlhf(monkeypatch: pytest.MonkeyPatch) -> None:
    """OPENRLHF_FLAT's targets are options of OpenRLHF 0.11.2's own parser (read from its source, no import of
    vLLM), and the imported official scripts pass its parser and __main__ checks."""
    point_at_backend(monkeypatch, "openrlhf")
    where = subprocess.run([str(backend_python("openrlhf")), "-c", "import importlib.util as u; "
                            "print(u.find_spec('openrlhf').submodule_search_locations[0])"],
                           capture_output=True, text=True, timeout=60).stdout.strip()
    src = (Path(where) / "cli" / "train_ppo_ray.py").read_text()
    # the literal "--x.y" options, and add_optimizer_args(prefix)'s f"--{prefix}.adam.lr" ... for actor and critic
    per_model = re.findall(r'\{prefix\}\.([a-z0-9_.]+)"', src)
    names = set(re.findall(r'"--([a-z0-9_.]+)"', src)) | {f"{p}.{s}" for p in ("actor", "critic") for s in per_model}
    # the two 0.11.0 names are then rewritten by openrlhf_0_11_0 (is_correction_level / is_correction_mode)
    translated = {"algo.advantage.is_correction_enable", "algo.advantage.is_correction_type"}
    assert set(OPENRLHF_FLAT.values()) - names == translated
    framework = get_host().frameworks.get("openrlhf")
    for name in OPENRLHF:
        _, _, result = imported(name)
        [check] = framework.check_in_backend([framework.plan(result.recipe)])
        assert check["problems"] == [], (name, check["problems"])


# --- the effective run: each example against the run worked out by hand, and its import's plan against it --------
EFFECTIVE = list(json.loads(ORACLE.read_text()))
REFUSED_BY_FIELD = {
    # RLOOTrainer clips one ratio per completion (the product of its token ratios): the recipe's token-level
    # clipping equals it only with one update per step, and these examples take 4 and 2 (the plan says so by field)
    "trl_rloo_script.json": "algorithm.importance_sampling_level='token'",
    "trl_rloo_paper_index.json": "algorithm.importance_sampling_level='token'",
}


@pytest.mark.parametrize("name", EFFECTIVE)
def test_an_official_example_imports_to_the_run_it_executes(name: str) -> None:
    """Held to the effective run (steps or passes, batch, updates, tokens, LR schedule and horizon, algorithm), not
    key by key: unirl's reader of the example agrees with the run worked out by hand from its script, its backend's
    defaults and its dataset's size (effective_runs.json, every number cited), and the imported recipe's plan runs
    exactly that, or is refused by field."""
    result = compare_effective(name)
    assert result["reader_vs_hand"] == [], result["reader_vs_hand"]
    if name in REFUSED_BY_FIELD:
        assert REFUSED_BY_FIELD[name] in result["refused"] and "one update per step" in result["refused"]
    else:
        assert result["refused"] is None and result["plan_vs_command"] == [], result["plan_vs_command"]


def test_the_corpus_holds_at_least_15_official_examples_of_verl_verl_recipe_openrlhf_and_trl() -> None:
    oracle = json.loads(ORACLE.read_text())
    sources = {entry["source"].split("@")[0] for entry in oracle.values()}
    assert len(oracle) >= 15 and {"volcengine/verl", "verl-project/verl-recipe", "OpenRLHF/OpenRLHF",
                                  "huggingface/trl"} <= sources, sources
    kinds = {(e["effective"]["algorithm"]["advantage_estimator"], e["effective"]["epochs"] is not None)
             for e in oracle.values()}
    assert {"gae", "rloo", "grpo", "reinforce_plus_plus", "group_norm"} <= {k for k, _ in kinds}


def test_unirl_import_says_whether_the_plan_runs_what_the_script_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "verl", str(FIXTURES / "verl_run_qwen2-7b.sh")]) == 0
    err = capsys.readouterr().err
    assert "the run verl executes: 15 passes over the data of 1024 prompts x 5 completions, 4 optimizer updates a " \
           "step; the imported recipe's plan runs the same" in err
