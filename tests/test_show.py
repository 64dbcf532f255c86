"""`unirl show RUN_DIR`: a run's scored completions in the terminal, grouped by prompt, each with its total, every
reward and component and the error of a failed call; filters by step, order, failures and prompt; clear refusals
(exit 2) for what is not a run or a step it did not record; model output never reaches the terminal raw.

The run directories here are written by unirl's own recorder (the hooks a TRL run fires, :mod:`unirl.record.
recorder`), so they hold exactly what a run writes; a real TRL run is shown by the `train` test at the end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli
from unirl.record.layout import MANIFEST, PLAN, RunInfo, write_json
from unirl.record.recorder import unirl_eval_done, unirl_metrics, unirl_rollouts_scored, unirl_run_end

PROMPTS = {"2+2=": "4", "3+4=": "7"}
HOSTILE = "\x1b[31mRED\x1b[0m\x1b]0;pwned-title\x07\rOVERWRITE\u202eevil\x08 <script>alert(1)</script> [bold]x[/bold]"


def scored(step: int, prompt: str, index: int, *, fail: bool = False, completion: str | None = None) -> dict[str, Any]:
    """One scored completion as unirl.adapters.common.trajectory_record writes it."""
    answer = int(PROMPTS[prompt])
    correct = index == 0
    record: dict[str, Any] = {
        "step": step, "prompt": prompt, "completion": completion or str(answer + index), "reference": PROMPTS[prompt],
        "data_source": "test", "truncated": False,
        "scores": {"math_answer": 1.0 if correct else 0.0, "brevity": None if fail else 0.5},
        "components": {"math_answer/has_answer": 1.0}, "errors": {},
    }
    record["total"] = record["scores"]["math_answer"] + (0.0 if fail else 0.25 * index)
    if fail:
        record["errors"] = {"brevity": "Traceback (most recent call last):\n  ...\nValueError: brevity blew up"}
        record["error_kinds"] = {"brevity": "exception"}
    return record


def make_run(root: Path, *, steps: int = 3, per_prompt: int = 3, compress: bool = False, plot: bool = False,
             hostile: str | None = None, fail_at: tuple[int, ...] = (2,), reward: float = 0.2,
             at: Path | None = None, seed: int = 0) -> Path:
    """A finished run directory (``at``, else under ``root/runs``), written through the recorder's hooks as a TRL
    run writes it; ``hostile`` is the last step's third completion of 2+2=; the total reward is ``reward * step``."""
    run_dir = at or root / "runs" / "grpo_math" / "2026-01-01_00-00-00"
    run_dir.mkdir(parents=True, exist_ok=True)
    recipe = {"logging": {"trajectories": True, "trajectories_compress": compress, "plot": plot, "progress": False}}
    run = RunInfo(run_dir, "trl", recipe)
    write_json(run_dir / MANIFEST, {"framework": "trl", "seed": 0, "argv": ["unirl", "recipe=grpo_math"]})
    write_json(run_dir / PLAN, {"framework": "trl", "command": ["python", "-m", "unirl.plugins.trl.runner"]})
    unirl_eval_done(run, 0, {"n": 2, "solved": 0, "accuracy": 0.0, "reward_mean": 0.0}, [])
    for step in range(1, steps + 1):
        records = [scored(step, p, i, fail=step in fail_at and p == "3+4=" and i == 1,
                          completion=hostile if hostile and step == steps and p == "2+2=" and i == 2 else None)
                   for p in PROMPTS for i in range(per_prompt)]
        unirl_rollouts_scored(run, step, records)
        unirl_metrics(run, step, {"reward/total/mean": reward * step, "reward/math_answer/mean": 0.1 * step,
                                  "reward/brevity/mean": 0.5, "entropy": 2.0 - 0.1 * step, "grad_norm": 1.0,
                                  "lr": 1e-4, "completion_len/mean": 2.0, "clip_ratio": 0.0})
    unirl_eval_done(run, steps, {"n": 2, "solved": 1, "accuracy": 0.5, "reward_mean": 0.5}, [])
    unirl_run_end(run, {"state": "completed", "framework": "trl", "steps": steps, "seed": seed, "wall_time_s": 1.5,
                        "accuracy_before": 0.0, "accuracy_after": 0.5})
    return run_dir


def show(*args: str, env: dict[str, str] | None = None) -> Any:
    return run_cli("show", *args, env=env)


