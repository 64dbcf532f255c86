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
    orjson = None

MANIFEST = "manifest.json"
PLAN = "plan.json"
NATIVE_CONFIG = "native_config.json"
TRAJECTORIES = "trajectories.jsonl"
METRICS = "metrics.jsonl"
EVAL = "eval.jsonl"
SUMMARY = "summary.json"
CURVES = "curves.png"


@dataclass
class RunInfo:
    run_dir: Path
    framework: str
    recipe: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

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
    """Append whole lines with one write on an O_APPEND descriptor, so a killed run leaves no torn line."""
    if not records:
        return
    data = encode_lines(records)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


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
