"""TensorBoard event files, written without TensorBoard or TensorFlow installed.

An event file is a sequence of records: the data's length (uint64, little-endian), the
masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data. Each record's
data is an ``Event`` protocol buffer; the few fields used here are encoded by hand:

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
              Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; }

The first event of a file holds ``file_version = "brain.Event:2"``. :func:`read_events`
reads such a file back (checking every CRC), so that the format is tested without
TensorBoard; ``tensorboard --logdir LOG_DIR/tensorboard`` shows the runs.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from ssilbench.loggers.base import LoggedRun, RunLogger

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 as protobuf writes it (two's complement)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint((number << 3) | wire)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _field(number, 2) + _varint(len(data)) + data


def encode_event(wall_time: float, step: int = 0, version: str | None = None,
                 scalars: dict[str, float] | None = None) -> bytes:  # fmt: skip
    """An ``Event`` holding a file version or scalar summaries."""
    data = _field(1, 1) + struct.pack("<d", wall_time) + _field(2, 0) + _varint(step)
    if version is not None:
        data += _bytes_field(3, version.encode())
    if scalars:
        summary = b"".join(
            _bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5) + struct.pack("<f", v))
            for tag, v in scalars.items()
        )
        data += _bytes_field(5, summary)
    return data


def record(data: bytes) -> bytes:
    """One record of an event file."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc(header)) + data
            + struct.pack("<I", masked_crc(data)))  # fmt: skip


class EventFileWriter:
    """An event file in ``folder`` (created), named as TensorBoard expects."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        now = time.time()
        self.path = folder / f"events.out.tfevents.{int(now)}.{socket.gethostname()}"
        self._file = open(self.path, "ab")  # noqa: SIM115 (closed in close())
        self._file.write(record(encode_event(now, version="brain.Event:2")))

    def scalars(self, step: int, values: dict[str, float], wall_time: float) -> None:
        self._file.write(record(encode_event(wall_time, step, scalars=values)))

    def close(self) -> None:
        self._file.close()


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a protocol buffer message."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value


def read_events(path: Path) -> list[dict]:
    """Every event of an event file: ``{"wall_time", "step", "file_version"?, "scalars"?}``;
    a ValueError when a record's CRC or length is wrong."""
    data = Path(path).read_bytes()
    events, pos = [], 0
    while pos < len(data):
        header = data[pos : pos + 8]
        if len(header) < 8 or struct.unpack("<I", data[pos + 8 : pos + 12])[0] != masked_crc(
            header
        ):
            raise ValueError(f"{path}: bad record header at byte {pos}")
        (length,) = struct.unpack("<Q", header)
        body = data[pos + 12 : pos + 12 + length]
        (crc,) = struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])
        if len(body) != length or crc != masked_crc(body):
            raise ValueError(f"{path}: bad record at byte {pos}")
        pos += 16 + length
        event: dict = {"step": 0}
        for number, _, value in _fields(body):
            if number == 1:
                event["wall_time"] = struct.unpack("<d", value)[0]
            elif number == 2:
                event["step"] = value
            elif number == 3:
                event["file_version"] = value.decode()
            elif number == 5:
                scalars = event.setdefault("scalars", {})
                for _, _, item in _fields(value):
                    parts = {n: v for n, _, v in _fields(item)}
                    scalars[parts[1].decode()] = struct.unpack("<f", parts[2])[0]
        events.append(event)
    return events


class TensorBoardLogger(RunLogger):
    """One folder per run under ``LOG_DIR/tensorboard``: its curves (``stage/loss``,
    ``stage/eval/score``, ``stage/NAME`` of ``ctx.log_metric``) and its final numbers
    (``final/score``, ``final/METRIC``) as scalars at their global steps."""

    def run_finished(self, run: LoggedRun) -> None:
        writer = EventFileWriter(self.log_dir / "tensorboard" / run.short_name)
        wall = run.finished_at or time.time()
        try:
            by_step: dict[int, dict[str, float]] = {}
            for curve in run.curves:
                for step, value in zip(curve.steps, curve.values, strict=True):
                    if value is not None:
                        by_step.setdefault(step, {})[curve.tag] = value
            last = max(by_step, default=0)
            final = {f"final/{k}": v for k, v in run.metrics.items() if v is not None}
            if run.score is not None:
                final["final/score"] = run.score
            for step in sorted(by_step):
                writer.scalars(step, by_step[step], wall)
            if final:
                writer.scalars(last, final, wall)
        finally:
            writer.close()
