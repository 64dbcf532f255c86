"""Submit a plan as a Ray job to a running cluster, follow its logs and status, stop it on Ctrl-C or ``unirl stop``.

unirl does not manage the cluster: ``scheduler.address`` (else ``$RAY_ADDRESS``, else the local default) names the
job server of a head someone started (``ray start --head``). The job's entrypoint is the plan's command where its
backend lives, with the plan's environment (reward spec, the staged light core on PYTHONPATH) in the job's runtime
environment. The run directory must be on a filesystem the head node sees (on one node it trivially is). A TRL
plan on several nodes (torchrun with a rendezvous) runs through :mod:`unirl.plugins.ray.torchrun_nodes`: one
torchrun per node of a placement group, meeting at the first node.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
import uuid
from pathlib import Path
from typing import Any, ClassVar

from unirl.backend.environment import launch_command
from unirl.backend.plan import LaunchPlan
from unirl.errors import UnirlError
from unirl.launch.scheduler import (
    BACKEND_LOG,
    JobResult,
    SchedulerBase,
    finish,
    needs_rendezvous,
    read_summary,
    write_job_record,
)

NAME = "ray"
DEFAULT_ADDRESS = "http://127.0.0.1:8265"
# Ray job states -> unirl's; STOPPED is a job someone stopped (Ctrl-C, unirl stop, ray job stop).
FINAL = {"SUCCEEDED": "completed", "FAILED": "failed", "STOPPED": "cancelled"}
# Right after a head starts, its job API answers 500 "No available agent to submit job" until the node's agent
# registers (research infra.md §1.4): retried for this long.
AGENT_WAIT_S = 60.0
# The submission ids unirl makes (see submit): what `unirl stop` accepts from a job.json.
SUBMISSION_ID = re.compile(r"unirl-[A-Za-z0-9_-]{1,200}-[0-9a-f]{8}")


def address_of(options: dict[str, Any]) -> str:
    return options.get("address") or os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS


def client_for(address: str) -> Any:
    """A job-submission client, or a clear error naming scheduler.address when nothing answers there."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:
        raise UnirlError("scheduler=ray needs Ray's job client in unirl's environment: pip install 'unirl[ray]' "
                         "(ray[default])") from exc
    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # Ray raises ConnectionError / RuntimeError variants for a dead or wrong address
        raise UnirlError(f"scheduler.address={address!r}: no Ray job server answers there ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0] if str(exc) else ''}); start a head with `ray start --head` "
                         "or point scheduler.address at its dashboard (http://HOST:8265)") from exc


class RayScheduler(SchedulerBase):
    name = NAME
    description = "a Ray job on a running cluster (scheduler.address): logs streamed, stopped on Ctrl-C"
    options: ClassVar[dict[str, Any]] = {
        "name": NAME,
        "address": None,  # null: $RAY_ADDRESS, else http://127.0.0.1:8265
        "wait": True,  # false: submit, record the job id and return (unirl stop <run_dir> stops it)
        "poll_s": 1.0,
        "entrypoint_num_cpus": None,  # reserve CPUs / GPUs for the job's driver process on the cluster
        "entrypoint_num_gpus": None,
        "env_vars": {},  # extra environment for the job (e.g. HF_HOME, WANDB_API_KEY)
        # placement of a multi-node torchrun plan's per-node bundles: STRICT_SPREAD = one node each (PACK fits
        # them on one machine, e.g. to try the launch on a single-node cluster)
        "node_strategy": "STRICT_SPREAD",
    }

    def check(self, options: dict[str, Any]) -> None:
        """Before anything is written: the address answers and the job API is up."""
        client_for(address_of(options))

    def submit(self, plan: LaunchPlan, run_dir: Path, options: dict[str, Any]) -> JobResult:
        address = address_of(options)
        client = client_for(address)
        command, env = launch_command(plan, run_dir)
        # A torchrun plan on one node (TRL with several processes) is the job's entrypoint as it is; on several
        # nodes the entrypoint is a driver that starts one torchrun per node (unirl.plugins.ray.torchrun_nodes).
        command = torchrun_across_nodes(plan, command, options)
        runtime_env = {"env_vars": {**env, **{k: str(v) for k, v in (options.get("env_vars") or {}).items()},
                                    "RAY_USAGE_STATS_ENABLED": "0"}}
        entrypoint = shlex.join(command)
        submission_id = f"unirl-{re.sub(r'[^A-Za-z0-9_-]', '-', run_dir.name)}-{uuid.uuid4().hex[:8]}"
        job_id = _submit(client, address, entrypoint=entrypoint, runtime_env=runtime_env,
                         submission_id=submission_id, entrypoint_num_cpus=options.get("entrypoint_num_cpus"),
                         entrypoint_num_gpus=options.get("entrypoint_num_gpus"),
                         metadata={"unirl_run_dir": str(run_dir), "framework": plan.framework})
        submitted = {"entrypoint": entrypoint, "runtime_env": runtime_env, "address": address}
        write_job_record(run_dir, NAME, job_id, "submitted", submitted, address=address)
        if not options.get("wait", True):
            print(f"unirl: submitted Ray job {job_id} to {address}; follow it with `ray job logs --follow "
                  f"--address {address} {job_id}`, stop it with `unirl stop {run_dir}`")
            return JobResult("submitted", 0, job_id=job_id)
        return self._follow(client, job_id, run_dir, float(options.get("poll_s") or 1.0))

    def _follow(self, client: Any, job_id: str, run_dir: Path, poll_s: float) -> JobResult:
        shown = 0
        running = False
        try:
            with (run_dir / BACKEND_LOG).open("a", encoding="utf-8") as log:
                while True:
                    status = str(client.get_job_status(job_id)).rsplit(".", 1)[-1]
                    if status == "RUNNING" and not running:
                        running = True
                        write_job_record(run_dir, NAME, job_id, "running", {})
                    logs = client.get_job_logs(job_id)
                    if len(logs) > shown:
                        sys.stdout.write(logs[shown:])
                        sys.stdout.flush()
                        log.write(logs[shown:])
                        log.flush()
                        shown = len(logs)
                    if status in FINAL:
                        return self._result(client, job_id, run_dir, status, logs)
                    time.sleep(poll_s)
        except KeyboardInterrupt:
            client.stop_job(job_id)
            _wait_final(client, job_id, timeout=30.0)
            tail = client.get_job_logs(job_id)[-4000:]
            return finish(run_dir, NAME, JobResult("interrupted", 130, job_id=job_id, log_tail=tail,
                                                   error="interrupted (Ctrl-C): the Ray job was stopped"))

    def _result(self, client: Any, job_id: str, run_dir: Path, status: str, logs: str) -> JobResult:
        info = client.get_job_info(job_id)
        code = info.driver_exit_code if info.driver_exit_code is not None else (0 if status == "SUCCEEDED" else 1)
        summary = read_summary(run_dir)
        state = FINAL[status]
        error = "" if state == "completed" else f"Ray job {status.lower()}: {info.message or ''}".strip()
        return finish(run_dir, NAME, JobResult(state, int(code), job_id=job_id, summary=summary,
                                               log_tail=logs[-4000:] if state != "completed" else "", error=error))

    def active(self, record: dict[str, Any]) -> bool | None:
        """Is the recorded job still pending or running? None when the cluster does not answer."""
        job_id = checked_job_id(record)
        submitted = record.get("submitted")
        address = record.get("address") or (submitted.get("address") if isinstance(submitted, dict) else None) \
            or DEFAULT_ADDRESS
        try:
            status = str(client_for(address).get_job_status(job_id)).rsplit(".", 1)[-1]
        except Exception:  # unreachable cluster, unknown job: no answer
            return None
        return status not in FINAL

    def stop(self, record: dict[str, Any]) -> str:
        """Stop the recorded job, only if it is one unirl submitted for this run directory (see :func:`check_owner`)."""
        job_id = checked_job_id(record)  # before any cluster is contacted
        submitted = record.get("submitted")
        address = record.get("address") or (submitted.get("address") if isinstance(submitted, dict) else None) \
            or DEFAULT_ADDRESS
        client = client_for(address)
        status = str(client.get_job_status(job_id)).rsplit(".", 1)[-1]
        if status in FINAL:
            return f"Ray job {job_id} already ended ({status})"
        check_owner(job_id, getattr(client.get_job_info(job_id), "metadata", None), record)
        client.stop_job(job_id)
        status = _wait_final(client, job_id, timeout=60.0)
        run_dir = record.get("run_dir")
        if run_dir:
            write_job_record(Path(run_dir), NAME, job_id, FINAL.get(status, "cancelled"), {})
        return f"stopped Ray job {job_id} ({status})"


