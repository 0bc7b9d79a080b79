"""Writing a TransitionStore block by block (:class:`TransitionStoreWriter`), for datasets
larger than memory, and appending rows to one ``.npy`` file (:class:`AppendedArray`)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.data.datasets import (
    FORMAT,
    FORMAT_VERSION,
    TransitionStore,
    extra_array_name,
    refuse_writes,
    sha256_file,
    with_producer_code,
    write_failed,
)

# Room for any .npy header of a few dimensions: numpy pads headers to 64-byte multiples,
# and a preamble this long holds shapes with row counts up to 10**15.
_NPY_PREAMBLE = 128


def _npy_preamble(shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """The .npy version-1.0 preamble (magic, header length, header) padded to _NPY_PREAMBLE."""
    header = repr({"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                   "shape": tuple(shape)})  # fmt: skip
    room = _NPY_PREAMBLE - 10 - 1  # magic + version + length field; the final newline
    if len(header) > room:
        raise ValueError(f"shape {shape} needs a longer .npy header than {_NPY_PREAMBLE} bytes")
    body = (header + " " * (room - len(header)) + "\n").encode("latin1")
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body


class AppendedArray:
    """A .npy file written row block by row block; its header is filled in at the end (a
    file larger than memory is never held in it)."""

    def __init__(self, path: Path, row_shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.path = path
        self.row_shape = tuple(row_shape)
        self.dtype = np.dtype(dtype)
        self.rows = 0
        self._file = open(path, "wb")  # noqa: SIM115 -- closed by finish() or abort()
        self._file.write(b"\0" * _NPY_PREAMBLE)

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.row_shape:
            raise ValueError(f"{self.path.name}: rows of shape {block.shape[1:]}, "
                             f"expected {self.row_shape}")  # fmt: skip
        block.tofile(self._file)
        self.rows += len(block)

    def drop_last_row(self) -> None:
        self.rows -= 1
        row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self._file.flush()
        self._file.truncate(_NPY_PREAMBLE + self.rows * row_bytes)
        self._file.seek(0, os.SEEK_END)

    def finish(self) -> None:
        self._file.seek(0)
        self._file.write(_npy_preamble((self.rows, *self.row_shape), self.dtype))
        self._file.close()

    def abort(self) -> None:
        with suppress(OSError):  # flushing the last buffer onto a full disk: it goes anyway
            self._file.close()


class TransitionStoreWriter:
    """Writes a store block by block, so that a dataset larger than memory can be imported.

    Frames, actions and rewards are appended to files in a hidden folder beside ``root``;
    :meth:`commit` writes the episode ends and the manifest and moves the folder into place,
    so a store that is there is always complete. An interrupted writer leaves only the
    hidden folder, which the next writer of the same store removes. Use it as a context
    manager: leaving the block without :meth:`commit` (an exception, Ctrl-C) removes it.

    ``ends_episode[i]`` marks the last frame of an episode. An episode of a single frame
    holds no transition, so its frame is not stored.
    """

    def __init__(
        self,
        root: Path,
        obs_shape: tuple[int, ...],
        obs_dtype: np.dtype | str,
        producer: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        action_shape: tuple[int, ...] = (),
        action_dtype: np.dtype | str = np.int64,
        extra_obs: dict[str, tuple[tuple[int, ...], np.dtype | str]] | None = None,
    ) -> None:
        self.root = Path(root)
        refuse_writes(self.root)
        self.producer = with_producer_code(producer)
        self.metadata = metadata or {}
        self.partial = partial_path(self.root)
        self._arrays: dict[str, AppendedArray] = {}
        self.extra_names = [extra_array_name(name) for name in (extra_obs or {})]
        columns = {"obs": (obs_shape, obs_dtype), "actions": (action_shape, action_dtype),
                   "rewards": ((), np.float32),
                   **{f"obs.{name}": spec for name, spec in (extra_obs or {}).items()}}  # fmt: skip
        with self._os_errors():
            shutil.rmtree(self.partial, ignore_errors=True)  # left by an interrupted writer
            self.partial.mkdir(parents=True)
            for key, (shape, dtype) in columns.items():
                self._arrays[key] = AppendedArray(
                    self.partial / f"{key}.npy", tuple(shape), np.dtype(dtype)
                )
        self.episode_ends: list[int] = []
        self._open = 0  # stored frames of the episode not yet ended
        self._done = False

    @property
    def num_frames(self) -> int:
        return self._arrays["obs"].rows

    def append(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        ends_episode: np.ndarray,
        extras: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Append consecutive frames; an episode may continue into the next call.

        ``extras`` holds a block for each of the writer's ``extra_obs``."""
        n = len(obs)
        extras = extras or {}
        if sorted(extras) != sorted(self.extra_names):
            raise ValueError(f"extras must be exactly {sorted(self.extra_names)}, "
                             f"got {sorted(extras)}")  # fmt: skip
        if not (len(actions) == len(rewards) == len(ends_episode) == n) or any(
            len(v) != n for v in extras.values()
        ):
            raise ValueError("obs, actions, rewards, ends_episode and extras need one entry "
                             "per frame")  # fmt: skip
        keep = np.ones(n, dtype=bool)
        stored_before, kept, pos = self.num_frames, 0, 0
        for end in np.flatnonzero(np.asarray(ends_episode, dtype=bool)).tolist():
            length = end + 1 - pos
            if self._open == 0 and length == 1:
                keep[end] = False  # a one-frame episode
            else:
                kept += length
                self.episode_ends.append(stored_before + kept)
            self._open, pos = 0, end + 1
        self._open += n - pos
        blocks = {"obs": obs, "actions": actions, "rewards": rewards,
                  **{f"obs.{k}": v for k, v in extras.items()}}  # fmt: skip
        with self._os_errors():
            for key, block in blocks.items():
                self._arrays[key].append(block if keep.all() else np.asarray(block)[keep])

    def commit(self) -> TransitionStore:
        """Close the open episode (if any), write the manifest and move the store into place."""
        with self._os_errors():
            return self._commit()

    def _commit(self) -> TransitionStore:
        n = self.num_frames
        if self._open == 1:  # a one-frame episode at the very end
            for array in self._arrays.values():
                array.drop_last_row()
            n -= 1
        elif self._open > 1:
            self.episode_ends.append(n)
        if not self.episode_ends:
            raise ValueError("no episode of at least two frames was written")
        files = {}
        for key, array in self._arrays.items():
            array.finish()
            files[f"{key}.npy"] = _file_entry(array.path)
        ends_path = self.partial / "episode_ends.npy"
        np.save(ends_path, np.asarray(self.episode_ends, dtype=np.int64), allow_pickle=False)
        files[ends_path.name] = _file_entry(ends_path)
        obs = self._arrays["obs"]
        actions = self._arrays["actions"]
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "producer": self.producer,
            "frames": n,
            "episodes": len(self.episode_ends),
            "transitions": n - len(self.episode_ends),
            "obs_shape": list(obs.row_shape),
            "obs_dtype": str(obs.dtype),
            "action_shape": list(actions.row_shape),
            "action_dtype": str(actions.dtype),
            "extra_obs": {
                name: {
                    "shape": list(self._arrays[f"obs.{name}"].row_shape),
                    "dtype": str(self._arrays[f"obs.{name}"].dtype),
                }
                for name in self.extra_names
            },  # fmt: skip
            "files": files,
            "metadata": self.metadata,
        }
        (self.partial / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
        stale = self.root.with_name(f".{self.root.name}.stale-{os.getpid()}")
        if self.root.exists():
            os.replace(self.root, stale)
        os.replace(self.partial, self.root)
        shutil.rmtree(stale, ignore_errors=True)
        self._done = True
        return TransitionStore.open(self.root, verify=False)

    def abort(self) -> None:
        """Discard everything written so far."""
        for array in self._arrays.values():
            array.abort()
        shutil.rmtree(self.partial, ignore_errors=True)
        self._done = True

    @contextmanager
    def _os_errors(self) -> Iterator[None]:
        """An OS error (disk full, read-only, ...) discards the partial store and becomes one
        DatasetError naming the store and the cause."""
        try:
            yield
        except OSError as exc:
            self.abort()
            raise write_failed(self.root, exc) from None

    def __enter__(self) -> TransitionStoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._done:
            self.abort()


def partial_path(root: Path) -> Path:
    """The hidden folder a :class:`TransitionStoreWriter` fills before moving it to ``root``."""
    root = Path(root)
    return root.with_name(f".{root.name}.partial")


def _file_entry(path: Path) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}
