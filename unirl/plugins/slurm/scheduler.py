"""Run a plan as a Slurm batch job: write ``job.sbatch``, ``sbatch`` it, follow it, record how it ended.

Everything here works on clusters without accounting (no slurmdbd, so no ``sacct``): the job's state comes from
``squeue`` while it is queued or running, then from ``scontrol show job`` (kept for ``MinJobAge`` after the end),
then ``sacct`` where it works, and last from ``slurm_exit_code``, which the batch script writes on exit.

A Ray-based backend (it declares ``ray_across_nodes``) on more than one node gets a Ray cluster across the
allocation first: the head on the batch node, one worker per other node through ``srun``. A torchrun plan (TRL on
several nodes) gets one torchrun per node through ``srun``, meeting at a c10d rendezvous on the first node.
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend.environment import follower_prefix, launch_command
from unirl.backend.plan import LaunchPlan
from unirl.errors import UnirlError
from unirl.launch.scheduler import (
    RDZV_PORT,
    JobResult,
    SchedulerBase,
    finish,
    needs_rendezvous,
    read_job_record,
    read_summary,
    with_rendezvous,
    write_job_record,
)

NAME = "slurm"
SCRIPT = "job.sbatch"
EXIT_CODE_FILE = "slurm_exit_code"
OUTPUT_PATTERN = "slurm-%j.out"
INSTALL_HINT = ("install the Slurm client commands (Debian/Ubuntu: apt-get install slurm-client) and point SLURM_CONF "
                "at the cluster's slurm.conf if it is not in /etc/slurm")
COMMAND_TIMEOUT_S = 60.0
LOG_TAIL_LINES = 50
RAY_PORT = 6379
RAY_WAIT_S = 300
# Slurm job ids: a job, an array task (123_4) or a heterogeneous job component (123+1).
JOB_ID = re.compile(r"[0-9]{1,12}(?:[_+][0-9]{1,9})?")
QUERY_GIVE_UP_S = 120.0
"""How long squeue may keep failing (controller unreachable) before unirl stops following and decides the state."""

# squeue's long state names while a job still holds (or waits for) its allocation.
ACTIVE_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                           "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"})
FAILED_STATES = {
    "FAILED": "the job exited with a non-zero status",
    "TIMEOUT": "Slurm stopped the job at its time limit (scheduler.time)",
    "NODE_FAIL": "a node of the allocation failed",
    "OUT_OF_MEMORY": "the job ran out of memory (scheduler.mem)",
    "BOOT_FAIL": "a node failed to boot",
    "DEADLINE": "the job reached its deadline",
    "PREEMPTED": "the job was preempted",
}
# Phrases in sbatch's refusal that point at one option: the error names the field to change.
REJECTION_FIELDS = (
    ("partition", "scheduler.partition"),
    ("account", "scheduler.account"),
    ("time limit", "scheduler.time"),
    ("time specification", "scheduler.time"),
    ("gres", "scheduler.gpus_per_node"),
    ("gpu", "scheduler.gpus_per_node"),
    ("memory", "scheduler.mem"),
    ("cpu", "scheduler.cpus_per_task"),
    ("node count", "resources.nodes"),
)


class SlurmScheduler(SchedulerBase):
    name = NAME
    description = "a Slurm batch job (sbatch); Ray across the allocation for Ray-based backends on several nodes"
    options: ClassVar[dict[str, Any]] = {
        "name": NAME,
        "partition": None,  # null: the cluster's default partition
        "account": None,
        "time": None,  # e.g. "04:00:00"; null: the partition's default
        "cpus_per_task": None,
        "mem": None,  # per node, e.g. "16G"; null: the partition's default
        "gpus_per_node": None,  # null: the plan's resources.gpus_per_node
        "extra_sbatch": [],  # raw sbatch options, e.g. ["--qos=high"] or ["#SBATCH --exclusive"]
        "wait": True,  # follow the job to its end; false: return once it is submitted
        "poll_s": 2.0,
    }

    def submit(self, plan: LaunchPlan, run_dir: Path, options: dict[str, Any]) -> JobResult:
        opts = {**self.options, **options}
        ray = ray_based(plan.framework)
        if plan.environment.nodes > 1 and not ray and not needs_rendezvous(plan.command):
            raise UnirlError(
                f"resources.nodes={plan.environment.nodes}: the slurm scheduler runs {plan.framework} on one node; "
                f"multi-node launches are for Ray-based backends (verl, OpenRLHF, NeMo RL, slime) and torchrun plans "
                f"(TRL)")
        sbatch = shutil.which("sbatch")
        if sbatch is None:
            raise UnirlError(f"scheduler=slurm needs sbatch, which is not on PATH: {INSTALL_HINT}")
        run_dir.mkdir(parents=True, exist_ok=True)
        script = run_dir / SCRIPT
        script.write_text(render_script(plan, run_dir, opts, ray_based=ray))
        (run_dir / EXIT_CODE_FILE).unlink(missing_ok=True)
        argv = [sbatch, "--parsable", str(script)]
        job_id = _sbatch(argv, opts)
        write_job_record(run_dir, NAME, job_id, "submitted", {"script": str(script), "sbatch": argv},
                         output=str(output_path(run_dir, job_id)), slurm_conf=os.environ.get("SLURM_CONF", ""))
        print(f"unirl: submitted Slurm job {job_id}; output: {output_path(run_dir, job_id)}", flush=True)
        if not opts.get("wait", True):
            return JobResult("submitted", 0, job_id=job_id)
        return self.follow(run_dir, poll_s=float(opts.get("poll_s") or 2.0))

    def follow(self, run_dir: Path, poll_s: float = 2.0, stream: bool = True) -> JobResult:
        """Follow the job ``job.json`` names until it leaves the queue, streaming its output; record its end.

        Ctrl-C cancels the job (scancel) and returns ``interrupted``."""
        record = read_job_record(run_dir)
        if record is None or record.get("scheduler") != NAME:
            raise UnirlError(f"{run_dir} holds no Slurm job record ({run_dir / 'job.json'})")
        job_id = str(record["job_id"])
        output = OutputFollower(output_path(run_dir, job_id), stream=stream)
        failing_since: float | None = None
        seen_running = record.get("state") == "running"
        try:
            while True:
                state = queue_state(job_id)
                output.poll()
                if state == "RUNNING" and not seen_running:
                    seen_running = True
                    write_job_record(run_dir, NAME, job_id, "running", {})
                if state is None:  # the controller did not answer: keep trying for a while
                    failing_since = failing_since or time.monotonic()
                    if time.monotonic() - failing_since > QUERY_GIVE_UP_S:
                        break
                else:
                    failing_since = None
                    if state not in ACTIVE_STATES:
                        break
                time.sleep(poll_s)
        except KeyboardInterrupt:
            message = _scancel(job_id)
            output.poll(final=True)
            return finish(run_dir, NAME, JobResult("interrupted", 130, job_id=job_id, log_tail=output.tail(),
                                                   summary=read_summary(run_dir),
                                                   error=f"interrupted (Ctrl-C): {message}"))
        output.poll(final=True)
        outcome = job_outcome(job_id, run_dir)
        return finish(run_dir, NAME, JobResult(outcome.state, outcome.exit_code, job_id=job_id,
                                               summary=read_summary(run_dir), error=outcome.error,
                                               log_tail=output.tail() if outcome.state != "completed" else ""))

    def active(self, record: dict[str, Any]) -> bool | None:
        """Is the recorded job still queued or running? None when squeue does not answer (or is missing)."""
        job_id = checked_job_id(record)
        slurm_conf = record.get("slurm_conf") if isinstance(record.get("slurm_conf"), str) else None
        state = queue_state(job_id, slurm_conf=slurm_conf) if shutil.which("squeue") else None
        return None if state is None else state in ACTIVE_STATES

    def stop(self, record: dict[str, Any]) -> str:
        """scancel the recorded job; Slurm sends SIGTERM, then SIGKILL after the cluster's KillWait.

        Only a job id of Slurm's shape (checked before any Slurm command runs: a crafted ``--user=...`` would be an
        option to scancel), and only the job whose working directory is this run directory."""
        job_id = checked_job_id(record)
        slurm_conf = record.get("slurm_conf") if isinstance(record.get("slurm_conf"), str) else None
        if shutil.which("scancel") is None:
            return f"cannot stop Slurm job {job_id}: scancel is not on PATH ({INSTALL_HINT})"
        state = queue_state(job_id, slurm_conf=slurm_conf)
        if state == "":
            return f"Slurm job {job_id} is no longer queued or running (recorded state {record.get('state')})"
        if record.get("run_dir"):
            shown = _slurm(["scontrol", "show", "job", "-o", job_id], slurm_conf)
            workdir = job_workdir(shown.stdout) if shown is not None and shown.returncode == 0 else None
            check_owner(job_id, workdir, str(record["run_dir"]))
        return _scancel(job_id, slurm_conf=slurm_conf)


# --- the batch script -------------------------------------------------------------------------------------------


def render_script(plan: LaunchPlan, run_dir: Path, options: dict[str, Any], ray_based: bool) -> str:
    """The sbatch script for a resolved plan: directives, the backend's environment, Ray if needed, the command."""
    nodes = plan.environment.nodes
    gpus = options.get("gpus_per_node")
    gpus = plan.environment.gpus_per_node if gpus is None else int(gpus)
    directives = [
        f"--job-name=unirl-{plan.framework}",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--output={run_dir}/{OUTPUT_PATTERN}",
        f"--chdir={run_dir}",
    ]
    if gpus > 0:
        directives.append(f"--gpus-per-node={gpus}")
    for key, flag in (("partition", "partition"), ("account", "account"), ("time", "time"),
                      ("cpus_per_task", "cpus-per-task"), ("mem", "mem")):
        if options.get(key) not in (None, ""):
            directives.append(f"--{flag}={options[key]}")
    directives += [_sbatch_option(raw) for raw in options.get("extra_sbatch") or []]
    command, extra_env = launch_command(plan, run_dir)
    lines = ["#!/bin/bash", *(f"#SBATCH {d}" for d in directives), "",
             f"# Written by unirl's Slurm scheduler for a {plan.framework} run; the run directory is {run_dir}.",
             "set -uo pipefail",
             "# The exit status on a file: how the job ended, even where sacct does not work and scontrol has",
             "# forgotten the job. Background helpers (Ray) go with the script.",
             f"unirl_exit_code_file={shlex.quote(str(run_dir / EXIT_CODE_FILE))}",
             "trap 'code=$?; echo \"$code\" > \"$unirl_exit_code_file\"; kill $(jobs -p) 2>/dev/null; exit $code' EXIT",
             "# scancel and the time limit send SIGTERM: end now (the backend gets its own SIGTERM from Slurm).",
             "trap 'echo \"unirl: SIGTERM (scancel or time limit)\" >&2; exit 143' TERM",
             "",
             "export PYTHONUNBUFFERED=1  # output reaches slurm-<id>.out as it is printed"]
    for key, value in sorted(extra_env.items()):
        if key == "PYTHONPATH":
            lines.append(f"export PYTHONPATH={shlex.quote(value)}${{PYTHONPATH:+:$PYTHONPATH}}")
        else:
            lines.append(f"export {key}={shlex.quote(value)}")
    if nodes > 1 and ray_based:
        lines += ["", *ray_bootstrap(plan, command, nodes, gpus)]
    start = shlex.join(command)
    if needs_rendezvous(command):
        lines += ["", *torchrun_rendezvous(nodes)]
        start = f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 " + shell_join(
            with_rendezvous(command, RDZV_ENDPOINT_VAR, RDZV_ID_VAR))
    lines += ["",
              'echo "unirl: Slurm job $SLURM_JOB_ID on $(hostname): starting the backend"',
              "# In the background, so a SIGTERM reaches the trap at once instead of after the command ends.",
              f"{start} &",
              'wait "$!"']
    return "\n".join(lines) + "\n"


