"""The ``grid`` environment family: the paper's stochastic-expert study (its Figure 4).

An open 20x20 grid (no walls inside; moves off the grid leave the agent in place), start
at the top-left cell (0, 0), goal at the bottom-right cell (19, 19). The expert is optimal
and stochastic: it goes right with probability ``p_right`` and down otherwise, except on the
right border (only down is optimal) and the bottom border (only right). Every expert
episode takes exactly 38 steps. The ground-truth IDM stays deterministic however stochastic
the expert is, which is the point of the study (BC against IDM labeling).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import Environment, Task
from ssilbench.kit import TransitionStore
from ssilbench_maze.environment import cell_world_spec, short_hash
from ssilbench_maze.expert import ACTION_NAMES, solve
from ssilbench_maze.generate import Maze
from ssilbench_maze.gym_env import FixedGoal, MazeObserver, MazeVectorEnv

# Bump when the grid, the expert or the dataset layout changes: it is part of the cache key.
GRID_GENERATOR = "ssilbench_maze/open-grid-v1"
GRID_SIZES = {"20x20": 20}
RIGHT = ACTION_NAMES.index("right")
DOWN = ACTION_NAMES.index("down")


class GridOptions(BaseModel):
    """Options of the grid task."""

    model_config = ConfigDict(extra="forbid")

    state: Literal["position", "image"] = Field(
        "position",
        description="Observation: the agent's (x, y) cell as float32, or a 3xHxW uint8 image "
        "with one pixel per cell (free white, goal green, agent red, agent on the goal "
        "yellow).",
    )
    p_right: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Probability that the expert goes right (else down) off the right and "
        "bottom borders; 0.5 is the most stochastic expert, 0 and 1 are deterministic.",
    )
    trajectories: int = Field(
        26, ge=1, description="Expert episodes in the dataset, 38 transitions each."
    )
    data_seed: int = Field(
        0,
        ge=0,
        description="Seed of the expert's draws in the dataset. Not given: each run's seed, "
        "so every seed has a dataset of its own, as the paper's code draws one per seed; "
        "given (e.g. 0): one dataset for every seed.",
    )
    action_selection: Literal["greedy", "sample"] = Field(
        "greedy",
        description="How evaluation rollouts pick actions: 'greedy' = argmax pi(a|s), as the "
        "paper's code evaluates its policies; 'sample' = draw from pi(a|s) (seeded).",
    )


def open_grid(size: int) -> Maze:
    """A ``size`` x ``size`` grid without walls; the goal is the bottom-right cell."""
    walls = np.zeros((size, size), dtype=bool)
    walls.setflags(write=False)
    goal = size * size - 1
    return Maze(seed=0, walls=walls, goal=goal, expert=solve(walls, goal))


def expert_episodes(
    size: int, p_right: float, count: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Cells (count, steps + 1) and actions (count, steps) of expert episodes from (0, 0).

    ``steps = 2 (size - 1)``. All draws (one per step, also where a border forces the
    move) come from ``rng`` up front.
    """
    steps = 2 * (size - 1)
    draws = rng.random((count, steps))
    x = np.zeros(count, dtype=np.int64)
    y = np.zeros(count, dtype=np.int64)
    cells = np.zeros((count, steps + 1), dtype=np.int64)
    actions = np.zeros((count, steps), dtype=np.int64)
    for t in range(steps):
        right = np.where(x == size - 1, False, np.where(y == size - 1, True, draws[:, t] < p_right))
        actions[:, t] = np.where(right, RIGHT, DOWN)
        x += right
        y += ~right
        cells[:, t + 1] = y * size + x
    return cells, actions


def binary_entropy(p: float) -> float:
    """Entropy (nats) of a coin with probability ``p``."""
    return -sum(q * math.log(q) for q in (p, 1.0 - p) if q > 0.0)


