"""``ssilbench data import pusht --from FILE.zarr``: a diffusion-policy replay file into a
TransitionStore.

The replay layout (``data/img``, ``data/state``, ``data/action``, ``data/keypoint``,
``data/n_contacts``, ``meta/episode_ends``; see :mod:`ssilbench_pusht.replay`) is checked
from the array headers and the episode ends before anything is written; then the frames
are copied block by block (whole zarr chunks at a time), so memory holds one block of
frames whatever the size of the file. Any problem is a DatasetError naming the file and
the key, and the store writer leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.api import DatasetError
from ssilbench_pusht.geometry import reward as state_reward
from ssilbench_pusht.vec_env import IMAGE_SHAPE
from ssilbench_pusht.zarr_codecs import check_codecs

LAYOUT_HINT = (
    "Expected a diffusion-policy replay zarr (a zarr v2 directory store such as "
    "pusht_cchi_v7_replay.zarr) holding data/img (T,96,96,3) uint8 or float32 0..255, "
    "data/state (T,5), data/action (T,2), optionally data/keypoint (T,9,2) and "
    "data/n_contacts (T,1), and meta/episode_ends (E,) int64, increasing and ending at T."
)
REQUIRED = ("data/img", "data/state", "data/action", "meta/episode_ends")
OPTIONAL = ("data/keypoint", "data/n_contacts")
# Frames converted per block (about 110 MB of float32 frames at most).
_BLOCK_FRAMES = 1024
REWARD_NOTE = (
    "rewards[i] = clip(coverage / 0.95, 0, 1) of the state at frame i+1 (the reward for the "
    "action at frame i), computed from data/state; the last frame of an episode carries "
    "the reward of its own state (its outcome is not recorded)"
)


@dataclass(frozen=True)
class Replay:
    """An opened, checked replay file."""

    path: Path
    arrays: dict[str, Any]  # key -> zarr array (REQUIRED and the OPTIONAL ones present)
    episode_ends: np.ndarray
    frames: int

    def layout(self) -> dict[str, Any]:
        """Shape, dtype and chunking of every array, for the manifest."""
        return {
            key: {
                "shape": list(a.shape),
                "dtype": str(a.dtype),
                "chunks": list(a.chunks),
            }
            for key, a in sorted(self.arrays.items())
        }


def _fail(path: Path, message: str) -> DatasetError:
    return DatasetError(f"{path}: {message} {LAYOUT_HINT}", path)


def _open_group(path: Path) -> Any:
    if not path.exists():
        raise DatasetError(
            f"{path}: no such file or folder. Give the replay store itself, e.g. --from "
            "data/pusht/pusht_cchi_v7_replay.zarr (see docs/environments/pusht.md).",
            path,
        )
    if not path.is_dir() or not ((path / ".zgroup").is_file() or (path / "zarr.json").is_file()):
        raise _fail(path, "is not a zarr directory store (no .zgroup or zarr.json in it).")
    check_codecs(path)  # before zarr reads anything: a codec may run code hidden in the data
    try:
        import zarr
    except ImportError as exc:
        raise DatasetError(f"Reading {path} needs the module 'zarr' ({exc}): pip install "
                           "'ssilbench[pusht]'.", path) from None  # fmt: skip
    try:
        return zarr.open_group(str(path), mode="r")
    except Exception as exc:  # zarr raises several types for unreadable metadata
        raise _fail(
            path, f"cannot be opened as a zarr group ({type(exc).__name__}: {exc})."
        ) from None


def _array(group: Any, path: Path, key: str) -> Any | None:
    import zarr

    parent, _, name = key.partition("/")
    try:
        node = group[parent][name] if parent in group and name in group[parent] else None
    except Exception as exc:
        message = f"the key '{key}' cannot be read ({type(exc).__name__}: {exc})."
        raise _fail(path, message) from None
    if node is not None and not isinstance(node, zarr.Array):
        raise _fail(path, f"'{key}' is a group, not an array.")
    return node


def _keys(group: Any) -> list[str]:
    found = []
    for parent in ("data", "meta"):
        if parent in group:
            found += [f"{parent}/{k}" for k in sorted(group[parent].keys())]
    return found


def open_replay(path: Path) -> Replay:
    """Open and check a replay file from its headers and episode ends (frames are not read)."""
    path = Path(path)
    group = _open_group(path)
    arrays = {}
    for key in REQUIRED + OPTIONAL:
        node = _array(group, path, key)
        if node is None and key in REQUIRED:
            raise _fail(path, f"the key '{key}' is missing (the file has: "
                              f"{', '.join(_keys(group)) or 'nothing'}).")  # fmt: skip
        if node is not None:
            arrays[key] = node

    img = arrays["data/img"]
    if img.ndim != 4 or tuple(img.shape[1:]) != IMAGE_SHAPE:
        raise _fail(path, f"'data/img' has shape {tuple(img.shape)}; expected (T, 96, 96, 3) "
                          "frames (96x96 RGB, channels last).")  # fmt: skip
    if img.dtype not in (np.uint8, np.float32, np.float64):
        raise _fail(path, f"'data/img' is {img.dtype}; expected uint8, or float32 holding "
                          "0..255.")  # fmt: skip
    frames = int(img.shape[0])
    rows = {"data/state": (5,), "data/action": (2,), "data/keypoint": (9, 2)}
    for key, row in rows.items():
        a = arrays.get(key)
        if a is None:
            continue
        if a.ndim != 1 + len(row) or tuple(a.shape[1:]) != row:
            expected = ", ".join(["T", *map(str, row)])
            raise _fail(path, f"'{key}' has shape {tuple(a.shape)}; expected ({expected}).")
        if not np.issubdtype(a.dtype, np.number):
            raise _fail(path, f"'{key}' is {a.dtype}; expected numbers (float32).")
    contacts = arrays.get("data/n_contacts")
    if contacts is not None and tuple(contacts.shape[1:]) not in ((), (1,)):
        raise _fail(path, f"'data/n_contacts' has shape {tuple(contacts.shape)}; expected "
                          "(T, 1) or (T,).")  # fmt: skip
    for key, a in arrays.items():
        if key.startswith("data/") and a.shape[0] != frames:
            raise _fail(path, f"'{key}' has {a.shape[0]} rows but 'data/img' has {frames}; "
                              "every array under data/ needs one row per frame.")  # fmt: skip

    ends_array = arrays["meta/episode_ends"]
    if ends_array.ndim != 1 or not np.issubdtype(ends_array.dtype, np.integer):
        raise _fail(path, f"'meta/episode_ends' is {ends_array.dtype} of shape "
                          f"{tuple(ends_array.shape)}; expected a 1-D integer array.")  # fmt: skip
    ends = _read(path, "meta/episode_ends", ends_array, slice(None)).astype(np.int64)
    if len(ends) == 0:
        raise _fail(path, "'meta/episode_ends' is empty: the file holds no episode.")
    bad = np.flatnonzero(np.diff(np.concatenate([[0], ends])) <= 0)
    if len(bad):
        i = int(bad[0])
        previous = int(ends[i - 1]) if i else 0
        raise _fail(path, f"'meta/episode_ends' is not increasing: entry {i} is {int(ends[i])} "
                          f"after {previous}.")  # fmt: skip
    if ends[-1] != frames:
        raise _fail(path, f"'meta/episode_ends' ends at {int(ends[-1])} but the file has "
                          f"{frames} frames; the last episode must end at T.")  # fmt: skip
    return Replay(path=path, arrays=arrays, episode_ends=ends, frames=frames)


def _read(path: Path, key: str, array: Any, rows: slice) -> np.ndarray:
    """Rows of a zarr array, read one stored chunk at a time.

    One chunk per call keeps a damaged chunk's failure clean: zarr 3 decodes the chunks of
    one read concurrently, and when one fails the others are left pending and reported as
    "Task was destroyed but it is pending!" noise when the program exits.
    """
    start, stop, _ = rows.indices(array.shape[0])
    step = int(array.chunks[0]) or 1
    parts, a = [], start
    while a < stop:
        b = min((a // step + 1) * step, stop)  # to the end of a's chunk
        try:
            parts.append(np.asarray(array[a:b]))
        except Exception as exc:  # a damaged chunk: blosc, zarr and OS errors of several types
            raise DatasetError(
                f"{path}: '{key}' rows {a}..{b} (one stored chunk) cannot be read "
                f"({type(exc).__name__}: {exc}); the file is damaged. Copy it again and import "
                "again.",
                path,
            ) from None
        a = b
    if not parts:
        return np.asarray(array[start:stop])
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _finite(path: Path, key: str, values: np.ndarray, start: int = 0) -> None:
    bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
    if len(bad):
        raise DatasetError(f"{path}: '{key}' holds NaN or infinite values (frame "
                           f"{start + int(bad[0])}).", path)  # fmt: skip


def frames_as_uint8(path: Path, img: np.ndarray, start: int) -> np.ndarray:
    """Frames stored as uint8, or as floats holding whole numbers 0..255 (the published file
    stores float32), as uint8."""
    if img.dtype == np.uint8:
        return img
    _finite(path, "data/img", img, start)
    rounded = np.rint(img)
    bad = np.flatnonzero(((rounded < 0) | (rounded > 255)).reshape(len(img), -1).any(axis=1))
    if len(bad):
        frame = start + int(bad[0])
        raise DatasetError(
            f"{path}: 'data/img' frame {frame} has values outside 0..255 (min "
            f"{float(img[bad[0]].min()):g}, max {float(img[bad[0]].max()):g}); float frames "
            "must hold 0..255 as the published file does.",
            path,
        )
    return rounded.astype(np.uint8)


def episode_rewards(states: np.ndarray, episode_ends: np.ndarray) -> np.ndarray:
    """Per-frame rewards (see REWARD_NOTE) for states (T, 5)."""
    own = state_reward(states)
    rewards = np.empty_like(own, dtype=np.float32)
    rewards[:-1] = own[1:]
    last = episode_ends - 1
    rewards[last] = own[last]  # the next frame belongs to the next episode
    return rewards


def import_replay(
    replay: Replay,
    target: Path,
    producer: dict[str, Any],
    metadata: dict[str, Any],
    log: Callable[[str], None] = print,
) -> Any:
    """Copy a checked replay into a store at ``target`` (written atomically)."""
    from ssilbench.kit import TransitionStoreWriter

    path, ends = replay.path, replay.episode_ends
    # States and actions are small (28 bytes a frame): read and check them whole first.
    states = _read(path, "data/state", replay.arrays["data/state"], slice(None))
    actions = _read(path, "data/action", replay.arrays["data/action"], slice(None))
    _finite(path, "data/state", states)
    _finite(path, "data/action", actions)
    rewards = episode_rewards(states.astype(np.float64), ends)
    last = np.zeros(replay.frames, dtype=bool)
    last[ends - 1] = True
    starts = np.concatenate([[0], ends[:-1]])
    # The demos' own score: the best reward each episode reached after one of its actions.
    best = [float(rewards[s:e - 1].max()) if e - s > 1 else 0.0
            for s, e in zip(starts, ends, strict=True)]  # fmt: skip

    img = replay.arrays["data/img"]
    chunk = int(img.chunks[0]) or 1
    block = chunk * max(1, _BLOCK_FRAMES // chunk)  # whole chunks: each is decoded once
    writer = TransitionStoreWriter(
        target, IMAGE_SHAPE, np.uint8, producer, metadata, action_shape=(2,),
        action_dtype=np.float32, extra_obs={"agent_pos": ((2,), "float32")},
    )  # fmt: skip
    with writer:
        for start in range(0, replay.frames, block):
            rows = slice(start, min(start + block, replay.frames))
            frames = frames_as_uint8(path, _read(path, "data/img", img, rows), start)
            writer.append(
                frames,
                actions[rows].astype(np.float32),
                rewards[rows],
                last[rows],
                extras={"agent_pos": states[rows, :2].astype(np.float32)},
            )
            log(f"  {rows.stop}/{replay.frames} frames")
        writer.metadata = {
            **metadata,
            "episode_max_reward_mean": float(np.mean(best)),
            "episode_max_reward": best,
        }
        return writer.commit()
