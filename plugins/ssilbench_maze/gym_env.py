"""Gymnasium environments over one maze: a single env and a numpy-batched vector env.

Actions: 0 right (+x), 1 left (-x), 2 up (-y), 3 down (+y); a move into a wall stays put.
With no-op probability ``noop`` the agent stays put at each step whatever the action (a
seeded draw per step). Reward 1.0 on reaching the goal (terminated), else 0; truncated
after ``horizon`` steps. Observations are positions (x, y) as float32, or uint8 images
(3, H, W) with one pixel per cell in the colours of a palette (see :data:`PALETTES`).
Where the goal changes from one episode to the next, positions gain the goal's (gx, gy)
and images draw the episode's goal. Start cells (and goals) come from an episode sampler:
:class:`FixedGoal` or :class:`GoalPerEpisode`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ssilbench_maze.expert import MOVES, Expert, GoalTables, stays, transition
from ssilbench_maze.generate import Maze

ObsKind = Literal["position", "image"]

Palette = Literal["ssilbench", "paper"]

# RGB per cell kind, each channel 0 or 255, per palette. In both the agent is the only
# colour with a full red channel and an empty blue one, so it can be found from those two
# channels alone. ssilbench's own turns the agent yellow on the goal, so that the goal stays
# visible in the final frame; the paper's code draws walls blue and the agent red over the
# goal.
_SSILBENCH: dict[str, tuple[int, int, int]] = {
    "wall": (0, 0, 0),
    "free": (255, 255, 255),
    "goal": (0, 255, 0),
    "agent": (255, 0, 0),
    "agent_on_goal": (255, 255, 0),
}
PALETTES: dict[str, dict[str, tuple[int, int, int]]] = {
    "ssilbench": _SSILBENCH,
    "paper": {**_SSILBENCH, "wall": (0, 0, 255), "agent_on_goal": (255, 0, 0)},
}
COLOURS = PALETTES["ssilbench"]
"""The default palette."""

# With no-ops the default horizon grows as 1 / (1 - noop), up to this many times the
# deterministic one.
NOOP_HORIZON_CAP = 10


def background(maze: Maze, with_goal: bool = True, palette: Palette = "ssilbench") -> np.ndarray:
    """The (3, H, W) uint8 image of walls, free cells and (optionally) the maze's goal."""
    colours = PALETTES[palette]
    wall = np.array(colours["wall"])[:, None, None]
    free = np.array(colours["free"])[:, None, None]
    image = np.where(maze.walls[None], wall, free).astype(np.uint8)
    if with_goal:
        gx, gy = maze.goal_position
        image[:, gy, gx] = colours["goal"]
    return image


def render_cells(
    maze: Maze,
    base: np.ndarray,
    cells: np.ndarray,
    goals: np.ndarray | None = None,
    palette: Palette = "ssilbench",
) -> np.ndarray:
    """Images (B, 3, H, W) of the agent at each of ``cells``, drawn on ``base``.

    ``goals`` (one cell per image) are drawn first where given; otherwise the goal is the
    maze's, already part of ``base``. On its goal the agent takes the palette's
    ``agent_on_goal`` colour.
    """
    colours = PALETTES[palette]
    cells = np.asarray(cells, dtype=np.int64).reshape(-1)
    images = np.repeat(base[None], len(cells), axis=0)
    index = np.arange(len(cells))
    if goals is None:
        goals = np.full(len(cells), maze.goal, dtype=np.int64)
    else:
        goals = np.broadcast_to(np.asarray(goals, dtype=np.int64).reshape(-1), cells.shape)
        gxy = maze.expert.positions(goals)
        images[index, :, gxy[:, 1], gxy[:, 0]] = np.array(colours["goal"], dtype=np.uint8)
    xy = maze.expert.positions(cells)
    on_goal = (cells == goals)[:, None]
    colour = np.where(on_goal, colours["agent_on_goal"], colours["agent"]).astype(np.uint8)
    images[index, :, xy[:, 1], xy[:, 0]] = colour
    return images


def vector_frames(venv: MazeVectorEnv, info: dict[str, Any]) -> np.ndarray:
    """RGB frames (num_envs, H, W, 3), one pixel per cell, of the agents at ``info``'s cells
    (and goals): what ``ssilbench eval --video`` films, whatever the observation kind."""
    palette = venv.observe.palette
    base = background(venv.maze, with_goal=False, palette=palette)
    images = render_cells(venv.maze, base, info["cell"], info["goal"], palette)
    return images.transpose(0, 2, 3, 1)