class GridTask(Task):
    """The grid task with its options applied."""

    def __init__(self, task: str, options: GridOptions) -> None:
        self.task = task
        self.options = options
        self.size = GRID_SIZES[task]
        self.maze = open_grid(self.size)
        self.start = 0
        self.steps = 2 * (self.size - 1)
        self.observe = MazeObserver(self.maze, options.state)
        self.sampler = FixedGoal(np.array([self.start]), self.maze.goal, self.steps)
        self.spec = cell_world_spec(
            f"grid:{task}",
            self.observe,
            horizon=self.steps,
            eval_episodes=25,
            # The paper's code rolls out argmax actions even though the expert is stochastic
            # (any optimal path succeeds); 'sample' lets a stochastic imitator act as such.
            action_selection=options.action_selection,
            success=f"reward 1 on reaching the bottom-right cell within {self.steps} steps",
            metadata={
                "grid_size": [self.size, self.size],
                "start": [0, 0],
                "goal": list(self.maze.goal_position),
                "shortest_path": self.steps,
                "p_right": options.p_right,
                "trajectories": options.trajectories,
                "expert_entropy_interior": binary_entropy(options.p_right),
            },
        )

    @property
    def data_key(self) -> dict[str, Any]:
        return {
            "generator": GRID_GENERATOR,
            "task": self.task,
            "state": self.options.state,
            "p_right": self.options.p_right,
            "trajectories": self.options.trajectories,
            "data_seed": self.options.data_seed,
        }

    def dataset_path(self, root: Path) -> Path:
        return Path(root) / "grid" / f"{self.task}-{short_hash(self.data_key)}"

    def expert_episodes(self) -> tuple[np.ndarray, np.ndarray]:
        """Cells and actions of the dataset's episodes (see :func:`expert_episodes`)."""
        rng = np.random.Generator(np.random.PCG64(self.options.data_seed))
        return expert_episodes(self.size, self.options.p_right, self.options.trajectories, rng)

    def dataset(self, root: Path) -> TransitionStore:
        path = self.dataset_path(root)
        if path.exists():
            return TransitionStore.open(path, verify=True)
        cells, actions = self.expert_episodes()
        count, frames = cells.shape
        # The last frame of each episode carries the filler action 0; the reward 1 belongs
        # to the transition into the goal, the last one of every episode.
        actions = np.concatenate([actions, np.zeros((count, 1), dtype=np.int64)], axis=1)
        rewards = np.zeros((count, frames), dtype=np.float32)
        rewards[:, -2] = 1.0
        return TransitionStore.write(
            path,
            obs=self.observe(cells.reshape(-1)),
            actions=actions.reshape(-1),
            rewards=rewards.reshape(-1),
            episode_ends=frames * np.arange(1, count + 1, dtype=np.int64),
            producer={"plugin": "ssilbench_maze", **self.data_key},
            metadata={**self.spec.metadata, "data_seed": self.options.data_seed},
        )

    def frames(self, venv: MazeVectorEnv, obs: Any, info: dict[str, Any]) -> np.ndarray:
        """The maze and the agents drawn from their cells (a video of any observation kind)."""
        from ssilbench_maze.gym_env import vector_frames

        return vector_frames(venv, info)

    def make_vec_env(self, num_envs: int, seed: int) -> MazeVectorEnv:
        return MazeVectorEnv(
            self.maze,
            num_envs,
            obs_kind=self.options.state,
            horizon=self.steps,
            seed=seed,
            sampler=self.sampler,
        )


class GridEnvironment(Environment):
    """The open grid of the stochastic-expert study."""

    description: ClassVar[str] = (
        "Open 20x20 grid from the top-left to the bottom-right cell with a stochastic "
        "optimal expert (right with probability p_right, else down): the paper's "
        "stochastic-expert study."
    )
    Options: ClassVar[type[BaseModel]] = GridOptions
    # The paper's code draws each seed's dataset (learn_maze_stoch_expert.py seeds its
    # expert with the run's seed); '-o data_seed=N' shares one among the seeds.
    per_seed_options: ClassVar[tuple[str, ...]] = ("data_seed",)
    task_class = GridTask
    task_kind = "grid task"

    def tasks(self) -> list[str]:
        return list(GRID_SIZES)


__all__ = ["GRID_GENERATOR", "GRID_SIZES", "GridEnvironment", "GridOptions", "GridTask"]
