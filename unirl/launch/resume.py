"""Resuming a run in its own directory: the checkpoint to continue from, and the command that started the run.

A run resumes in place: the same run directory (``hydra.run.dir``) with ``run.resume=true``. The backend continues
from the newest complete checkpoint there and drops what the killed run logged after it (see
:func:`unirl.record.layout.truncate_after`), so the directory reads as one uninterrupted run.

Complete means verified, before any log is cut back: trainer_state.json parses, the weights' safetensors headers
describe exactly the bytes on disk, and the optimizer, scheduler and RNG files (torch's zip format) have their zip
directory and every member inside the file. A newer checkpoint that fails is skipped, with the reason, and the
previous complete one is used. A run stopped before its first complete checkpoint starts again from step 0 in the
same directory. Whether a resumed run repeated the uninterrupted one is measured, not assumed: the steps the stopped
run logged after its checkpoint are compared with the same steps of the resumed run (``bit_identical``, with the
first difference); what is known to prevent it (no RNG state, a forced recipe change) is listed beside.

The recipe of a resumed run is the recipe it started with (``plan.json``): a resume that would train on another one
(different overrides, an edited recipe file) is refused unless forced (``unirl resume RUN_DIR --force ...``), and a
forced change is recorded in the manifest (``resumed_from.recipe_changes``: which fields, old -> new). A run that
already completed is not run again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import zipfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from unirl.errors import UnirlError

log = logging.getLogger(__name__)

HYDRA_OVERRIDES = Path(".hydra") / "overrides.yaml"
# Overrides the resume command sets itself; the earlier run's values for them are replaced, not repeated.
RESUME_KEYS = ("run.resume", "hydra.run.dir")
# Hugging Face Trainer's checkpoint folders: checkpoint-<optimizer updates>; trainer_state.json is written last.
TRAINER_CHECKPOINT = re.compile(r"checkpoint-(\d+)")
TRAINER_STATE = "trainer_state.json"
# What a skipped checkpoint folder is renamed to, out of the way of the Trainer's own checkpoint-* globbing (it
# would otherwise save into the broken folder again, mixing its files with the new ones).
SKIPPED_PREFIX = "skipped-"
# A path Hydra's override grammar reads as one plain value; anything else is quoted.
PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./\-+]+")
# Weights in any of the layouts transformers saves (one file, shards with an index, a PEFT adapter).
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "adapter_model.safetensors", "pytorch_model.bin",
           "pytorch_model.bin.index.json", "adapter_model.bin")
# The Trainer loads optimizer and scheduler only when both files exist, and silently starts fresh otherwise.
REQUIRED = ("optimizer.pt", "scheduler.pt")
RNG_STATE = re.compile(r"rng_state(_\d+)?\.pth")
TORCH_SUFFIXES = (".pt", ".pth", ".bin")
# Whole-file CRC checks read every byte: done for files up to this size; larger ones get the structural check.
CRC_CHECK_BYTES = 256 << 20
SAFETENSORS_HEADER_MAX = 100 << 20
# Recipe fields a resume may change without --force: where the run executes and how progress is shown; none of
# them changes what is trained.
RESUME_MAY_CHANGE = ("run.resume", "logging.progress", "scheduler")
PLAN_FILE = "plan.json"
SUMMARY_FILE = "summary.json"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class Checkpoint:
    path: Path | None
    """None: no complete checkpoint; a resume starts again from step 0 (see :func:`resume_checkpoint`)."""
    global_step: int
    """The backend's own count at the checkpoint (for TRL: optimizer updates, not unirl steps)."""
    skipped: tuple[tuple[Path, str], ...] = ()
    """Newer checkpoint folders passed over, each with why."""
    not_bit_identical: tuple[str, ...] = ()
    """Why resuming from this checkpoint cannot repeat the uninterrupted run exactly (empty: it can)."""


def trainer_checkpoints(checkpoints_dir: Path) -> list[tuple[Path, int]]:
    """Every ``checkpoint-<N>`` folder with its global step (trainer_state.json's, else N), newest first."""
    if not checkpoints_dir.is_dir():
        return []
    found = []
    for folder in checkpoints_dir.iterdir():
        match = TRAINER_CHECKPOINT.fullmatch(folder.name)
        if not match or not folder.is_dir():
            continue
        step = int(match.group(1))
        with contextlib.suppress(OSError, ValueError):
            state = json.loads((folder / TRAINER_STATE).read_text())
            if isinstance(state, dict) and isinstance(state.get("global_step"), int):
                step = state["global_step"]
        found.append((folder, step))
    return sorted(found, key=lambda item: item[1], reverse=True)


