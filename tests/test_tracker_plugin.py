"""A tracker a user installed (examples/unirl-tracker-example: a real distribution with an entry point in group
``unirl``) sees every backend's run through the same lifecycle hooks: TRL's from its training process, and verl's
and OpenRLHF's from their reward adapters in the backend's own interpreter, run from a directory prepared as a run
prepares it, with nothing on that interpreter's path but the staged light core. The trajectory log is written
through the same recorder; a tracker that raises does not stop scoring; a plugin the host blocked stays out of the
backend too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import unirl.backend.native
from tests.support.backend_recipes import gpu_recipe
from tests.support.cli import run_console
from tests.support.helpers import REPO, backend_python, read_jsonl, run_dirs
from unirl.adapters import common
from unirl.backend.environment import CORE_DIR, PLUGIN_LIST
from unirl.host.manager import build_host
from unirl.host.planning import run_inputs
from unirl.plugins.openrlhf.framework import OpenRlhfFramework
from unirl.plugins.verl.framework import VerlFramework
from unirl.rewards.spec import RewardEntry, RewardPolicy, RewardRuntimeSpec

TRACKER = REPO / "examples" / "unirl-tracker-example"
TRACKER_LOG = "tracker_example.jsonl"
ANSWERS = ("7", "12")  # right and wrong for "3+4"

# What each backend does with unirl's adapter, reduced to the calls it makes: verl calls compute_score by keyword
# with the spec in reward_kwargs; OpenRLHF loads the generated file by path and calls reward_func with the decoded
# prompt + response (special-token text included). The interpreter then exits as a backend process does.
BACKEND_CALLS = {
    "verl": """
import json, sys
from unirl.adapters.verl import compute_score
spec = sys.argv[1] + "/reward_spec.json"
scores = [compute_score(data_source="unirl/arith", solution_str=a, ground_truth="7",
                        extra_info={"unirl_prompt": "3+4="}, unirl_spec=spec)["score"] for a in sys.argv[2:]]
