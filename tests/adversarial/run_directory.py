"""The run directory: what a careless (or hostile) user, a concurrent second command, a lost node or a crafted file
does to it. Nothing may write a run directory another live process writes, continue a run with another recipe,
resume from a broken checkpoint, signal a process that is not the run's, write outside UNIRL_RUNS_DIR, or call a run
that trained nothing completed.

Each case runs real commands: ``unirl.cli.main.main`` in this process (as a user's second terminal would, minus the
interpreter start), real training subprocesses killed with SIGKILL at a chosen step by a hook, real processes for the
lock and ``unirl stop``. The killed run and the uninterrupted one it is compared with are made once per process and
copied into each case's directory.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.adversarial import Case
from tests.support.cli import run_cli

AREA = "run directory (concurrent writers, resume, stop, names)"
TRAIN = ("train", "slow")
STEPS = 6
KILL_AT = 5  # with checkpoints every 2 steps: checkpoint-2 and checkpoint-4 complete, step 5 logged, then SIGKILL
RUN = [f"algorithm.steps={STEPS}", "algorithm.prompts_per_step=2", "algorithm.samples_per_prompt=4",
       "run.checkpoint_every=2", "eval.every_steps=3", "data.eval_rows=3", "logging.progress=false",
       "logging.plot=false"]
DEADLINE_S = 300.0
# Hooks the training subprocesses load from ./unirlfile.py (unirl's project-local plugin file). Both act only when
# their variable is set, which only the subprocess that should be killed or held gets.
HOOKS = """\
import os
import signal
import time
from pathlib import Path

import unirl


@unirl.hookimpl
def unirl_metrics(run, step, metrics):
    kill_at = os.environ.get("UNIRL_TEST_KILL_AT_STEP")
    if kill_at and step >= int(kill_at):
        os.killpg(0, signal.SIGKILL)  # the whole process group, no cleanup: what a lost node or the OOM killer does


@unirl.hookimpl
def unirl_run_start(run):
    gate = os.environ.get("UNIRL_TEST_GATE")
    if gate:  # hold the run here (lock taken, logs cut back, manifest written) until the test opens the gate
        Path(gate + ".reached").write_text(str(os.getpid()))
        deadline = time.monotonic() + 600
        while not Path(gate).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