RDZV_ENDPOINT_VAR = "$UNIRL_RDZV_ENDPOINT"
RDZV_ID_VAR = "$SLURM_JOB_ID"


def torchrun_rendezvous(nodes: int) -> list[str]:
    """torchrun on every node (one srun task per node) meets at a c10d rendezvous on the allocation's first node.

    torchrun's ``--rdzv_backend c10d --rdzv_endpoint HOST:PORT --rdzv_id ID`` (torch/distributed/run.py): the agent
    whose host is the endpoint serves the rendezvous store, the others dial it; ranks are assigned there."""
    return [
        f"# torchrun on each of the {nodes} nodes; they meet at the first node's rendezvous (job id = rendezvous id).",
        'unirl_rdzv_host=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f'export UNIRL_RDZV_ENDPOINT="$unirl_rdzv_host:${{UNIRL_RDZV_PORT:-{RDZV_PORT}}}"',
        'echo "unirl: torchrun rendezvous at $UNIRL_RDZV_ENDPOINT (id $SLURM_JOB_ID)"',
    ]


def shell_join(command: list[str]) -> str:
    """``shlex.join``, except that the shell variables this script sets (``$NAME`` tokens) are expanded."""
    return " ".join(f'"{c}"' if c in (RDZV_ENDPOINT_VAR, RDZV_ID_VAR) else shlex.quote(c) for c in command)


