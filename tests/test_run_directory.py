"""The run directory's guards, piece by piece: the lock (holder, staleness, pid reuse, children), the destination
policy, the recipe a resume may not change, the run-name rule, checkpoint verification and the job ids a stop
accepts. The attacks themselves, end to end, are the adversarial corpus's `run_directory` area
(tests/adversarial/run_directory.py); this file checks the parts those attacks rest on, and one subprocess smoke test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial import run_directory as rd
from unirl.errors import UnirlError
from unirl.launch.resume import (
    latest_trainer_checkpoint,
    recipe_changes,
    safetensors_problem,
    torch_file_problem,
    verify_checkpoint,
)
from unirl.launch.run_lock import (
    LOCK,
    RunDirectoryLocked,
    acquire,
    check_destination,
    held,
    holder,
    identify,
    process_start,
    read_lock,
)
from unirl.recipe.run_name import PATTERN, problems, raw_problems


def _record(pid: int, **changes: object) -> dict[str, object]:
    return {**identify(pid).to_dict(), "host": socket.gethostname(), "command": ["unirl", "resume", "x"], **changes}


def test_the_lock_names_its_holder_is_reentrant_and_goes_with_the_last_release(tmp_path: Path) -> None:
    run_dir = tmp_path / "a" / "run"
    lock = acquire(run_dir, ["unirl", "algorithm.steps=4"])  # makes the directory
    record = read_lock(run_dir)
    assert record is not None and record["pid"] == os.getpid() and record["start_ticks"] == process_start(os.getpid())
    assert record["command"] == ["unirl", "algorithm.steps=4"] and record["started"].startswith("20")
    again = acquire(run_dir, ["unirl", "other"])  # the run's main() and its task take the same lock
    assert again is lock and held(run_dir) is lock
    again.release()
    assert (run_dir / LOCK).exists()
    lock.release()
    assert not (run_dir / LOCK).exists() and held(run_dir) is None


def test_a_live_holder_is_refused_and_every_kind_of_stale_lock_is_replaced(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with rd.sleeper() as other:
        (run_dir / LOCK).write_text(json.dumps(_record(other.pid)))
        with pytest.raises(RunDirectoryLocked) as refused:
            acquire(run_dir, ["unirl"])
        message = str(refused.value)
        assert f"pid {other.pid}" in message and "command: unirl resume x" in message and "started 20" in message
        assert f"unirl stop {run_dir}" in message
        assert holder(run_dir) is not None
        gone = subprocess.Popen(["true"])
        gone.wait()
        stale = {
            "its process ended": _record(gone.pid, start_ticks=1),
            "its pid was reused": _record(other.pid, start_ticks=(process_start(other.pid) or 0) + 1),
            "the machine rebooted": _record(other.pid, boot_id="another-boot"),
        }
        expected = {"its process ended": "no longer running", "its pid was reused": "now belongs to another process",
                    "the machine rebooted": "before this machine last booted"}
        for case, record in stale.items():
            (run_dir / LOCK).write_text(json.dumps(record))
            assert holder(run_dir) is None, case
            lock = acquire(run_dir, ["unirl"])
            assert lock.replaced and expected[case] in lock.replaced, (case, lock.replaced)
            lock.release()
        for garbage in ("{", "[]", ""):
            (run_dir / LOCK).write_text(garbage)
            lock = acquire(run_dir, ["unirl"])
            assert lock.replaced and "does not parse" in lock.replaced
            lock.release()
        assert other.poll() is None  # deciding staleness never touched the other process


def test_a_lock_from_another_host_stands_and_says_how_to_clear_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOCK).write_text(json.dumps(_record(os.getpid(), host="gpu-node-7")))
    with pytest.raises(RunDirectoryLocked, match=r"held on host gpu-node-7.*delete the lock"):
        acquire(run_dir, ["unirl"])


def test_a_backend_child_keeps_the_lock_when_unirl_itself_is_gone(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    with rd.sleeper() as child:  # a backend child in its own session survives a SIGKILL of unirl
        (run_dir / LOCK).write_text(json.dumps(_record(gone.pid, start_ticks=1,
                                                       children=[identify(child.pid).to_dict()])))
        with pytest.raises(RunDirectoryLocked, match=f"its backend process {child.pid} is running"):
            acquire(run_dir, ["unirl"])


def test_the_lock_is_one_lock_through_a_symlink_and_release_leaves_another_holders_lock(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    with rd.sleeper() as other:
        (real / LOCK).write_text(json.dumps(_record(other.pid)))
        with pytest.raises(RunDirectoryLocked):
            acquire(link, ["unirl"])
    lock = acquire(real, ["unirl"])
    (real / LOCK).write_text(json.dumps(_record(os.getppid())))  # someone replaced it (by hand): not ours to remove
    lock.release()
    assert (real / LOCK).exists()


def test_a_lock_file_that_is_a_symlink_is_never_followed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (run_dir / LOCK).symlink_to(target)
    lock = acquire(run_dir, ["unirl"])
    lock.release()
    assert target.read_text() == "keep me"


@pytest.mark.parametrize(("entries", "resume", "refused"), [
    (None, False, None),
    ([], False, None),
    ([".hydra/", "cli.log", LOCK], False, None),  # what a refused attempt leaves: reusable
    (["notes.txt"], False, "is not empty"),
    ([".hydra/", "metrics.jsonl"], False, "holds an earlier run"),
    ([".hydra/", "outcome.json:failed"], False, "holds an earlier run (state failed)"),
    ([".hydra/", "outcome.json:invalid"], False, None),
    (None, True, "the directory does not exist"),
    (["notes.txt"], True, "not a unirl run directory"),
    ([".hydra/"], True, None),
])
def test_where_a_run_may_write(tmp_path: Path, entries: list[str] | None, resume: bool, refused: str | None) -> None:
    run_dir = tmp_path / "run"
    if entries is not None:
        run_dir.mkdir()
        for entry in entries:
            name, _, state = entry.partition(":")
            if name.endswith("/"):
                (run_dir / name).mkdir()
            else:
                (run_dir / name).write_text(json.dumps({"state": state}) if state else "x")
    if refused is None:
        check_destination(run_dir, resume=resume)
    else:
        with pytest.raises(UnirlError, match=refused.replace("(", r"\(").replace(")", r"\)")):
            check_destination(run_dir, resume=resume)


def test_a_resume_may_change_where_it_runs_but_not_what_it_trains() -> None:
    old: dict[str, Any] = {"run": {"resume": False, "name": "x"}, "logging": {"progress": True, "plot": True},
           "scheduler": {"name": "local"}, "rewards": [{"name": "a", "weight": 1.0}], "algorithm": {"lr": 1e-4}}
    new = {"run": {"resume": True, "name": "x"}, "logging": {"progress": False, "plot": True},
           "scheduler": {"name": "slurm", "partition": "gpu"}, "rewards": [{"name": "a", "weight": 0.5}],
           "algorithm": {"lr": 1e-4}}
    assert recipe_changes(old, new) == {"rewards.0.weight": {"old": 1.0, "new": 0.5}}
    assert recipe_changes(old, {**old, "rewards": [*old["rewards"], {"name": "b", "weight": 1.0}]}) == {
        "rewards.1.name": {"old": None, "new": "b"}, "rewards.1.weight": {"old": None, "new": 1.0}}


def test_a_detached_jobs_state_comes_from_its_scheduler_and_no_answer_is_no_answer() -> None:
    from unirl.launch.run_lock import detached_job_active
    from unirl.launch.scheduler import SchedulerBase

    class Asked:
        def __init__(self, answer: object) -> None:
            self.answer = answer

        def active(self, record: dict[str, Any]) -> object:
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    assert detached_job_active(Asked(True), {}) is True
    assert detached_job_active(Asked(False), {}) is False
    assert detached_job_active(Asked("yes"), {}) is None
    assert detached_job_active(Asked(UnirlError("unreachable")), {}) is None
    assert detached_job_active(SchedulerBase(), {}) is None  # a scheduler without its own active(): cannot tell


def test_the_run_name_rule() -> None:
    for name in ("a", "grpo_math", "run-1.2_x", "A" * 100, "a..b"):
        assert problems(name) == [], name
    bad: tuple[object, ...] = ("", "A" * 101, "../x", "a/b", ".x", "-x", "/etc", "a b", "a\nb", None, 3)
    for value in bad:
        [problem] = problems(value)
        assert problem.field == "run.name" and PATTERN in problem.allowed, value
    for override in ("run.name=${oc.env:HOME}", "+run.name=${a}", "++run.name=x${a}", "run={name:${oc.env:USER}}"):
        [problem] = raw_problems([override])
        assert problem.field == "run.name" and "${" in str(problem.value), override
    assert raw_problems(["run.name=plain", "recipe=grpo_math", "hydra.run.dir=${oc.env:HOME}/x"]) == []


def test_plan_refuses_a_run_name_that_is_not_one_folder(capsys: pytest.CaptureFixture[str]) -> None:
    from unirl.cli.main import main

    assert main(["plan", "run.name=../../x"]) == 2
    assert f"run.name='../../x': a run name is one folder name matching {PATTERN}" in capsys.readouterr().err


@pytest.mark.train
@pytest.mark.slow
def test_checkpoint_verification_names_what_is_wrong(tmp_path: Path) -> None:
    with rd.workspace(tmp_path):
        run_dir = rd.killed_run(tmp_path)
    checkpoint = run_dir / "trl" / "checkpoint-4"
    assert verify_checkpoint(checkpoint) == (None, ())
    found = latest_trainer_checkpoint(run_dir / "trl")
    assert found is not None and found.path == checkpoint and found.skipped == ()

    copies: list[Path] = []

    def damaged(name: str, change: object) -> str | None:
        copy = tmp_path / f"damaged-{len(copies)}"
        copies.append(copy)
        shutil.copytree(checkpoint, copy)
        path = copy / name
        if change == "delete":
            path.unlink()
        elif change == "append":
            path.write_bytes(path.read_bytes() + b"\0" * 16)
        else:
            path.write_bytes(path.read_bytes()[:int(path.stat().st_size * float(str(change)))])
        return verify_checkpoint(copy)[0]

    assert "truncated" in (damaged("model.safetensors", 0.99) or "")
    assert "trailing bytes" in (damaged("model.safetensors", "append") or "")
    assert "shorter than the 8-byte header" in (damaged("model.safetensors", 0.0) or "")
    assert "no model weights" in (damaged("model.safetensors", "delete") or "")
    assert "optimizer.pt" in (damaged("optimizer.pt", 0.999) or "") and "truncated" in (damaged("optimizer.pt", 0.5)
                                                                                        or "")
    assert "scheduler.pt missing" in (damaged("scheduler.pt", "delete") or "")
    assert "training_args.bin" in (damaged("training_args.bin", 0.5) or "")
    assert "does not parse" in (damaged("trainer_state.json", 0.5) or "")
    assert damaged("rng_state.pth", "delete") is None  # resumable, but not bit-identically, and it says so
    assert "no RNG state" in verify_checkpoint(copies[-1])[1][0]
    assert safetensors_problem(checkpoint / "model.safetensors") is None
    assert torch_file_problem(checkpoint / "optimizer.pt") is None
    sharded = tmp_path / "sharded"
    shutil.copytree(checkpoint, sharded)
    (sharded / "model.safetensors").unlink()
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "model-00001.safetensors"}}))
    assert "model-00001.safetensors" in (verify_checkpoint(sharded)[0] or "")


def test_job_ids_of_the_shapes_unirl_and_slurm_make_are_accepted() -> None:
    from unirl.plugins.ray.scheduler import checked_job_id as ray_job_id
    from unirl.plugins.slurm.scheduler import checked_job_id as slurm_job_id

    assert ray_job_id({"job_id": "unirl-2026-01-01_00-00-00-000001-0123abcd"}) == \
        "unirl-2026-01-01_00-00-00-000001-0123abcd"
    for job_id in ("123", "123_4", "123+1", 123):
        assert slurm_job_id({"job_id": job_id}) == str(job_id)


def test_help_documents_resume_force_and_stop_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    from unirl.cli.main import main

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "resume RUN_DIR [--force] [OVERRIDE ...]" in out and "recorded in manifest.json" in out
    assert "a pid or job id not the run's, is refused" in out


@pytest.mark.train
@pytest.mark.slow
def test_two_resumes_started_as_commands_one_exits_2_naming_the_other(tmp_path: Path) -> None:
    """The reported defect, as a user meets it: two `unirl resume DIR` processes; one resumes, one is refused."""
    with rd.workspace(tmp_path):
        run_dir = rd.killed_run(tmp_path)
        gate = tmp_path / "gate"
        first = rd.spawn(tmp_path, "resume", str(run_dir), UNIRL_TEST_GATE=str(gate))
        try:
            rd.wait_for(Path(f"{gate}.reached"), first, "the first resume started training")
            second = subprocess.run([sys.executable, "-m", "unirl.cli.main", "resume", str(run_dir)], cwd=tmp_path,
                                    capture_output=True, text=True, timeout=300)
            assert second.returncode == 2, second.stderr[-2000:]
            assert f"in use by another unirl process: pid {first.pid}" in second.stderr
            assert f"command: unirl resume {run_dir}" in second.stderr
            gate.touch()
            assert rd.finish(first) == 0, rd.stderr_of(first)[-3000:]
        finally:
            gate.touch()
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
            first.wait()
        rd.assert_one_run(run_dir)
