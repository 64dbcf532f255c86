"""Experiment trackers named in the recipe (``logging.trackers``): TensorBoard, W&B (offline), MLflow and trackio get
unirl's own record from the process that reports the run, and each is read back with its own tools: TensorBoard's
``EventAccumulator``, W&B's ``wandb leet inspect`` over the offline run's transaction log, ``MlflowClient`` over the
run directory's store, trackio's ``SQLiteStorage``. Plan-time refusals (an unknown tracker, one not installed where
the run reports) and a tracker that raises (counted in the summary, the run unharmed) need no training.

Semantics relied on (installed versions: tensorboard 2.21.0, wandb 0.31.0, mlflow-skinny 3.17.2, trackio 0.43.0):
- TensorBoard stores a ``simple_value`` as float32 (tensorboard/compat/proto/summary.proto ``float simple_value``),
  so values compare at float32 precision; ``EventAccumulator.Scalars`` returns ``ScalarEvent(wall_time, step, value)``
  (tensorboard/backend/event_processing/event_accumulator.py).
- ``wandb leet inspect --json PATH`` prints one JSON object per record of the ``.wandb`` log; history records carry
  ``history.item`` with ``_step`` (``wandb leet inspect --help``; wandb 0.31.0); ``--summary --json`` prints the run's
  state, summary and config as one object.
- MLflow's ``get_metric_history`` returns every logged ``Metric(key, value, timestamp, step)``
  (mlflow/tracking/client.py ``MlflowClient.get_metric_history``); params are strings.
- trackio's ``SQLiteStorage.get_logs(project, run)`` returns one dict per logged step with ``step``
  (trackio/sqlite_storage.py); the store is ``$TRACKIO_DIR`` read at import (trackio/utils.py ``_get_trackio_dir``).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import run_cli, run_console
from tests.support.helpers import missing, read_jsonl, run_dirs
from unirl.host.manager import build_host
from unirl.recipe.schema import TRACKER_MODULES, TRACKERS, Recipe
from unirl.record.layout import ROLE_SCORER, RunInfo

ALL = list(TRACKERS)
SHORT = ["algorithm.steps=3", "eval.every_steps=0", "logging.progress=false", "logging.plot=false"]


def require_trackers() -> None:
    import importlib.util

    absent = [m for m in TRACKER_MODULES.values() if importlib.util.find_spec(m) is None]
    if absent:
        missing(f"tracker packages {absent} are not installed (pip install -e '.[trackers]')")


def tool(name: str) -> str:
    path = Path(sys.executable).parent / name
    if not path.exists():
        missing(f"{name} is not installed beside this interpreter (pip install -e '.[trackers]')")
    return str(path)


def offline_env(root: Path) -> dict[str, str]:
    """No network, no account, nothing written outside ``root``: W&B offline with its own directories, trackio's
    store in ``root``, MLflow's default (the run directory's sqlite store)."""
    (root / "home").mkdir(exist_ok=True)
    return {"WANDB_MODE": "offline", "WANDB_DIR": str(root / "wandb"), "WANDB_CACHE_DIR": str(root / "wandb-cache"),
            "WANDB_CONFIG_DIR": str(root / "wandb-config"), "WANDB_DATA_DIR": str(root / "wandb-data"),
            "TRACKIO_DIR": str(root / "trackio"), "HF_HUB_OFFLINE": "1", "HOME": str(root / "home")}


def recipe_with(*trackers: str, **options: dict[str, Any]) -> dict[str, Any]:
    from dataclasses import asdict

    recipe = asdict(Recipe())
    recipe["logging"].update(trackers=list(trackers), plot=False, progress=False)
    for name, values in options.items():
        recipe["logging"]["tracker_options"][name].update(values)
    return recipe


def tb_scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def tb_texts(logdir: Path) -> dict[str, list[tuple[int, str]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"tensors": 0})
    events.Reload()
    return {tag: [(e.step, e.tensor_proto.string_val[0].decode()) for e in events.Tensors(tag)]
            for tag in events.Tags()["tensors"]}


def code_block(text: str) -> Any:
    return json.loads(text.removeprefix("```json\n").removesuffix("\n```"))


def f32(value: float) -> float:
    import numpy as np

    return float(np.float32(value))


# --- plan time ------------------------------------------------------------------------------------------------


def test_an_unknown_tracker_is_refused_at_plan_time_naming_the_field_and_the_choices(isolated: Path) -> None:
    out = run_cli("plan", "logging.trackers=[tensorboard,neptune]")
    assert out.returncode == 2
    assert "logging.trackers[1]='neptune': one of ['tensorboard', 'wandb', 'mlflow', 'trackio']" in out.stderr
    assert not (isolated / "runs").exists()
    twice = run_cli("plan", "logging.trackers=[wandb,wandb]")
    assert twice.returncode == 2 and "each tracker may appear once" in twice.stderr


def test_a_tracker_missing_where_the_run_reports_is_refused_at_plan_time_naming_the_extra(isolated: Path) -> None:
    # A real interpreter without the trackers: a fresh venv, as a TRL environment of its own would be before
    # `pip install unirl[wandb]` (TRL's runner reports the run from framework.python).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(isolated / "bare")], check=True, timeout=120)
    bare = isolated / "bare" / "bin" / "python"
    out = run_cli("plan", "logging.trackers=[tensorboard,wandb]", f"+framework.python={bare}")
    assert out.returncode == 2, out.stdout + out.stderr
    for i, name in enumerate(("tensorboard", "wandb")):
        assert f"logging.trackers[{i}]={name!r}: a tracker installed where the run reports (framework.python={bare})" \
            in out.stderr
        assert f"pip install 'unirl[{name}]' there" in out.stderr
    require_trackers()
    # Here (unirl's own interpreter, where they are installed) the same recipe plans. A native backend's run is
    # reported by its record follower, in the backend's own interpreter: one that lacks them is refused the same way.
    assert run_cli("plan", "logging.trackers=[tensorboard,wandb]").returncode == 0
    native = run_cli("plan", "framework=verl", "logging.trackers=[tensorboard,wandb]", f"framework.python={bare}")
    assert native.returncode == 2 and f"(framework.python={bare}), which has no module 'wandb'" in native.stderr


def test_planning_with_trackers_imports_none_of_them() -> None:
    probe = ("import sys, io, contextlib\nfrom unirl.cli.main import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             "    rc = main(['plan', 'logging.trackers=[tensorboard,wandb,mlflow,trackio]'])\n"
             "print(rc, sorted(m for m in ('tensorboard', 'wandb', 'mlflow', 'trackio') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    require_trackers()
    assert out.stdout.split("\n")[-2] == "0 []", out.stdout + out.stderr


# --- the lifecycle, fed directly --------------------------------------------------------------------------------


def test_trackers_act_only_when_named_and_only_where_the_whole_run_is_reported(tmp_path: Path) -> None:
    require_trackers()
    host = build_host()
    unnamed = host.run_recorder(RunInfo(tmp_path / "a", "trl", recipe_with()))
    scorer = host.run_recorder(RunInfo(tmp_path / "b", "verl", recipe_with("tensorboard"), role=ROLE_SCORER))
    for recorder in (unnamed, scorer):
        recorder.run.run_dir.mkdir()
        recorder.run_start()
        recorder.metrics(1, {"loss": 1.0})
        recorder.run_end({"state": "completed"})
    assert not (tmp_path / "a" / "tensorboard").exists() and not (tmp_path / "b" / "tensorboard").exists()
    assert not (tmp_path / "a" / "mlflow.db").exists() and not (tmp_path / "a" / "wandb").exists()


def test_a_tracker_that_raises_is_counted_in_the_summary_and_the_run_record_and_other_trackers_go_on(
        tmp_path: Path) -> None:
    require_trackers()
    run_dir = tmp_path / "run" / "t0"
    run_dir.mkdir(parents=True)
    (tmp_path / "not-a-dir").write_text("a file where TensorBoard wants its directory")
    recipe = recipe_with("tensorboard", "mlflow", tensorboard={"dir": str(tmp_path / "not-a-dir" / "tb")})
    recorder = build_host().run_recorder(RunInfo(run_dir, "trl", recipe))
    recorder.run_start()
    for step in (1, 2, 3):
        recorder.metrics(step, {"loss": 1.0 / step})
    recorder.run_end({"state": "completed"})
    summary = json.loads((run_dir / "summary.json").read_text())
    # counted once, at the start that raised; the tracker is off for the rest of the run (nothing more to count)
    assert summary["plugin_errors"] == {"tensorboard:unirl_run_start": 1}
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("unirl").experiment_id])
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == \
        [(1, 1.0), (2, 0.5), (3, 1.0 / 3)]


@pytest.mark.parametrize(("state", "mlflow_status", "wandb_exit"),
                         [("failed", "FAILED", 1), ("interrupted", "KILLED", 1)])
def test_a_failed_or_interrupted_run_still_closes_every_tracker_with_its_state(
        state: str, mlflow_status: str, wandb_exit: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_trackers()
    for key, value in offline_env(tmp_path).items():
        monkeypatch.setenv(key, value)
    run_dir = tmp_path / "run" / state
    run_dir.mkdir(parents=True)
    recorder = build_host().run_recorder(RunInfo(run_dir, "trl", recipe_with("tensorboard", "wandb", "mlflow")))
    recorder.run_start()
    recorder.metrics(1, {"loss": 0.5})
    recorder.run_end({"state": state, "error": "KeyboardInterrupt" if state == "interrupted" else "boom"})
    assert "plugin_errors" not in json.loads((run_dir / "summary.json").read_text())
    assert code_block(tb_texts(run_dir / "tensorboard")["summary"][0][1])["state"] == state  # closed and flushed
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run_dir / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("unirl").experiment_id])
    assert run.info.status == mlflow_status and run.data.tags["unirl.state"] == state
    inspected = subprocess.run([tool("wandb"), "leet", "inspect", "--summary", "--json", str(run_dir / "wandb")],
                               capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    found = json.loads(inspected.stdout)
    assert found["summary"]["state"] == state and found["exit_code"] == wandb_exit, found


# --- a real TRL run -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default, three steps, with every tracker; its own process (W&B starts its service process,
    trackio reads TRACKIO_DIR when first imported), offline, everything under a temporary directory."""
    require_trackers()
    root = tmp_path_factory.mktemp("tracked")
    out = run_console(*SHORT, f"logging.trackers=[{','.join(ALL)}]", cwd=root,
                      env={**offline_env(root), "UNIRL_RUNS_DIR": str(root / "runs")})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    [run_dir] = run_dirs(root / "runs")
    return run_dir


