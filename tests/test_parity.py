"""The parity certificate: unirl's reference semantics stated by hand-checked numbers, then each backend's own loss
code on one frozen batch against it (TRL in process; verl 0.9.1 and OpenRLHF 0.11.2 in their venvs), every
algorithm preset each backend runs, and a deliberately wrong native override caught as a mismatch."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.support.cli import run_cli
from tests.support.helpers import backend_python
from unirl.backend.parity.batch import FrozenBatch
from unirl.backend.parity.certificate import Design, certify
from unirl.backend.parity.reference import Semantics, Tensors, advantages, loss_parts, quantities

PRESETS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "ppo")
BASE = ("recipe=gsm8k_grpo",)  # a recipe every native backend plans (chat prompts, vLLM rollouts, GPUs)


def semantics(**changes: Any) -> Semantics:
    base = Semantics(advantage_baseline="group_mean", advantage_norm="group", kl_coef=0.0, kl_estimator="k3",
                     kl_placement="loss", clip_low=0.2, clip_high=0.2, dual_clip=None,
                     importance_sampling_level="token", loss_aggregation="token_mean", loss_normalizer=4,
                     entropy_coef=0.0)
    return base.changed(**changes)


def tensors(rewards: list[float], group: list[int], lengths: list[int], width: int = 4, **columns: Any) -> Tensors:
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths], dtype=torch.float64)
    zeros = torch.zeros_like(mask)
    return Tensors(rewards=torch.tensor(rewards, dtype=torch.float64), group=torch.tensor(group), mask=mask,
                   logp=columns.get("logp", zeros), old_logp=columns.get("old_logp", zeros),
                   ref_logp=columns.get("ref_logp", zeros), entropy=columns.get("entropy", zeros),
                   values=columns.get("values", zeros))


# -- the reference, by hand ------------------------------------------------------------------------------------------
def test_group_baselines_and_normalisations_are_what_the_fields_say() -> None:
    t = tensors([1.0, 0.0, 0.0, 1.0, 2.0, 2.0], [0, 0, 0, 0, 1, 1], [2, 1, 3, 4, 1, 2])
    std = math.sqrt(1 / 3)  # Bessel-corrected std of [1, 0, 0, 1]
    adv = advantages(t, semantics())
    assert adv[0, 0].item() == pytest.approx(0.5 / (std + 1e-6)) and adv[0, 2].item() == 0.0  # padding stays 0
    assert adv[4, 0].item() == 0.0 and adv[5, 1].item() == 0.0  # equal rewards: exactly 0, not rounding noise
    loo = advantages(t, semantics(advantage_baseline="leave_one_out", advantage_norm="none"))
    assert loo[0, 0].item() == pytest.approx(1.0 - 1 / 3) and loo[1, 0].item() == pytest.approx(0.0 - 2 / 3)
    batch = advantages(t, semantics(advantage_norm="batch"))
    assert batch[0, 0].item() == pytest.approx(0.5 / (t.rewards.std().item() + 1e-6))


def test_kl_in_the_reward_is_baselined_with_it_and_reinforce_returns_are_to_go() -> None:
    ref = torch.zeros(2, 4, dtype=torch.float64)
    old = torch.tensor([[0.2, 0.1, 0.0, 0.0], [0.0, 0.3, 0.0, 0.0]], dtype=torch.float64)
    t = tensors([1.0, 0.0], [0, 0], [2, 2], old_logp=old, ref_logp=ref)
    s = semantics(kl_coef=0.5, kl_estimator="k1", kl_placement="reward", advantage_norm="none")
    adv = advantages(t, s)
    # returns: 1 - 0.5 x (0.2 + 0.1) = 0.85 and 0 - 0.5 x 0.3 = -0.15; the group mean 0.35 is subtracted
    assert adv[0, 0].item() == pytest.approx(0.5) and adv[1, 1].item() == pytest.approx(-0.5)
    to_go = advantages(t, s.changed(advantage_baseline="none"))
    assert to_go[0].tolist()[:2] == pytest.approx([0.85, 0.95]) and to_go[1].tolist()[:2] == pytest.approx(
        [-0.15, -0.15])


def test_clipping_dual_clip_aggregation_and_the_sequence_ratio() -> None:
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0, 1.0], [4.0, 1.0, 1.0, 1.0]], dtype=torch.float64))
    t = tensors([1.0, 0.0], [0, 0], [2, 1], logp=logp.clone().requires_grad_(True))
    adv = torch.tensor([[1.0, 1.0, 0, 0], [-1.0, 0, 0, 0]], dtype=torch.float64)
    parts = loss_parts(t, adv, semantics(dual_clip=3.0))
    # token 0: ratio 1.5 clipped to 1.2 with A > 0; token 1: ratio 0.5 (A > 0: the lower clip does not bind); token 2:
    # ratio 4 with A < 0, which PPO's clip leaves at -A x 4 and the dual clip bounds at 3 x -A
    assert parts.pg_loss.item() == pytest.approx((-1.2 - 0.5 + 3.0) / 3)
    assert parts.clip_fraction.item() == pytest.approx(1 / 3) and parts.dual_clip_fraction.item() == pytest.approx(
        1 / 3)
    per_sequence = loss_parts(t, adv, semantics(loss_aggregation="seq_mean_token_mean"))
    assert per_sequence.pg_loss.item() == pytest.approx(((-1.2 - 0.5) / 2 + 4.0) / 2)  # no dual clip: 4
    normed = loss_parts(t, adv, semantics(loss_aggregation="seq_mean_token_sum_norm", loss_normalizer=4))
    assert normed.pg_loss.item() == pytest.approx(((-1.2 - 0.5) + 4.0) / 2 / 4)
    leaf = logp.clone().requires_grad_(True)
    gspo = loss_parts(tensors([1.0], [0], [2], logp=leaf[:1]), adv[:1], semantics(importance_sampling_level="sequence"))
    gspo.loss.backward()
    ratio = math.exp((math.log(1.5) + math.log(0.5)) / 2)  # 0.866: inside the clip range
    # GSPO: the loss -A s, with s the exp of the mean log-ratio, so d loss / d log pi_t = -A s / len
    assert leaf.grad[0, :2].tolist() == pytest.approx([-ratio / 2, -ratio / 2])


def test_kl_estimators_are_schulmans() -> None:
    from unirl.backend.parity.reference import kl_per_token

    logp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    r = math.log(0.5) - math.log(0.25)
    assert kl_per_token(logp, ref, "k1").item() == pytest.approx(r)
    assert kl_per_token(logp, ref, "k2").item() == pytest.approx(r * r / 2)
    assert kl_per_token(logp, ref, "k3").item() == pytest.approx(0.5 - 1 + r)


def test_gae_with_a_critic() -> None:
    values = torch.tensor([[0.5, 0.25, 0, 0]], dtype=torch.float64)
    t = tensors([1.0], [0], [2], values=values)
    adv = advantages(t, semantics(advantage_baseline="critic", advantage_norm="none", gamma=1.0, gae_lambda=1.0))
    assert adv[0].tolist() == pytest.approx([0.5, 0.75, 0.0, 0.0])  # Monte-Carlo return 1 minus each value


def test_overlong_punishment_and_filter() -> None:
    from unirl.backend.parity.reference import overlong_buffer

    t = tensors([1.0, 1.0, 1.0, 1.0], [0, 0, 1, 1], [4, 2, 3, 1], width=4)
    s = semantics(advantage_norm="none", max_new_tokens=4, overlong_buffer=2, overlong_penalty=0.5)
    adv = advantages(t, s)
    # lengths 4, 2 | 3, 1 past max_new_tokens - buffer = 2: -2/2 x 0.5 and 0 | -1/2 x 0.5 and 0
    assert adv[0, 0].item() == pytest.approx(-0.25) and adv[1, 0].item() == pytest.approx(0.25)
    assert adv[2, 0].item() == pytest.approx(-0.125) and adv[3, 0].item() == pytest.approx(0.125)
    assert overlong_buffer("auto", 20) == 4 and overlong_buffer("auto", 4) is None and overlong_buffer(None, 9) is None
    logp = torch.full((2, 2), math.log(1.1), dtype=torch.float64)
    cut = tensors([1.0, 0.0], [0, 0], [2, 2], width=2, logp=logp)
    cut = Tensors(**{**cut.__dict__, "truncated": torch.tensor([True, False])})
    a = torch.tensor([[1.0, 1.0], [-1.0, -1.0]], dtype=torch.float64)
    assert loss_parts(cut, a, semantics()).pg_loss.item() == pytest.approx(0.0)  # -1.1 and +1.1 cancel
    assert loss_parts(cut, a, semantics(overlong_filter=True)).pg_loss.item() == pytest.approx(1.1)  # only the ended


def test_one_ratio_per_completion() -> None:
    logp = torch.log(torch.tensor([[1.1, 1.2], [0.9, 1.0]], dtype=torch.float64))
    t = tensors([1.0, 0.0], [0, 0], [2, 1], width=2, logp=logp)
    a = torch.tensor([[1.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)
    parts = loss_parts(t, a, semantics(ratio_per_completion=True))
    # completion 0: ratio 1.1 x 1.2 = 1.32, clipped to 1.2 (A > 0); completion 1: 0.9 (inside); mean of -1.2 and 0.9
    assert parts.loss.item() == pytest.approx((-1.2 + 0.9) / 2) and parts.clip_fraction.item() == pytest.approx(0.5)


def test_verdicts_equal_design_mismatch_and_refused() -> None:
    t = tensors([1.0, 0.0, 0.5, 0.25], [0, 0, 0, 0], [2, 2, 1, 1])
    batch = FrozenBatch(seed=0, prompts=[""] * 4, completions=[""] * 4, prompt_ids=[[1]] * 4,
                        completion_ids=[[1, 2], [1, 2], [2], [2]], group=[0] * 4, rewards=t.rewards.tolist(),
                        mask=t.mask.tolist(), logp=[[0.0] * 4] * 4, old_logp=[[0.0] * 4] * 4,
                        ref_logp=[[0.0] * 4] * 4, entropy=[[0.0] * 4] * 4, group_size=4)
    s = semantics()
    exact = quantities(batch.tensors(), s)
    assert {r.verdict for r in certify("x", "grpo", batch, s, exact, [])} == {"equal"}
    other = quantities(batch.tensors(), s.changed(std_eps=1e-2))
    rows = {r.quantity: r for r in certify("x", "grpo", batch, s, other, [])}
    assert rows["advantages"].verdict == "mismatch" and rows["advantages"].max_rel_diff > 1e-3
    named = Design("std + 1e-2", "divides by std + 1e-2", ("advantages",), {"std_eps": 1e-2})
    rows = {r.quantity: r for r in certify("x", "grpo", batch, s, other, [named])}
    assert rows["advantages"].verdict == "design" and "std + 1e-2" in rows["advantages"].reason
    assert {r.verdict for r in certify("x", "grpo", batch, s, {"refused": "no"}, [])} == {"refused"}


# -- the backends' own code -----------------------------------------------------------------------------------------
def certificate(*args: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    out = run_cli("parity", "--json", *args, cwd=cwd)
    assert out.returncode in (0, 1), out.stderr[-3000:]
    return out.returncode, json.loads(out.stdout)


def verdicts(data: dict[str, Any], framework: str) -> dict[str, str]:
    return {r["quantity"]: r["verdict"] for r in data["rows"] if r["framework"] == framework}


@pytest.mark.slow
def test_trl_computes_every_preset_it_runs_as_the_recipe_means(isolated: Path) -> None:
    certified = 0
    for preset in PRESETS:
        code, data = certificate("--frameworks", "trl", *BASE, f"algorithm={preset}", cwd=isolated)
        assert code == 0, (preset, [r for r in data["rows"] if r["verdict"] == "mismatch"])
        found = verdicts(data, "trl")
        if set(found.values()) <= {"refused"}:
            continue  # the plan refuses it (e.g. REINFORCE++: no critic-free REINFORCE in TRL): by field, elsewhere
        certified += 1
        assert found["loss"] == "equal" and found["grad"] == "equal", (preset, found)
    assert certified >= 3  # grpo, dr_grpo, gspo at least (gsm8k_grpo's mini-batches rule out RLOOTrainer)
    # RLOOTrainer (one update per step, as the embedded default): one ratio per completion, its tokens summed, named
    # as a design with its size; its leave-one-out advantages and KL in the reward are the recipe's
    code, data = certificate("--frameworks", "trl", "algorithm=rloo", "algorithm.kl_coef=0.05", cwd=isolated)
    found = verdicts(data, "trl")
    reason = next(r["reason"] for r in data["rows"] if r["quantity"] == "grad")
    assert code == 0 and found["advantages"] == "equal" and found["grad"] == "design", found
    assert "one ratio per completion" in reason


@pytest.mark.slow
def test_a_trl_override_that_changes_the_loss_is_a_mismatch(isolated: Path) -> None:
    code, data = certificate("--frameworks", "trl", *BASE, "+framework=trl", "+framework.overrides.epsilon=0.05",
                             cwd=isolated)
    assert code == 1 and verdicts(data, "trl")["loss"] == "mismatch"


@pytest.mark.slow
def test_trl_sends_the_plain_kl_the_recipe_means(isolated: Path) -> None:
    """The certificate found TRL multiplying its KL by the importance ratio (use_bias_correction_kl, on by default);
    the plan now turns it off, and the KL term is the recipe's."""
    code, data = certificate("--frameworks", "trl", *BASE, "algorithm.kl_coef=0.05", cwd=isolated)
    assert code == 0 and verdicts(data, "trl")["kl_term"] == "equal"
    code, data = certificate("--frameworks", "trl", *BASE, "algorithm.kl_coef=0.05", "+framework=trl",
                             "+framework.overrides.use_bias_correction_kl=true", cwd=isolated)
    assert code == 1 and verdicts(data, "trl")["kl_term"] == "mismatch"


