"""The backend's environment: its interpreter or container, what unirl stages there, and its GPUs.

The host imports no backend. A backend lives in another interpreter (``framework.python``) or a container
image (``framework.image``); unirl copies its light core (the ``unirl`` package and the plugin's own
package, pure Python, needing only pluggy) plus the user's reward packages into the run directory and puts
that directory on the backend's PYTHONPATH, so nothing has to be pip-installed there.

The user's run-record plugins (trackers, sinks: whatever implements a lifecycle hook) go with it: the host writes
the list of plugins the backend's processes load (``unirl_plugins.json`` next to the staged ``unirl``), and stages
each third-party one's modules with a minimal dist-info (``METADATA``, ``entry_points.txt``), so pluggy's own entry
point loader finds it there with its distribution and version, exactly as on the host (:func:`stage_plugins`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from unirl.backend.plan import BackendEnvironment, LaunchPlan
from unirl.errors import UnirlError

log = logging.getLogger(__name__)

CORE_DIR = "unirl_core"  # inside the run directory
PLUGIN_LIST = "unirl_plugins.json"  # inside the staged core, next to the unirl package
PLUGIN_FILES = "unirl_plugin_files"  # inside the staged core: copies of plugin files (unirlfile.py, ...)
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
        stage_plugins(core, StagedPlugins(()))  # a check is not a run: a reward it scores reaches no plugin
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
    result: dict[str, Any] = json.loads(lines[-1])
    return result


# --- launching ------------------------------------------------------------------------------------------


FOLLOWER_MODULE = "unirl.adapters.follow"


def follower_prefix(run_dir: Path) -> list[str]:
    """What a ``record_follower`` plan's command runs under, in the backend's interpreter (see unirl.record.follow)."""
    return ["python", "-m", FOLLOWER_MODULE, "--run-dir", str(run_dir), "--"]


def launch_command(plan: LaunchPlan, run_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The command and extra environment that run the (resolved) plan where its backend lives."""
    env_spec = plan.environment
    pythonpath = [str(run_dir / CORE_DIR), *env_spec.reward_paths]
    env = {**plan.env, "PYTHONPATH": os.pathsep.join(pythonpath)}
    command = [*follower_prefix(run_dir), *plan.command] if plan.record_follower else list(plan.command)
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


_GPU_COUNTS: dict[tuple[str | None, str | None], tuple[int, str]] = {}


def count_gpus() -> tuple[int, str]:
    """GPUs on this node and how that was found (``nvidia-smi -L``; CUDA_VISIBLE_DEVICES narrows it), counted once
    per nvidia-smi and CUDA_VISIBLE_DEVICES: the plan's ``auto`` GPUs, the preflight and the launch's check of one
    command all see the same count, for one nvidia-smi call."""
    key = (shutil.which("nvidia-smi"), os.environ.get("CUDA_VISIBLE_DEVICES"))
    if key not in _GPU_COUNTS:
        _GPU_COUNTS[key] = _count_gpus(key[0])
    return _GPU_COUNTS[key]


def _count_gpus(smi: str | None) -> tuple[int, str]:
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


