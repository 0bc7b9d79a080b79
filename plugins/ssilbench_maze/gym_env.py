"""Gymnasium environments over one maze: a single env and a numpy-batched vector env.

Actions: 0 right (+x), 1 left (-x), 2 up (-y), 3 down (+y); a move into a wall stays put.
Reward 1.0 on reaching the goal (terminated), else 0; truncated after ``horizon`` steps.
Observations are positions (x, y) as float32, or uint8 images (3, H, W) with one pixel per
cell (see :data:`COLOURS`). Start cells are drawn uniformly from the feasible non-goal cells.
"""

from __future__ import annotations

from typing import Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ssilbench_maze.expert import MOVES, transition
from ssilbench_maze.generate import Maze

ObsKind = Literal["position", "image"]

# RGB per cell kind, each channel 0 or 255. The agent is the only colour with a full red
# channel and an empty blue one, so it can be found from those two channels alone; it
# turns yellow on the goal so that the goal stays visible in the final frame.
COLOURS: dict[str, tuple[int, int, int]] = {
    "wall": (0, 0, 0),
    "free": (255, 255, 255),
    "goal": (0, 255, 0),
    "agent": (255, 0, 0),
    "agent_on_goal": (255, 255, 0),
}


def background(maze: Maze) -> np.ndarray:
    """The (3, H, W) uint8 image of walls, free cells and the goal, without the agent."""
    image = np.where(maze.walls[None], np.array(COLOURS["wall"])[:, None, None], 255)
    image = image.astype(np.uint8)
    gx, gy = maze.goal_position
    image[:, gy, gx] = COLOURS["goal"]
    return image


def render_cells(maze: Maze, base: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Images (B, 3, H, W) of the agent at each of ``cells``, drawn on ``base``."""
    cells = np.asarray(cells, dtype=np.int64).reshape(-1)
    images = np.repeat(base[None], len(cells), axis=0)
    xy = maze.expert.positions(cells)
    colour = np.where(
        (cells == maze.goal)[:, None], COLOURS["agent_on_goal"], COLOURS["agent"]
    ).astype(np.uint8)
    images[np.arange(len(cells)), :, xy[:, 1], xy[:, 0]] = colour
    return images


class MazeObserver:
    """Turns cells into observations of one kind; shared by the envs and the dataset."""

    def __init__(self, maze: Maze, kind: ObsKind) -> None:
        self.maze = maze
        self.kind = kind
        rows, cols = maze.shape
        if kind == "position":
            high = np.array([cols - 1, rows - 1], dtype=np.float32)
            self.space: spaces.Box = spaces.Box(0.0, high, shape=(2,), dtype=np.float32)
        elif kind == "image":
            self.base = background(maze)
            self.space = spaces.Box(0, 255, shape=(3, rows, cols), dtype=np.uint8)
        else:
            raise ValueError(f"unknown observation kind {kind!r}")

    def __call__(self, cells: np.ndarray) -> np.ndarray:
        """Observations of a batch of cells, shape (B, *space.shape)."""
        if self.kind == "position":
            return self.maze.expert.positions(cells).reshape(-1, 2).astype(np.float32)
        return render_cells(self.maze, self.base, cells)


def default_horizon(maze: Maze) -> int:
    """Twice the longest expert path: room for detours, short enough to punish loops."""
    return 2 * maze.expert.longest_path


class MazeEnv(gymnasium.Env):
    """One agent in one maze; equal ``reset`` seeds give equal episodes."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        maze: Maze,
        obs_kind: ObsKind = "position",
        horizon: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        self.maze = maze
        self.observe = MazeObserver(maze, obs_kind)
        self.horizon = horizon or default_horizon(maze)
        self.observation_space = self.observe.space
        self.action_space = spaces.Discrete(len(MOVES))
        self.render_mode = render_mode
        self._starts = maze.expert.sources
        self._cell = int(self._starts[0])
        self._t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._cell = int(self._starts[self.np_random.integers(len(self._starts))])
        self._t = 0
        return self.observe(self._cell)[0], {"cell": self._cell}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(int(action)):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        self._cell = int(transition(self.maze.walls, self._cell, int(action)))
        self._t += 1
        terminated = self._cell == self.maze.goal
        truncated = not terminated and self._t >= self.horizon
        reward = 1.0 if terminated else 0.0
        return self.observe(self._cell)[0], reward, terminated, truncated, {"cell": self._cell}

    def render(self) -> np.ndarray:
        """The maze as an (H, W, 3) RGB array, one pixel per cell."""
        image = render_cells(self.maze, background(self.maze), [self._cell])[0]
        return image.transpose(1, 2, 0)


class MazeVectorEnv(VectorEnv):
    """``num_envs`` agents in one maze, stepped together with numpy.

    Autoreset mode is gymnasium's default, NEXT_STEP: the step that ends a sub-env's episode
    returns its final observation; the next ``step`` call ignores that sub-env's action and
    returns the first observation of a new episode with reward 0 and no termination.
    Sub-env ``i`` draws its start cells from ``seeding.np_random(seed + i)``, so it plays
    the same episodes as ``MazeEnv.reset(seed=seed + i)``.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(
        self,
        maze: Maze,
        num_envs: int,
        obs_kind: ObsKind = "position",
        horizon: int | None = None,
        seed: int | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.maze = maze
        self.num_envs = num_envs
        self.observe = MazeObserver(maze, obs_kind)
        self.horizon = horizon or default_horizon(maze)
        self.single_observation_space = self.observe.space
        self.single_action_space = spaces.Discrete(len(MOVES))
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._seed = seed
        self._rngs: list[np.random.Generator] = []
        self._starts = maze.expert.sources
        self._cells = np.full(num_envs, self._starts[0], dtype=np.int64)
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._done = np.zeros(num_envs, dtype=bool)

    def _draw_start(self, i: int) -> int:
        return int(self._starts[self._rngs[i].integers(len(self._starts))])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is None and not self._rngs:
            seed = self._seed
        if seed is not None or not self._rngs:
            self._rngs = [
                seeding.np_random(None if seed is None else seed + i)[0]
                for i in range(self.num_envs)
            ]
        self._cells = np.array([self._draw_start(i) for i in range(self.num_envs)])
        self._t[:] = 0
        self._done[:] = False
        return self.observe(self._cells), {"cell": self._cells.copy()}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if not self._rngs:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions).reshape(-1)
        if actions.shape != (self.num_envs,) or not self.action_space.contains(
            actions.astype(np.int64)
        ):
            raise ValueError(f"actions {actions!r} are not in {self.action_space}")
        restarting = self._done
        moved = transition(self.maze.walls, self._cells, actions.astype(np.int64))
        self._cells = np.where(restarting, self._cells, moved)
        self._t = np.where(restarting, 0, self._t + 1)
        for i in np.flatnonzero(restarting):
            self._cells[i] = self._draw_start(int(i))
        terminated = (self._cells == self.maze.goal) & ~restarting
        truncated = (self._t >= self.horizon) & ~terminated & ~restarting
        self._done = terminated | truncated
        rewards = terminated.astype(np.float64)
        return (
            self.observe(self._cells),
            rewards,
            terminated,
            truncated,
            {"cell": self._cells.copy()},
        )
