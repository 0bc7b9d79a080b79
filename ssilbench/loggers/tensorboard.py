"""TensorBoard event files, written without TensorBoard or TensorFlow installed.

An event file is a sequence of records: the data's length (uint64, little-endian), the
masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the data. Each record's
data is an ``Event`` protocol buffer; the few fields used here are encoded by hand:

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
              Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; SummaryMetadata metadata = 9; }
    SummaryMetadata { PluginData plugin_data = 1; }
    PluginData      { string plugin_name = 1; bytes content = 2; }

Hyper-parameters go to the HParams dashboard as the ``hparams`` plugin writes them: a value
tagged ``_hparams_/session_start_info`` whose plugin content is

    HParamsPluginData { int32 version = 1; SessionStartInfo session_start_info = 3;
                        SessionEndInfo session_end_info = 4; }
    SessionStartInfo  { map<string, google.protobuf.Value> hparams = 1;
                        double start_time_secs = 5; }
    SessionEndInfo    { Status status = 1; double end_time_secs = 2; }   (1 = success)
    Value             { double number_value = 2; string string_value = 3; bool bool_value = 4; }

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

from ssilbench.loggers.base import LiveRun, LoggedRun, RunLogger

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


HPARAMS_START = "_hparams_/session_start_info"
HPARAMS_END = "_hparams_/session_end_info"


def _proto_value(value: object) -> bytes:
    """A ``google.protobuf.Value``: a number, a string or a bool."""
    if isinstance(value, bool):
        return _field(4, 0) + _varint(int(value))
    if isinstance(value, (int, float)):
        return _field(2, 1) + struct.pack("<d", float(value))
    return _bytes_field(3, str(value).encode())


def _plugin_value(tag: str, plugin: str, content: bytes) -> bytes:
    """A summary ``Value`` that carries only a plugin's data (no number)."""
    plugin_data = _bytes_field(1, plugin.encode()) + _bytes_field(2, content)
    return _bytes_field(1, tag.encode()) + _bytes_field(9, _bytes_field(1, plugin_data))


def encode_hparams(wall_time: float, hparams: dict[str, object]) -> bytes:
    """An ``Event`` starting an HParams session with ``hparams``."""
    entries = b"".join(
        _bytes_field(1, _bytes_field(1, key.encode()) + _bytes_field(2, _proto_value(value)))
        for key, value in hparams.items()
    )
    start = entries + _field(5, 1) + struct.pack("<d", wall_time)
    content = _field(1, 0) + _varint(0) + _bytes_field(3, start)
    summary = _bytes_field(1, _plugin_value(HPARAMS_START, "hparams", content))
    return _field(1, 1) + struct.pack("<d", wall_time) + _bytes_field(5, summary)


def encode_session_end(wall_time: float, status: int = 1) -> bytes:
    """An ``Event`` ending the HParams session (status 1: success)."""
    end = _field(1, 0) + _varint(status) + _field(2, 1) + struct.pack("<d", wall_time)
    content = _field(1, 0) + _varint(0) + _bytes_field(4, end)
    summary = _bytes_field(1, _plugin_value(HPARAMS_END, "hparams", content))
    return _field(1, 1) + struct.pack("<d", wall_time) + _bytes_field(5, summary)


