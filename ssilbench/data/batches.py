"""Minibatches from the store: frames stay in their stored dtype until they reach the device.

A view of 2.6M Procgen transitions is 32 GB of uint8 frames; as float32 (s, s') pairs it
would be 256 GB. Nothing here builds a copy of the whole dataset in float, and nothing
large is held in memory at all: a view small enough to fit under :data:`RESIDENT_BYTES` is
copied to the device once (in its stored dtype, or as model input when that is smaller than
:data:`FLOAT_BYTES`); a larger one is read from the store per minibatch with positioned reads
(the frames then live in the operating system's page cache, shared by every process, not in
any process's memory), moved to the device and scaled there. The next minibatch can be read
in a background thread while the current one trains (:meth:`TransitionFrames.prefetch`).

Whatever the mode, a minibatch holds the same numbers: model inputs are
``ssilbench.data.tensors.as_model_input`` of the stored frames.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal, Protocol

import numpy as np
import torch

from ssilbench.data.split import LabeledView, UnlabeledView

RESIDENT_BYTES = 256 * 2**20
"""A view whose frames take at most this many bytes as stored is copied to the device once."""
FLOAT_BYTES = 64 * 2**20
"""...and kept there as float model input when that takes at most this many bytes."""
HASH_BYTES = 64 * 2**20
"""Frames up to this size are fingerprinted by their content (so that identical data in two
stores is recognised); larger views by their store's recorded sha256 and their index."""
CHUNK_BYTES = 32 * 2**20
"""Float input bytes per chunk of a pass over a whole view (labelling, full losses)."""

Rows = slice | np.ndarray
Kind = Literal["obs", "next_obs", "pair", "delta"]


class RowSource(Protocol):
    """What supervised fits read: ``len`` rows, ``source[rows]`` a tensor on the device.

    Tensors are row sources; so are :class:`FrameInputs` and :class:`ArrayRows`."""

    def __len__(self) -> int: ...

    def __getitem__(self, rows: Rows) -> torch.Tensor: ...


