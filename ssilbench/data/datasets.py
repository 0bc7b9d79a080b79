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


def refuse_writes(root: Path) -> None:
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
        refuse_writes(root)
        episode_ends = np.asarray(episode_ends, dtype=np.int64)
        n = len(obs)
        extras = {extra_array_name(k): v for k, v in (extras or {}).items()}
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


def extra_array_name(name: str) -> str:
    # The name becomes part of a file name: keep it to one plain word.
    if not name.isidentifier() or name in ARRAYS:
        raise ValueError(f"extra observation name {name!r} must be an identifier other than "
                         f"{', '.join(ARRAYS)}")  # fmt: skip
    return name
