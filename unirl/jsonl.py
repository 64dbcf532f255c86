"""The one JSON-lines reader: data files, ``--samples`` files and a run's own logs, plain or gzip-compressed.

Lines end at ``\\n`` only: JSON leaves U+2028, U+2029 and U+0085 raw inside strings, and ``str.splitlines`` breaks
there, which made unirl reject files its own exporter wrote. Bytes are decoded as strict UTF-8 per line, so a
binary or Latin-1 file is an error that names the line, not a garbled prompt. ``.gz`` files (and any file that
starts with gzip's magic bytes) are read through gzip, so a compressed ``trajectories.jsonl.gz`` reads like the
plain one.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from unirl.errors import UnirlError

GZIP_MAGIC = b"\x1f\x8b"


class JsonlError(UnirlError):
    """A JSON-lines file that cannot be read; ``lineno`` is 1-based (0: the file as a whole)."""

    def __init__(self, path: Path, lineno: int, reason: str) -> None:
        self.path = path
        self.lineno = lineno
        self.reason = reason
        where = f"{path}:{lineno}" if lineno else str(path)
        super().__init__(f"{where}: {reason}")


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed when it is gzip.

    unirl appends to a compressed log one whole gzip member at a time (concatenated members are one valid gzip
    file), so a kill can only tear the last member: what it held is dropped, every earlier member is kept.
    """
    data = path.read_bytes()
    if not data.startswith(GZIP_MAGIC):
        return data
    out = bytearray()
    while data.startswith(GZIP_MAGIC):
        member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = member.decompress(data)
        except zlib.error as exc:
            if not out:
                raise JsonlError(path, 0, f"not a readable gzip file ({exc})") from None
            break
        if not member.eof:
            break  # a torn last member
        out += chunk
        data = member.unused_data
    return bytes(out)


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) for every non-blank line; JsonlError for binary or non-UTF-8 content."""
    data = read_bytes(path)
    if b"\x00" in data:
        raise JsonlError(path, 0, "a binary file (it holds NUL bytes), not JSON lines")
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonlError(path, lineno, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                                           "save the file as UTF-8") from None
        yield lineno, text


def records(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON value) for every non-blank line; JsonlError naming the first bad line."""
    for lineno, text in lines(path):
        try:
            yield lineno, json.loads(text)
        except json.JSONDecodeError as exc:
            raise JsonlError(path, lineno, f"not JSON ({exc.msg} at column {exc.colno})") from None
        except RecursionError:
            raise JsonlError(path, lineno, "JSON nested too deeply") from None


def objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Like :func:`records`, but every line must be a JSON object."""
    for lineno, value in records(path):
        if not isinstance(value, dict):
            raise JsonlError(path, lineno, f"a JSON {type(value).__name__}, not an object")
        yield lineno, value


def read_run_log(path: Path) -> list[dict[str, Any]]:
    """A run's own JSONL log (metrics, eval, trajectories; ``path`` or ``path.gz``), tolerating a torn last line.

    A run killed mid-write can leave its last line unfinished (appends are whole lines, but a kill between the
    bytes of one write is possible on some filesystems); every other line must parse.
    """
    if not path.exists() and Path(str(path) + ".gz").exists():
        path = Path(str(path) + ".gz")
    if not path.exists():
        return []
    found: list[tuple[int, str]] = list(lines(path))
    rows: list[dict[str, Any]] = []
    for position, (lineno, text) in enumerate(found):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            if position == len(found) - 1:
                break  # torn by a kill
            raise JsonlError(path, lineno, f"not JSON ({exc.msg})") from None
        if isinstance(value, dict):
            rows.append(value)
    return rows
