"""Push-T's coverage reward computed from a recorded state, without the simulator.

The environment scores a step by the share of the goal's T area that the block's T covers,
reward = clip(coverage / 0.95, 0, 1). The diffusion-policy replay file records each frame's
state (agent x, y, block x, y, block angle) but no reward, so the importer recomputes the
reward from the state with the same geometry: the T is two rectangles fixed to the block's
body (gym-pusht's ``add_tee`` with scale 30 and length 4), placed in the world by the body's
position and angle; the goal is the same T at (256, 256, pi/4). A test checks the result
against the environment's own ``info["coverage"]``.
"""

from __future__ import annotations

import numpy as np

SUCCESS_THRESHOLD = 0.95
GOAL_POSE = (256.0, 256.0, np.pi / 4)
# The two rectangles of the T in the block's body frame (the bar, then the stem).
_SCALE, _LENGTH = 30.0, 4.0
T_PARTS = np.array(
    [
        [(-_LENGTH * _SCALE / 2, _SCALE), (_LENGTH * _SCALE / 2, _SCALE),
         (_LENGTH * _SCALE / 2, 0.0), (-_LENGTH * _SCALE / 2, 0.0)],
        [(-_SCALE / 2, _SCALE), (-_SCALE / 2, _LENGTH * _SCALE),
         (_SCALE / 2, _LENGTH * _SCALE), (_SCALE / 2, _SCALE)],
    ]
)  # fmt: skip


def _tees(poses: np.ndarray) -> np.ndarray:
    """Shapely T shapes (one MultiPolygon per pose) for poses (N, 3): x, y, angle."""
    import shapely

    x, y, angle = poses[:, 0], poses[:, 1], poses[:, 2]
    cos, sin = np.cos(angle)[:, None, None], np.sin(angle)[:, None, None]
    px, py = T_PARTS[None, :, :, 0], T_PARTS[None, :, :, 1]
    # Rotate each body-frame vertex by the angle, then translate (pymunk's local_to_world).
    wx = x[:, None, None] + cos * px - sin * py
    wy = y[:, None, None] + sin * px + cos * py
    corners = np.stack([wx, wy], axis=-1)  # (N, 2 parts, 4 corners, 2)
    rings = np.concatenate([corners, corners[:, :, :1]], axis=2)  # closed rings
    parts = shapely.polygons(rings.reshape(-1, 5, 2)).reshape(-1, 2)
    return shapely.multipolygons(parts)


def coverage(states: np.ndarray) -> np.ndarray:
    """Share of the goal T covered by the block, for states (N, 5) (agent xy, block xy,
    angle); float64 (N,)."""
    import shapely

    states = np.asarray(states, dtype=np.float64)
    if len(states) == 0:
        return np.zeros(0)
    goal = _tees(np.array([GOAL_POSE]))[0]
    blocks = _tees(states[:, 2:5])
    return shapely.area(shapely.intersection(blocks, goal)) / shapely.area(goal)


def reward(states: np.ndarray) -> np.ndarray:
    """The environment's reward for being in each state: clip(coverage / 0.95, 0, 1)."""
    return np.clip(coverage(states) / SUCCESS_THRESHOLD, 0.0, 1.0)