"""


# --- harness --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def workspace(tmp: Path) -> Iterator[Path]:
    """Run a case as a user in ``tmp``: the working directory, UNIRL_RUNS_DIR=tmp/runs, the hooks file, a fresh
    plugin host; everything restored afterwards (the corpus also runs outside pytest)."""
    from unirl.host.manager import reset_host

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    os.chdir(tmp)
    os.environ["UNIRL_RUNS_DIR"] = str(tmp / "runs")
    for var in ("UNIRL_PLUGINS_BLOCK", "UNIRL_DISABLE_PLUGIN_AUTOLOAD", "UNIRL_PLUGINS", "UNIRL_PLUGIN_FILE",
                "UNIRL_TEST_KILL_AT_STEP", "UNIRL_TEST_GATE"):
        os.environ.pop(var, None)
    (tmp / "unirlfile.py").write_text(HOOKS)
    reset_host()
    try:
        yield tmp
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        reset_host()


def cli(*args: str) -> tuple[int, str, str]:
    """``unirl ARGS`` in this process: (exit code, stdout, stderr)."""
    out = run_cli(*args)
    return out.returncode, out.stdout, out.stderr


_LOGS: dict[int, Path] = {}


def spawn(cwd: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    """``unirl ARGS`` as its own process (own session, so a hook's killpg takes only it), output to files."""
    log = cwd / f"spawned-{time.monotonic_ns()}"
    with open(f"{log}.out", "w") as out, open(f"{log}.err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "unirl.cli.main", *args], cwd=cwd, text=True, stdout=out,
                                stderr=err, env={**os.environ, "UNIRL_RUNS_DIR": str(cwd / "runs"), **env},
                                start_new_session=True)
    _LOGS[proc.pid] = Path(f"{log}.err")
    return proc


def stderr_of(proc: subprocess.Popen[str]) -> str:
    path = _LOGS.get(proc.pid)
    return path.read_text() if path is not None and path.exists() else ""


def wait_for(path: Path, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the process ended (exit {proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {DEADLINE_S:g} s")
        time.sleep(0.05)


def finish(proc: subprocess.Popen[str], kill: bool = False) -> int:
    if kill and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait(timeout=DEADLINE_S)


def snapshot(directory: Path) -> dict[str, Any]:
    """Every file's bytes (hash) and modification time, and every folder: what "nothing was written" compares."""
    out: dict[str, Any] = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        if path.is_symlink() or not path.is_file():
            out[rel] = "dir" if path.is_dir() else "other"
        else:
            out[rel] = (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def assert_unchanged(before: dict[str, Any], after: dict[str, Any], what: str) -> None:
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"{what} changed files: {changed[:10]}"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().split("\n") if line.strip()] if path.exists() else []


def steps_of(run_dir: Path) -> list[int]:
    return [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]


def completions_per_step(run_dir: Path) -> dict[int, int]:
    per_step: dict[int, int] = {}
    for t in read_jsonl(run_dir / "trajectories.jsonl"):
        per_step[t["step"]] = per_step.get(t["step"], 0) + 1
    return per_step


def assert_one_run(run_dir: Path) -> None:
    """The directory reads as one run: every step logged once, and the completions of exactly the steps the
    uninterrupted run logged (the recipe may sample steps: logging.trajectories_every), each step's once."""
    assert steps_of(run_dir) == list(range(1, STEPS + 1)), f"metrics steps {steps_of(run_dir)}"
    per_step = completions_per_step(run_dir)
    assert per_step == completions_per_step(whole_run()), f"completions per step {per_step}"
    assert set(per_step.values()) == {8}, f"completions per step {per_step}"


def summary_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


# Made once per process: the killed run (its directory as SIGKILL left it) and the same run uninterrupted.
_TEMPLATES: dict[str, Path] = {}


def _template(kind: str) -> Path:
    if kind in _TEMPLATES and _TEMPLATES[kind].exists():
        return _TEMPLATES[kind]
    root = Path(tempfile.mkdtemp(prefix=f"unirl-rundir-{kind}-"))
    atexit.register(shutil.rmtree, root, True)
    (root / "unirlfile.py").write_text(HOOKS)
    env = {"UNIRL_TEST_KILL_AT_STEP": str(KILL_AT)} if kind == "killed" else {}
    proc = spawn(root, *RUN, f"hydra.run.dir={root / 'run'}", **env)
    code = finish(proc)
    if kind == "killed":
        assert code == -signal.SIGKILL, f"the run to kill ended with {code}: {stderr_of(proc)[-2000:]}"
        assert (root / "run" / "trl" / "checkpoint-4" / "trainer_state.json").exists(), "no checkpoint-4"
    else:
        assert code == 0, f"the uninterrupted run failed: {stderr_of(proc)[-2000:]}"
    _TEMPLATES[kind] = root / "run"
    return root / "run"


def killed_run(tmp: Path, name: str = "killed") -> Path:
    """A copy of a run SIGKILLed at step 5 of 6 (checkpoints at 2 and 4; its lock file left behind, stale)."""
    target = tmp / "runs" / name
    shutil.copytree(_template("killed"), target, symlinks=True)
    return target


def whole_run() -> Path:
    return _template("whole")


def same_training(run_dir: Path) -> None:
    """Bit-identical to the uninterrupted run: the same rewards, losses and completions at every step."""
    reference = whole_run()
    ours = [(m["reward/total/mean"], m["loss"]) for m in read_jsonl(run_dir / "metrics.jsonl")]
    theirs = [(m["reward/total/mean"], m["loss"]) for m in read_jsonl(reference / "metrics.jsonl")]
    assert ours == theirs, "the resumed run's metrics differ from the uninterrupted run's"
    assert [t["completion"] for t in read_jsonl(run_dir / "trajectories.jsonl")] == \
        [t["completion"] for t in read_jsonl(reference / "trajectories.jsonl")]


@contextlib.contextmanager
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process of our own (its own session) for lock and stop cases; ended by its pid."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextlib.contextmanager
def no_signals() -> Iterator[list[tuple[str, int, int]]]:
    """For job ids that would signal every process (-1) or init's group (1): os.kill/killpg record instead of
    sending, so a regression fails the case instead of signalling every process on a shared machine."""
    sent: list[tuple[str, int, int]] = []
    real_kill, real_killpg = os.kill, os.killpg
    os.kill = lambda pid, sig: sent.append(("kill", pid, sig))  # type: ignore[assignment]
    os.killpg = lambda pid, sig: sent.append(("killpg", pid, sig))  # type: ignore[assignment]
    try:
        yield sent
    finally:
        os.kill, os.killpg = real_kill, real_killpg


def write_job(run_dir: Path, **record: Any) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "job.json").write_text(json.dumps({"scheduler": "local", "submitted": {"command": ["x"]},
                                                  "history": [], **record}))


# --- one writer per run directory -------------------------------------------------------------------------------


def two_resumes_at_once(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = killed_run(tmp)
        gate = tmp / "gate"
        first = spawn(tmp, "resume", str(run_dir), UNIRL_TEST_GATE=str(gate))
        try:
            wait_for(Path(f"{gate}.reached"), first, "the first resume started training")
            before = snapshot(run_dir)
            code, _, err = cli("resume", str(run_dir))
            assert code == 2, f"the second resume exited {code}, expected 2: {err[-2000:]}"
            for text in (f"pid {first.pid}", f"command: unirl resume {run_dir}", "started 20", "in use by"):
                assert text in err, f"{text!r} not in the refusal: {err[-2000:]}"
            assert_unchanged(before, snapshot(run_dir), "the refused second resume")
            gate.touch()
            assert finish(first) == 0, stderr_of(first)[-3000:]
        finally:
            finish(first, kill=True)
        assert_one_run(run_dir)
        assert "replaced a stale lock" in stderr_of(first)  # the SIGKILLed run's lock, detected as stale
        assert not (run_dir / ".unirl.lock").exists(), "the lock outlived the run"


def fresh_run_into_a_directory_being_written(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = tmp / "runs" / "live"
        gate = tmp / "gate"
        first = spawn(tmp, *RUN, f"hydra.run.dir={run_dir}", UNIRL_TEST_GATE=str(gate))
        try:
            wait_for(Path(f"{gate}.reached"), first, "the run started training")
            before = snapshot(run_dir)
            for attempt in ([*RUN, f"hydra.run.dir={run_dir}"], ["resume", str(run_dir)],
                            [*RUN, "run.resume=true", f"hydra.run.dir={run_dir}"]):
                code, _, err = cli(*attempt)
                assert code == 2 and f"pid {first.pid}" in err, f"{attempt[-1]}: exit {code}: {err[-1500:]}"
            assert_unchanged(before, snapshot(run_dir), "the refused writers")
        finally:
            gate.touch()
            finish(first, kill=True)


def sweep_member_resumed_while_the_sweep_runs(tmp: Path) -> None:
    with workspace(tmp):
        sweep = tmp / "runs" / "sweep"
        gate = tmp / "gate"
        first = spawn(tmp, "-m", f"hydra.sweep.dir={sweep}", "seed=0,1", *RUN, UNIRL_TEST_GATE=str(gate))
        try:
            wait_for(Path(f"{gate}.reached"), first, "the first member started training")
            member = sweep / "0"
            before = snapshot(sweep)
            code, _, err = cli("resume", str(member))
            assert code == 2 and f"pid {first.pid}" in err and str(member) in err, f"exit {code}: {err[-1500:]}"
            code, _, err = cli("-m", f"hydra.sweep.dir={sweep}", "seed=0", *RUN)
            assert code == 2 and f"pid {first.pid}" in err and str(sweep) in err, f"exit {code}: {err[-1500:]}"
            assert_unchanged(before, snapshot(sweep), "the refused writers")
        finally:
            gate.touch()
            finish(first, kill=True)


def lock_of_a_reused_pid(tmp: Path) -> None:
    from unirl.launch.run_lock import LOCK, RunDirectoryLocked, acquire, identify, read_lock

    with sleeper() as other:
        run_dir = tmp / "run"
        run_dir.mkdir()
        live = {**identify(other.pid).to_dict(), "host": socket.gethostname(), "command": ["unirl", "x"]}
        (run_dir / LOCK).write_text(json.dumps(live))
        try:
            acquire(run_dir, ["unirl", "y"]).release()
            raise AssertionError("a lock whose process runs (same pid, same start time) was taken over")
        except RunDirectoryLocked as exc:
            assert f"pid {other.pid}" in str(exc) and "unirl x" in str(exc), str(exc)
        (run_dir / LOCK).write_text(json.dumps({**live, "start_ticks": live["start_ticks"] - 1}))
        lock = acquire(run_dir, ["unirl", "y"])
        assert lock.replaced and "now belongs to another process" in lock.replaced, lock.replaced
        assert (read_lock(run_dir) or {}).get("pid") == os.getpid()
        lock.release()
        assert not (run_dir / LOCK).exists() and other.poll() is None  # nothing was done to the other process


def racing_for_a_stale_lock(tmp: Path) -> None:
    """Four processes see the same stale lock at once: exactly one may take it."""
    from unirl.launch.run_lock import LOCK

    run_dir = tmp / "run"
    run_dir.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    (run_dir / LOCK).write_text(json.dumps({"pid": gone.pid, "start_ticks": 1, "host": socket.gethostname()}))
    go, done = tmp / "go", tmp / "release"
    script = ("import sys, time\nfrom pathlib import Path\n"
              "from unirl.launch.run_lock import acquire, RunDirectoryLocked\n"
              f"Path({str(tmp)!r}, 'ready-' + sys.argv[1]).touch()\n"
              f"while not Path({str(go)!r}).exists(): time.sleep(0.001)\n"
              f"try:\n    lock = acquire(Path({str(run_dir)!r}), ['racer'])\nexcept RunDirectoryLocked:\n"
              "    print('LOST', flush=True)\n    sys.exit(0)\nprint('WON', flush=True)\n"
              f"while not Path({str(done)!r}).exists(): time.sleep(0.01)\nlock.release()\n")
    racers = [subprocess.Popen([sys.executable, "-c", script, str(n)], stdout=subprocess.PIPE, text=True)
              for n in range(4)]
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(list(tmp.glob("ready-*"))) < len(racers):  # all four spinning on the go file: then they race
            assert time.monotonic() < deadline and all(r.poll() is None for r in racers), "a racer did not start"
            time.sleep(0.01)
        go.touch()
        results = []
        for racer in racers:
            assert racer.stdout is not None
            results.append(racer.stdout.readline().strip())
        assert sorted(results) == ["LOST", "LOST", "LOST", "WON"], results
    finally:
        done.touch()
        for racer in racers:
            racer.wait(timeout=60)


def resume_while_a_detached_job_writes(tmp: Path) -> None:
    """A Slurm job submitted with scheduler.wait=false still writes the directory; no unirl process holds its lock.
    No cluster here: the scheduler's own answer ("still queued or running") is what the guard acts on, so the case
    gives that answer in place of squeue."""
    from unirl.plugins.slurm.scheduler import SlurmScheduler

    with workspace(tmp):
        run_dir = killed_run(tmp)
        job = json.loads((run_dir / "job.json").read_text())
        (run_dir / "job.json").write_text(json.dumps({**job, "scheduler": "slurm", "job_id": "4242",
                                                      "state": "running"}))
        before = snapshot(run_dir)
        asked: list[str] = []

        def still_running(self: SlurmScheduler, record: dict[str, Any]) -> bool:
            asked.append(record["job_id"])
            return True

        real = SlurmScheduler.active
        SlurmScheduler.active = still_running  # type: ignore[method-assign]
        try:
            code, _, err = cli("resume", str(run_dir))
        finally:
            SlurmScheduler.active = real  # type: ignore[method-assign]
        assert asked == ["4242"], asked
        assert code == 2 and "slurm job '4242'" in err and "still active" in err, f"exit {code}: {err[-2000:]}"
        assert_unchanged(before, snapshot(run_dir), "the refused resume")


def lock_released_on_every_exit_path(tmp: Path) -> None:
    from unirl.launch.run_lock import LOCK

    with workspace(tmp):
        runs = tmp / "runs"
        completed = runs / "completed"
        code, _, err = cli(*RUN[:3], "algorithm.steps=1", f"hydra.run.dir={completed}")
        assert code == 0, err[-2000:]
        failed = runs / "failed"  # fewer updates than the recipe asks: a failed run (exit 1)
        code, _, err = cli(*RUN[:3], "algorithm.steps=2", "+framework.overrides.max_steps=1", f"hydra.run.dir={failed}")
        assert code == 1, err[-2000:]
        invalid = runs / "invalid"  # refused by TRL's own GRPOConfig: before Hydra, so no directory at all
        code, _, err = cli(*RUN[:3], "+framework.overrides.no_such_grpo_key=1", f"hydra.run.dir={invalid}")
        assert code == 2 and not invalid.exists(), err[-2000:]
        sweep = runs / "sweep"  # a sweep member is refused after Hydra made its directory
        code, _, err = cli("-m", *RUN[:3], "+framework.overrides.no_such_grpo_key=1", f"hydra.sweep.dir={sweep}")
        assert code == 2, err[-2000:]
        for run_dir in (completed, failed, sweep, sweep / "0"):
            assert run_dir.is_dir() and not (run_dir / LOCK).exists(), f"{run_dir.name}: the lock was left behind"
        interrupted = runs / "interrupted"
        gate = tmp / "gate"
        proc = spawn(tmp, *RUN, f"hydra.run.dir={interrupted}", UNIRL_TEST_GATE=str(gate))
        try:
            wait_for(Path(f"{gate}.reached"), proc, "the run started training")
            assert (interrupted / LOCK).exists(), "the run holds no lock while it trains"
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the user's terminal reaches the whole group
            assert finish(proc) == 130, stderr_of(proc)[-2000:]
        finally:
            gate.touch()
            finish(proc, kill=True)
        assert not (interrupted / LOCK).exists(), "interrupted: the lock was left behind"


# --- resume continues the same run --------------------------------------------------------------------------------


def _refused_change(run_dir: Path, *attempt: str, field: str) -> None:
    before = snapshot(run_dir)
    code, _, err = cli(*attempt)
    assert code == 2, f"a resume with another recipe exited {code}: {err[-2000:]}"
    assert field in err and "--force" in err, f"{field!r} or --force not named: {err[-2000:]}"
    assert_unchanged(before, snapshot(run_dir), "the refused resume")


def resume_with_another_override(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = killed_run(tmp)
        _refused_change(run_dir, "resume", str(run_dir), "algorithm.lr=0.002", field="algorithm.lr: 0.001 -> 0.002")


def resume_through_hydra_with_another_override(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = killed_run(tmp)
        _refused_change(run_dir, *RUN, "algorithm.samples_per_prompt=8", "run.resume=true",
                        f"hydra.run.dir={run_dir}", field="algorithm.samples_per_prompt: 4 -> 8")


def resume_after_the_recipe_file_was_edited(tmp: Path) -> None:
    from importlib import resources

    with workspace(tmp):
        shipped = resources.files("unirl.recipe.recipes").joinpath("grpo_math.yaml").read_text()
        assert "  lr: 1.0e-3\n" in shipped
        recipe = tmp / "mine.yaml"
        recipe.write_text(shipped)  # the same recipe as the shipped one the killed run was started with
        run_dir = killed_run(tmp)
        overrides = run_dir / ".hydra" / "overrides.yaml"
        overrides.write_text(overrides.read_text() + f"- recipe={recipe}\n")  # as if started with recipe=mine.yaml
        recipe.write_text(shipped.replace("  lr: 1.0e-3\n", "  lr: 5.0e-4\n"))  # then edited
        _refused_change(run_dir, "resume", str(run_dir), field="algorithm.lr: 0.001 -> 0.0005")


def assert_not_claimed_identical(resumed: dict[str, Any]) -> None:
    """``bit_identical`` is measured: False where logged steps differ, None where nothing could be compared (the
    killed run logged no step after its checkpoint), never True with a reason it cannot be."""
    if resumed["bit_identical"] is None:
        assert resumed["compared_steps"] == 0 and resumed["why_not_compared"], resumed
    else:
        assert resumed["bit_identical"] is False, resumed


def forced_resume_is_recorded(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = killed_run(tmp)
        code, _, err = cli("resume", str(run_dir), "--force", "algorithm.lr=0.0003")
        assert code == 0, err[-3000:]
        assert "resume --force" in err and "algorithm.lr" in err
        manifest = json.loads((run_dir / "manifest.json").read_text())
        [change] = manifest["resumed_from"]["recipe_changes"]
        assert change["fields"] == {"algorithm.lr": {"old": 0.001, "new": 0.0003}}, change
        resumed = summary_of(run_dir)["resumed_from"]
        assert "algorithm.lr" in " ".join(resumed["not_bit_identical_because"]), resumed
        assert_not_claimed_identical(resumed)
        assert_one_run(run_dir)
        # the next plain resume continues the forced recipe, and (completed) runs nothing
        before = snapshot(run_dir)
        code, out, err = cli("resume", str(run_dir))
        assert code == 0 and "already completed" in out, (out + err)[-2000:]
        assert_unchanged(before, snapshot(run_dir), "resuming the completed run")


def resume_of_a_completed_run(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = tmp / "runs" / "done"
        shutil.copytree(whole_run(), run_dir)
        before = snapshot(run_dir)
        for attempt in (["resume", str(run_dir)], [*RUN, "run.resume=true", f"hydra.run.dir={run_dir}"]):
            code, out, err = cli(*attempt)
            assert code == 0, f"exit {code}: {err[-2000:]}"
            assert "already completed" in out and "nothing was run again" in out, out
            assert_unchanged(before, snapshot(run_dir), "resuming a completed run")  # the final eval not repeated


# --- checkpoints a resume must not trust ---------------------------------------------------------------------


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def _falls_back(tmp: Path, damage: Callable[[Path], None], reason: str, identical: bool = True) -> None:
    with workspace(tmp):
        run_dir = killed_run(tmp)
        damage(run_dir / "trl" / "checkpoint-4")
        code, _, err = cli("resume", str(run_dir))
        assert code == 0, err[-3000:]
        assert "skipped checkpoint-4" in err and reason in err and "continuing from checkpoint-2" in err, err[-2000:]
        resumed = summary_of(run_dir)["resumed_from"]
        assert resumed["step"] == 2, resumed
        assert [s["reason"] for s in resumed["skipped_checkpoints"]] and reason in \
            resumed["skipped_checkpoints"][0]["reason"]
        assert_one_run(run_dir)
        if identical:
            assert resumed["bit_identical"] is True, resumed
            same_training(run_dir)


def truncated_optimizer(tmp: Path) -> None:
    _falls_back(tmp, lambda c: _truncate(c / "optimizer.pt"), "optimizer.pt")


def truncated_weights(tmp: Path) -> None:
    _falls_back(tmp, lambda c: _truncate(c / "model.safetensors", 0.9), "model.safetensors")


def missing_scheduler(tmp: Path) -> None:
    _falls_back(tmp, lambda c: (c / "scheduler.pt").unlink(), "scheduler.pt missing")


def torn_trainer_state(tmp: Path) -> None:
    _falls_back(tmp, lambda c: _truncate(c / "trainer_state.json"), "trainer_state.json")


def overwritten_rng_state(tmp: Path) -> None:
    def damage(checkpoint: Path) -> None:
        data = bytearray((checkpoint / "rng_state.pth").read_bytes())
        data[200:600] = b"\0" * 400  # same size, garbage inside: the CRC check sees it
        (checkpoint / "rng_state.pth").write_bytes(bytes(data))

    _falls_back(tmp, damage, "rng_state.pth")


def every_checkpoint_corrupt(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = killed_run(tmp)
        _truncate(run_dir / "trl" / "checkpoint-4" / "optimizer.pt")
        _truncate(run_dir / "trl" / "checkpoint-2" / "model.safetensors")
        code, _, err = cli("resume", str(run_dir))
        # a kill before the first complete save restarts cleanly from step 0, in the same directory, and says why
        assert code == 0, f"exit {code}: {err[-2000:]}"
        assert "no complete checkpoint" in err and "skipped checkpoint-4 (optimizer.pt" in err and \
            "skipped checkpoint-2 (model.safetensors" in err, err[-2000:]
        resumed = summary_of(run_dir)["resumed_from"]
        assert resumed["checkpoint"] is None and resumed["step"] == 0, resumed
        assert {Path(c["checkpoint"]).name for c in resumed["skipped_checkpoints"]} == {"checkpoint-4", "checkpoint-2"}
        assert_one_run(run_dir)


def checkpoint_without_rng_state(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = killed_run(tmp)
        (run_dir / "trl" / "checkpoint-4" / "rng_state.pth").unlink()
        code, _, err = cli("resume", str(run_dir))
        assert code == 0, err[-3000:]
        resumed = summary_of(run_dir)["resumed_from"]
        assert resumed["step"] == 4 and "no RNG state" in " ".join(resumed["not_bit_identical_because"]), resumed
        assert_not_claimed_identical(resumed)
        assert_one_run(run_dir)


# --- unirl stop signals only the run's own process ---------------------------------------------------------------


def stop_a_run_that_ended(tmp: Path) -> None:
    from unirl.launch.run_lock import process_start

    with workspace(tmp), sleeper() as other:
        for state in ("completed", "failed", "cancelled", "interrupted"):
            run_dir = tmp / state
            write_job(run_dir, job_id=str(other.pid), pid_start=process_start(other.pid), state=state)
            code, _, err = cli("stop", str(run_dir))
            assert code == 2 and "already ended" in err and state in err, f"{state}: exit {code}: {err}"
            assert other.poll() is None, f"{state}: the process at the recorded pid was signalled"
            assert not (run_dir / ".stop_requested").exists()


def stop_with_a_crafted_pid(tmp: Path) -> None:
    with workspace(tmp):
        for job_id in ("-1", "0", "1", -1, "abc", "12 13", "+5", "٣", True, 3.5, None, "1e3", ""):
            run_dir = tmp / f"crafted-{abs(hash(repr(job_id)))}"
            write_job(run_dir, job_id=job_id, pid_start=1, state="running")
            with no_signals() as sent:
                code, _, err = cli("stop", str(run_dir))
            assert code == 2 and not sent, f"job_id {job_id!r}: exit {code}, signals {sent}: {err}"
            assert "nothing was signalled" in err or "nothing was stopped" in err, err


def stop_a_reused_pid(tmp: Path) -> None:
    from unirl.launch.run_lock import process_start

    with workspace(tmp), sleeper() as other:
        run_dir = tmp / "run"
        start = process_start(other.pid)
        assert start is not None
        write_job(run_dir, job_id=str(other.pid), pid_start=start - 5, state="running")
        code, _, err = cli("stop", str(run_dir))
        assert code == 2 and "not the run's any more" in err, f"exit {code}: {err}"
        write_job(run_dir, job_id=str(other.pid), state="running")  # no start time recorded: cannot tell
        code, _, err = cli("stop", str(run_dir))
        assert code == 2 and "no start time" in err, f"exit {code}: {err}"
        assert other.poll() is None and not (run_dir / ".stop_requested").exists()
        write_job(run_dir, job_id=str(other.pid), pid_start=start, state="running")  # the run's own: stopped
        code, out, err = cli("stop", str(run_dir))
        assert code == 0 and f"stopped process {other.pid}" in out, f"exit {code}: {out} {err}"
        assert other.wait(timeout=60) is not None


def stop_with_an_unparsable_record(tmp: Path) -> None:
    with workspace(tmp):
        for text in ("{", "[1, 2]", '{"job_id": 5}', "null"):
            run_dir = tmp / f"r{abs(hash(text))}"
            run_dir.mkdir()
            (run_dir / "job.json").write_text(text)
            with no_signals() as sent:
                code, _, err = cli("stop", str(run_dir))
            assert code == 2 and not sent and "Traceback" not in err, f"{text!r}: exit {code}: {err}"


def stop_a_crafted_ray_job(tmp: Path) -> None:
    from unirl.errors import UnirlError
    from unirl.plugins.ray.scheduler import RayScheduler, check_owner

    for job_id in ("raysubmit_abc", "../x", "unirl-run", "unirl-run-XYZ", "--address=x", 7, ""):
        try:
            RayScheduler().stop({"job_id": job_id, "address": "http://127.0.0.1:9", "run_dir": str(tmp)})
            raise AssertionError(f"Ray job id {job_id!r} was accepted")
        except UnirlError as exc:
            assert "nothing was stopped" in str(exc), str(exc)
    try:  # a well-formed id of a job another run directory submitted
        check_owner("unirl-a-0123abcd", {"unirl_run_dir": "/elsewhere"}, {"run_dir": str(tmp)})
        raise AssertionError("another run directory's Ray job was accepted")
    except UnirlError as exc:
        assert "not stopped" in str(exc)
    check_owner("unirl-a-0123abcd", {"unirl_run_dir": str(tmp)}, {"run_dir": str(tmp)})


def stop_a_crafted_slurm_job(tmp: Path) -> None:
    from unirl.errors import UnirlError
    from unirl.plugins.slurm.scheduler import SlurmScheduler, check_owner, job_workdir

    for job_id in ("-1", "--user=root", "12 13", "12,13", "12;rm", "", "12_", "abc", True):
        try:
            SlurmScheduler().stop({"job_id": job_id, "run_dir": str(tmp)})
            raise AssertionError(f"Slurm job id {job_id!r} was accepted")
        except UnirlError as exc:
            assert "nothing was cancelled" in str(exc), str(exc)
    line = f"JobId=12 JobName=unirl-trl UserId=u(1) JobState=RUNNING WorkDir=/other/run dir StdErr={tmp}/x.out"
    assert job_workdir(line) == "/other/run dir"
    try:
        check_owner("12", job_workdir(line), str(tmp))
        raise AssertionError("a Slurm job running in another directory was accepted")
    except UnirlError as exc:
        assert "nothing was cancelled" in str(exc)


# --- where a run may write ---------------------------------------------------------------------------------------


def _refused_before_anything(tmp: Path, *args: str, expect: tuple[str, ...], escape: Path | None = None) -> None:
    """``unirl ARGS`` exits 2 naming ``expect`` with no file written in the case's directory or at ``escape``."""
    with workspace(tmp):
        before = snapshot(tmp)
        code, _, err = cli(*args)
        assert code == 2, f"{args}: exit {code}: {err[-2000:]}"
        for text in expect:
            assert text in err, f"{text!r} not in: {err[-2000:]}"
        assert "Traceback" not in err
        assert_unchanged(before, snapshot(tmp), f"{args}")
        assert escape is None or not os.path.lexists(escape), f"{escape} was made, outside UNIRL_RUNS_DIR"


def _name_case(value: str) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        from unirl.recipe.run_name import PATTERN

        escape = Path(os.path.normpath(tmp / "runs" / value)) if "${" not in value and value else None
        if escape is not None and os.path.lexists(escape):
            escape = None  # e.g. "/etc": it exists anyway; "nothing was made there" is not checkable by existence
        _refused_before_anything(tmp, f"run.name={value}", expect=("run.name=", repr(value)[1:-1][:60], PATTERN),
                                 escape=escape)

    return check


def name_in_a_recipe_file(tmp: Path) -> None:
    (tmp / "evil.yaml").write_text("defaults:\n  - grpo_math\n  - _self_\nrun:\n  name: ${oc.env:USER,x}\n")
    _refused_before_anything(tmp, "recipe=./evil.yaml", expect=("run.name='${oc.env:USER,x}'", "set by recipe"))


def name_interpolated_in_a_sweep(tmp: Path) -> None:
    _refused_before_anything(tmp, "-m", "run.name=${oc.env:HOME},b", "seed=0", expect=("run.name=",))


def run_dir_is_the_working_directory(tmp: Path) -> None:
    (tmp / "my_notes.txt").write_text("mine")
    _refused_before_anything(tmp, "hydra.run.dir=.", expect=("is not empty", "my_notes.txt"))


def run_dir_is_a_home_directory(tmp: Path) -> None:
    home = tmp / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".bashrc").write_text("x")
    os.environ["FAKE_HOME"] = str(home)
    try:
        _refused_before_anything(tmp, "hydra.run.dir=${oc.env:FAKE_HOME}", expect=("is not empty", str(home)))
    finally:
        os.environ.pop("FAKE_HOME", None)


def fresh_run_into_an_earlier_run(tmp: Path) -> None:
    shutil.copytree(whole_run(), tmp / "runs" / "done")
    _refused_before_anything(tmp, *RUN, f"hydra.run.dir={tmp / 'runs' / 'done'}",
                             expect=("holds an earlier run (state completed)", "unirl resume"))


def sweep_into_an_earlier_sweep(tmp: Path) -> None:
    sweep = tmp / "runs" / "sweep"
    (sweep / "0" / ".hydra").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text("{}\n")
    _refused_before_anything(tmp, "-m", f"hydra.sweep.dir={sweep}", "seed=0,1", expect=("holds an earlier sweep",))


def resume_in_a_directory_that_is_not_a_run(tmp: Path) -> None:
    (tmp / "notes").mkdir()
    (tmp / "notes" / "a.txt").write_text("x")
    _refused_before_anything(tmp, "run.resume=true", f"hydra.run.dir={tmp / 'notes'}",
                             expect=("not a unirl run directory",))


def _read_only(tmp: Path, directory: Path, *args: str, expect: str) -> None:
    """``unirl ARGS`` with ``directory`` mounted read-only (a private mount namespace: only this command sees it)."""
    if shutil.which("unshare") is None:
        raise AssertionError("unshare is not installed: cannot make a read-only mount for this case")
    script = (f"mount --bind {directory} {directory} && mount -o remount,bind,ro {directory} && "
              f"exec {sys.executable} -m unirl.cli.main " + " ".join(f"'{a}'" for a in args))
    before = snapshot(directory)
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=tmp,
                          capture_output=True, text=True, timeout=DEADLINE_S,
                          env={**os.environ, "UNIRL_RUNS_DIR": str(tmp / "runs")})
    if "mount" in proc.stderr and proc.returncode not in (0, 1, 2):
        raise AssertionError(f"could not make a read-only mount here: {proc.stderr[-500:]}")
    assert proc.returncode == 2, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    assert "not writable" in proc.stderr and expect in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert_unchanged(before, snapshot(directory), "the refused run")


def read_only_runs_dir(tmp: Path) -> None:
    runs = tmp / "runs"
    runs.mkdir()
    _read_only(tmp, runs, *RUN, expect=str(runs))


def read_only_run_dir_on_resume(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = killed_run(tmp)
    _read_only(tmp, run_dir, "resume", str(run_dir), expect=str(run_dir))


# --- a run that trained nothing is not completed ---------------------------------------------------------------


def training_set_smaller_than_a_step(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = tmp / "runs" / "tiny"
        code, _, err = cli(*RUN, "data.train_rows=1", f"hydra.run.dir={run_dir}")
        assert code in (1, 2), f"a run that can make no update exited {code}"
        if code == 2:  # refused before launch (the preflight's check)
            assert "data.train_rows" in err or "prompts_per_step" in err, err[-2000:]
            return
        summary = summary_of(run_dir)
        assert summary["state"] == "failed" and summary["updates"] == 0, summary
        assert "0 optimizer updates" in summary["error"] and "0 optimizer updates" in err, err[-2000:]
        assert json.loads((run_dir / "outcome.json").read_text())["state"] == "failed"


def fewer_updates_than_the_recipe(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = tmp / "runs" / "short"
        code, _, err = cli(*RUN, "+framework.overrides.max_steps=2", f"hydra.run.dir={run_dir}")
        assert code == 1, f"exit {code}: {err[-2000:]}"
        summary = summary_of(run_dir)
        assert summary["state"] == "failed" and summary["steps_completed"] == 2, summary
        assert "after 2 of 6 optimizer updates" in summary["error"] and "max_steps=2" in summary["error"]
        assert "the run failed" in err


def zero_updates_in_a_child_process(tmp: Path) -> None:
    with workspace(tmp):
        run_dir = tmp / "runs" / "child"
        code, _, err = cli(*RUN, "+framework.overrides.max_steps=1", f"framework.python={sys.executable}",
                           f"hydra.run.dir={run_dir}")
        assert code == 1, f"exit {code}: {err[-2000:]}"
        job = json.loads((run_dir / "job.json").read_text())
        assert job["state"] == "failed" and "after 1 of 6" in job["error"], job


CASES = [
    Case("two `unirl resume DIR` at once", two_resumes_at_once, TRAIN),
    Case("a fresh run or resume into a directory another run is writing", fresh_run_into_a_directory_being_written,
         TRAIN),
    Case("a sweep member resumed, or the sweep rerun, while the sweep runs", sweep_member_resumed_while_the_sweep_runs,
         TRAIN),
    Case("a lock whose pid now belongs to another process", lock_of_a_reused_pid),
    Case("four writers racing for one stale lock", racing_for_a_stale_lock, ("slow",)),
    Case("a resume while a detached (wait=false) Slurm job still writes the directory",
         resume_while_a_detached_job_writes, TRAIN),
    Case("the lock after completed, failed, invalid and interrupted runs", lock_released_on_every_exit_path, TRAIN),
    Case("`unirl resume DIR` with another override", resume_with_another_override, TRAIN),
    Case("run.resume=true hydra.run.dir=DIR with another override", resume_through_hydra_with_another_override, TRAIN),
    Case("resume after the recipe file was edited", resume_after_the_recipe_file_was_edited, TRAIN),
    Case("`unirl resume DIR --force` with a change", forced_resume_is_recorded, TRAIN),
    Case("resuming a completed run", resume_of_a_completed_run, TRAIN),
    Case("latest checkpoint: optimizer.pt truncated", truncated_optimizer, TRAIN),
    Case("latest checkpoint: model.safetensors truncated", truncated_weights, TRAIN),
    Case("latest checkpoint: scheduler.pt missing", missing_scheduler, TRAIN),
    Case("latest checkpoint: trainer_state.json torn", torn_trainer_state, TRAIN),
    Case("latest checkpoint: rng_state.pth overwritten inside", overwritten_rng_state, TRAIN),
    Case("every checkpoint corrupt", every_checkpoint_corrupt, TRAIN),
    Case("a checkpoint without RNG state", checkpoint_without_rng_state, TRAIN),
    Case("`unirl stop` of a run that ended", stop_a_run_that_ended),
    Case("`unirl stop` with job_id -1, 0, 1 or not an integer", stop_with_a_crafted_pid),
    Case("`unirl stop` of a reused pid, or one without a start time", stop_a_reused_pid),
    Case("`unirl stop` with a job.json that does not parse", stop_with_an_unparsable_record),
    Case("Ray stop: a crafted or another run's job id", stop_a_crafted_ray_job),
    Case("Slurm stop: a crafted job id (options, several ids)", stop_a_crafted_slurm_job),
    Case("run.name=../../x", _name_case("../../x")),
    Case("run.name=${oc.env:HOME}", _name_case("${oc.env:HOME}")),
    Case("run.name=${oc.env:USER} (resolves to a plain name)", _name_case("${oc.env:USER}")),
    Case("run.name= (empty)", _name_case("")),
    Case("run.name of 300 characters", _name_case("a" * 300)),
    Case("run.name=a/b", _name_case("a/b")),
    Case("run.name=/etc", _name_case("/etc")),
    Case("run.name=.hidden", _name_case(".hidden")),
    Case("run.name interpolated in a recipe file", name_in_a_recipe_file),
    Case("run.name interpolated in a sweep", name_interpolated_in_a_sweep),
    Case("hydra.run.dir=. (a directory with the user's files)", run_dir_is_the_working_directory),
    Case("hydra.run.dir=$HOME (through an interpolation)", run_dir_is_a_home_directory),
    Case("a fresh run into an earlier run's directory", fresh_run_into_an_earlier_run, TRAIN),
    Case("hydra.sweep.dir= an earlier sweep", sweep_into_an_earlier_sweep),
    Case("run.resume=true in a directory that is not a run", resume_in_a_directory_that_is_not_a_run),
    Case("read-only UNIRL_RUNS_DIR", read_only_runs_dir),
    Case("read-only run directory on resume", read_only_run_dir_on_resume, TRAIN),
    Case("a training set smaller than one step", training_set_smaller_than_a_step, TRAIN),
    Case("a max_steps override shorter than algorithm.steps", fewer_updates_than_the_recipe, TRAIN),
    Case("too few updates in a backend child process", zero_updates_in_a_child_process, TRAIN),
]