@pytest.mark.verl
def test_verl_computes_every_preset_as_the_recipe_means(isolated: Path) -> None:
    python = backend_python("verl")
    for preset in PRESETS:
        code, data = certificate("--frameworks", "verl", f"--python=verl={python}", *BASE, f"algorithm={preset}",
                                 cwd=isolated)
        found = verdicts(data, "verl")
        assert code == 0 and found and not data["not_certified"], (preset, data)
        assert found["loss"] == "equal" and found["grad"] == "equal" and found["advantages"] in ("equal", "design"), (
            preset, found)
    code, data = certificate("--frameworks", "verl", f"--python=verl={python}", *BASE, "+framework=verl",
                             "+framework.overrides.actor_rollout_ref.actor.clip_ratio_low=0.05", cwd=isolated)
    assert code == 1 and verdicts(data, "verl")["loss"] == "mismatch"


@pytest.mark.openrlhf
def test_openrlhf_computes_every_preset_it_runs_as_the_recipe_means_or_by_named_design(isolated: Path) -> None:
    python = backend_python("openrlhf")
    for preset in PRESETS:
        code, data = certificate("--frameworks", "openrlhf", f"--python=openrlhf={python}", *BASE,
                                 f"algorithm={preset}", cwd=isolated)
        found = verdicts(data, "openrlhf")
        assert code == 0 and found, (preset, data)
        assert set(found.values()) <= {"equal", "design", "refused"}, (preset, found)
    code, data = certificate("--frameworks", "openrlhf", f"--python=openrlhf={python}", *BASE, "+framework=openrlhf",
                             "+framework.overrides.actor.eps_clip_low_high=[0.05,0.2]", cwd=isolated)
    assert code == 1 and verdicts(data, "openrlhf")["loss"] == "mismatch"