def metrics_of(run_dir: Path) -> list[dict[str, Any]]:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    return rows


def evals_of(run_dir: Path) -> list[dict[str, Any]]:
    return [e for e in read_jsonl(run_dir / "eval.jsonl") if e["kind"] == "summary"]


def numbers(row: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in row.items() if k != "step" and isinstance(v, int | float) and not isinstance(v, bool)}


def same(a: float, b: float, rel: float = 1e-12) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=rel, abs=1e-12)


@pytest.mark.train
def test_tensorboard_holds_every_step_of_metrics_jsonl_and_the_evaluations(tracked_run: Path) -> None:
    scalars = tb_scalars(tracked_run / "tensorboard")
    rows = metrics_of(tracked_run)
    assert set(scalars) == {k for r in rows for k in numbers(r)} | {f"eval/{k}" for e in evals_of(tracked_run)
                                                                    for k in numbers(e)}
    for key in {k for r in rows for k in numbers(r)}:
        expected = [(r["step"], f32(r[key])) for r in rows if key in r]
        assert len(scalars[key]) == len(expected), key
        assert all(s == e_s and same(v, e_v, 1e-6)
                   for (s, v), (e_s, e_v) in zip(scalars[key], expected, strict=True)), key
    evals = evals_of(tracked_run)
    assert scalars["eval/accuracy"] == [(e["step"], f32(e["accuracy"])) for e in evals]
    assert [e["step"] for e in evals] == [0, 3]
    texts = tb_texts(tracked_run / "tensorboard")
    assert code_block(texts["recipe"][0][1]) == json.loads((tracked_run / "plan.json").read_text())["recipe"]
    summary = json.loads((tracked_run / "summary.json").read_text())
    assert texts["summary"][0][0] == 3 and code_block(texts["summary"][0][1])["accuracy_after"] == \
        summary["accuracy_after"]


