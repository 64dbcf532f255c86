"""manifest.json: what is needed to say exactly what a run was (versions, model, data, rewards, host)."""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PACKAGES = ("unirl", "torch", "transformers", "trl", "accelerate", "datasets", "vllm", "ray", "verl", "openrlhf")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed versions read from metadata; importing nothing."""
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    return found


def git_sha(directory: Path) -> str | None:
    """The commit of the user's project (where unirl was started), with '+dirty' if it has changes."""
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=directory,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")


def accelerator() -> dict[str, Any]:
    """GPUs as torch sees them (torch is already loaded in the backend process that calls this)."""
    info: dict[str, Any] = {"cpu_count": os.cpu_count(), "cuda": False}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        info.update(cuda=True, cuda_version=torch.version.cuda, gpus=[
            torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
    return info


def build_manifest(*, framework: str, seed: int, reward_sources: dict[str, dict[str, str]],
                   model: dict[str, Any], data: dict[str, Any], project_dir: Path) -> dict[str, Any]:
    return {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "framework": framework,
        "versions": package_versions(),
        "python": sys.version.split()[0],
        "model": model,
        "data": data,
        "rewards": reward_sources,
        "seed": seed,
        "project_git_sha": git_sha(project_dir),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(), **accelerator()},
        "argv": sys.argv,
    }


def reward_sources(registry: Any, names: list[str]) -> dict[str, dict[str, str]]:
    """Which plugin, module and package version each reward came from."""
    sources = {}
    for name in names:
        entry = registry.entry(name)
        fn = registry.get(name)
        top = (fn.module or "").split(".")[0]
        try:
            # unirl's own rewards need no scan of every installed package (~0.5 s, a tenth of the default run's
            # start-up)
            dist = top if top == "unirl" else _packages_distributions().get(top, [top])[0]
            version = md.version(dist)
        except (md.PackageNotFoundError, IndexError):
            dist, version = top, "unknown"
        sources[name] = {"plugin": entry.source, "module": fn.module, "distribution": dist, "version": version,
                         "file": fn.file or "", "sha256": _sha256(fn.file)}
    return sources


REWARD_FILES = "reward_files"


def keep_reward_files(run_dir: Path, sources: dict[str, dict[str, str]]) -> None:
    """Copy each reward's defining file that no installed package pins (a recipe's ``rewards[i].file``, a
    ``unirlfile.py``) into ``<run_dir>/reward_files/``: an edited file would otherwise make the run unreproducible.
    The manifest already holds every file's sha256; this adds the copy's path."""
    import shutil

    for source in sources.values():
        file = source.get("file")
        if not file or source.get("version") != "unknown" or not Path(file).is_file():
            continue  # an installed distribution's version pins its files
        target = run_dir / REWARD_FILES / f"{source['sha256'][:12]}-{Path(file).name}"
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            shutil.copyfile(file, target)
        source["copy"] = str(target.relative_to(run_dir))


def _sha256(file: str | None) -> str:
    import hashlib

    if not file or not Path(file).is_file():
        return ""
    return hashlib.sha256(Path(file).read_bytes()).hexdigest()


@functools.cache
def _packages_distributions() -> Mapping[str, list[str]]:
    """Import name -> distributions; scanning every installed package takes 0.1-0.5 s, so once per process."""
    return md.packages_distributions()
