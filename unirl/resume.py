"""Resuming a run in its own directory: the checkpoint to continue from, and the command that started the run.

A run resumes in place: the same run directory (``hydra.run.dir``) with ``run.resume=true``. The backend continues
from the newest complete checkpoint there and drops what the killed run logged after it (see
:func:`unirl.run.truncate_after`), so the directory reads as one uninterrupted run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from unirl.errors import UnirlError

HYDRA_OVERRIDES = Path(".hydra") / "overrides.yaml"
# Overrides the resume command sets itself; the earlier run's values for them are replaced, not repeated.
RESUME_KEYS = ("run.resume", "hydra.run.dir")
# Hugging Face Trainer's checkpoint folders: checkpoint-<optimizer updates>; trainer_state.json is written last.
TRAINER_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
TRAINER_STATE = "trainer_state.json"
# A path Hydra's override grammar reads as one plain value; anything else is quoted.
PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./\-+]+")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    global_step: int
    """The backend's own count at the checkpoint (for TRL: optimizer updates, not unirl steps)."""


def latest_trainer_checkpoint(checkpoints_dir: Path) -> Checkpoint | None:
    """The newest complete ``checkpoint-<N>`` folder of a Hugging Face Trainer, or None when there is none.

    Complete means its trainer_state.json parses: the Trainer writes it after the weights, optimizer, scheduler and
    RNG state, so a folder a kill interrupted mid-save has none (or a torn one) and is passed over.
    """
    if not checkpoints_dir.is_dir():
        return None
    found: list[Checkpoint] = []
    for folder in checkpoints_dir.iterdir():
        match = TRAINER_CHECKPOINT.fullmatch(folder.name)
        if not match or not folder.is_dir():
            continue
        try:
            state = json.loads((folder / TRAINER_STATE).read_text())
        except (OSError, ValueError):
            continue
        global_step = state.get("global_step") if isinstance(state, dict) else None
        found.append(Checkpoint(folder, global_step if isinstance(global_step, int) else int(match.group(1))))
    return max(found, key=lambda c: c.global_step, default=None)


def require_trainer_checkpoint(run_dir: Path, checkpoints_dir: Path) -> Checkpoint:
    """The checkpoint ``run.resume=true`` continues from; a UnirlError naming the directory when there is none."""
    checkpoint = latest_trainer_checkpoint(checkpoints_dir)
    if checkpoint is None:
        raise UnirlError(
            f"run.resume=true: no complete checkpoint in {checkpoints_dir} (run directory {run_dir}); resume needs "
            "the directory of an earlier run that saved one (run.checkpoint_every=N), given as hydra.run.dir=<dir>")
    return checkpoint


def resume_overrides(run_dir: Path) -> list[str]:
    """The command-line overrides that continue the run in ``run_dir``: its own, plus resume and its directory.

    Relative paths among the earlier overrides (data files, reward files) mean what they meant then, so the resumed
    command runs from the same working directory as the first.
    """
    overrides_file = run_dir / HYDRA_OVERRIDES
    if not overrides_file.is_file():
        raise UnirlError(f"{run_dir} is not a unirl run directory: {overrides_file} is missing")
    import yaml

    earlier = yaml.safe_load(overrides_file.read_text()) or []
    if not isinstance(earlier, list) or not all(isinstance(o, str) for o in earlier):
        raise UnirlError(f"{overrides_file}: expected a list of override strings, as Hydra writes it")
    kept = [o for o in earlier if _override_key(o) not in RESUME_KEYS]
    return [*kept, "run.resume=true", f"hydra.run.dir={_hydra_value(str(run_dir.resolve()))}"]


def _override_key(override: str) -> str:
    """``key`` of ``key=value``, ``+key=value``, ``++key=value`` and ``~key``."""
    return override.split("=", 1)[0].lstrip("+~")


def _hydra_value(text: str) -> str:
    """``text`` as one Hydra override value: bare when plain, else single-quoted.

    Inside quotes Hydra reads a backslash literally unless it comes before a quote or the closing quote, so only
    those runs of backslashes are doubled, and each quote gets its own.
    """
    if PLAIN_VALUE.fullmatch(text):
        return text
    escaped = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text)
    return f"'{escaped}'"