@pytest.mark.train
def test_wandb_offline_run_holds_the_history_config_and_summary(tracked_run: Path) -> None:
    [offline] = list((tracked_run / "wandb").glob("offline-run-*"))
    records = subprocess.run([tool("wandb"), "leet", "inspect", "--json", str(offline)], capture_output=True,
                             text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert records.returncode == 0, records.stderr
    history: dict[int, dict[str, Any]] = {}
    for line in records.stdout.splitlines():
        record = json.loads(line)
        if record.get("type") == "history":
            item = record["history"]["item"]
            history.setdefault(item["_step"], {}).update(item)
    assert sorted(history) == [0, 1, 2, 3]
    for row in metrics_of(tracked_run):
        logged = history[row["step"]]
        for key, value in numbers(row).items():
            got = logged[key]
            assert same(float(got), value) if not isinstance(got, str) else math.isnan(value), (key, got, value)
    for e in evals_of(tracked_run):
        assert history[e["step"]]["eval/accuracy"] == pytest.approx(e["accuracy"])
    found = json.loads(subprocess.run([tool("wandb"), "leet", "inspect", "--summary", "--json", str(offline)],
                                      capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL).stdout)
    summary = json.loads((tracked_run / "summary.json").read_text())
    assert found["exit_code"] == 0 and found["name"] == f"{tracked_run.parent.name}-{tracked_run.name}"
    assert found["summary"]["state"] == "completed" and found["step"] == 3
    assert found["summary"]["accuracy_after"] == pytest.approx(summary["accuracy_after"])
    plan_recipe = json.loads((tracked_run / "plan.json").read_text())["recipe"]
    config = json.dumps(found["config"])
    assert '"steps": 3' in config and '"trackers"' in config and plan_recipe["logging"]["trackers"] == ALL


@pytest.mark.train
def test_mlflow_store_holds_the_params_every_metric_history_and_the_summary(tracked_run: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tracked_run / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("unirl").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["unirl.state"] == "completed"
    assert run.info.run_name == f"{tracked_run.parent.name}-{tracked_run.name}"
    params = run.data.params
    assert params["algorithm.steps"] == "3" and params["model.path"] == "builtin:tiny-arith"
    assert json.loads(params["logging.trackers"]) == ALL
    rows = metrics_of(tracked_run)
    for key in {k for r in rows for k in numbers(r)}:
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        expected = [(r["step"], r[key]) for r in rows if key in r]
        assert len(history) == len(expected) and all(
            s == e_s and same(v, e_v) for (s, v), (e_s, e_v) in zip(history, expected, strict=True)), key
    accuracy = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, "eval/accuracy"))
    assert accuracy == [(e["step"], e["accuracy"]) for e in evals_of(tracked_run)]
    summary = json.loads((tracked_run / "summary.json").read_text())
    assert run.data.metrics["summary/accuracy_after"] == summary["accuracy_after"]