@pytest.mark.train
def test_a_run_records_its_certificate_and_the_report_shows_it(isolated: Path) -> None:
    out = run_cli("algorithm.steps=2", "eval.every_steps=0", "logging.progress=false", "hydra.run.dir=runs/one",
                  cwd=isolated)
    assert out.returncode == 0, out.stderr[-3000:]
    parity = json.loads((isolated / "runs/one/parity.json").read_text())
    assert verdicts(parity, "trl")["loss"] == "equal" and verdicts(parity, "trl")["grad"] == "equal"
    assert run_cli("report", "runs/one", cwd=isolated).returncode == 0
    page = (isolated / "runs/one/report.html").read_text()
    assert 'id="parity"' in page and "verdict-equal" in page


OVERLONG = ("algorithm.max_new_tokens=8", "algorithm.overlong_buffer=4")  # completions of 5-8 tokens are punished


@pytest.mark.slow
def test_trl_shapes_overlong_completions_and_filters_truncated_ones_as_the_recipe_means(isolated: Path) -> None:
    code, data = certificate("--frameworks", "trl", *OVERLONG, cwd=isolated)
    assert code == 0 and set(verdicts(data, "trl").values()) <= {"equal", "design"}
    code, data = certificate("--frameworks", "trl", "algorithm.max_new_tokens=8", "algorithm.overlong_filter=true",
                             cwd=isolated)
    assert code == 0 and verdicts(data, "trl")["loss"] == "equal"