def test_the_last_step_grouped_by_prompt_with_total_every_reward_and_component(isolated: Path) -> None:
    run_dir = make_run(isolated)
    out = show(str(run_dir))
    assert out.returncode == 0, out.stderr
    assert "step 3 (recorded steps: 1-3)" in out.stdout  # the last step by default, and which steps exist
    assert "6 of 6 completions, in 2 prompt group(s)" in out.stdout
    assert "prompt: 2+2=   reference: 4   3 shown" in out.stdout and "prompt: 3+4=   reference: 7" in out.stdout
    header = next(line for line in out.stdout.splitlines() if line.startswith("┃"))
    for column in ("total", "math_answer", "brevity", "math_answer/has_answer", "completion", "errors"):
        assert column in header
    # 2+2='s completions 4, 5, 6: the first right (total 1), the others 0.25 and 0.5 from brevity's share.
    rows = [line for line in out.stdout.splitlines() if line.startswith("│")]
    assert rows[0].split("│")[1:3] == [" 1.000 ", " 1.000       "] and "│ 4 " in rows[0]
    assert out.stdout.index("prompt: 2+2=") < out.stdout.index("prompt: 3+4=")


def test_step_worst_best_prompt_and_limit_choose_what_is_shown(isolated: Path) -> None:
    run_dir = make_run(isolated)
    first = show(str(run_dir), "--step", "1")
    assert first.returncode == 0 and "step 1 (recorded steps: 1-3)" in first.stdout

    def totals(out: str) -> list[str]:
        return [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]

    worst = show(str(run_dir), "--worst", "--limit", "2")
    assert worst.returncode == 0
    assert totals(worst.stdout) == ["0.250", "0.250"]  # each prompt's second completion: wrong, short
    assert "2 of 6 completions worst first" in worst.stdout and "(--limit 2)" in worst.stdout
    best = show(str(run_dir), "--best", "--limit", "3")
    # The three best: both right answers (1.0) and 2+2='s 0.5, grouped by prompt in the order the best first appear.
    assert totals(best.stdout) == ["1.000", "0.500", "1.000"]
    assert best.stdout.index("prompt: 2+2=") < best.stdout.index("prompt: 3+4=")
    only = show(str(run_dir), "--prompt", "3+4")  # every step: 3 steps x 3 completions of that prompt
    assert "9 of 9 completions whose prompt contains '3+4'" in only.stdout
    assert "prompt: 2+2=" not in only.stdout and "every step" in only.stdout
    assert "step" in next(line for line in only.stdout.splitlines() if line.startswith("┃"))  # a step column then
    none = show(str(run_dir), "--prompt", "no such prompt")
    assert none.returncode == 0 and "no completions whose prompt contains 'no such prompt'" in none.stdout


def test_errors_shows_only_failed_reward_calls_with_their_error(isolated: Path) -> None:
    run_dir = make_run(isolated, fail_at=(1, 2))
    out = show(str(run_dir), "--errors")
    assert out.returncode == 0, out.stderr
    assert "2 of 2 failed reward calls, in 1 prompt group(s)" in out.stdout  # steps 1 and 2, nothing else
    assert out.stdout.count("brevity (exception): ValueError: brevity blew up") == 2
    assert "prompt: 2+2=" not in out.stdout
    clean = make_run(isolated / "other", fail_at=())
    assert "no failed reward calls at every step" in show(str(clean), "--errors").stdout


def test_json_gives_the_chosen_records_as_the_run_wrote_them(isolated: Path) -> None:
    run_dir = make_run(isolated)
    out = show(str(run_dir), "--worst", "--limit", "3", "--json")
    records = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(records) == 3 and all(r["step"] == 3 for r in records)
    assert [r["total"] for r in records] == sorted(r["total"] for r in records)


@pytest.mark.parametrize("case", ["missing", "file", "not_a_run", "multirun", "bad_step", "no_trajectories",
                                  "limit_zero", "worst_and_best"])
