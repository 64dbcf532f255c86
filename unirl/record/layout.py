"""A run as the lifecycle hooks see it, and its directory's file layout."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import orjson
except ImportError:  # optional: the core stays pure Python
    orjson = None  # type: ignore[assignment]

MANIFEST = "manifest.json"
PLAN = "plan.json"
NATIVE_CONFIG = "native_config.json"
TRAJECTORIES = "trajectories.jsonl"
METRICS = "metrics.jsonl"
EVAL = "eval.jsonl"
SUMMARY = "summary.json"
PARITY = "parity.json"  # the recipe's parity certificate on the run's backend (unirl.backend.parity)
CURVES = "curves.png"


ROLE_RUN = "run"
"""This process reports the whole run: every lifecycle hook, once (TRL's runner)."""
ROLE_SCORER = "scorer"
"""This process is one of a native backend's that score rewards (verl's reward workers, OpenRLHF's engine actors,
NeMo RL's environment actor, slime's rollout process); a run may have several, each reporting what it scored."""


@dataclass
class RunInfo:
    run_dir: Path
    framework: str
    recipe: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    role: str = ROLE_RUN
    """:data:`ROLE_RUN` or :data:`ROLE_SCORER`: which part of the run this process reports."""

    def path(self, name: str) -> Path:
        return self.run_dir / name


def encode_lines(records: list[dict[str, Any]]) -> bytes:
    """JSON lines; orjson when installed (several times faster on the per-step trajectory batch)."""
    if orjson is not None:
        try:
            return b"".join(orjson.dumps(r, default=_jsonable) + b"\n" for r in records)
        except TypeError:  # e.g. a non-str dict key: the standard library handles it
            pass
    return "".join(json.dumps(r, ensure_ascii=False, default=_jsonable) + "\n" for r in records).encode()


def append_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    """Append whole lines with one write on an O_APPEND descriptor, so a killed run leaves no torn line.

    A ``.gz`` path gets one whole gzip member per call (see :mod:`unirl.record.trajectory_log`).
    """
    if not records:
        return
    data = encode_lines(records)
    if path.suffix == ".gz":
        from unirl.record.trajectory_log import encode

        data = encode(data, compress=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """A run's JSONL log (``path``, or ``path.gz`` when the run compressed it); a torn last line is skipped."""
    from unirl.jsonl import read_run_log

    return read_run_log(path)


def truncate_after(path: Path, step: int) -> int:
    """Drop the lines of a run's JSONL file whose ``step`` is after ``step``, and a torn last line; return how many.

    A resumed run repeats every step after its checkpoint, so the lines those steps wrote before the kill must go,
    or the file would hold them twice. A last line that does not parse is what a kill mid-write leaves; the next
    append would be glued onto it. Other lines, ``step``-less or not, are kept as they are. The file is rewritten
    through a temporary file and ``os.replace``, so a kill during the truncation leaves the old file or the new one,
    never half of either. A missing file, or a whole one with nothing to drop, is left untouched.
    """
    if not path.exists() and Path(f"{path}.gz").exists():
        path = Path(f"{path}.gz")  # the run compressed this log
    if not path.exists():
        return 0
    from unirl.jsonl import read_bytes

    compressed = path.suffix == ".gz"
    lines = read_bytes(path).split(b"\n")
    lines = [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    kept: list[bytes] = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = _loads(line)
        except ValueError:
            if index == len(lines) - 1:
                continue  # torn by a kill: the only place line-atomic appends can leave a partial line
            kept.append(line if line.endswith(b"\n") else line + b"\n")
            continue
        record_step = record.get("step") if isinstance(record, dict) else None
        if isinstance(record_step, int | float) and not isinstance(record_step, bool) and record_step > step:
            continue
        kept.append(line if line.endswith(b"\n") else line + b"\n")
    dropped = sum(1 for line in lines if line.strip()) - len(kept)
    # A complete last line without its newline (a kill between the two) still needs one before the next append.
    if dropped or (lines and not lines[-1].endswith(b"\n")):
        tmp = path.with_suffix(path.suffix + ".tmp")
        with tmp.open("wb") as out:
            if compressed:
                from unirl.record.trajectory_log import encode

                out.write(encode(b"".join(kept), compress=True))
            else:
                out.writelines(kept)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    return dropped


def _loads(line: bytes) -> Any:
    """One JSON line; ValueError (json's and orjson's decode errors both are) when it does not parse."""
    if orjson is not None:
        return orjson.loads(line)
    return json.loads(line)


def write_json(path: Path, data: Any) -> None:
    """Write via a temporary file and rename, so readers never see half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=_jsonable) + "\n")
    os.replace(tmp, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy / torch scalars
        return value.item()
    return repr(value)