@pytest.mark.train
def test_trackio_store_holds_every_step_and_the_config(tracked_run: Path) -> None:
    store = tracked_run.parents[2] / "trackio"
    name = f"{tracked_run.parent.name}-{tracked_run.name}"
    read = ("import json, sys\nfrom trackio.sqlite_storage import SQLiteStorage as S\n"
            "print(json.dumps({'logs': S.get_logs('unirl', sys.argv[1]), "
            "'config': S.get_run_config('unirl', sys.argv[1])}, default=str))\n")
    out = subprocess.run([sys.executable, "-c", read, name], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRACKIO_DIR": str(store)})
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout.strip().splitlines()[-1])
    by_step: dict[int, dict[str, Any]] = {}
    for log in found["logs"]:
        by_step.setdefault(log["step"], {}).update(log)
    for row in metrics_of(tracked_run):
        for key, value in numbers(row).items():
            got = by_step[row["step"]].get(key)
            assert got is not None and (same(float(got), value) if math.isfinite(value) else True), (key, got)
    assert [by_step[e["step"]]["eval/accuracy"] for e in evals_of(tracked_run)] == \
        [e["accuracy"] for e in evals_of(tracked_run)]
    assert found["config"]["algorithm"]["steps"] == 3 and found["config"]["logging"]["trackers"] == ALL


@pytest.mark.train
def test_the_tracked_run_reports_no_plugin_error_and_trl_keeps_its_own_trackers_off(tracked_run: Path) -> None:
    summary = json.loads((tracked_run / "summary.json").read_text())
    assert summary["state"] == "completed" and "plugin_errors" not in summary
    native = json.loads((tracked_run / "native_config.json").read_text())
    assert native["trainer_config"]["report_to"] == "none"  # unirl fans out; TRL's own callbacks stay off