def verify_checkpoint(folder: Path) -> tuple[str | None, tuple[str, ...]]:
    """(why the checkpoint cannot be resumed from, or None; why a resume from it would not be bit-identical).

    Cheap: headers and sizes, plus CRCs of the torch files up to CRC_CHECK_BYTES; nothing is unpickled."""
    try:
        state = json.loads((folder / TRAINER_STATE).read_text())
    except OSError:
        return f"no {TRAINER_STATE} (a save that was interrupted)", ()
    except ValueError:
        return f"{TRAINER_STATE} does not parse (a save that was interrupted)", ()
    if not isinstance(state, dict) or not isinstance(state.get("global_step"), int):
        return f"{TRAINER_STATE} holds no global_step", ()
    weights = [name for name in WEIGHTS if (folder / name).is_file()]
    if not weights:
        return f"no model weights (none of {', '.join(WEIGHTS[:2])}, ...)", ()
    missing = [name for name in REQUIRED if not (folder / name).is_file()]
    if missing:
        return (f"{' and '.join(missing)} missing: the Trainer would silently restart the optimizer and learning-rate "
                "schedule"), ()
    for name in weights:
        problem = _weights_problem(folder, name)
        if problem:
            return problem, ()
    for path in sorted(folder.iterdir()):
        if path.suffix in TORCH_SUFFIXES and path.is_file() and path.name not in weights:
            problem = torch_file_problem(path)
            if problem:
                return f"{path.name}: {problem}", ()
    if not any(RNG_STATE.fullmatch(p.name) for p in folder.iterdir()):
        return None, (f"{folder.name} has no RNG state (rng_state.pth): sampling after the resume differs from the "
                      "uninterrupted run",)
    return None, ()


def _weights_problem(folder: Path, name: str) -> str | None:
    path = folder / name
    if name.endswith(".index.json"):
        try:
            shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return f"{name} does not parse"
        for shard in shards:
            if "/" in shard or not (folder / shard).is_file():
                return f"{name} lists {shard!r}, which is missing"
            problem = safetensors_problem(folder / shard) if shard.endswith(".safetensors") else \
                torch_file_problem(folder / shard)
            if problem:
                return f"{shard}: {problem}"
        return None
    problem = safetensors_problem(path) if name.endswith(".safetensors") else torch_file_problem(path)
    return f"{name}: {problem}" if problem else None


def safetensors_problem(path: Path) -> str | None:
    """Why a .safetensors file is not whole, or None: its header must parse and describe exactly the bytes on disk."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than the 8-byte header length (truncated)"
        length = int.from_bytes(head, "little")
        if length > min(size - 8, SAFETENSORS_HEADER_MAX):
            return f"its header length ({length} bytes) runs past the end of the file ({size} bytes): truncated"
        try:
            header = json.loads(handle.read(length))
            ends = [int(entry["data_offsets"][1]) for key, entry in header.items() if key != "__metadata__"]
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            return "its header does not parse"
    expected = 8 + length + max(ends, default=0)
    if size < expected:
        return f"{size} bytes where its header describes {expected}: truncated"
    if size > expected:
        return f"{size} bytes where its header describes {expected}: trailing bytes"
    return None


def torch_file_problem(path: Path) -> str | None:
    """Why a torch.save file is not whole, or None: the zip directory at its end is present, every member lies
    inside the file, and (up to CRC_CHECK_BYTES) every member's CRC matches."""
    size = path.stat().st_size
    if size == 0:
        return "empty"
    if not zipfile.is_zipfile(path):
        with path.open("rb") as handle:
            if handle.read(1) == b"\x80":  # torch's legacy (pre-zip) pickle format: no cheap check exists
                return None
        return f"{size} bytes and no zip directory at its end (torch.save writes one last): truncated or overwritten"
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if info.header_offset + info.compress_size > size:
                    return f"member {info.filename} runs past the end of the file: truncated"
            if size <= CRC_CHECK_BYTES:
                bad = archive.testzip()
                if bad is not None:
                    return f"member {bad} fails its CRC check: corrupt"
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return f"its zip structure is broken ({exc})"
    return None


def latest_trainer_checkpoint(checkpoints_dir: Path) -> Checkpoint | None:
    """The newest complete ``checkpoint-<N>`` folder of a Hugging Face Trainer, or None when there is none.

    Complete means :func:`verify_checkpoint` finds nothing wrong; the newer folders it passes over (a kill mid-save,
    a truncated file) are listed in ``skipped`` with the reason."""
    skipped: list[tuple[Path, str]] = []
    for folder, step in trainer_checkpoints(checkpoints_dir):
        problem, not_identical = verify_checkpoint(folder)
        if problem is None:
            return Checkpoint(folder, step, tuple(skipped), not_identical)
        skipped.append((folder, problem))
    return None