""",
    "openrlhf": """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("reward_func", sys.argv[1] + "/openrlhf_reward.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
scores = [module.reward_func([f"3+4={a}</s>"], ["3+4="], ["7"])["scores"] for a in sys.argv[2:]]
""",
}
REPORT = """
import unirl
modules = {"unirl": unirl.__file__}
try:
    import unirl_tracker_example
    modules["tracker"] = unirl_tracker_example.__file__
except ImportError:
    pass
print(json.dumps({"scores": scores, "modules": modules}))
"""
FRAMEWORKS = {"verl": VerlFramework(), "openrlhf": OpenRlhfFramework()}


@pytest.fixture(scope="module")
def tracker_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pip-install the tracker into a directory of its own (the test venv stays untouched)."""
    target = tmp_path_factory.mktemp("tracker-site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                    str(TRACKER)], check=True, capture_output=True, text=True)
    return target


@pytest.fixture
def tracker_installed(tracker_site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tracker importable and its distribution visible here, as after `pip install` on the host."""
    monkeypatch.syspath_prepend(str(tracker_site))
    monkeypatch.setattr(unirl.backend.native, "check_gpus", lambda *a: None)  # no GPU here; the rest is real
    return tracker_site


@pytest.mark.train
def test_an_installed_tracker_sees_a_trl_run_from_its_training_process(tracker_site: Path, isolated: Path) -> None:
    # its own process: the tracker must be on the interpreter's path when it starts, as after `pip install`
    out = run_console("algorithm.steps=2", "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=4",
                      "eval.before_training=false", "eval.every_steps=0", "logging.progress=false",
                      "logging.plot=false", "logging.trajectories_every=1", cwd=isolated,
                      env={"PYTHONPATH": os.pathsep.join(p for p in (str(tracker_site), os.environ.get("PYTHONPATH"))
                                                         if p)})
    assert out.returncode == 0, out.stderr[-3000:]
    [run_dir] = run_dirs(isolated / "runs")
    events = read_jsonl(run_dir / TRACKER_LOG)
    assert [e["event"] for e in events] == ["run_start", "rollouts_scored", "rollouts_scored", "run_end"]
    assert {(e["role"], e["framework"]) for e in events} == {("run", "trl")}
    assert [e["step"] for e in events if e["event"] == "rollouts_scored"] == [1, 2]
    assert events[-1]["state"] == "completed"
    scored = [r["completion"] for e in events if e["event"] == "rollouts_scored" for r in e["records"]]
    assert scored == [t["completion"] for t in read_jsonl(run_dir / "trajectories.jsonl")]


def prepare(backend: str, run_dir: Path) -> Path:
    """The run directory as `unirl +framework=<backend>` prepares it before launching; returns the staged core."""
    framework = FRAMEWORKS[backend]
    plan = framework.plan(gpu_recipe(backend, algorithm={"steps": 3, "prompts_per_step": 8}))
    framework.prepare(plan, run_dir, run_inputs(build_host(), plan))
    return run_dir / CORE_DIR


def score_in_backend(python: list[str], backend: str, run_dir: Path) -> dict[str, Any]:
    """The backend's process: another interpreter, started in the run directory with only the core on its path."""
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(run_dir / CORE_DIR), "PYTHONDONTWRITEBYTECODE": "1",
           "HOME": str(run_dir)}
    done = subprocess.run([*python, "-c", BACKEND_CALLS[backend] + REPORT, str(run_dir), *ANSWERS], env=env,
                          cwd=run_dir, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def interpreter(kind: str, backend: str) -> list[str]:
    # "bare": this Python without its site-packages (-S), so unirl, pluggy and the tracker can only come from the
    # staged core; "venv": the backend's own virtual environment, where none of the three is installed.
    return [sys.executable, "-S"] if kind == "bare" else [str(backend_python(backend))]


@pytest.mark.parametrize(("backend", "kind"), [
    ("verl", "bare"), ("openrlhf", "bare"),
    pytest.param("verl", "venv", marks=[pytest.mark.verl, pytest.mark.slow]),
    pytest.param("openrlhf", "venv", marks=[pytest.mark.openrlhf, pytest.mark.slow]),
])
def test_an_installed_tracker_sees_what_a_native_adapter_scores_in_another_interpreter(
        tracker_installed: Path, isolated: Path, backend: str, kind: str) -> None:
    run_dir = isolated / "run"
    core = prepare(backend, run_dir)
    staged = json.loads((core / PLUGIN_LIST).read_text())
    assert {"name": "tracker_example", "kind": "entry_point", "distribution": "unirl-tracker-example",
            "version": "0.1.0", "module": "", "path": ""} in staged["plugins"]

    result = score_in_backend(interpreter(kind, backend), backend, run_dir)
    assert result["modules"]["unirl"].startswith(str(core)) and result["modules"]["tracker"].startswith(str(core))
    events = read_jsonl(run_dir / TRACKER_LOG)
    assert [e["event"] for e in events] == ["run_start", "rollouts_scored", "rollouts_scored", "run_end"]
    assert {(e["role"], e["framework"]) for e in events} == {("scorer", backend)}
    assert len({e["pid"] for e in events}) == 1 and events[0]["pid"] != os.getpid()  # the backend's process
    assert events[0]["version"] == "0.1.0"  # its dist-info was staged with it
    scored = [r for e in events if e["event"] == "rollouts_scored" for r in e["records"]]
    assert [r["completion"] for r in scored] == list(ANSWERS)
    assert [r["total"] for r in scored] == result["scores"]
    assert result["scores"][0] > result["scores"][1]  # the right answer scores higher
    assert [e.get("step") for e in events if e["event"] == "rollouts_scored"] == [None, None]
    assert (events[-1]["state"], events[-1]["reward_calls"]) == ("completed", len(ANSWERS))
    # unirl's own writer got the same records, through the same recorder
    trajectories = read_jsonl(run_dir / "trajectories.jsonl")
    assert [(t["completion"], t["total"], t["backend"]) for t in trajectories] == \
        [(a, s, backend) for a, s in zip(ANSWERS, result["scores"], strict=True)]


def test_a_plugin_the_host_blocked_stays_out_of_the_backend(tracker_installed: Path, isolated: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNIRL_PLUGINS_BLOCK", "tracker_example")
    run_dir = isolated / "run"
    core = prepare("verl", run_dir)
    staged = json.loads((core / PLUGIN_LIST).read_text())
    assert "tracker_example" in staged["blocked"] and "tracker_example" not in {p["name"] for p in staged["plugins"]}
    assert not (core / "unirl_tracker_example").exists()
    result = score_in_backend(interpreter("bare", "verl"), "verl", run_dir)
    assert len(result["scores"]) == len(ANSWERS) and "tracker" not in result["modules"]
    assert not (run_dir / TRACKER_LOG).exists()
    assert len(read_jsonl(run_dir / "trajectories.jsonl")) == len(ANSWERS)


RAISING_TRACKER = """
import json
import unirl

@unirl.hookimpl
def unirl_rollouts_scored(run, records):
    raise ConnectionError("the tracking server is down")

@unirl.hookimpl
def unirl_run_end(run, summary):
    run.path("end.json").write_text(json.dumps(summary))
"""


def test_a_tracker_that_raises_does_not_stop_scoring(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (isolated / "unirlfile.py").write_text(RAISING_TRACKER)
    from unirl.adapters.verl import compute_score

    spec = isolated / "reward_spec.json"
    RewardRuntimeSpec((RewardEntry("bare_number", "unirl.plugins.builtin_rewards.formats:bare_number", inline=True),),
                      RewardPolicy(on_error="fallback"), str(isolated / "trajectories.jsonl")).write(spec)
    try:
        rows = [compute_score("unirl/arith", answer, "7", {}, unirl_spec=str(spec)) for answer in ("7", "seven")]
        common.runtime_for("verl", str(spec)).end()
    finally:
        runtime = common._RUNTIMES.pop(("verl", os.path.abspath(spec)), None)
        if runtime is not None:
            runtime.executor.close()
    assert [row["score"] for row in rows] == [1.0, 0.0]
    assert [t["completion"] for t in read_jsonl(isolated / "trajectories.jsonl")] == ["7", "seven"]
    err = capsys.readouterr().err
    assert err.count("plugin 'local:unirlfile.py' raised in unirl_rollouts_scored") == 1
    assert "ConnectionError: the tracking server is down" in err
    end = json.loads((isolated / "end.json").read_text())
    assert end["state"] == "completed" and end["plugin_errors"] == {"local:unirlfile.py:unirl_rollouts_scored": 2}
