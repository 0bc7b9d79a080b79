"""Writing and recording Push-T demonstrations in the diffusion-policy replay layout.

There is no download: users import the replay file they have (``ssilbench data import
pusht --from FILE.zarr``). For tests, demos and end-to-end runs without it, this module
records episodes from the real environment with a simple scripted policy and writes them
in the same layout the importer reads::

    FILE.zarr/              zarr v2 directory store, blosc-compressed chunks
      data/img              (T, 96, 96, 3) float32 0..255 (as the published file) or uint8
      data/state            (T, 5) float32   agent x, y, block x, y, block angle
      data/keypoint         (T, 9, 2) float32 points fixed to the block
      data/action           (T, 2) float32   target position commanded at frame t
      data/n_contacts       (T, 1) float32   contact points of the step that led to frame t
      meta/episode_ends     (E,) int64       exclusive end of each episode

Frame t pairs the observation before the action with that action, so an episode's last
frame has an action but its outcome is not recorded. The keypoints here are the T's eight
corners and its centre of gravity, not diffusion-policy's own nine sampled points: the
importer checks their shape only. The scripted policies are not experts (their coverage is
low); they exist to make real, reproducible Push-T data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from ssilbench_pusht.vec_env import ACTION_HIGH, ACTION_LOW, IMAGE_SHAPE, make_pusht_env

# Frames per stored chunk along time: ~3.5 MB of float32 frames per img chunk.
CHUNK_FRAMES = 100
ScriptedPolicy = Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]
"""``policy(state (5,), previous_action (2,), rng) -> action (2,)``."""


@dataclass(frozen=True)
class ReplayEpisode:
    """One recorded episode, arrays in the replay layout (one row per frame)."""

    img: np.ndarray  # (L, 96, 96, 3) uint8
    state: np.ndarray  # (L, 5) float32
    keypoint: np.ndarray  # (L, 9, 2) float32
    action: np.ndarray  # (L, 2) float32
    n_contacts: np.ndarray  # (L, 1) float32
    max_coverage: float  # the best coverage the episode reached (after any of its actions)

    def __len__(self) -> int:
        return len(self.img)


def _zarr_v3() -> bool:
    import zarr

    return int(zarr.__version__.split(".")[0]) >= 3


def create_array(group, name: str, row_shape: tuple[int, ...], dtype: str, chunk_rows: int):  # noqa: ANN001, ANN202
    """An empty (0, *row_shape) blosc-compressed array, written in zarr v2 format by
    zarr 2.18 and zarr 3 alike."""
    from numcodecs import Blosc

    compressor = Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE)
    shape, chunks = (0, *row_shape), (chunk_rows, *row_shape)
    if _zarr_v3():
        return group.create_array(name, shape=shape, dtype=dtype, chunks=chunks,
                                  compressors=compressor)  # fmt: skip
    return group.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks,
                                compressor=compressor)  # fmt: skip


def write_replay_zarr(
    path: Path,
    episodes: Iterable[ReplayEpisode],
    img_dtype: Literal["float32", "uint8"] = "float32",
    chunk_frames: int = CHUNK_FRAMES,
) -> int:
    """Write episodes (consumed one at a time) as a diffusion-policy replay zarr at ``path``
    (replacing what is there); returns the number of frames written. ``img_dtype`` float32
    is what the published file holds, uint8 the compact variant; both import."""
    import zarr

    kwargs = {"zarr_format": 2} if _zarr_v3() else {}
    root = zarr.open_group(str(path), mode="w", **kwargs)
    data, meta = root.require_group("data"), root.require_group("meta")
    arrays = {
        "img": create_array(data, "img", IMAGE_SHAPE, img_dtype, chunk_frames),
        "state": create_array(data, "state", (5,), "float32", chunk_frames),
        "keypoint": create_array(data, "keypoint", (9, 2), "float32", chunk_frames),
        "action": create_array(data, "action", (2,), "float32", chunk_frames),
        "n_contacts": create_array(data, "n_contacts", (1,), "float32", chunk_frames),
    }
    ends: list[int] = []
    for episode in episodes:
        for name, array in arrays.items():
            array.append(np.asarray(getattr(episode, name), dtype=array.dtype))
        ends.append((ends[-1] if ends else 0) + len(episode))
    episode_ends = create_array(meta, "episode_ends", (), "int64", max(len(ends), 1))
    episode_ends.append(np.asarray(ends, dtype=np.int64))
    return ends[-1] if ends else 0


def _keypoints(block) -> np.ndarray:  # noqa: ANN001
    """The T's eight corners and its centre of gravity in world coordinates, (9, 2)."""
    points = [block.local_to_world(v) for shape in block.shapes for v in shape.get_vertices()]
    points.append(block.local_to_world(block.center_of_gravity))
    return np.array([tuple(p) for p in points], dtype=np.float32)