class MazeObserver:
    """Turns cells (and goals) into observations of one kind; shared by envs and datasets.

    With ``goal_features`` the goal is part of each observation: positions become
    (x, y, gx, gy) and images show the given goal cell instead of the maze's fixed goal.
    Images take the colours of ``palette`` (:data:`PALETTES`).
    """

    def __init__(
        self,
        maze: Maze,
        kind: ObsKind,
        goal_features: bool = False,
        palette: Palette = "ssilbench",
    ) -> None:
        self.maze = maze
        self.kind = kind
        self.goal_features = goal_features
        self.palette = palette
        rows, cols = maze.shape
        if kind == "position":
            high = np.array([cols - 1, rows - 1] * (2 if goal_features else 1), dtype=np.float32)
            self.space: spaces.Box = spaces.Box(0.0, high, shape=high.shape, dtype=np.float32)
        elif kind == "image":
            self.base = background(maze, with_goal=not goal_features, palette=palette)
            self.space = spaces.Box(0, 255, shape=(3, rows, cols), dtype=np.uint8)
        else:
            raise ValueError(f"unknown observation kind {kind!r}")

    @property
    def goal_dims(self) -> tuple[int, ...]:
        """The goal's feature indices in a vector observation."""
        return (2, 3) if self.goal_features and self.kind == "position" else ()

    def __call__(self, cells: np.ndarray, goals: np.ndarray | None = None) -> np.ndarray:
        """Observations of a batch of cells, shape (B, *space.shape).

        ``goals`` (one per cell, or one for all) is required with goal features and
        ignored without them.
        """
        cells = np.asarray(cells, dtype=np.int64).reshape(-1)
        if self.goal_features:
            if goals is None:
                raise ValueError("this observer shows the goal: pass the goal of each cell")
            goals = np.broadcast_to(np.asarray(goals, dtype=np.int64).reshape(-1), cells.shape)
        else:
            goals = None
        if self.kind == "position":
            xy = self.maze.expert.positions(cells)
            if goals is not None:
                xy = np.concatenate([xy, self.maze.expert.positions(goals)], axis=1)
            return xy.astype(np.float32)
        return render_cells(self.maze, self.base, cells, goals, self.palette)


def default_horizon(longest_path: int, noop: float = 0.0) -> int:
    """Twice the longest expert path, stretched by 1 / (1 - noop) for no-op dynamics.

    Room for detours, short enough to punish loops. The stretch is capped at
    :data:`NOOP_HORIZON_CAP` times; with ``noop = 1`` no agent ever moves, so the horizon
    stays the deterministic one.
    """
    base = 2 * int(longest_path)
    if noop <= 0.0 or noop >= 1.0:
        return base
    return min(math.ceil(base / (1.0 - noop)), NOOP_HORIZON_CAP * base)


class FixedGoal:
    """Episodes start uniformly in ``starts``; every episode has the same goal."""

    varies_goal = False

    def __init__(self, starts: np.ndarray, goal: int, longest_path: int) -> None:
        self.starts = np.asarray(starts, dtype=np.int64)
        self.goal = int(goal)
        self.longest_path = int(longest_path)

    @classmethod
    def from_expert(cls, expert: Expert) -> FixedGoal:
        """Starts uniform over the feasible non-goal cells of ``expert``'s goal."""
        return cls(expert.sources, expert.goal, expert.longest_path)

    def draw(self, rng: np.random.Generator) -> tuple[int, int]:
        """(start, goal) of a new episode."""
        return int(self.starts[rng.integers(len(self.starts))]), self.goal


class GoalPerEpisode:
    """Each episode draws a goal uniformly, then a start uniformly among the cells != goal
    that can reach it.

    The goals are every goal of ``tables``, or the given subset of them (a maze with a
    fixed set of goals); ``longest_path`` is the longest expert path to any of them.
    """

    varies_goal = True

    def __init__(self, tables: GoalTables, goals: np.ndarray | None = None) -> None:
        self.tables = tables
        self.goals = tables.goals if goals is None else np.asarray(goals, dtype=np.int64)
        if len(self.goals) == 0:
            raise ValueError("GoalPerEpisode needs at least one goal")
        self._sources = [tables.expert(g).sources for g in self.goals]
        self.longest_path = int(tables.distance[tables.row[self.goals]].max())

    def draw(self, rng: np.random.Generator) -> tuple[int, int]:
        """(start, goal) of a new episode."""
        index = int(rng.integers(len(self.goals)))
        sources = self._sources[index]
        return int(sources[rng.integers(len(sources))]), int(self.goals[index])


Sampler = FixedGoal | GoalPerEpisode


