"""`unirl compare`: seeds aggregated per configuration (members that differ only in `seed`), the final reward
smoothed over the last 10% of steps instead of the last noisy one, failed seeds counted but kept out of the mean;
and a sweep (`unirl -m ...`) ends by printing that table and its multirun directory.

The sweeps here (but the `train` one) are multirun directories laid out as Hydra writes them (numbered members with
`.hydra/overrides.yaml`), each member's files written by unirl's own recorder (tests/test_show.py's make_run) and its
`outcome.json` as unirl.cli.run records it.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from tests.test_show import make_run
from unirl.record.layout import write_json

CONFIGS = [("algorithm.lr=0.0001", 0.01), ("algorithm.lr=0.0003", 0.02)]
"""(override, reward slope): a member's mean total reward at step s is slope x s x (1 + seed / 10)."""


def make_sweep(root: Path, *, steps: int = 20, seeds: tuple[int, ...] = (0, 1, 2),
               failed: tuple[str, ...] = ()) -> Path:
    """A multirun directory of len(CONFIGS) x len(seeds) members, numbered as Hydra's basic launcher numbers them."""
    sweep = root / "runs" / "multirun" / "2026-01-01_00-00-00"
    index = 0
    for override, slope in CONFIGS:
        for seed in seeds:
            member = sweep / str(index)
            make_run(root, steps=steps, per_prompt=2, fail_at=(), reward=slope * (1 + seed / 10), at=member,
                     seed=seed)
            (member / ".hydra").mkdir()
            (member / ".hydra" / "overrides.yaml").write_text(
                f"- recipe=grpo_math\n- {override}\n- seed={seed}\n- hydra.run.dir=x\n")
            state = "failed" if str(index) in failed else "completed"
            outcome: dict[str, Any] = {"state": state, "run_dir": str(member), "framework": "trl", "seed": seed}
            if state == "failed":
                outcome["error"] = "RuntimeError: the backend died"
            write_json(member / "outcome.json", outcome)
            index += 1
    return sweep


def expected_final(slope: float, seed: int, steps: int) -> float:
    window = math.ceil(steps / 10)  # the last 10% of steps, at least one
    return statistics.mean(slope * (1 + seed / 10) * s for s in range(steps - window + 1, steps + 1))


def compared(sweep: Path) -> dict[str, Any]:
    out = run_cli("compare", str(sweep), "--json")
    assert out.returncode in (0, 1), out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_final_reward_is_the_mean_of_the_last_tenth_of_steps_not_the_last_step(isolated: Path) -> None:
    sweep = make_sweep(isolated, steps=20, seeds=(0,))
    result = compared(sweep)
    assert result["final_reward"] == "mean total reward over the last 10% of logged steps (at least 1)"
    for row, (_, slope) in zip(result["members"], CONFIGS, strict=True):
        assert row["final_reward_steps"] == 2  # 10% of 20 steps
        assert row["final_reward"] == pytest.approx(expected_final(slope, 0, 20))  # mean of steps 19 and 20
        assert row["last_reward"] == pytest.approx(slope * 20)
        assert row["final_reward"] < row["last_reward"]
    short = compared(make_sweep(isolated / "short", steps=3, seeds=(0,)))["members"][0]
    assert short["final_reward_steps"] == 1 and short["final_reward"] == pytest.approx(0.01 * 3)  # at least one