def ray_bootstrap(plan: LaunchPlan, command: list[str], nodes: int, gpus: int) -> list[str]:
    """A Ray cluster across the allocation: head here (the batch script runs on the first node), workers elsewhere.

    ``ray`` is run as ``<backend python> -m ray.scripts.scripts`` (inside the container for image plans), so it is the
    backend's own Ray, whatever is on PATH."""
    follower = len(follower_prefix(Path("."))) if plan.record_follower else 0  # not around `ray start`
    container_prefix = command[:len(command) - len(plan.command) - follower]
    python = command[len(container_prefix)] if follower or (plan.command and plan.command[0] == "python") \
        else "python"
    ray = shlex.join([*container_prefix, python, "-m", "ray.scripts.scripts"])
    workers = nodes - 1
    gpu_flag = f" --gpus-per-node={gpus}" if gpus > 0 else ""
    return [
        f"# A Ray cluster across the {nodes} nodes; the backend joins it through RAY_ADDRESS.",
        'ray_nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
        'ray_head_node="${ray_nodes[0]}"',
        "ray_head_ip=$(hostname -I 2>/dev/null | awk '{print $1}')",
        '[[ -n "$ray_head_ip" ]] || ray_head_ip=$(hostname --ip-address | awk \'{print $1}\')',
        f'export RAY_ADDRESS="$ray_head_ip:${{UNIRL_RAY_PORT:-{RAY_PORT}}}"',
        'echo "unirl: Ray head on $ray_head_node ($RAY_ADDRESS)"',
        f'{ray} start --head --node-ip-address="$ray_head_ip" --port="${{UNIRL_RAY_PORT:-{RAY_PORT}}}" --block &',
        "sleep 5  # the head must listen before workers dial it",
        f'srun --nodes={workers} --ntasks={workers} --ntasks-per-node=1{gpu_flag} --exclude="$ray_head_node" \\',
        f'    {ray} start --address="$RAY_ADDRESS" --block &',
        "ray_active_nodes() {",
        f'    {ray} status --address="$RAY_ADDRESS" 2>/dev/null \\',
        "        | awk '/^Active:/ {active=1; next} /^Pending:/ {active=0} active && /node_/ {n++} END {print n+0}'",
        "}",
        f"ray_deadline=$((SECONDS + {RAY_WAIT_S}))",
        f'until (( $(ray_active_nodes) >= {nodes} )); do',
        "    if (( SECONDS > ray_deadline )); then",
        f'        echo "unirl: the Ray cluster did not reach {nodes} nodes within {RAY_WAIT_S} s" >&2',
        "        exit 1",
        "    fi",
        "    sleep 2",
        "done",
        f'echo "unirl: Ray cluster up with {nodes} nodes"',
    ]


