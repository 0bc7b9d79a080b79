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

from ssilbench.errors import DatasetError, os_error_message

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


_UNVERIFIED = contextvars.ContextVar("ssilbench_datasets_unverified", default=False)


@contextmanager
def unverified() -> Iterator[None]:
    """Within the block opening a store checks its manifest, files and sizes but hashes no
    file (``ssilbench list`` says what is there without reading gigabytes; a run verifies)."""
    token = _UNVERIFIED.set(True)
    try:
        yield
    finally:
        _UNVERIFIED.reset(token)


def refuse_writes(root: Path) -> None:
    if _READ_ONLY.get():
        raise DatasetNotBuilt(f"The dataset {root} does not exist yet: a run builds it.", root)


def write_failed(root: Path, exc: OSError) -> DatasetError:
    """The error for an OS error while writing the store at ``root`` (disk full, ...)."""
    return DatasetError(os_error_message(root, exc, "write the dataset"))


def task_dataset(task: Any, root: Path) -> TransitionStore:
    """``task.dataset(root)``, with an OS error on the data root (a file in the way, a
    read-only or full disk) turned into a DatasetError naming the folder and the cause."""
    try:
        return task.dataset(root)
    except OSError as exc:
        raise DatasetError(os_error_message(root, exc, "use the data root")) from None


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
        tmp = None
        try:
            root.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
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
        except BaseException as exc:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError):
                raise write_failed(root, exc) from None
            raise
        return cls.open(root, verify=False)

    @classmethod
    def open(cls, root: Path, verify: bool = True) -> TransitionStore:
        """Open a store; with ``verify`` every file's size and sha256 must match the manifest."""
        root = Path(root)
        verify = verify and not _UNVERIFIED.get()
        manifest = read_manifest(root)
        extra_obs = manifest.get("extra_obs", {})
        keys = [*ARRAYS, *(f"obs.{name}" for name in extra_obs)]
        stamps = _read_stamps(root) if verify else {}
        recorded = dict(stamps)
        for key in keys:
            path = root / f"{key}.npy"
            expected = manifest["files"].get(path.name)
            if expected is None or not path.is_file():
                raise DatasetError(f"Dataset file {path} is missing. {rebuild_hint(root)}", root)
            if verify and not _verified(path, expected, stamps):
                raise DatasetError(
                    f"Dataset file {path} does not match its manifest (sha256 or size differs): "
                    f"it is corrupted or was modified. {rebuild_hint(root)}",
                    root,
                )
        if stamps != recorded and not _READ_ONLY.get():  # a file was hashed: record it
            _write_stamps(root, stamps)
        try:
            arrays = {
                key: np.load(root / f"{key}.npy", mmap_mode="r", allow_pickle=False) for key in keys
            }
        except (ValueError, OSError, EOFError) as exc:
            raise DatasetError(
                f"A dataset file in {root} cannot be read ({exc}). {rebuild_hint(root)}", root
            ) from exc
        _check_sizes(root, manifest, arrays)
        extras = {name: arrays.pop(f"obs.{name}") for name in extra_obs}
        return cls(root=root, manifest=manifest, extras=extras, **arrays)


def rebuild_hint(root: Path) -> str:
    """What to do about a damaged dataset folder: build it again, or import it again."""
    return (
        f"Delete the folder {root} so it is rebuilt (ssilbench data build ENV --rebuild), "
        "or import the data again (ssilbench data import FAMILY --from DIR --replace)."
    )


# What a manifest must hold, key -> (type, what the message calls it). Both writers
# (TransitionStore.write and TransitionStoreWriter) write every key; extra_obs and metadata
# may be absent from stores written before they existed.
_REQUIRED = {
    "producer": (dict, "an object"),
    "frames": (int, "a whole number"),
    "episodes": (int, "a whole number"),
    "transitions": (int, "a whole number"),
    "obs_shape": (list, "a list of whole numbers"),
    "obs_dtype": (str, "a string"),
    "action_shape": (list, "a list of whole numbers"),
    "action_dtype": (str, "a string"),
    "files": (dict, "an object"),
}
_OPTIONAL = {"extra_obs": (dict, "an object"), "metadata": (dict, "an object")}


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the store at ``root``, checked: a DatasetError naming the manifest
    file and what to do when it is missing, not UTF-8 JSON, not an object, of another
    format or version, or when a key is missing or of the wrong type."""
    path = root / "manifest.json"
    if not path.is_file():
        raise DatasetError(f"No dataset manifest at {path}. {rebuild_hint(root)}", root)

    def damaged(problem: str) -> DatasetError:
        return DatasetError(f"The dataset manifest {path} {problem}. {rebuild_hint(root)}", root)

    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise damaged(f"cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise damaged("is not valid JSON (it is not even UTF-8 text)") from None
    except (ValueError, RecursionError) as exc:
        raise damaged(f"is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict):
        raise damaged(f"is not a JSON object (it holds a {type(manifest).__name__})")
    if (
        manifest.get("format") != FORMAT
        or type(manifest.get("format_version")) is not int  # true == 1 in Python
        or manifest.get("format_version") != FORMAT_VERSION
    ):
        raise DatasetError(
            f"{path} is not a {FORMAT} v{FORMAT_VERSION} manifest. {rebuild_hint(root)}", root
        )
    missing = [key for key in _REQUIRED if key not in manifest]
    if missing:
        raise damaged(f"lacks the key{'s' * (len(missing) > 1)} {', '.join(missing)}")
    for key, (kind, name) in {**_REQUIRED, **_OPTIONAL}.items():
        value = manifest.get(key, kind())
        if not isinstance(value, kind) or kind is int and not _count(value):
            raise damaged(f"has {key} = {_shown(value)}, which should be {name}")
        if kind is list and not all(_count(v) for v in value):
            raise damaged(f"has {key} = {_shown(value)}, which should be {name}")
    for name, entry in manifest["files"].items():
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str)
                and _count(entry.get("bytes"))):  # fmt: skip
            raise damaged(f"has files.{name} = {_shown(entry)}, which should be an object "
                          "with a sha256 string and a whole number of bytes")  # fmt: skip
    for name, entry in manifest.get("extra_obs", {}).items():
        if not name.isidentifier() or name in ARRAYS or not isinstance(entry, dict):
            raise damaged(f"has extra_obs.{name} = {_shown(entry)}, which is not an extra "
                          "observation array")  # fmt: skip
    if manifest["transitions"] != manifest["frames"] - manifest["episodes"]:
        raise damaged("counts transitions that are not its frames minus its episodes")
    return manifest


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shown(value: object) -> str:
    text = json.dumps(value) if isinstance(value, str | int | float | bool | None) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_sizes(root: Path, manifest: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """The arrays hold the frames and episodes the manifest counts (one row per frame)."""
    frames, episodes = manifest["frames"], manifest["episodes"]
    rows = {key: len(array) if array.ndim else -1 for key, array in arrays.items()}
    wrong = [f"{key}.npy has {n} rows" for key, n in rows.items()
             if n != (episodes if key == "episode_ends" else frames)]  # fmt: skip
    if wrong:
        raise DatasetError(
            f"The dataset in {root} does not match its manifest ({frames} frames, {episodes} "
            f"episodes): {', '.join(wrong)}. {rebuild_hint(root)}",
            root,
        )


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