class MazeEnv(gymnasium.Env):
    """One agent in one maze; equal ``reset`` seeds give equal episodes."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        maze: Maze,
        obs_kind: ObsKind = "position",
        horizon: int | None = None,
        render_mode: str | None = None,
        noop: float = 0.0,
        sampler: Sampler | None = None,
        palette: Palette = "ssilbench",
    ) -> None:
        self.maze = maze
        self.sampler = sampler or FixedGoal.from_expert(maze.expert)
        self.observe = MazeObserver(
            maze, obs_kind, goal_features=self.sampler.varies_goal, palette=palette
        )
        self.noop = float(noop)
        self.horizon = horizon or default_horizon(self.sampler.longest_path, self.noop)
        self.observation_space = self.observe.space
        self.action_space = spaces.Discrete(len(MOVES))
        self.render_mode = render_mode
        self._cell, self._goal = -1, -1
        self._t = 0

    def _obs(self) -> np.ndarray:
        return self.observe([self._cell], [self._goal])[0]

    def _info(self) -> dict[str, Any]:
        return {"cell": self._cell, "goal": self._goal}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._cell, self._goal = self.sampler.draw(self.np_random)
        self._t = 0
        return self._obs(), self._info()

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(int(action)):
            raise ValueError(f"action {action!r} is not in {self.action_space}")
        if not stays(self.np_random, self.noop):
            self._cell = int(transition(self.maze.walls, self._cell, int(action)))
        self._t += 1
        terminated = self._cell == self._goal
        truncated = not terminated and self._t >= self.horizon
        reward = 1.0 if terminated else 0.0
        return self._obs(), reward, terminated, truncated, self._info()

    def render(self) -> np.ndarray:
        """The maze as an (H, W, 3) RGB array, one pixel per cell."""
        palette = self.observe.palette
        base = background(self.maze, with_goal=False, palette=palette)
        image = render_cells(self.maze, base, [self._cell], [self._goal], palette)[0]
        return image.transpose(1, 2, 0)


class MazeVectorEnv(VectorEnv):
    """``num_envs`` agents in one maze, stepped together with numpy.

    Autoreset mode is gymnasium's default, NEXT_STEP: the step that ends a sub-env's episode
    returns its final observation; the next ``step`` call ignores that sub-env's action and
    returns the first observation of a new episode with reward 0 and no termination.
    Sub-env ``i`` draws its starts, goals and no-ops from ``seeding.np_random(seed + i)``,
    so it plays the same episodes as ``MazeEnv.reset(seed=seed + i)``.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(
        self,
        maze: Maze,
        num_envs: int,
        obs_kind: ObsKind = "position",
        horizon: int | None = None,
        seed: int | None = None,
        noop: float = 0.0,
        sampler: Sampler | None = None,
        palette: Palette = "ssilbench",
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.maze = maze
        self.num_envs = num_envs
        self.sampler = sampler or FixedGoal.from_expert(maze.expert)
        self.observe = MazeObserver(
            maze, obs_kind, goal_features=self.sampler.varies_goal, palette=palette
        )
        self.noop = float(noop)
        self.horizon = horizon or default_horizon(self.sampler.longest_path, self.noop)
        self.single_observation_space = self.observe.space
        self.single_action_space = spaces.Discrete(len(MOVES))
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._seed = seed
        self._rngs: list[np.random.Generator] = []
        self._cells = np.zeros(num_envs, dtype=np.int64)
        self._goals = np.zeros(num_envs, dtype=np.int64)
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._done = np.zeros(num_envs, dtype=bool)

    def _start(self, i: int) -> None:
        self._cells[i], self._goals[i] = self.sampler.draw(self._rngs[i])

    def _noops(self, active: np.ndarray) -> np.ndarray:
        """Which of the ``active`` sub-envs stay put this step (one draw each)."""
        if self.noop <= 0.0:
            return np.zeros(self.num_envs, dtype=bool)
        return np.array(
            [bool(a) and stays(r, self.noop) for a, r in zip(active, self._rngs, strict=True)]
        )

    def _info(self) -> dict[str, Any]:
        return {"cell": self._cells.copy(), "goal": self._goals.copy()}

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
        for i in range(self.num_envs):
            self._start(i)
        self._t[:] = 0
        self._done[:] = False
        return self.observe(self._cells, self._goals), self._info()

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
        moved = np.where(self._noops(~restarting), self._cells, moved)
        self._cells = np.where(restarting, self._cells, moved)
        self._t = np.where(restarting, 0, self._t + 1)
        for i in np.flatnonzero(restarting):
            self._start(int(i))
        terminated = (self._cells == self._goals) & ~restarting
        truncated = (self._t >= self.horizon) & ~terminated & ~restarting
        self._done = terminated | truncated
        rewards = terminated.astype(np.float64)
        return (
            self.observe(self._cells, self._goals),
            rewards,
            terminated,
            truncated,
            self._info(),
        )