def _sbatch_option(raw: str) -> str:
    option = str(raw).strip().removeprefix("#SBATCH").strip()
    if not option.startswith("-"):
        raise UnirlError(f"scheduler.extra_sbatch={raw!r}: each entry is one sbatch option such as '--qos=high' "
                         "or '#SBATCH --exclusive'")
    return option


# --- talking to Slurm -------------------------------------------------------------------------------------------


def ray_based(framework: str) -> bool:
    """Does the backend's multi-node launch need a Ray cluster (its declared ``ray_across_nodes``)?"""
    from unirl.host.manager import get_host

    try:
        capabilities = get_host().frameworks.get(framework).capabilities
    except Exception:  # an unknown or broken framework plugin: no Ray bootstrap, the single-node launch still works
        return False
    return capabilities.ray_across_nodes


def _slurm(argv: list[str], slurm_conf: str | None = None) -> subprocess.CompletedProcess[str] | None:
    """Run a Slurm client command; None when it is missing or hangs. ``slurm_conf`` applies when none is set here."""
    env = dict(os.environ)
    if slurm_conf and not env.get("SLURM_CONF"):
        env["SLURM_CONF"] = slurm_conf
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None


def checked_job_id(record: dict[str, Any]) -> str:
    """The recorded job id when it has Slurm's shape (digits, an array task ``_N`` or a het component ``+N``), else a
    UnirlError: nothing else reaches scancel's command line."""
    raw = record.get("job_id")
    job_id = str(raw) if isinstance(raw, int | str) and not isinstance(raw, bool) else ""
    if not JOB_ID.fullmatch(job_id):
        raise UnirlError(f"job.json's Slurm job id {raw!r} is not a Slurm job id (digits, optionally _N or +N): "
                         "nothing was cancelled")
    return job_id