def chunk_rows(row_bytes: int) -> int:
    """Rows per chunk of a full pass, for rows of ``row_bytes`` float input bytes."""
    return int(min(8192, max(1, CHUNK_BYTES // max(row_bytes, 1))))


def chunks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


class RowReader:
    """Rows of an array by index, ``span`` consecutive rows at each start.

    A memory-mapped ``.npy`` file (as :class:`ssilbench.data.datasets.TransitionStore` opens
    them) is read with positioned reads rather than through the mapping, so the pages read
    count in the page cache and not in this process's resident memory; any other array is
    indexed directly."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.row_shape = tuple(array.shape[1:])
        self.dtype = array.dtype
        self.row_bytes = int(math.prod(self.row_shape)) * self.dtype.itemsize
        self.path, self.offset = _mapped_file(array)
        self._fd: int | None = None
        # The read-ahead thread and the caller read through one descriptor (positioned
        # reads share no file offset); the lock only guards opening it.
        self._opening = threading.Lock()

    def __len__(self) -> int:
        return len(self.array)

    def __getstate__(self) -> dict:
        # neither a descriptor nor a lock crosses processes
        return {k: v for k, v in self.__dict__.items() if k not in ("_fd", "_opening")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _fd=None, _opening=threading.Lock())

    def close(self) -> None:
        """Close the file until the next read (a view held on the device needs it no more)."""
        with self._opening:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        if getattr(self, "_fd", None) is not None:
            os.close(self._fd)

    def read(self, starts: np.ndarray, span: int = 1, out: np.ndarray | None = None) -> np.ndarray:
        """``(len(starts), span, *row)`` (or ``(len(starts), *row)`` when span is 1)."""
        starts = np.asarray(starts, dtype=np.int64)
        shape = (len(starts), span, *self.row_shape)
        if out is None:
            out = np.empty(shape, dtype=self.dtype)
        out = out.reshape(shape)
        if len(starts) and (starts.min() < 0 or starts.max() + span > len(self.array)):
            raise IndexError(
                f"rows {starts.min()}..{starts.max() + span - 1} outside {len(self.array)}"
            )
        if self.path is None:
            out[:] = self.array[starts[:, None] + np.arange(span)[None, :]]
        else:
            self._pread(starts, span, out)
        return out[:, 0] if span == 1 else out

    def _pread(self, starts: np.ndarray, span: int, out: np.ndarray) -> None:
        if self._fd is None:
            with self._opening:
                if self._fd is None:
                    self._fd = os.open(self.path, os.O_RDONLY)
        # Consecutive starts are read as one block: a pass over a view reads sequentially.
        breaks = np.flatnonzero(np.diff(starts) != 1) + 1
        for run in np.split(np.arange(len(starts)), breaks):
            if len(run) == 0:
                continue
            first, count = int(starts[run[0]]), len(run)
            if count == 1:
                self._read_into(out[run[0]], first, span)
                continue
            block = np.empty((count + span - 1, *self.row_shape), dtype=self.dtype)
            self._read_into(block, first, count + span - 1)
            windows = np.lib.stride_tricks.sliding_window_view(block, span, axis=0)
            out[run[0] : run[0] + count] = np.moveaxis(windows, -1, 1)

    def _read_into(self, target: np.ndarray, first: int, rows: int) -> None:
        view = memoryview(target).cast("B")
        wanted, done = rows * self.row_bytes, 0
        position = self.offset + first * self.row_bytes
        while done < wanted:
            got = os.preadv(self._fd, [view[done:]], position + done)
            if got <= 0:
                raise OSError(f"{self.path}: short read at byte {position + done}")
            done += got


def _mapped_file(array: np.ndarray) -> tuple[str | None, int]:
    """The file and data offset behind a whole memory-mapped .npy array, else (None, 0)."""
    if not isinstance(array, np.memmap) or not array.flags.c_contiguous:
        return None, 0
    path = getattr(array, "filename", None)
    offset = int(getattr(array, "offset", 0))
    try:
        if path is None or os.path.getsize(path) != offset + array.nbytes:
            return None, 0  # a slice of a mapping: its offset is the parent's
    except OSError:
        return None, 0
    return str(path), offset


def _float(frames: torch.Tensor) -> torch.Tensor:
    # the scaling of ssilbench.data.tensors.as_model_input, on the device
    if frames.dtype == torch.uint8:
        return frames.float().div_(255.0)
    return frames.float()


class TransitionFrames:
    """The frames of a view's transitions (s, s') as model inputs on ``device``.

    ``resident`` (None: by size, see the module docstring) copies the frames the view
    touches to the device once; otherwise every call reads its rows from the store."""

    def __init__(
        self,
        view: LabeledView | UnlabeledView,
        device: torch.device | str = "cpu",
        resident: bool | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.index = np.asarray(view.index, dtype=np.int64)
        self.reader = RowReader(view.frames)
        self.obs_shape = self.reader.row_shape
        stored = 2 * len(self.index) * self.reader.row_bytes  # at most: s and s' distinct
        self.resident = stored <= RESIDENT_BYTES if resident is None else resident
        self._frames: torch.Tensor | None = None
        self._pos: torch.Tensor | None = None
        if self.resident:
            used = np.unique(np.concatenate([self.index, self.index + 1]))
            touched = self.reader.read(used)
            if touched.size * 4 <= FLOAT_BYTES:
                self._frames = _float(torch.from_numpy(touched).to(self.device))
            else:
                self._frames = torch.from_numpy(touched).to(self.device)
            # s' of a transition is the frame after s, and ``used`` holds both: next position.
            self._pos = torch.from_numpy(np.searchsorted(used, self.index)).to(self.device)
            self.reader.close()  # many small views are alive at once in stacked training
        self._source = getattr(view, "source", "")
        self._fingerprints: dict[tuple[int, ...], str] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._ahead: tuple[np.ndarray, int, Future] | None = None
        self._last: tuple[Rows, int, torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.index)

    def fingerprint_of(self, offsets: tuple[int, ...] = (0, 1)) -> str:
        """Identifies the frames ``index + k`` for k in ``offsets``: (0,) the states s, (1,)
        the next states, (0, 1) the transitions (see :func:`_fingerprint`)."""
        if offsets not in self._fingerprints:
            self._fingerprints[offsets] = _fingerprint(self, self._source, offsets)
            if self.resident:
                self.reader.close()
        return self._fingerprints[offsets]

    @property
    def fingerprint(self) -> str:
        """Identifies the view's transitions (s, s')."""
        return self.fingerprint_of((0, 1))

    @property
    def float_row_bytes(self) -> int:
        return 4 * int(math.prod(self.obs_shape))

    def gather(self, rows: Rows, span: int) -> torch.Tensor:
        """Frames ``index[rows] + k`` for k < span: (B, span, *obs_shape) model input."""
        last = self._last
        if last is not None and last[1] >= span and _same_rows(last[0], rows):
            return last[2][:, :span]  # the loss and its target read the same minibatch
        if self.resident:
            at = self._pos[_as_index(rows, self.device)]
            out = _float(self._frames[at[:, None] + torch.arange(span, device=self.device)])
        else:
            out = _float(self._fetch(rows, span))
        self._last = (rows, span, out)
        return out

    def obs(self, rows: Rows = slice(None)) -> torch.Tensor:
        return self.gather(rows, 1)[:, 0]

    def next_obs(self, rows: Rows = slice(None)) -> torch.Tensor:
        return self.gather(rows, 2)[:, 1]

    def pairs(self, rows: Rows = slice(None)) -> tuple[torch.Tensor, torch.Tensor]:
        both = self.gather(rows, 2)
        return both[:, 0], both[:, 1]

    def inputs(self, kind: Kind) -> FrameInputs:
        """A row source of one kind of model input (see :class:`FrameInputs`)."""
        return FrameInputs(self, kind)

    # --- streaming ---------------------------------------------------------------------

    def prefetch(self, rows: Rows, span: int = 2) -> None:
        """Start reading ``rows`` in the background (a later :meth:`gather` of the same rows
        takes the result); nothing to do for a resident view."""
        if self.resident or isinstance(rows, slice):
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="ssilbench-read")
        rows = np.array(rows, copy=True)
        self._ahead = (rows, span, self._pool.submit(self._read, rows, span))

    def _fetch(self, rows: Rows, span: int) -> torch.Tensor:
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[1] >= span and _same_rows(ahead[0], rows):
            host = ahead[2].result()[:, :span]
        else:
            host = self._read(rows, span)
        pinned = self.device.type == "cuda" and host.is_pinned()
        return host.to(self.device, non_blocking=pinned)

    def _read(self, rows: Rows, span: int) -> torch.Tensor:
        starts = self.index[rows]
        shape = (len(starts), span, *self.obs_shape)
        host = torch.empty(
            shape, dtype=_torch_dtype(self.reader.dtype), pin_memory=self.device.type == "cuda"
        )
        self.reader.read(starts, span, out=host.numpy())
        return host

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._ahead = self._last = None


def _same_rows(a: Rows, b: Rows) -> bool:
    if a is b:
        return True
    if isinstance(a, slice) or isinstance(b, slice):
        return isinstance(a, slice) and isinstance(b, slice) and a == b
    return len(a) == len(b) and np.array_equal(a, b)


def _as_index(rows: Rows, device: torch.device) -> slice | torch.Tensor:
    return rows if isinstance(rows, slice) else torch.as_tensor(rows, device=device)


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _fingerprint(frames: TransitionFrames, source: str, offsets: tuple[int, ...]) -> str:
    """Identifies the frames ``index + k`` (k in ``offsets``) of a view: their content when
    small, else the store's recorded sha256 and the index (no frame of a large store is
    read or hashed again)."""
    h = hashlib.sha256(f"{frames.reader.dtype}|{frames.obs_shape}|{offsets}|".encode())
    small = len(offsets) * len(frames.index) * frames.reader.row_bytes <= HASH_BYTES
    if small or not source:
        h.update(b"content|")
        for k in offsets:
            for rows in chunks(len(frames.index), 4096):
                block = frames.reader.read(frames.index[rows] + k)
                h.update(memoryview(np.ascontiguousarray(block)).cast("B"))
    else:
        h.update(f"store|{source}|".encode())
        h.update(frames.index.tobytes())
    return h.hexdigest()


class FrameInputs:
    """One kind of model input of a view's transitions, as a row source:

    - ``obs``: s; ``next_obs``: s'; ``pair``: (s, s') stacked on the channel/feature axis
      (``ssilbench.data.tensors.pair``, an IDM's input); ``delta``: s' - s (a video model's
      regression target).
    """

    def __init__(self, frames: TransitionFrames, kind: Kind) -> None:
        self.frames = frames
        self.kind = kind

    @property
    def fingerprint(self) -> str:
        """What the inputs are computed from (the states only, for ``obs``) and how."""
        offsets = {"obs": (0,), "next_obs": (1,)}.get(self.kind, (0, 1))
        return hashlib.sha256(
            f"{self.frames.fingerprint_of(offsets)}|{self.kind}".encode()
        ).hexdigest()

    @property
    def device(self) -> torch.device:
        return self.frames.device

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def row_bytes(self) -> int:
        return self.frames.float_row_bytes * (2 if self.kind == "pair" else 1)

    def __getitem__(self, rows: Rows) -> torch.Tensor:
        if self.kind == "obs":
            return self.frames.obs(rows)
        both = self.frames.gather(rows, 2)
        if self.kind == "next_obs":
            return both[:, 1]
        if self.kind == "delta":
            return both[:, 1] - both[:, 0]
        return both.flatten(1, 2)  # (B, 2, C, ...) -> (B, 2C, ...): s's channels, then s''s

    def prefetch(self, rows: Rows) -> None:
        self.frames.prefetch(rows, 1 if self.kind == "obs" else 2)


class ArrayRows:
    """Rows of an array (labels, latents: an ``.npy`` file or an in-memory array) as tensors
    on ``device``: loaded there once when small, else read per call."""

    def __init__(
        self,
        array: np.ndarray,
        device: torch.device | str,
        fingerprint: str,
        resident: bool | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.reader = RowReader(array)
        self.fingerprint = fingerprint
        self.resident = array.nbytes <= RESIDENT_BYTES if resident is None else resident
        self.dtype = _torch_dtype(array.dtype)
        self._data = None
        if self.resident:
            host = self.reader.read(np.arange(len(array), dtype=np.int64))
            self._data = torch.from_numpy(host).to(self.device)
            self.reader.close()

    def __len__(self) -> int:
        return len(self.reader)

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.reader), *self.reader.row_shape)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def __getitem__(self, rows: Rows) -> torch.Tensor:
        if self._data is not None:
            return self._data[_as_index(rows, self.device)]
        n = len(self.reader)
        starts = np.arange(*rows.indices(n)) if isinstance(rows, slice) else np.asarray(rows)
        host = torch.from_numpy(self.reader.read(starts))
        return host.to(self.device)


def materialise(source: RowSource) -> torch.Tensor:
    """Every row of a source as one tensor (for small sources only: stacked training)."""
    return source if isinstance(source, torch.Tensor) else source[slice(None)]


def float_bytes(source: RowSource) -> int:
    """Bytes of the source's rows as float tensors (what :func:`materialise` would hold)."""
    if isinstance(source, torch.Tensor):
        return source.numel() * 4
    if isinstance(source, FrameInputs):
        return len(source) * source.row_bytes
    return len(source) * 4 * int(math.prod(source.shape[1:]))


def row_bytes(source: RowSource) -> int:
    return max(1, float_bytes(source) // max(len(source), 1))


def fingerprint(source: RowSource) -> str:
    """What identifies a source's rows for a cache key: its declared fingerprint, or the
    sha256 of a tensor's content."""
    declared = getattr(source, "fingerprint", None)
    if declared is not None:
        return declared
    t = source.detach().cpu().contiguous()
    h = hashlib.sha256(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


class ArgmaxRows:
    """The argmax of each row of a source of probabilities: hard labels from soft ones."""

    def __init__(self, probs: RowSource) -> None:
        self.probs = probs
        self.fingerprint = hashlib.sha256(f"{fingerprint(probs)}|argmax".encode()).hexdigest()

    def __len__(self) -> int:
        return len(self.probs)

    @property
    def device(self) -> torch.device:
        return self.probs.device

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self.probs),)

    def is_floating_point(self) -> bool:
        return False

    def __getitem__(self, rows: Rows) -> torch.Tensor:
        return self.probs[rows].argmax(-1)

    def prefetch(self, rows: Rows) -> None:
        ahead = getattr(self.probs, "prefetch", None)
        if ahead is not None:
            ahead(rows)