def test_what_is_not_a_run_or_a_recorded_step_is_refused_clearly(isolated: Path, case: str) -> None:
    run_dir = make_run(isolated)
    (isolated / "plain.txt").write_text("x")
    (isolated / "empty").mkdir()
    sweep = isolated / "multirun" / "2026"
    for member in ("0", "1"):
        (sweep / member / ".hydra").mkdir(parents=True)
    bare = isolated / "bare"
    bare.mkdir()
    write_json(bare / MANIFEST, {"framework": "trl"})
    args, message = {
        "missing": ([str(isolated / "nope")], "nope: no such directory"),
        "file": ([str(isolated / "plain.txt")], "a file, not a run directory"),
        "not_a_run": ([str(isolated / "empty")], "not a run directory (it has none of manifest.json"),
        "multirun": ([str(sweep)], f"is a multirun directory, not one run; `unirl show` one of its members: "
                                   f"{sweep / '0'}, {sweep / '1'}"),
        "bad_step": ([str(run_dir), "--step", "7"], "step 7: no completions recorded at that step in "
                                                   f"{run_dir}; recorded steps: 1-3"),
        "no_trajectories": ([str(bare)], "no completions recorded (no trajectories.jsonl"),
        "limit_zero": ([str(run_dir), "--limit", "0"], "must be at least 1, not 0"),
        "worst_and_best": ([str(run_dir), "--worst", "--best"], "not allowed with argument"),
    }[case]
    out = show(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert out.stdout == ""


def test_sparse_recorded_steps_are_named_as_they_are(isolated: Path) -> None:
    run_dir = make_run(isolated, steps=1)
    run = RunInfo(run_dir, "trl", {"logging": {"trajectories": True}})
    for step in (10, 20):
        unirl_rollouts_scored(run, step, [scored(step, "2+2=", 0)])
    out = show(str(run_dir), "--step", "5")
    assert "recorded steps: 1, 10, 20" in out.stderr


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "colour-terminal"])
def test_control_characters_in_a_completion_never_reach_the_terminal_raw(isolated: Path, terminal: bool) -> None:
    run_dir = make_run(isolated, hostile=HOSTILE)
    # FORCE_COLOR makes rich treat the capture as a colour terminal (rich/console.py reads it): styles are sent as
    # escapes of its own then, and the completion's must still arrive escaped.
    env = {"FORCE_COLOR": "1", "COLUMNS": "250"} if terminal else {"NO_COLOR": "1"}
    out = show(str(run_dir), env=env)
    assert out.returncode == 0, out.stderr
    for raw in ("\x1b[31mRED", "\x1b]0;", "\x07", "\r", "\u202e", "\x08"):
        assert raw not in out.stdout
    for shown in ("\\x1b[31mRED", "\\x1b]0;pwned-title\\a", "\\rOVERWRITE", "\\u202eevil\\b", "<script>alert(1)",
                  "[bold]x[/bold]"):  # printed as written: escapes visible, brackets not taken as rich markup
        assert shown in out.stdout
    if not terminal:
        assert "\x1b" not in out.stdout  # nothing at all a terminal would interpret
    else:
        assert "\x1b[" in out.stdout  # rich's own styling is on: the check above is not vacuous


def test_gzip_trajectories_and_a_torn_last_line_are_read(isolated: Path) -> None:
    run_dir = make_run(isolated, compress=True)
    assert (run_dir / "trajectories.jsonl.gz").exists() and not (run_dir / "trajectories.jsonl").exists()
    out = show(str(run_dir))
    assert out.returncode == 0 and "6 of 6 completions" in out.stdout
    plain = make_run(isolated / "plain")
    with (plain / "trajectories.jsonl").open("a") as f:  # a kill mid-write leaves the last line unfinished
        f.write('{"step": 4, "prompt": "2+2=", "comple')
    torn = show(str(plain))
    assert torn.returncode == 0 and "step 3 (recorded steps: 1-3)" in torn.stdout
    with (run_dir / "trajectories.jsonl.gz").open("ab") as g:  # and a gzip member torn by a kill
        g.write(b"\x1f\x8b\x08\x00" + os.urandom(8))
    assert "6 of 6 completions" in show(str(run_dir)).stdout


@pytest.mark.train
@pytest.mark.slow
def test_a_real_trl_run_is_shown_by_prompt_with_its_rewards(isolated: Path) -> None:
    run = run_cli("recipe=grpo_math", "algorithm.steps=2", "algorithm.prompts_per_step=2",
                  "algorithm.samples_per_prompt=4", "eval.before_training=false", "logging.progress=false",
                  "logging.plot=false", "logging.trajectories_every=1")
    assert run.returncode == 0, run.stderr[-3000:]
    [run_dir] = [p.parent for p in (isolated / "runs").rglob("summary.json")]
    out = show(str(run_dir), "--worst")
    assert out.returncode == 0, out.stderr
    assert "step 2 (recorded steps: 1, 2)" in out.stdout and "8 of 8 completions worst first" in out.stdout
    assert out.stdout.count("prompt: ") == 2  # prompts_per_step groups
    header = next(line for line in out.stdout.splitlines() if line.startswith("┃"))
    for reward in ("math_answer", "numeric_closeness", "bare_number"):  # grpo_math's rewards, each a column
        assert reward in header