def test_members_that_differ_only_in_seed_are_aggregated_per_configuration(isolated: Path) -> None:
    sweep = make_sweep(isolated, seeds=(0, 1, 2))
    result = compared(sweep)
    configs = result["configurations"]
    assert [c["differs"] for c in configs] == [["algorithm.lr=0.0001"], ["algorithm.lr=0.0003"]]
    for config, (_, slope) in zip(configs, CONFIGS, strict=True):
        finals = [expected_final(slope, seed, 20) for seed in (0, 1, 2)]
        assert config["seeds"] == [0, 1, 2] and config["states"] == {"completed": 3}
        assert config["final_reward"]["n"] == 3
        assert config["final_reward"]["mean"] == pytest.approx(statistics.mean(finals))
        assert config["final_reward"]["std"] == pytest.approx(statistics.stdev(finals))  # sample sd (n-1)
        assert (config["final_reward"]["min"], config["final_reward"]["max"]) == pytest.approx((finals[0], finals[2]))
        assert config["accuracy"]["mean"] == pytest.approx(0.5) and config["accuracy"]["std"] == pytest.approx(0.0)
    table = run_cli("compare", str(sweep))
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    lr1 = statistics.mean(expected_final(0.01, s, 20) for s in (0, 1, 2))
    sd1 = statistics.stdev(expected_final(0.01, s, 20) for s in (0, 1, 2))
    [row] = [line for line in lines if "trl algorithm.lr=0.0001" in line and "0 1 2" in line]
    assert f"{lr1:.3f} ± {sd1:.3f} (n=3;" in row and "completed 3" in row
    assert "* final reward: mean total reward over the last 10% of logged steps (at least 1)" in table.stdout
    assert "algorithm.lr=0.0003 seed=2" in table.stdout  # the members' own table stays


def test_a_failed_seed_is_counted_but_kept_out_of_the_mean(isolated: Path) -> None:
    sweep = make_sweep(isolated, seeds=(0, 1, 2), failed=("1",))
    out = run_cli("compare", str(sweep), "--json")
    assert out.returncode == 1  # a member failed
    first = json.loads(out.stdout)["configurations"][0]
    assert first["states"] == {"completed": 2, "failed": 1} and first["final_reward"]["n"] == 2
    finals = [expected_final(0.01, seed, 20) for seed in (0, 2)]
    assert first["final_reward"]["mean"] == pytest.approx(statistics.mean(finals))
    table = run_cli("compare", str(sweep)).stdout
    assert "member 1 failed: RuntimeError: the backend died" in table


def test_one_seed_per_configuration_shows_no_aggregate_table(isolated: Path) -> None:
    out = run_cli("compare", str(make_sweep(isolated, seeds=(0,))))
    assert out.returncode == 0
    assert "configuration (seed aside)" not in out.stdout and "final reward *" in out.stdout


def test_compare_png_draws_each_configuration(isolated: Path) -> None:
    sweep = make_sweep(isolated, seeds=(0, 1))
    result = compared(sweep)
    png = Path(result["png"])
    assert png == sweep / "compare.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 10_000


@pytest.mark.train
@pytest.mark.slow
def test_a_sweep_ends_by_printing_its_table_and_multirun_directory(isolated: Path) -> None:
    out = run_cli("-m", "recipe=grpo_math", "algorithm.steps=3", "algorithm.prompts_per_step=2",
                  "algorithm.samples_per_prompt=4", "eval.before_training=false", "logging.progress=false",
                  "seed=0,1")
    assert out.returncode == 0, out.stderr[-3000:]
    [sweep] = list((isolated / "runs" / "multirun").iterdir())
    tail = out.stdout[out.stdout.rindex("┏"):]  # the last table printed: the sweep's, after both members' summaries
    assert "configuration (seed aside)" in tail and "completed 2" in tail
    assert f"multirun directory: {sweep}" in tail.splitlines()[-1]
    assert (sweep / "compare.png").exists()
    [config] = compared(sweep)["configurations"]
    assert config["seeds"] == [0, 1] and config["final_reward"]["n"] == 2
    # Each member's curves.png from what TRL logged: one line per grpo_math reward, and the total.
    from unirl.record.plot import figure

    assert (sweep / "0" / "curves.png").exists()
    panels = {ax.get_title(): ax for ax in figure(sweep / "0").axes}
    legend = [t.get_text() for t in panels["reward by component"].get_legend().get_texts()]
    assert legend == ["math_answer", "numeric_closeness", "bare_number", "total (weighted)"]
    for title in ("entropy", "completion length", "gradient norm", "learning rate", "clip ratio"):
        assert panels[title].lines, title
