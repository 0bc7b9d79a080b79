"""TransitionStore: expert episodes on disk, each frame once, memory-mapped, with a manifest.

Layout of a store directory::

    obs.npy           (F, *obs_shape)  every frame once
    actions.npy       (F, *action_shape)  action taken at frame i (the last frame of an
                      episode carries a filler value that no transition uses)
    rewards.npy       (F,) float32     reward received for the action at frame i
    episode_ends.npy  (E,) int64       exclusive end index of each episode
    obs.NAME.npy      (F, *shape)      optional per-frame observation arrays beside the
                      main frame (a wrist camera, proprioception), listed under
                      ``extra_obs`` in the manifest
    manifest.json     format version, producer, sizes, sha256 of every file, reference scores

Transition i is (obs[i], actions[i], obs[i+1]) for every i that is not the last frame of
its episode, so transitions never cross an episode boundary.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.errors import DatasetError

FORMAT = "ssilbench.transitions"
FORMAT_VERSION = 1
ARRAYS = ("obs", "actions", "rewards", "episode_ends")


_READ_ONLY = contextvars.ContextVar("ssilbench_datasets_read_only", default=False)


class DatasetNotBuilt(DatasetError):
    """A dataset would have to be written, inside :func:`read_only` (a dry run)."""


@contextmanager
def read_only() -> Iterator[None]:
    """Within the block no store is written and no verification stamp recorded: a dataset
    that would have to be built raises :class:`DatasetNotBuilt` instead (``run --dry-run``
    plans without touching the data root)."""
    token = _READ_ONLY.set(True)
    try:
        yield
    finally:
        _READ_ONLY.reset(token)


def _refuse_writes(root: Path) -> None:
    if _READ_ONLY.get():
        raise DatasetNotBuilt(f"The dataset {root} does not exist yet: a run builds it.", root)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class TransitionStore:
    """An opened store; arrays are read-only memory maps."""

    root: Path
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    episode_ends: np.ndarray
    manifest: dict[str, Any]
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    def content_id(self, array: str = "obs") -> str:
        """The sha256 the manifest records for one of the store's arrays ("" if none)."""
        entry = self.manifest.get("files", {}).get(f"{array}.npy", {})
        return str(entry.get("sha256", "")) if isinstance(entry, dict) else ""

    @property
    def num_frames(self) -> int:
        return int(self.obs.shape[0])

    @property
    def num_episodes(self) -> int:
        return int(self.episode_ends.shape[0])

    def transition_indices(self) -> np.ndarray:
        """Frame indices i such that (i, i+1) lies inside one episode, ascending."""
        valid = np.ones(self.num_frames, dtype=bool)
        valid[self.episode_ends - 1] = False
        return np.flatnonzero(valid)

    def episode_of_transitions(self, indices: np.ndarray) -> np.ndarray:
        """The episode number of each transition index."""
        return np.searchsorted(self.episode_ends, indices, side="right")

    @property
    def num_transitions(self) -> int:
        return self.num_frames - self.num_episodes

    @classmethod
    def write(
        cls,
        root: Path,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        episode_ends: np.ndarray,
        producer: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        extras: dict[str, np.ndarray] | None = None,
    ) -> TransitionStore:
        """Write a complete store atomically (a killed writer leaves no half store)."""
        root = Path(root)
        _refuse_writes(root)
        episode_ends = np.asarray(episode_ends, dtype=np.int64)
        n = len(obs)
        extras = {_extra_name(k): v for k, v in (extras or {}).items()}
        if not (len(actions) == len(rewards) == n) or any(len(v) != n for v in extras.values()):
            raise ValueError("obs, actions, rewards and extras must have one entry per frame")
        if len(episode_ends) == 0 or episode_ends[-1] != n or np.any(np.diff(episode_ends) < 2):
            raise ValueError(
                "episode_ends must be increasing, end at len(obs), episodes >= 2 frames"
            )
        if episode_ends[0] < 2:
            raise ValueError("every episode needs at least 2 frames")
        root.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
        try:
            arrays = {
                "obs": np.ascontiguousarray(obs),
                "actions": np.ascontiguousarray(actions),
                "rewards": np.ascontiguousarray(rewards, dtype=np.float32),
                "episode_ends": episode_ends,
                **{f"obs.{k}": np.ascontiguousarray(v) for k, v in extras.items()},
            }
            files = {}
            for key, value in arrays.items():
                np.save(tmp / f"{key}.npy", value, allow_pickle=False)
                path = tmp / f"{key}.npy"
                files[path.name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
            manifest = {
                "format": FORMAT,
                "format_version": FORMAT_VERSION,
                "producer": producer,
                "frames": n,
                "episodes": len(episode_ends),
                "transitions": n - len(episode_ends),
                "obs_shape": list(arrays["obs"].shape[1:]),
                "obs_dtype": str(arrays["obs"].dtype),
                "action_shape": list(arrays["actions"].shape[1:]),
                "action_dtype": str(arrays["actions"].dtype),
                "extra_obs": {
                    k: {"shape": list(v.shape[1:]), "dtype": str(v.dtype)}
                    for k, v in extras.items()
                },  # fmt: skip
                "files": files,
                "metadata": metadata or {},
            }
            (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
            # Move the old store aside first so that at every instant either the old or the
            # new complete store is in place.
            stale = root.with_name(f".{root.name}.stale-{os.getpid()}")
            if root.exists():
                os.replace(root, stale)
            os.replace(tmp, root)
            shutil.rmtree(stale, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return cls.open(root, verify=False)

    @classmethod
    def open(cls, root: Path, verify: bool = True) -> TransitionStore:
        """Open a store; with ``verify`` every file's size and sha256 must match the manifest."""
        root = Path(root)
        manifest_path = root / "manifest.json"
        if not manifest_path.is_file():
            raise DatasetError(
                f"No dataset manifest at {manifest_path}. Delete the folder {root} so it is "
                "rebuilt (ssilbench data build ENV --rebuild).",
                root,
            )
        try:
            manifest = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"The dataset manifest {manifest_path} is not valid JSON ({exc}). Delete the "
                f"folder {root} so it is rebuilt (ssilbench data build ENV --rebuild).",
                root,
            ) from exc
        if (
            not isinstance(manifest, dict)
            or manifest.get("format") != FORMAT
            or manifest.get("format_version") != FORMAT_VERSION
            or not isinstance(manifest.get("files"), dict)
        ):
            raise DatasetError(
                f"{manifest_path} is not a {FORMAT} v{FORMAT_VERSION} manifest. Delete the "
                f"folder {root} so it is rebuilt (ssilbench data build ENV --rebuild).",
                root,
            )
        extra_obs = manifest.get("extra_obs", {})
        keys = [*ARRAYS, *(f"obs.{name}" for name in extra_obs)]
        stamps = _read_stamps(root) if verify else {}
        recorded = dict(stamps)
        for key in keys:
            path = root / f"{key}.npy"
            expected = manifest["files"].get(path.name)
            if expected is None or not path.is_file():
                raise DatasetError(
                    f"Dataset file {path} is missing. Delete the folder {root} so it is "
                    "rebuilt (ssilbench data build ENV --rebuild).",
                    root,
                )
            if verify and not _verified(path, expected, stamps):
                raise DatasetError(
                    f"Dataset file {path} does not match its manifest (sha256 or size differs): "
                    f"it is corrupted or was modified. Delete the folder {root} so it is "
                    "rebuilt (ssilbench data build ENV --rebuild).",
                    root,
                )
        if stamps != recorded and not _READ_ONLY.get():  # a file was hashed: record it
            _write_stamps(root, stamps)
        try:
            arrays = {
                key: np.load(root / f"{key}.npy", mmap_mode="r", allow_pickle=False) for key in keys
            }
        except ValueError as exc:
            raise DatasetError(
                f"A dataset file in {root} cannot be read ({exc}). Delete the folder so it is "
                "rebuilt (ssilbench data build ENV --rebuild).",
                root,
            ) from exc
        extras = {name: arrays.pop(f"obs.{name}") for name in extra_obs}
        return cls(root=root, manifest=manifest, extras=extras, **arrays)


# Hashing a large store on every open costs minutes (the 2.6M Procgen frames are 32 GB), so
# a file whose sha256 matched is recorded with what the file system says about it; while
# its size, inode and modification and change times stay the same it is not hashed again.
# Any write to the file (even one restoring its old mtime) changes its change time.
STAMPS = ".verified.json"


def _file_state(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns]


def _read_stamps(root: Path) -> dict[str, Any]:
    try:
        stamps = json.loads((root / STAMPS).read_text())
    except (OSError, ValueError):
        return {}
    return stamps if isinstance(stamps, dict) else {}


def _verified(path: Path, expected: dict[str, Any], stamps: dict[str, Any]) -> bool:
    """Whether the file matches its manifest entry (hashing it only when it changed)."""
    state = _file_state(path)
    if state[0] != expected["bytes"]:
        return False
    if stamps.get(path.name) == {"state": state, "sha256": expected["sha256"]}:
        return True
    if sha256_file(path) != expected["sha256"]:
        return False
    stamps[path.name] = {"state": state, "sha256": expected["sha256"]}
    return True


def _write_stamps(root: Path, stamps: dict[str, Any]) -> None:
    tmp = root / f"{STAMPS}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(stamps, sort_keys=True))
        os.replace(tmp, root / STAMPS)
    except OSError:  # a read-only dataset folder: verify by hashing every time
        tmp.unlink(missing_ok=True)


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
        _refuse_writes(self.root)
        self.producer = producer
        self.metadata = metadata or {}
        self.partial = partial_path(self.root)
        shutil.rmtree(self.partial, ignore_errors=True)  # left by an interrupted writer
        self.partial.mkdir(parents=True)
        self._arrays = {
            "obs": AppendedArray(self.partial / "obs.npy", obs_shape, np.dtype(obs_dtype)),
            "actions": AppendedArray(
                self.partial / "actions.npy", action_shape, np.dtype(action_dtype)
            ),
            "rewards": AppendedArray(self.partial / "rewards.npy", (), np.dtype(np.float32)),
        }
        self.extra_names = [_extra_name(name) for name in (extra_obs or {})]
        for name, (shape, dtype) in (extra_obs or {}).items():
            self._arrays[f"obs.{name}"] = AppendedArray(
                self.partial / f"obs.{name}.npy", tuple(shape), np.dtype(dtype)
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
        for key, block in blocks.items():
            self._arrays[key].append(block if keep.all() else np.asarray(block)[keep])

    def commit(self) -> TransitionStore:
        """Close the open episode (if any), write the manifest and move the store into place."""
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

    def __enter__(self) -> TransitionStoreWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._done:
            self.abort()


def _extra_name(name: str) -> str:
    # The name becomes part of a file name: keep it to one plain word.
    if not name.isidentifier() or name in ARRAYS:
        raise ValueError(f"extra observation name {name!r} must be an identifier other than "
                         f"{', '.join(ARRAYS)}")  # fmt: skip
    return name


def partial_path(root: Path) -> Path:
    """The hidden folder a :class:`TransitionStoreWriter` fills before moving it to ``root``."""
    root = Path(root)
    return root.with_name(f".{root.name}.partial")


def _file_entry(path: Path) -> dict[str, Any]:
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}
