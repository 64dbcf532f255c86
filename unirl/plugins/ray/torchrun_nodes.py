"""A Ray job's entrypoint that starts one torchrun per node and lets them meet at a c10d rendezvous.

A Ray job runs one entrypoint command on one node; a TRL run on several nodes needs ``torchrun`` on each (see
:func:`unirl.plugins.trl.framework.runner_command`). This driver reserves one placement-group bundle per node
(``STRICT_SPREAD``: each on its own node), asks the first bundle's node for its IP, and runs the plan's command in
one Ray task per bundle with the rendezvous endpoint (that IP, a port) and id (the Ray job's submission id) filled
in. Each task streams its torchrun's output (Ray forwards it to the job's logs) and returns its exit status; the
driver exits with the first failure's. A task's torchrun gets SIGTERM when its Ray worker dies (``PR_SET_PDEATHSIG``),
so ``ray job stop`` leaves no training process behind.

    python -m unirl.plugins.ray.torchrun_nodes --nodes 2 --gpus-per-node 8 -- python -m torch.distributed.run ...

Runs in the backend's interpreter inside the job, which needs Ray there (``pip install 'unirl[ray]'``).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from typing import Any

from unirl.launch.scheduler import with_rendezvous


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the Ray worker that started it dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def node_address() -> tuple[str, int]:
    """This node's IP (as Ray knows it) and a free TCP port on it, for the rendezvous."""
    import ray

    with socket.socket() as probe:
        probe.bind(("", 0))
        free = int(probe.getsockname()[1])
    return str(ray.util.get_node_ip_address()), free  # type: ignore[no-untyped-call]


def run_node(command: list[str]) -> int:
    """One node's torchrun, its output streamed line by line to this task's stdout."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_die_with_parent)
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
    return proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, default=0)
    parser.add_argument("--cpus-per-node", type=float, default=1.0)
    parser.add_argument("--strategy", default="STRICT_SPREAD",
                        help="placement-group strategy; STRICT_SPREAD puts each torchrun on its own node")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=True)
    bundle: dict[str, float] = {"CPU": ns.cpus_per_node}
    if ns.gpus_per_node:
        bundle["GPU"] = float(ns.gpus_per_node)
    group = placement_group([dict(bundle) for _ in range(ns.nodes)], strategy=ns.strategy)
    ray.get(group.ready())

    def on(index: int, fn: Any, cpus: float, gpus: float) -> Any:
        where = PlacementGroupSchedulingStrategy(placement_group=group, placement_group_bundle_index=index)
        return ray.remote(fn).options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy=where)

    host, port = ray.get(on(0, node_address, 0, 0).remote())
    endpoint = f"{host}:{port}"
    run_id = os.environ.get("RAY_JOB_SUBMISSION_ID") or os.environ.get("RAY_JOB_ID") or "unirl"
    print(f"unirl: {ns.nodes} torchrun(s) meeting at {endpoint} (rendezvous id {run_id})", flush=True)
    filled = with_rendezvous(command, endpoint, run_id)
    tasks = [on(i, run_node, ns.cpus_per_node, float(ns.gpus_per_node)).remote(filled) for i in range(ns.nodes)]
    codes = [int(code) for code in ray.get(tasks)]
    print(f"unirl: torchrun exit statuses per node: {codes}", flush=True)
    return next((code for code in codes if code != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
