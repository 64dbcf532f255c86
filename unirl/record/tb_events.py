"""TensorBoard event files read back, one file at a time, from where the last read stopped.

Every native backend but verl writes its metrics as TensorBoard events (OpenRLHF, NeMo RL, slime and vime through
``torch.utils.tensorboard.SummaryWriter``). A file is a TFRecord stream: per record a little-endian ``uint64``
length, a masked CRC-32C of it, the serialised ``tensorflow.Event`` protobuf and a masked CRC-32C of that. Each file
is read on its own (:class:`EventFileReader`): TensorBoard's ``EventAccumulator`` over a directory that two processes
write into (slime's Megatron actor and its rollout manager) stops reading the older file and silently drops its new
events (seen with tensorboard 2.21: "File ... updated even though the current file is ...").

Two decoders give the same values (``tests/test_bridge.py`` checks it on files written by torch's ``SummaryWriter``,
by OpenRLHF 0.11.2's ``TensorboardLogger`` and by verl 0.9.1's ``Tracking``):
- a decoder of the framing and the protobuf wire format written here, the default: no dependency (a backend's
  environment may lack tensorboard and protobuf) and about a fifth of the CPU of TensorBoard's loader in the follower
  (``benchmarks/bridge.py``); it stops before a torn last record and resumes from its byte offset;
- TensorBoard's own ``EventFileLoader`` (``use_tensorboard=True``), the reference the tests compare against (its
  compat record reader keeps a torn last record for the next read,
  tensorboard/compat/tensorflow_stub/pywrap_tensorflow.py ``PyRecordReader_New``).

Only scalars are kept: ``Summary.Value.simple_value`` (what ``add_scalar`` writes by default, torch
torch/utils/tensorboard/summary.py ``scalar(new_style=False)``) and one-element tensors (``new_style=True``, and the
tensor summaries TensorBoard's data-compat layer makes). TensorBoard stores float32: 0.01 reads back as 0.00999999977.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENT_FILE_MARK = "tfevents"
"""Every event file's name holds it: ``events.out.tfevents.<time>.<host>.<pid>.<n>`` (torch's EventFileWriter)."""


@dataclass(frozen=True)
class Scalar:
    tag: str
    step: int
    value: float
    wall_time: float


def is_event_file(path: Path) -> bool:
    return path.is_file() and EVENT_FILE_MARK in path.name


def event_files(root: Path) -> list[Path]:
    """Every event file under ``root`` (any depth: OpenRLHF writes into ``<dir>/<run_name>/``, NeMo RL into
    ``exp_NNN/tensorboard/``), in a stable order."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob(f"*{EVENT_FILE_MARK}*") if p.is_file())


def tensorboard_available() -> bool:
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader  # noqa: F401
    except Exception:  # not installed, or broken in the backend's environment: the decoder below reads the same
        return False
    return True


class EventFileReader:
    """One event file, read incrementally: each :meth:`read` returns the scalars appended since the last one."""

    def __init__(self, path: Path, use_tensorboard: bool | None = None) -> None:
        self.path = path
        self.offset = 0
        """Bytes decoded so far (the pure decoder's; TensorBoard's loader keeps its own position)."""
        self.use_tensorboard = bool(use_tensorboard) and tensorboard_available()
        self._loader: Any = None

    def read(self) -> list[Scalar]:
        return self._read_tensorboard() if self.use_tensorboard else self._read_wire()

    # --- TensorBoard's own loader ----------------------------------------------------------------------------------

    def _read_tensorboard(self) -> list[Scalar]:
        if self._loader is None:
            from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

            self._loader = EventFileLoader(str(self.path))
        found: list[Scalar] = []
        for event in self._loader.Load():
            if not event.HasField("summary"):
                continue
            for value in event.summary.value:
                number = _tensorboard_scalar(value)
                if number is not None:
                    found.append(Scalar(value.tag, int(event.step), number, float(event.wall_time)))
        return found

    # --- the wire format, decoded here -----------------------------------------------------------------------------

    def _read_wire(self) -> list[Scalar]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        found: list[Scalar] = []
        position = 0
        while len(data) - position >= 12:
            (length,) = struct.unpack_from("<Q", data, position)
            end = position + 12 + length + 4
            if end > len(data):
                break  # a record still being written: read again from its start next time
            found.extend(decode_event(data[position + 12:position + 12 + length]))
            position = end
        self.offset += position
        return found


