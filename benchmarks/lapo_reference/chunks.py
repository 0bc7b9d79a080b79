"""A small Procgen-style dataset in the paper's chunk layout, with actions that can be learned.

The procgen tests' generator (``write_split`` in tests/plugins/procgen/test_procgen_data.py)
writes the layout with random frames and random actions: right for checking an importer,
useless for comparing accuracies (every model is at chance). This one writes the same layout
(``<game>/{train,test}/<i>.npz`` with ``obs`` (N, 64, 64, 3) uint8, ``ta``, ``done``,
``rewards``, ``ep_returns``, ``values``) from the moving square of the LAPO parity test
(tests/plugins/lapo/test_reference_parity.py): a 6 x 6 white square over a fixed colour
gradient on a 64 x 64 torus, moved 4 pixels by each action.

Actions are Procgen's first nine (the eight directions and NOOP, in Procgen's order). An
"expert" takes, with probability ``greedy``, the action a fixed random table assigns to the
square's 8 x 8 cell, and a uniformly random one of the nine otherwise; so an IDM can tell
every action from (s, s'), and a policy from s alone can reach about greedy + (1 - greedy)/9.
Episodes end every ``episode`` frames, after which the square starts at a random place.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# Procgen's actions 0..8: LEFT-DOWN, LEFT, LEFT-UP, DOWN, NOOP, UP, RIGHT-DOWN, RIGHT, RIGHT-UP
# as (dy, dx) on the image (rows grow downwards)
MOVES = np.array([[4, -4], [0, -4], [-4, -4], [4, 0], [0, 0], [-4, 0], [4, 4], [0, 4], [-4, 4]])


def _background() -> np.ndarray:
    ramp = np.linspace(40, 160, 64, dtype=np.float32)
    return np.stack(
        [np.broadcast_to(ramp[None, :], (64, 64)), np.broadcast_to(ramp[:, None], (64, 64)),
         np.full((64, 64), 90.0, np.float32)], axis=-1,
    ).astype(np.uint8)  # fmt: skip


def episodes(n: int, seed: int, greedy: float = 0.75, episode: int = 200) -> dict[str, np.ndarray]:
    """``n`` consecutive frames with the chunk keys, episodes of ``episode`` frames."""
    rng = np.random.Generator(np.random.PCG64(seed))
    # the expert's table is the same for every split (seed 0): train and test share the task
    table = np.random.Generator(np.random.PCG64(0)).integers(0, len(MOVES), size=(8, 8))
    obs = np.repeat(_background()[None], n, axis=0)
    ta = np.zeros(n, np.int64)
    done = np.zeros(n, bool)
    pos = rng.integers(0, 64, size=2)
    for t in range(n):
        rows, cols = np.arange(pos[0], pos[0] + 6) % 64, np.arange(pos[1], pos[1] + 6) % 64
        obs[t][rows[:, None], cols[None, :]] = 255
        cell = table[pos[0] // 8, pos[1] // 8]
        ta[t] = cell if rng.random() < greedy else rng.integers(0, len(MOVES))
        done[t] = (t + 1) % episode == 0
        pos = rng.integers(0, 64, size=2) if done[t] else (pos + MOVES[ta[t]]) % 64
    return {
        "obs": obs,
        "ta": ta,
        "done": done,
        "rewards": np.zeros(n, np.float32),
        "ep_returns": np.zeros(n, np.float32),
        "values": np.zeros(n, np.float32),
    }


def write_dataset(root: Path, game: str, train: int, test: int, seed: int = 0) -> Path:
    """``root/<game>/train/0.npz`` (``train`` frames) and ``root/<game>/test/0.npz``
    (``test`` frames), one chunk each; returns ``root``."""
    for split, n, split_seed in (("train", train, seed), ("test", test, seed + 1)):
        folder = Path(root) / game / split
        folder.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(folder / "0.npz", **episodes(n, split_seed))
    return Path(root)