def check_gpus(framework: str, env_spec: BackendEnvironment, assumed: bool = False) -> None:
    """Fail before launching when this node has fewer GPUs than the plan expects (``assumed``: the count is what
    ``resources.gpus_per_node=auto`` assumed, there being none found)."""
    if env_spec.gpus_per_node <= 0:
        return
    found, how = count_gpus()
    if found < env_spec.gpus_per_node:
        setting = "auto, assumed " if assumed else ""
        raise UnirlError(
            f"{framework} expects {env_spec.gpus_per_node} GPU(s) on this node (resources.gpus_per_node={setting}"
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


# --- the user's plugins, for the backend's processes --------------------------------------------------------

PluginKind = Literal["builtin", "entry_point", "file"]


@dataclass(frozen=True)
class StagedPlugin:
    """One plugin a backend's processes load: one of unirl's own modules, an installed distribution's entry point
    (group ``unirl``), or a plugin file (a project's ``unirlfile.py``)."""

    name: str
    kind: PluginKind
    module: str = ""
    """builtin: the module to import."""
    distribution: str = ""
    """entry_point: the distribution whose entry point it is (staged with its modules and a minimal dist-info)."""
    version: str = ""
    path: str = ""
    """file: the plugin file; once staged, relative to the list's directory."""


@dataclass(frozen=True)
class StagedPlugins:
    """What the host loaded that a backend's processes must load too, and what it blocked."""

    plugins: tuple[StagedPlugin, ...]
    blocked: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StagedPlugins:
        return cls(tuple(StagedPlugin(**p) for p in data.get("plugins", ())), tuple(data.get("blocked", ())))


def stage_plugins(core: Path, staged: StagedPlugins) -> StagedPlugins:
    """Stage the plugins a backend's processes load into ``core`` (the run's light core) and write their list.

    A third-party plugin gets its distribution's top-level modules (pure Python, as for reward packages) and a
    minimal dist-info, so ``importlib.metadata`` and pluggy's ``load_setuptools_entrypoints`` see it in the backend's
    interpreter as on the host; a plugin file is copied (a container sees the run directory, not the project).
    What cannot be staged (a compiled module) is named on stderr and left to the backend's environment: a plugin
    that then fails to load there is reported by that process and the run goes on without it."""
    written: list[StagedPlugin] = []
    for plugin in staged.plugins:
        if plugin.kind == "entry_point":
            _stage_distribution(core, plugin)
            written.append(plugin)
        elif plugin.kind == "file":
            source = Path(plugin.path)
            digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
            target = core / PLUGIN_FILES / f"{digest}-{source.name}"
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            written.append(replace(plugin, path=str(target.relative_to(core))))
        else:
            written.append(plugin)
    result = StagedPlugins(tuple(written), staged.blocked)
    core.mkdir(parents=True, exist_ok=True)
    (core / PLUGIN_LIST).write_text(result.to_json() + "\n", encoding="utf-8")
    return result


def staged_plugins(core: Path | None = None) -> tuple[StagedPlugins, Path] | None:
    """The plugin list staged next to the running ``unirl`` package (or in ``core``), with its directory; None when
    unirl does not run from a staged core (a checkout, an install of its own)."""
    directory = core or Path(__file__).resolve().parents[2]
    path = directory / PLUGIN_LIST
    if not path.is_file():
        return None
    return StagedPlugins.from_dict(json.loads(path.read_text(encoding="utf-8"))), directory


def _stage_distribution(core: Path, plugin: StagedPlugin) -> None:
    try:
        dist = md.distribution(plugin.distribution)
    except md.PackageNotFoundError:
        _not_staged(plugin, f"its distribution {plugin.distribution!r} is not installed here")
        return
    info = core / f"{_normalised(plugin.distribution)}-{dist.version}.dist-info"
    if info.exists():
        shutil.rmtree(info)
    info.mkdir(parents=True)
    metadata = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or \
        f"Metadata-Version: 2.1\nName: {plugin.distribution}\nVersion: {dist.version}\n"
    (info / "METADATA").write_text(metadata, encoding="utf-8")
    (info / "entry_points.txt").write_text(dist.read_text("entry_points.txt") or "", encoding="utf-8")
    for module in _distribution_modules(dist):
        if module in ("unirl", "pluggy"):
            continue  # the light core itself, already staged
        if not _stage_module(core, module):
            _not_staged(plugin, f"its module {module!r} is not pure Python importable here")


def _distribution_modules(dist: md.Distribution) -> list[str]:
    """The top-level modules a distribution installs: its ``top_level.txt``, else its file list, plus the modules
    its ``unirl`` entry points name (an editable install lists no files of its own)."""
    names: list[str] = []
    top_level = dist.read_text("top_level.txt")
    if top_level:
        names += [line.strip() for line in top_level.splitlines() if line.strip()]
    else:
        for file in dist.files or ():
            first = file.parts[0]
            if len(file.parts) > 1 and not first.endswith((".dist-info", ".egg-info", ".data")) and first != "..":
                names.append(first)
            elif len(file.parts) == 1 and file.suffix == ".py":
                names.append(file.stem)
    names += [ep.module.split(".")[0] for ep in dist.entry_points if ep.group == "unirl"]
    return sorted({n for n in names if n.isidentifier() and n != "__pycache__"})


def _stage_module(core: Path, name: str) -> bool:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return False  # not found, or a namespace package
    origin = Path(spec.origin)
    if origin.name == "__init__.py":
        target = core / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(origin.parent, target, ignore=_IGNORE)
        return True
    if origin.suffix == ".py":
        shutil.copyfile(origin, core / origin.name)
        return True
    return False


def _normalised(distribution: str) -> str:
    """A distribution name as dist-info directories spell it (PEP 427: runs of -_. become one underscore)."""
    return re.sub(r"[-_.]+", "_", distribution)


def _not_staged(plugin: StagedPlugin, why: str) -> None:
    log.warning("warning: plugin %r (%s) was not staged for the backend: %s; the backend's environment must provide "
                "it, or the backend's processes run without it", plugin.name, plugin.distribution, why)