def job_workdir(scontrol_line: str) -> str | None:
    """``WorkDir`` from ``scontrol show job -o`` (one line of key=value pairs; a path may hold spaces)."""
    match = re.search(r"(?:^|\s)WorkDir=(.*?)(?=\s+[A-Za-z][A-Za-z:/]*=|$)", scontrol_line.strip())
    return match.group(1) if match else None


def check_owner(job_id: str, workdir: str | None, run_dir: str) -> None:
    """Refuse to cancel a job Slurm runs in another directory: unirl's jobs run in their run directory (--chdir)."""
    if workdir is not None and os.path.realpath(workdir) != os.path.realpath(run_dir):
        raise UnirlError(f"Slurm job {job_id} runs in {workdir}, not in {run_dir}: it is not this run's job, "
                         "nothing was cancelled")


def _sbatch(argv: list[str], options: dict[str, Any]) -> str:
    proc = _slurm(argv)
    if proc is None:
        raise UnirlError(f"sbatch did not answer within {COMMAND_TIMEOUT_S:.0f} s: is slurmctld reachable?")
    if proc.returncode != 0:
        message = (proc.stderr or proc.stdout).strip()
        lowered = message.lower()
        field = next((f for phrase, f in REJECTION_FIELDS if phrase in lowered), None)
        if field is not None and field.startswith("scheduler."):
            value = options.get(field.removeprefix("scheduler."))
            raise UnirlError(f"{field}={value!r}: Slurm rejected the job: {message}")
        where = f" (check {field})" if field else ""
        raise UnirlError(f"Slurm rejected the job{where}: {message}")
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        raise UnirlError(f"sbatch --parsable printed no job id: {proc.stdout!r} {proc.stderr!r}")
    return job_id


def _scancel(job_id: str, slurm_conf: str | None = None) -> str:
    proc = _slurm(["scancel", job_id], slurm_conf)
    if proc is None:
        return f"scancel {job_id} failed: scancel is missing or did not answer"
    if proc.returncode != 0:
        return f"scancel {job_id} failed: {(proc.stderr or proc.stdout).strip()}"
    return f"scancel sent to Slurm job {job_id}"