def torchrun_across_nodes(plan: LaunchPlan, command: list[str], options: dict[str, Any]) -> list[str]:
    """The command, or for a multi-node torchrun plan the driver that runs it once per node of a placement group."""
    if not needs_rendezvous(command):
        return command
    python = command[len(command) - len(plan.command)] if plan.command[:1] == ["python"] else "python"
    return [python, "-m", "unirl.plugins.ray.torchrun_nodes", "--nodes", str(plan.environment.nodes),
            "--gpus-per-node", str(plan.environment.gpus_per_node),
            "--strategy", str(options.get("node_strategy") or "STRICT_SPREAD"), "--", *command]


def checked_job_id(record: dict[str, Any]) -> str:
    """The recorded job id when it has the shape unirl gives its submissions, else a UnirlError (nothing is asked of
    any cluster): a crafted job.json must not name another user's job."""
    job_id = record.get("job_id")
    if not isinstance(job_id, str) or not SUBMISSION_ID.fullmatch(job_id):
        raise UnirlError(f"job.json's Ray job id {job_id!r} is not one unirl submits (unirl-<run>-<8 hex digits>): "
                         "nothing was stopped")
    return job_id


def check_owner(job_id: str, metadata: Any, record: dict[str, Any]) -> None:
    """Refuse to stop a Ray job that was not submitted for this run directory (its ``unirl_run_dir`` metadata)."""
    run_dir = record.get("run_dir")
    if not run_dir:
        return
    theirs = metadata.get("unirl_run_dir") if isinstance(metadata, dict) else None
    if not isinstance(theirs, str) or os.path.realpath(theirs) != os.path.realpath(str(run_dir)):
        raise UnirlError(f"Ray job {job_id} was not submitted for {run_dir} (its metadata names "
                         f"{theirs!r}): not stopped")


def _submit(client: Any, address: str, **kwargs: Any) -> str:
    deadline = time.monotonic() + AGENT_WAIT_S
    while True:
        try:
            return str(client.submit_job(**{k: v for k, v in kwargs.items() if v is not None}))
        except Exception as exc:
            if "No available agent" in str(exc) and time.monotonic() < deadline:
                time.sleep(1.0)
                continue
            raise UnirlError(f"the Ray cluster at scheduler.address={address!r} rejected the job: "
                             f"{type(exc).__name__}: {str(exc)[:1000]}") from exc


def _wait_final(client: Any, job_id: str, timeout: float) -> str:
    end = time.monotonic() + timeout
    status = ""
    while time.monotonic() < end:
        status = str(client.get_job_status(job_id)).rsplit(".", 1)[-1]
        if status in FINAL:
            break
        time.sleep(0.5)
    return status