def _tensorboard_scalar(value: Any) -> float | None:
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":
        tensor = value.tensor
        for name in ("float_val", "double_val", "int_val", "int64_val"):
            values = getattr(tensor, name)
            if len(values) == 1:
                return float(values[0])
        if tensor.tensor_content and tensor.dtype in _CONTENT_FORMATS:
            fmt = _CONTENT_FORMATS[tensor.dtype]
            if len(tensor.tensor_content) == struct.calcsize(fmt):
                return float(struct.unpack(fmt, tensor.tensor_content)[0])
    return None


# tensorflow/core/framework/types.proto: DT_FLOAT = 1, DT_DOUBLE = 2, DT_INT32 = 3, DT_INT64 = 9
_CONTENT_FORMATS = {1: "<f", 2: "<d", 3: "<i", 9: "<q"}


# --- protobuf wire format (https://protobuf.dev/programming-guides/encoding/) --------------------------------------
# tensorboard/compat/proto/event.proto: Event { double wall_time = 1; int64 step = 2; ...; Summary summary = 5; }
# summary.proto: Summary { repeated Value value = 1; } Value { string tag = 1; float simple_value = 2;
#   TensorProto tensor = 8; ... } tensor.proto: TensorProto { DataType dtype = 1; bytes tensor_content = 4;
#   repeated float float_val = 5; repeated double double_val = 6; repeated int32 int_val = 7;
#   repeated int64 int64_val = 10; }


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value): varints as ints, fixed64/fixed32 as raw bytes, length-delimited as bytes."""
    out: list[tuple[int, int, Any]] = []
    position, end = 0, len(data)
    while position < end:
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, position = _varint(data, position)
        elif wire == 1:
            value, position = data[position:position + 8], position + 8
        elif wire == 2:
            size, position = _varint(data, position)
            value, position = data[position:position + size], position + size
        elif wire == 5:
            value, position = data[position:position + 4], position + 4
        else:  # groups (3, 4) are not used by these messages
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((number, wire, value))
    return out


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def decode_event(record: bytes) -> list[Scalar]:
    """The scalars of one serialised ``Event`` (none for file-version, graph or non-scalar events)."""
    try:
        fields = _fields(record)
    except (IndexError, ValueError):
        return []
    wall_time, step, summaries = 0.0, 0, []
    for number, wire, value in fields:
        if number == 1 and wire == 1:
            (wall_time,) = struct.unpack("<d", value)
        elif number == 2 and wire == 0:
            step = _signed64(value)
        elif number == 5 and wire == 2:
            summaries.append(value)
    found: list[Scalar] = []
    for summary in summaries:
        for number, wire, value in _fields(summary):
            if number == 1 and wire == 2:
                scalar = _decode_value(value)
                if scalar is not None:
                    found.append(Scalar(scalar[0], step, scalar[1], wall_time))
    return found


def _decode_value(data: bytes) -> tuple[str, float] | None:
    tag, number_found = "", None
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:
            tag = value.decode("utf-8", "replace")
        elif number == 2 and wire == 5:
            (number_found,) = struct.unpack("<f", value)
        elif number == 8 and wire == 2:
            number_found = _decode_tensor(value)
    return (tag, float(number_found)) if number_found is not None else None


def _decode_tensor(data: bytes) -> float | None:
    dtype, content, values = 0, b"", []
    for number, wire, value in _fields(data):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 4 and wire == 2:
            content = value
        elif number in (5, 6, 7, 10):
            values.extend(_repeated(number, wire, value))
    if len(values) == 1:
        return values[0]
    fmt = _CONTENT_FORMATS.get(dtype)
    if fmt and len(content) == struct.calcsize(fmt):
        return float(struct.unpack(fmt, content)[0])
    return None


def _repeated(number: int, wire: int, value: Any) -> list[float]:
    """One field of a numeric repeated field: packed (wire type 2) or one element."""
    if number == 5:
        return list(struct.unpack(f"<{len(value) // 4}f", value)) if wire == 2 else [struct.unpack("<f", value)[0]]
    if number == 6:
        return list(struct.unpack(f"<{len(value) // 8}d", value)) if wire == 2 else [struct.unpack("<d", value)[0]]
    if wire == 0:
        return [float(_signed64(value)) if number == 10 else float(_signed32(value))]
    out, position = [], 0
    while position < len(value):
        item, position = _varint(value, position)
        out.append(float(_signed64(item)) if number == 10 else float(_signed32(item)))
    return out


def _signed32(value: int) -> int:
    value &= (1 << 64) - 1
    value = _signed64(value)
    return value