@pytest.mark.verl
@pytest.mark.openrlhf
def test_native_backends_shape_overlong_completions_and_a_group_of_equal_rewards_is_named_rounding(
        isolated: Path) -> None:
    """The embedded default's rewards (1.7 for a right digit) are not binary fractions: a group of equal ones has a
    float32 std of one rounding unit, which verl's 1e-6 and OpenRLHF's 1e-9 epsilon turn into advantages of 0.1 and
    about 100 instead of 0 (found by this certificate). DAPO's overlong punishment runs through verl's own reward
    manager and OpenRLHF's length penalties; verl with the naive manager (no punishment) is caught."""
    pythons = [f"--python=verl={backend_python('verl')}", f"--python=openrlhf={backend_python('openrlhf')}"]
    code, data = certificate("--frameworks", "verl,openrlhf", *pythons, cwd=isolated)
    rows = {(r["framework"], r["quantity"]): r for r in data["rows"]}
    assert code == 0 and rows["openrlhf", "advantages"]["verdict"] == "design", rows
    assert rows["openrlhf", "advantages"]["max_abs_diff"] > 10 and "1e-9" in rows["openrlhf", "advantages"]["reason"]
    assert rows["verl", "advantages"]["verdict"] == "design" and rows["verl", "advantages"]["max_abs_diff"] > 1e-3
    code, data = certificate("--frameworks", "verl,openrlhf", *pythons, *OVERLONG, cwd=isolated)
    assert code == 0 and {r["verdict"] for r in data["rows"]} <= {"equal", "design"}, data["rows"]
    code, data = certificate("--frameworks", "verl", pythons[0], "algorithm=dapo", *OVERLONG, "+framework=verl",
                             "+framework.overrides.reward.reward_manager.name=naive", cwd=isolated)
    assert code == 1 and verdicts(data, "verl")["advantages"] == "mismatch"