def queue_state(job_id: str, slurm_conf: str | None = None) -> str | None:
    """The job's state in squeue (``RUNNING``...); ``""`` once it has left the queue; None if squeue failed."""
    proc = _slurm(["squeue", "-h", "-j", job_id, "-o", "%T"], slurm_conf)
    if proc is None:
        return None
    if proc.returncode != 0:
        # squeue forgets a finished job once MinJobAge has passed and then calls its id invalid.
        return "" if "invalid job id" in (proc.stderr or "").lower() else None
    return proc.stdout.strip().splitlines()[0].strip() if proc.stdout.strip() else ""


@dataclass
class Outcome:
    state: str
    exit_code: int
    error: str = ""


def job_outcome(job_id: str, run_dir: Path) -> Outcome:
    """How a job that left the queue ended: scontrol, else sacct, else the exit code file its script wrote."""
    proc = _slurm(["scontrol", "show", "job", "-o", job_id])
    if proc is not None and proc.returncode == 0 and (state := re.search(r"\bJobState=(\S+)", proc.stdout)):
        exit_code = re.search(r"\bExitCode=(\d+):(\d+)", proc.stdout)
        status, signal = (int(exit_code.group(1)), int(exit_code.group(2))) if exit_code else (0, 0)
        return outcome_from_state(state.group(1), status, signal, "scontrol")
    proc = _slurm(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State,ExitCode"])
    if proc is not None and proc.returncode == 0 and proc.stdout.strip():
        state_text, _, code_text = proc.stdout.strip().splitlines()[0].partition("|")
        exit_text, _, signal_text = code_text.partition(":")
        return outcome_from_state(state_text.split()[0], int(exit_text or 0), int(signal_text or 0), "sacct")
    code_file = run_dir / EXIT_CODE_FILE
    if code_file.exists() and code_file.read_text().strip().lstrip("-").isdigit():
        code = int(code_file.read_text().strip())
        if code == 0:
            return Outcome("completed", 0)
        return Outcome("failed", code, f"the batch script exited with status {code} (from {EXIT_CODE_FILE}: "
                                       "scontrol no longer knows the job and sacct is unavailable)")
    return Outcome("failed", 1, f"Slurm job {job_id} ended but its state is unknown: scontrol no longer knows it, "
                                f"sacct is unavailable and the script wrote no {EXIT_CODE_FILE}")


def outcome_from_state(state: str, status: int, signal: int, source: str) -> Outcome:
    """Map Slurm's final JobState and ExitCode (``status:signal``) onto unirl's states."""
    if state == "COMPLETED":
        return Outcome("completed", 0)
    if state == "CANCELLED":
        return Outcome("cancelled", status or 128 + (signal or 15), "the job was cancelled (scancel)")
    code = status or (128 + signal if signal else 1)
    how = f"exit status {status}" if status else (f"signal {signal}" if signal else "no exit status")
    reason = FAILED_STATES.get(state, f"Slurm ended the job as {state}")
    return Outcome("failed", code, f"{reason} ({state}, {how}, from {source})")


# --- output and summary -----------------------------------------------------------------------------------------


def output_path(run_dir: Path, job_id: str) -> Path:
    return run_dir / OUTPUT_PATTERN.replace("%j", job_id)


class OutputFollower:
    """Streams the complete new lines of the job's output file to stdout and keeps the last ones."""

    def __init__(self, path: Path, stream: bool = True) -> None:
        self.path = path
        self.stream = stream
        self.offset = 0
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)

    def poll(self, final: bool = False) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        if not final:  # hold back a partial last line until its newline arrives
            chunk = chunk[:chunk.rfind(b"\n") + 1]
        if not chunk:
            return
        self.offset += len(chunk)
        text = chunk.decode("utf-8", errors="replace")
        self.lines.extend(text.splitlines(keepends=True))
        if self.stream:
            sys.stdout.write(text)
            sys.stdout.flush()

    def tail(self) -> str:
        return "".join(self.lines)


