"""The backend's environment: its interpreter or container, what unirl stages there, and its GPUs.

The host imports no backend. A backend lives in another interpreter (``framework.python``) or a container
image (``framework.image``); unirl copies its light core (the ``unirl`` package and the plugin's own
package, pure Python, needing only pluggy) plus the user's reward packages into the run directory and puts
that directory on the backend's PYTHONPATH, so nothing has to be pip-installed there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from unirl.backend.plan import BackendEnvironment, LaunchPlan
from unirl.errors import UnirlError

CORE_DIR = "unirl_core"  # inside the run directory
CONTAINER_RUNTIMES = ("docker", "apptainer")
PROBE_TIMEOUT_S = 120.0
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc")


def python_option(name: str, options: dict[str, Any]) -> str | None:
    """``framework.python``, else ``$UNIRL_<NAME>_PYTHON``: where the backend's own interpreter is.

    A relative path is made absolute here, since checks and launches run in other directories."""
    python = options.get("python") or os.environ.get(f"UNIRL_{name.upper()}_PYTHON") or None
    if python and os.sep in python and not os.path.isabs(python):
        python = os.path.abspath(python)
    return python


def package_dir(module: str) -> Path | None:
    """The directory of a pure-Python top-level package, or None (a namespace, an extension, not found)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith("__init__.py"):
        return None
    return Path(spec.origin).parent


def stage_light_core(dest: Path, packages: list[str]) -> Path:
    """Copy the named top-level packages into ``dest`` (replacing older copies); returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in packages:
        src = package_dir(name)
        if src is None:
            raise UnirlError(f"cannot stage package {name!r} for the backend's environment: it is not a "
                             "pure-Python package importable here")
        target = dest / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(src, target, ignore=_IGNORE)
    return dest


def version_in(python: str, distribution: str) -> str | None:
    """``distribution``'s installed version in another interpreter (reads metadata, imports nothing)."""
    code = ("import importlib.metadata as m, sys\ntry: print(m.version(sys.argv[1]))\n"
            "except m.PackageNotFoundError: pass")
    try:
        out = subprocess.run([python, "-c", code, distribution], capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def run_check(python: str, module: str, payload: dict[str, Any], packages: list[str],
              timeout: float = 600.0) -> dict[str, Any]:
    """Run ``python -m module`` in the backend's interpreter with the light core staged on its path.

    The module reads ``payload`` as JSON on stdin and prints one JSON object as its last line of stdout.
    """
    with tempfile.TemporaryDirectory(prefix="unirl-core-") as tmp:
        core = stage_light_core(Path(tmp), packages)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(core), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep), "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            proc = subprocess.run([python, "-m", module], input=json.dumps(payload), capture_output=True, text=True,
                                  env=env, timeout=timeout, cwd=tmp)
        except FileNotFoundError as exc:
            raise UnirlError(f"framework.python={python!r}: no such interpreter") from exc
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise UnirlError(f"{module} in {python} printed no result (exit {proc.returncode}):\n"
                         f"{(proc.stderr or proc.stdout)[-3000:]}")
    return json.loads(lines[-1])


# --- launching ------------------------------------------------------------------------------------------


def launch_command(plan: LaunchPlan, run_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The command and extra environment that run the (resolved) plan where its backend lives."""
    env_spec = plan.environment
    pythonpath = [str(run_dir / CORE_DIR), *env_spec.reward_paths]
    env = {**plan.env, "PYTHONPATH": os.pathsep.join(pythonpath)}
    command = list(plan.command)
    if env_spec.kind == "in_process":
        return [sys.executable if c == "python" else c for c in command], env
    if env_spec.kind == "interpreter":
        return [env_spec.python if c == "python" else c for c in command], env
    command = [env_spec.python if c == "python" else c for c in command]
    mounts = sorted({str(run_dir), *env_spec.reward_paths, *env_spec.mounts})
    if env_spec.container_runtime == "apptainer":
        wrapped = ["apptainer", "exec", "--nv", "--cleanenv"]
        for m in mounts:
            wrapped += ["--bind", f"{m}:{m}"]
        for k, v in sorted(env.items()):
            wrapped += ["--env", f"{k}={v}"]
        return [*wrapped, "--pwd", str(run_dir), str(env_spec.image), *command], {}
    wrapped = ["docker", "run", "--rm", "--gpus", "all", "--ipc=host", "--shm-size=16g", "--network=host"]
    for m in mounts:
        wrapped += ["-v", f"{m}:{m}"]
    for k, v in sorted(env.items()):
        wrapped += ["-e", f"{k}={v}"]
    return [*wrapped, "-w", str(run_dir), str(env_spec.image), *command], {}


def count_gpus() -> tuple[int, str]:
    """GPUs on this node and how that was found (``nvidia-smi -L``; CUDA_VISIBLE_DEVICES narrows it)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0, "nvidia-smi is not on PATH"
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 0, f"nvidia-smi -L failed: {exc}"
    found = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        found = min(found, len([d for d in visible.split(",") if d.strip()]))
        return found, f"nvidia-smi -L, narrowed by CUDA_VISIBLE_DEVICES={visible!r}"
    return found, "nvidia-smi -L"


def check_gpus(framework: str, env_spec: BackendEnvironment) -> None:
    """Fail before launching when this node has fewer GPUs than the plan expects."""
    if env_spec.gpus_per_node <= 0:
        return
    found, how = count_gpus()
    if found < env_spec.gpus_per_node:
        raise UnirlError(
            f"{framework} expects {env_spec.gpus_per_node} GPU(s) on this node (resources.gpus_per_node="
            f"{env_spec.gpus_per_node}) and found {found} ({how}); nothing was started")


def check_environment(env_spec: BackendEnvironment) -> None:
    """The interpreter or container runtime the plan names must exist here."""
    if env_spec.kind == "interpreter" and shutil.which(env_spec.python) is None and not Path(env_spec.python).exists():
        raise UnirlError(f"framework.python={env_spec.python!r}: no such interpreter on this machine")
    if env_spec.kind == "image":
        runtime = env_spec.container_runtime or "docker"
        if runtime not in CONTAINER_RUNTIMES:
            raise UnirlError(f"framework.container_runtime={runtime!r}: one of {list(CONTAINER_RUNTIMES)}")
        if shutil.which(runtime) is None:
            raise UnirlError(f"framework.image={env_spec.image!r} needs {runtime}, which is not on PATH")