@pytest.mark.openrlhf
def test_openrlhf_clips_the_reward_only_where_it_means_the_reward(isolated: Path) -> None:
    """OpenRLHF's compute_reward clips what it is given, which after a group baseline is the normalised advantage
    (the certificate showed a 1.3 difference): the plan refuses that, and certifies the clip with REINFORCE++."""
    out = run_cli("plan", "+framework=openrlhf", *BASE, "algorithm.reward_clip=0.5", cwd=isolated)
    assert out.returncode == 2 and "algorithm.reward_clip=0.5: not supported by openrlhf" in out.stderr
    code, data = certificate("--frameworks", "openrlhf", f"--python=openrlhf={backend_python('openrlhf')}", *BASE,
                             "algorithm=reinforce_pp", "algorithm.reward_clip=0.5", cwd=isolated)
    assert code == 0 and set(verdicts(data, "openrlhf").values()) <= {"equal", "design"}


@pytest.mark.openrlhf
def test_diff_shows_each_sides_numeric_verdict_beside_the_key_table(isolated: Path) -> None:
    env = {"UNIRL_OPENRLHF_PYTHON": str(backend_python("openrlhf"))}
    recipe = (*BASE, "algorithm.clip_low=0.19")  # a recipe no other test certifies (the cache is per session)
    out = run_cli("diff", "trl", "openrlhf", "--json", *recipe, env=env, cwd=isolated)
    assert json.loads(out.stdout)["parity"] == {"trl": None, "openrlhf": None}  # nothing computed for it yet
    out = run_cli("diff", "trl", "openrlhf", "--parity", *recipe, env=env, cwd=isolated)
    assert "parity trl: advantages " in out.stdout and "parity openrlhf: advantages " in out.stdout, out.stderr
    out = run_cli("diff", "trl", "openrlhf", "--json", *recipe, env=env, cwd=isolated)  # from the cache now
    parity = json.loads(out.stdout)["parity"]
    assert parity["trl"]["cached"] and verdicts(parity["openrlhf"], "openrlhf")["loss"] == "equal"