def record(data: bytes) -> bytes:
    """One record of an event file."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc(header)) + data
            + struct.pack("<I", masked_crc(data)))  # fmt: skip


LIVE_SUFFIX = ".live"
"""The event file a run's points go to while it trains; replaced by the complete one (its
curves as the store keeps them) when the run is recorded, kept when it is not."""


class EventFileWriter:
    """An event file in ``folder`` (created), named as TensorBoard expects (TensorBoard
    reads any file whose name holds ``tfevents``); ``suffix`` ends its name."""

    def __init__(self, folder: Path, suffix: str = "") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        now = time.time()
        self.path = folder / f"events.out.tfevents.{int(now)}.{socket.gethostname()}{suffix}"
        self._file = open(self.path, "ab")  # noqa: SIM115 (closed in close())
        self._file.write(record(encode_event(now, version="brain.Event:2")))

    def scalars(self, step: int, values: dict[str, float], wall_time: float) -> None:
        self._file.write(record(encode_event(wall_time, step, scalars=values)))

    def hparams(self, hparams: dict[str, object], wall_time: float) -> None:
        self._file.write(record(encode_hparams(wall_time, hparams)))

    def session_end(self, wall_time: float) -> None:
        self._file.write(record(encode_session_end(wall_time)))

    def flush(self) -> None:
        """To the operating system: a reader, or a run killed right after, finds it all."""
        self._file.flush()

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
    """Every event of an event file: ``{"wall_time", "step", "file_version"?, "scalars"?,
    "hparams"?, "session_end"?}``; a ValueError when a record's CRC is wrong. A record cut
    short at the end of the file (its writer killed mid-write) ends the list, as
    TensorBoard reads it."""
    data = Path(path).read_bytes()
    events, pos = [], 0
    while pos + 12 <= len(data):
        header = data[pos : pos + 8]
        if struct.unpack("<I", data[pos + 8 : pos + 12])[0] != masked_crc(header):
            raise ValueError(f"{path}: bad record header at byte {pos}")
        (length,) = struct.unpack("<Q", header)
        if pos + 16 + length > len(data):
            break  # cut short by a kill
        body = data[pos + 12 : pos + 12 + length]
        (crc,) = struct.unpack("<I", data[pos + 12 + length : pos + 16 + length])
        if crc != masked_crc(body):
            raise ValueError(f"{path}: bad record at byte {pos}")
        pos += 16 + length
        events.append(_event(body))
    return events


def _event(body: bytes) -> dict:
    event: dict = {"step": 0}
    for number, _, value in _fields(body):
        if number == 1:
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:
            event["step"] = value
        elif number == 3:
            event["file_version"] = value.decode()
        elif number == 5:
            for _, _, item in _fields(value):
                _summary_value(event, {n: v for n, _, v in _fields(item)})
    return event


def _summary_value(event: dict, parts: dict) -> None:
    """One summary value into ``event``: a scalar, or the hparams plugin's data."""
    if 2 in parts:
        event.setdefault("scalars", {})[parts[1].decode()] = struct.unpack("<f", parts[2])[0]
        return
    plugin = {n: v for n, _, v in _fields({n: v for n, _, v in _fields(parts[9])}[1])}
    if plugin.get(1) != b"hparams":
        return
    content = {n: v for n, _, v in _fields(plugin.get(2, b""))}
    if 3 in content:
        hparams = event.setdefault("hparams", {})
        for number, _, entry in _fields(content[3]):
            if number == 1:
                pair = {n: v for n, _, v in _fields(entry)}
                hparams[pair[1].decode()] = _read_proto_value(pair.get(2, b""))
    if 4 in content:
        event["session_end"] = {n: v for n, _, v in _fields(content[4])}.get(1, 0)


def _read_proto_value(data: bytes) -> object:
    for number, _, value in _fields(data):
        if number == 2:
            return struct.unpack("<d", value)[0]
        if number == 3:
            return value.decode()
        if number == 4:
            return bool(value)
    return None


class TensorBoardLogger(RunLogger):
    """One folder per run under ``LOG_DIR/tensorboard``: while it trains, a live event file
    (``*.live``) with its hyper-parameters and the losses and evaluations of its progress
    events; once recorded, one file with its hyper-parameters, its curves (``stage/loss``,
    ``stage/eval/score``, ``stage/NAME`` of ``ctx.log_metric``) and its final numbers
    (``final/score``, ``final/METRIC``) as scalars at their global steps, which replaces the
    live one. A run that fails or is killed keeps its live file."""

    def __init__(self, log_dir: Path) -> None:
        super().__init__(log_dir)
        self.live: dict[str, EventFileWriter] = {}

    def _folder(self, short_name: str) -> Path:
        return self.log_dir / "tensorboard" / short_name

    def run_hparams(self, run: LiveRun) -> None:
        writer = EventFileWriter(self._folder(run.short_name), LIVE_SUFFIX)
        writer.hparams(run.hparams, time.time())
        writer.flush()
        self.live[run.run_id] = writer

    def run_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        writer = self.live.get(run_id)
        if writer is not None:
            writer.scalars(step, values, time.time())
            writer.flush()

    def run_failed(self, run_id: str) -> None:
        writer = self.live.pop(run_id, None)
        if writer is not None:
            writer.close()

    def run_finished(self, run: LoggedRun) -> None:
        self.run_failed(run.run_id)  # the live file is closed, then replaced
        folder = self._folder(run.short_name)
        for live in folder.glob(f"events.out.tfevents.*{LIVE_SUFFIX}"):
            live.unlink(missing_ok=True)  # this run's, or an earlier attempt's
        writer = EventFileWriter(folder)
        wall = run.finished_at or time.time()
        try:
            if run.hparams:
                writer.hparams(run.hparams, wall)
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
            writer.session_end(wall)
        finally:
            writer.close()

    def close(self) -> None:
        for run_id in list(self.live):
            self.run_failed(run_id)