def resume_checkpoint(checkpoints_dir: Path) -> Checkpoint:
    """The checkpoint ``run.resume=true`` continues from: the newest complete one, or, when a kill came before the
    first complete save, a restart (``path`` None, step 0) with every folder it passed over in ``skipped``."""
    checkpoint = latest_trainer_checkpoint(checkpoints_dir)
    if checkpoint is not None:
        return checkpoint
    passed = tuple((folder, verify_checkpoint(folder)[0] or "not complete")
                   for folder, _ in trainer_checkpoints(checkpoints_dir))
    return Checkpoint(None, 0, passed)


def take_checkpoint(run_dir: Path, checkpoint: Checkpoint) -> dict[str, Any]:
    """Before a resume trains from ``checkpoint``: move the newer, broken folders it skipped out of the Trainer's
    way, say so, and return what the run records about the resume (``resumed_from``'s extra keys). Whether the
    resumed run repeats the uninterrupted one is measured afterwards (:func:`measured_identity`); the reasons known
    now that it cannot are listed."""
    skipped = []
    for folder, why in checkpoint.skipped:
        target = folder.with_name(SKIPPED_PREFIX + folder.name)
        for n in range(2, 1000):
            if not target.exists():
                break
            target = folder.with_name(f"{SKIPPED_PREFIX}{folder.name}-{n}")
        try:
            folder.rename(target)
            kept = target
        except OSError:
            kept = folder
        skipped.append({"checkpoint": str(folder), "reason": why, "kept_as": str(kept)})
        log.warning("resume: skipped %s (%s); kept as %s", folder.name, why, kept.name)
    if checkpoint.path is None:
        log.warning("resume: no complete checkpoint in %s: the run was stopped before its first save; it starts "
                    "again from step 0 in the same directory", run_dir)
    elif skipped:
        log.info("resume: continuing from %s, the newest complete checkpoint", checkpoint.path.name)
    changes = recipe_change_history(run_dir)
    reasons = list(checkpoint.not_bit_identical)
    if changes:
        fields = sorted({f for change in changes for f in change.get("fields", {})})
        reasons.append(f"the recipe was changed on resume (forced): {', '.join(fields)}")
    return {"skipped_checkpoints": skipped, "not_bit_identical_because": reasons, "recipe_changes": changes,
            **({"restarted": "no complete checkpoint: the run started again from step 0"}
               if checkpoint.path is None else {})}


REPLAY_KEYS = ("reward/total/mean", "loss", "grad_norm", "lr")
"""What a resumed step is compared on with the same step logged before the stop: enough to tell another batch,
other samples or other weights apart, exactly (floats compare equal or not)."""


def logged_after(metrics: Path, step: int) -> dict[int, list[Any]]:
    """The steps after ``step`` that the stopped run logged (read before a resume drops them), with the values of
    :data:`REPLAY_KEYS`: what the resumed run's same steps are compared with."""
    from unirl.jsonl import JsonlError, objects

    found: dict[int, list[Any]] = {}
    if not metrics.is_file():
        return found
    try:
        rows = [row for _, row in objects(metrics)]
    except JsonlError:  # a torn last line: the resume drops it; compare what parsed before it
        rows = []
        for line in metrics.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    for row in rows:
        at = row.get("step") if isinstance(row, dict) else None
        if isinstance(at, int) and not isinstance(at, bool) and at > step:
            found[at] = [row.get(key) for key in REPLAY_KEYS]
    return found


def measured_identity(before: dict[int, list[Any]], metrics: Path) -> dict[str, Any]:
    """Whether the resumed run repeated the steps the stopped run had logged after its checkpoint, measured:
    ``bit_identical`` True (every compared step equal), False (with the first difference) or None (nothing to
    compare: the stop came right after a checkpoint, or the resumed run stopped before those steps)."""
    after = logged_after(metrics, 0)
    compared = sorted(set(before) & set(after))
    out: dict[str, Any] = {"compared_steps": len(compared)}
    for step in compared:
        if before[step] != after[step]:
            out.update(bit_identical=False, first_difference={"step": step, "keys": list(REPLAY_KEYS),
                                                              "before_the_stop": before[step],
                                                              "after_the_resume": after[step]})
            return out
    out["bit_identical"] = True if compared else None
    if not compared:
        out["why_not_compared"] = ("the stopped run logged no step after its checkpoint" if not before else
                                   "the resumed run ended before the steps the stopped run had logged")
    return out


# --- the recipe a resume continues, and a run that already ended ------------------------------------------------


@dataclass(frozen=True)
class ResumeRequest:
    """``unirl resume RUN_DIR [--force]``, for the checks made before the run starts."""

    run_dir: str
    force: bool
    command: list[str] = field(default_factory=list)