def _state(env) -> np.ndarray:  # noqa: ANN001
    # The layout's state: agent xy, block xy, block angle wrapped to [0, 2 pi) as gym-pusht's
    # own "state" observation does.
    agent, block = env.agent.position, env.block.position
    angle = env.block.angle % (2 * np.pi)
    return np.array([agent[0], agent[1], block[0], block[1], angle], dtype=np.float32)


def push_policy(state: np.ndarray, previous: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A smoothed noisy chase of the block: the target drifts toward the block's centre plus
    noise, so the agent keeps bumping the T around (contacts, some coverage); not an expert."""
    aim = state[2:4] + rng.normal(0.0, 40.0, size=2)
    return np.clip(0.7 * previous + 0.3 * aim, ACTION_LOW + 20, ACTION_HIGH - 20)


def random_policy(state: np.ndarray, previous: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A smooth random walk of the target (uniform random targets only make the agent
    jitter in place at 10 Hz)."""
    return np.clip(previous + rng.normal(0.0, 25.0, size=2), ACTION_LOW + 20, ACTION_HIGH - 20)


POLICIES: dict[str, ScriptedPolicy] = {"push": push_policy, "random": random_policy}


def record_episodes(
    num_episodes: int,
    seed: int = 0,
    policy: str | ScriptedPolicy = "push",
    max_steps: int = 300,
) -> Iterator[ReplayEpisode]:
    """Roll out ``policy`` in the real environment, one episode per seed ``seed + e``.

    An episode ends when the block covers its goal (the environment terminates) or after
    ``max_steps`` actions. Equal arguments give equal episodes.
    """
    act = POLICIES[policy] if isinstance(policy, str) else policy
    env = make_pusht_env()
    try:
        for e in range(num_episodes):
            rng = np.random.Generator(np.random.PCG64(seed + e))
            observation, _ = env.reset(seed=seed + e)
            rows: dict[str, list] = {k: [] for k in ("img", "state", "keypoint", "action",
                                                     "n_contacts")}  # fmt: skip
            contacts, best = 0, 0.0
            action = np.asarray(observation["agent_pos"], dtype=np.float64)
            for _ in range(max_steps):
                state = _state(env)
                action = np.asarray(act(state, action, rng), dtype=np.float32)
                rows["img"].append(observation["pixels"])
                rows["state"].append(state)
                rows["keypoint"].append(_keypoints(env.block))
                rows["action"].append(action)
                rows["n_contacts"].append([contacts])
                observation, _, terminated, _, info = env.step(action)
                contacts, best = info["n_contacts"], max(best, float(info["coverage"]))
                if terminated:
                    break
            yield ReplayEpisode(
                img=np.stack(rows["img"]).astype(np.uint8),
                state=np.stack(rows["state"]),
                keypoint=np.stack(rows["keypoint"]),
                action=np.stack(rows["action"]),
                n_contacts=np.asarray(rows["n_contacts"], dtype=np.float32),
                max_coverage=best,
            )
    finally:
        env.close()


def make_demo_dataset(
    path: Path,
    num_episodes: int = 10,
    seed: int = 0,
    policy: str | ScriptedPolicy = "push",
    max_steps: int = 300,
    img_dtype: Literal["float32", "uint8"] = "float32",
) -> Path:
    """A small replay zarr of real Push-T rollouts at ``path``, ready for ``ssilbench data
    import pusht --from PATH`` (about 0.3 s per 100 frames to record)."""
    path = Path(path)
    episodes = record_episodes(num_episodes, seed=seed, policy=policy, max_steps=max_steps)
    write_replay_zarr(path, episodes, img_dtype=img_dtype)
    return path
