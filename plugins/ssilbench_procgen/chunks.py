"""Reads the paper's Procgen data layout: ``<game>/{train,test}/<int>.npz`` chunks.

Each chunk holds ``obs`` (N, 64, 64, 3) uint8 frames (channels last), ``ta`` the integer
action taken at each frame, ``done`` (True where the episode ends after that frame's
action) and ``rewards``; other keys (``ep_returns``, ``values``, log-probabilities) are
allowed and ignored. Chunks are consecutive: an episode may continue from one chunk into
the next. Everything is checked from the chunk headers before any frame is copied, and
each chunk's contents again while it is copied. Chunks are read with ``allow_pickle=False``:
an array of Python objects in a chunk is refused, never unpickled.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ssilbench.api import DatasetError
from ssilbench_procgen.games import NUM_ACTIONS

FRAME_SHAPE = (64, 64, 3)
REQUIRED_KEYS = ("obs", "ta", "done", "rewards")
LAYOUT_HINT = (
    "Expected the paper's layout: DIR/<game>/train/ and DIR/<game>/test/ holding chunks "
    "0.npz, 1.npz, ... with the keys obs (N,64,64,3) uint8, ta (N,) int, done (N,) bool and "
    "rewards (N,) float."
)


@dataclass(frozen=True)
class Chunk:
    path: Path
    frames: int


def list_chunks(folder: Path) -> list[Path]:
    """The chunk files of one split folder in order, after checking that nothing is missing
    or out of place."""
    if not folder.is_dir():
        raise DatasetError(f"{folder} is not a folder. {LAYOUT_HINT}")
    numbered: dict[int, Path] = {}
    for path in folder.iterdir():
        if path.name.startswith("."):
            continue  # hidden files (editor or OS droppings) are not data
        stem = path.stem
        if path.suffix != ".npz" or not path.is_file() or not (stem.isascii() and stem.isdigit()):
            raise DatasetError(
                f"Unexpected file {path}: a split folder holds only chunks named <int>.npz. "
                "Move it elsewhere and import again."
            )
        numbered[int(stem)] = path
    if not numbered:
        raise DatasetError(f"{folder} holds no <int>.npz chunks. {LAYOUT_HINT}")
    order = sorted(numbered)
    missing = sorted(set(range(order[0], order[-1] + 1)) - set(order))
    if missing:
        shown = ", ".join(f"{m}.npz" for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise DatasetError(
            f"{folder} has chunks {order[0]}..{order[-1]} but {len(missing)} are missing "
            f"({shown}); episodes continue across chunks, so the set must be complete. Copy "
            "the missing chunks and import again."
        )
    return [numbered[i] for i in order]


def _member_header(archive: zipfile.ZipFile, key: str) -> tuple[tuple[int, ...], np.dtype]:
    with archive.open(f"{key}.npy") as fh:
        version = np.lib.format.read_magic(fh)
        read = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read(fh)
    return tuple(shape), np.dtype(dtype)


def inspect_chunk(path: Path) -> Chunk:
    """The chunk's frame count, from its headers; every key, shape and dtype is checked."""
    try:
        with zipfile.ZipFile(path) as archive:
            keys = {n[:-4] for n in archive.namelist() if n.endswith(".npy")}
            missing = [k for k in REQUIRED_KEYS if k not in keys]
            if missing:
                raise DatasetError(
                    f"Chunk {path} lacks the key(s) {', '.join(missing)} (it has "
                    f"{', '.join(sorted(keys)) or 'none'}). {LAYOUT_HINT}"
                )
            headers = {k: _member_header(archive, k) for k in REQUIRED_KEYS}
    except DatasetError:
        raise
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, KeyError) as exc:
        raise DatasetError(
            f"Chunk {path} is truncated or corrupt ({type(exc).__name__}: {exc}). Copy it "
            "again from the source and import again."
        ) from None
    pickled = [k for k in REQUIRED_KEYS if headers[k][1].hasobject]
    if pickled:
        raise DatasetError(
            f"Chunk {path}: '{pickled[0]}' holds pickled Python objects ({headers[pickled[0]][1]})"
            ", which ssilbench never loads: unpickling runs code stored in the file. The "
            "published chunks hold plain arrays; copy them again from the source."
        )
    shape, dtype = headers["obs"]
    if len(shape) != 4 or shape[1:] != FRAME_SHAPE or dtype != np.uint8:
        raise DatasetError(
            f"Chunk {path}: 'obs' is {dtype} of shape {shape}; expected uint8 of shape "
            f"(N, 64, 64, 3) (frames, channels last)."
        )
    n = shape[0]
    expected = {"ta": "an integer", "done": "a bool", "rewards": "a float"}
    for key, kind in expected.items():
        shape, dtype = headers[key]
        ok_dtype = {
            "ta": np.issubdtype(dtype, np.integer),
            "done": dtype == np.bool_,
            "rewards": np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer),
        }[key]
        if shape != (n,) or not ok_dtype:
            raise DatasetError(
                f"Chunk {path}: '{key}' is {dtype} of shape {shape}; expected {kind} array of "
                f"shape ({n},), one entry per frame of 'obs'."
            )
    return Chunk(path, n)


@dataclass(frozen=True)
class ChunkData:
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    done: np.ndarray


def read_chunk(chunk: Chunk) -> ChunkData:
    """A chunk's arrays (frames still channels last); contents are checked."""
    path = chunk.path
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in REQUIRED_KEYS}
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, KeyError) as exc:
        raise DatasetError(
            f"Chunk {path} is truncated or corrupt ({type(exc).__name__}: {exc}). Copy it "
            "again from the source and import again."
        ) from None
    if len(arrays["obs"]) != chunk.frames:
        raise DatasetError(f"Chunk {path} changed while it was imported; import again.")
    actions = arrays["ta"]
    bad = np.flatnonzero((actions < 0) | (actions >= NUM_ACTIONS))
    if len(bad):
        raise DatasetError(
            f"Chunk {path}: action {int(actions[bad[0]])} at frame {int(bad[0])} is outside "
            f"0..{NUM_ACTIONS - 1} ({len(bad)} such frame(s)); Procgen has {NUM_ACTIONS} "
            "actions."
        )
    rewards = arrays["rewards"].astype(np.float32)
    if not np.isfinite(rewards).all():
        raise DatasetError(f"Chunk {path}: 'rewards' holds NaN or infinite values.")
    return ChunkData(arrays["obs"], actions.astype(np.int64), rewards, arrays["done"])


def iter_chunks(chunks: list[Chunk]) -> Iterator[ChunkData]:
    for chunk in chunks:
        yield read_chunk(chunk)


def write_synthetic_split(
    folder: Path, frames: int, *, episode: int = 400, chunk: int = 32_768, seed: int = 0
) -> None:
    """Chunks ``0.npz, 1.npz, ...`` in the paper's layout holding ``frames`` random frames,
    episodes of ``episode`` frames and random actions: a stand-in for the paper's data in
    benchmarks and tests (written chunk by chunk, so any size fits in memory)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.Generator(np.random.PCG64(seed))
    for number, start in enumerate(range(0, frames, chunk)):
        n = min(chunk, frames - start)
        index = np.arange(start, start + n)
        np.savez(
            folder / f"{number}.npz",
            obs=rng.integers(0, 256, size=(n, *FRAME_SHAPE), dtype=np.uint8),
            ta=rng.integers(0, NUM_ACTIONS, size=n),
            done=(index % episode) == episode - 1,
            rewards=np.zeros(n, dtype=np.float32),
            ep_returns=np.zeros(n, dtype=np.float32),
            values=np.zeros(n, dtype=np.float32),
        )