_REQUEST: ContextVar[ResumeRequest | None] = ContextVar("unirl_resume_request", default=None)


@contextlib.contextmanager
def requested(run_dir: Path, force: bool, command: list[str]) -> Iterator[None]:
    token = _REQUEST.set(ResumeRequest(os.path.realpath(run_dir), force, command))
    try:
        yield
    finally:
        _REQUEST.reset(token)


def current_request(run_dir: Path) -> ResumeRequest | None:
    request = _REQUEST.get()
    return request if request is not None and request.run_dir == os.path.realpath(run_dir) else None


class RecipeChanged(UnirlError):
    def __init__(self, run_dir: Path, changes: dict[str, dict[str, Any]]) -> None:
        self.changes = changes
        shown = "; ".join(f"{key}: {c['old']!r} -> {c['new']!r}" for key, c in sorted(changes.items())[:20])
        more = f" (and {len(changes) - 20} more)" if len(changes) > 20 else ""
        super().__init__(
            f"run.resume=true: the recipe differs from the one {run_dir} was trained with ({shown}{more}); a resume "
            "continues the same run, so nothing was run. Resume it unchanged with `unirl resume "
            f"{run_dir}`, or continue with the new values on purpose with `unirl resume {run_dir} --force "
            "OVERRIDE ...` (recorded in manifest.json; the run is then no longer one recipe)")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out or {prefix.rstrip("."): {}}
    if isinstance(value, list):
        out = {}
        for index, item in enumerate(value):
            out.update(_flatten(item, f"{prefix}{index}."))
        return out or {prefix.rstrip("."): []}
    return {prefix.rstrip("."): value}


def recipe_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Field -> {old, new} for every recipe field that differs (lists by index), except RESUME_MAY_CHANGE's."""
    before, after = _flatten(old), _flatten(new)
    changes = {}
    for key in sorted(before.keys() | after.keys()):
        if any(key == free or key.startswith(free + ".") for free in RESUME_MAY_CHANGE):
            continue
        if before.get(key, "<unset>") != after.get(key, "<unset>"):
            changes[key] = {"old": before.get(key), "new": after.get(key)}
    return changes


def recorded_recipe(run_dir: Path) -> dict[str, Any] | None:
    """The recipe the run directory's last start used (its plan.json), or None when no run got that far."""
    path = run_dir / PLAN_FILE
    if not path.exists():
        return None
    try:
        recipe = json.loads(path.read_text()).get("recipe")
    except (OSError, ValueError, AttributeError):
        raise UnirlError(f"run.resume=true: {path} does not parse, so the recipe {run_dir} was trained with is "
                         "unknown; resume with `unirl resume RUN_DIR --force` to continue with the current one") \
            from None
    return recipe if isinstance(recipe, dict) else None


def completed_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's summary when it completed (nothing left to train or evaluate), else None."""
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("state") == "completed" else None


def check_resume(run_dir: Path, recipe: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """Before a resume starts (the run directory's lock held): (the summary, when the run already completed and the
    recipe is unchanged, so there is nothing to do; the forced recipe changes to record).

    :class:`RecipeChanged` for a changed recipe that was not forced."""
    request = current_request(run_dir)
    earlier = recorded_recipe(run_dir)
    changes = recipe_changes(earlier, recipe) if earlier is not None else {}
    if changes and not (request and request.force):
        raise RecipeChanged(run_dir, changes)
    if not changes:
        return completed_summary(run_dir), {}
    return None, changes


def record_forced_changes(run_dir: Path, changes: dict[str, dict[str, Any]]) -> None:
    """Append a forced recipe change to ``manifest.json`` (``resumed_from.recipe_changes``): the runner carries that
    list into the manifest it writes (see :func:`take_checkpoint`)."""
    from unirl.record.layout import write_json

    path = run_dir / MANIFEST_FILE
    try:
        manifest = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError):
        manifest = {}
    if not isinstance(manifest, dict):
        manifest = {}
    earlier = manifest.get("resumed_from")
    resumed: dict[str, Any] = earlier if isinstance(earlier, dict) else {}
    history = list(resumed.get("recipe_changes") or [])
    history.append({"time": datetime.now().isoformat(timespec="seconds"), "fields": changes})
    manifest["resumed_from"] = {**resumed, "recipe_changes": history}
    write_json(path, manifest)


def recipe_change_history(run_dir: Path) -> list[dict[str, Any]]:
    """Every forced recipe change of this run so far, oldest first (from manifest.json)."""
    try:
        manifest = json.loads((run_dir / MANIFEST_FILE).read_text())
        history = manifest["resumed_from"]["recipe_changes"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [h for h in history if isinstance(h, dict)] if isinstance(history, list) else []


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
