"""TransitionStore: expert episodes on disk, each frame once, memory-mapped, with a manifest.

Layout of a store directory::

    obs.npy           (F, *obs_shape)  every frame once
    actions.npy       (F, *action_shape)  action taken at frame i (the last frame of an
                      episode carries a filler value that no transition uses)
    rewards.npy       (F,) float32     reward received for the action at frame i
    episode_ends.npy  (E,) int64       exclusive end index of each episode
    manifest.json     format version, producer, sizes, sha256 of every file, reference scores

Transition i is (obs[i], actions[i], obs[i+1]) for every i that is not the last frame of
its episode, so transitions never cross an episode boundary.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.errors import DatasetError

FORMAT = "ssilbench.transitions"
FORMAT_VERSION = 1
ARRAYS = ("obs", "actions", "rewards", "episode_ends")


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
    ) -> TransitionStore:
        """Write a complete store atomically (a killed writer leaves no half store)."""
        root = Path(root)
        episode_ends = np.asarray(episode_ends, dtype=np.int64)
        n = len(obs)
        if not (len(actions) == len(rewards) == n):
            raise ValueError("obs, actions and rewards must have one entry per frame")
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
        for key in ARRAYS:
            path = root / f"{key}.npy"
            expected = manifest["files"].get(path.name)
            if expected is None or not path.is_file():
                raise DatasetError(
                    f"Dataset file {path} is missing. Delete the folder {root} so it is "
                    "rebuilt (ssilbench data build ENV --rebuild).",
                    root,
                )
            if verify and (
                path.stat().st_size != expected["bytes"] or sha256_file(path) != expected["sha256"]
            ):
                raise DatasetError(
                    f"Dataset file {path} does not match its manifest (sha256 or size differs): "
                    f"it is corrupted or was modified. Delete the folder {root} so it is "
                    "rebuilt (ssilbench data build ENV --rebuild).",
                    root,
                )
        try:
            arrays = {
                key: np.load(root / f"{key}.npy", mmap_mode="r", allow_pickle=False)
                for key in ARRAYS
            }
        except ValueError as exc:
            raise DatasetError(
                f"A dataset file in {root} cannot be read ({exc}). Delete the folder so it is "
                "rebuilt (ssilbench data build ENV --rebuild).",
                root,
            ) from exc
        return cls(root=root, manifest=manifest, **arrays)
