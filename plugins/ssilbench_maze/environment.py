"""The ``maze`` environment family: tasks, options, the expert dataset, v* and test accuracy."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import Environment, EnvSpec, Normaliser, Policy, Task, VideoModel
from ssilbench.data.store import TransitionStore
from ssilbench.data.tensors import as_model_input
from ssilbench.errors import unknown
from ssilbench_maze.expert import ACTION_NAMES, cover_paths, rollout_paths
from ssilbench_maze.generate import COMPLEXITY, DENSITY, Maze, generate_maze
from ssilbench_maze.gym_env import COLOURS, MazeObserver, MazeVectorEnv, default_horizon

if TYPE_CHECKING:
    from collections.abc import Sequence

# Bump when the generator, expert or dataset layout changes: it is part of the cache key.
GENERATOR = "ssilbench_maze/random-walk-v1"
TASK_SIZES = {"10x10": 10, "20x20": 20, "50x50": 50}
# Seed stream of the dataset's start cells, kept apart from the layout's stream.
_START_STREAM = 1
_METRIC_CHUNK = 4096


class MazeOptions(BaseModel):
    """Options of every maze task."""

    model_config = ConfigDict(extra="forbid")

    state: Literal["position", "image"] = Field(
        "position",
        description="Observation: the agent's (x, y) cell as float32, or a 3xHxW uint8 image "
        "with one pixel per cell (wall black, free white, goal green, agent red, agent on "
        "the goal yellow).",
    )
    data: Literal["rollouts", "states"] = Field(
        "rollouts",
        description="Expert dataset: 'rollouts' = `episodes` expert episodes from uniformly "
        "random start cells; 'states' = the paper's D^full, every feasible non-goal state "
        "exactly once as a transition source.",
    )
    episodes: int = Field(
        200, ge=1, description="Number of expert episodes when data='rollouts' (else unused)."
    )
    maze_seed: int = Field(
        0, ge=0, description="Seed of the maze layout, its goal and the dataset's start cells."
    )
    horizon: int | None = Field(
        None,
        ge=1,
        description="Steps before an evaluation episode is truncated; None means twice the "
        "longest expert path of the maze.",
    )


def data_key(task: str, options: MazeOptions) -> dict[str, Any]:
    """The options that change the dataset, plus the generator version."""
    key: dict[str, Any] = {
        "generator": GENERATOR,
        "task": task,
        "state": options.state,
        "data": options.data,
        "maze_seed": options.maze_seed,
    }
    if options.data == "rollouts":
        key["episodes"] = options.episodes
    return key


def short_hash(payload: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def episode_arrays(
    maze: Maze, paths: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cells, actions, rewards and episode ends of expert paths, each frame stored once.

    The last frame of each episode carries the filler action 0 and reward 0.
    """
    cells = np.concatenate(paths)
    ends = np.cumsum([len(p) for p in paths]).astype(np.int64)
    last = np.zeros(len(cells), dtype=bool)
    last[ends - 1] = True
    actions = np.where(last, 0, maze.expert.action[cells]).astype(np.int64)
    # The reward is for the action at frame i, so it is 1 where the next frame is the goal.
    reaches_goal = np.zeros(len(cells), dtype=bool)
    reaches_goal[:-1] = (cells[1:] == maze.goal) & ~last[:-1]
    return cells, actions, reaches_goal.astype(np.float32), ends


class MazeVideoModel(VideoModel):
    """The ground-truth video model v*(s) = f(s, pi*(s)) as a lookup table over cells.

    States without an expert action (the goal, walls, positions off the grid, images with
    no agent pixel) map to themselves.
    """

    def __init__(self, maze: Maze, kind: Literal["position", "image"]) -> None:
        self.maze = maze
        self.kind = kind
        self._next = torch.from_numpy(maze.expert.next_cell.copy())
        self._positions = torch.as_tensor(maze.expert.positions(np.arange(maze.walls.size)))
        if kind == "image":
            self._background = as_model_input(MazeObserver(maze, "image").base)
            colours = [COLOURS["agent"], COLOURS["agent_on_goal"]]
            self._agent_colours = torch.tensor(colours, dtype=torch.float32) / 255.0

    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        if self.kind == "position":
            return self._predict_positions(obs)
        return self._predict_images(obs)

    def _predict_positions(self, obs: torch.Tensor) -> torch.Tensor:
        rows, cols = self.maze.shape
        xy = obs.round().long()
        x, y = xy[:, 0], xy[:, 1]
        inside = (x >= 0) & (x < cols) & (y >= 0) & (y < rows)
        cells = torch.where(inside, y * cols + x, torch.zeros_like(x))
        table = self._positions.to(obs.device)
        moved = table[self._next.to(obs.device)[cells]].to(obs.dtype)
        return torch.where(inside[:, None], moved, obs)

    def _predict_images(self, obs: torch.Tensor) -> torch.Tensor:
        # The agent is the only pixel with a full red channel and an empty blue one.
        agent = ((obs[:, 0] > 0.5) & (obs[:, 2] < 0.5)).flatten(1)
        rows = agent.any(dim=1).nonzero().squeeze(1)
        cells = agent[rows].to(torch.uint8).argmax(dim=1)
        nxt = self._next.to(obs.device)[cells]
        positions = self._positions.to(obs.device)
        here, there = positions[cells], positions[nxt]
        background = self._background.to(obs.device, obs.dtype)
        colours = self._agent_colours.to(obs.device, obs.dtype)
        out = obs.clone()
        # Move the agent: restore the background under it, then draw it at v*(s).
        out[rows, :, here[:, 1], here[:, 0]] = background[:, here[:, 1], here[:, 0]].T
        out[rows, :, there[:, 1], there[:, 0]] = colours[(nxt == self.maze.goal).long()]
        return out


class MazeTask(Task):
    """One maze task with its options applied."""

    def __init__(self, task: str, options: MazeOptions) -> None:
        self.task = task
        self.options = options
        self.maze = generate_maze(TASK_SIZES[task], options.maze_seed)
        self.observe = MazeObserver(self.maze, options.state)
        self.horizon = options.horizon or default_horizon(self.maze)
        self.spec = self._spec()
        self._metric_batches: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def _spec(self) -> EnvSpec:
        image = self.options.state == "image"
        expert = self.maze.expert
        return EnvSpec(
            env_id=f"maze:{self.task}",
            obs_shape=tuple(self.observe.space.shape),
            obs_dtype="uint8" if image else "float32",
            obs_kind="image" if image else "vector",
            num_actions=len(ACTION_NAMES),
            action_names=ACTION_NAMES,
            horizon=self.horizon,
            eval_episodes=64,
            eval_every=500,
            action_selection="greedy",
            default_steps=1500,
            default_arch="cnn1" if image else "mlp5",
            normaliser=Normaliser(
                name="success rate",
                low=0.0,
                high=1.0,
                source="rollout success: reward 1 on reaching the goal",
            ),
            budget_unit="transitions",
            metadata={
                "feasible_states": int((expert.distance >= 0).sum()),
                "test_states": int(len(expert.sources)),
                "longest_expert_path": expert.longest_path,
                "grid_size": list(self.maze.shape),
                "goal": list(self.maze.goal_position),
                "maze_seed": self.options.maze_seed,
            },
        )

    def expert_paths(self) -> list[np.ndarray]:
        """The cell paths of the dataset's episodes."""
        if self.options.data == "states":
            return cover_paths(self.maze.expert)
        rng = np.random.Generator(np.random.PCG64([self.options.maze_seed, _START_STREAM]))
        sources = self.maze.expert.sources
        starts = sources[rng.integers(len(sources), size=self.options.episodes)]
        return rollout_paths(self.maze.expert, starts)

    @cached_property
    def data_key(self) -> dict[str, Any]:
        return data_key(self.task, self.options)

    def dataset_path(self, root: Path) -> Path:
        return Path(root) / "maze" / f"{self.task}-{short_hash(self.data_key)}"

    def dataset(self, root: Path) -> TransitionStore:
        path = self.dataset_path(root)
        if path.exists():
            return TransitionStore.open(path, verify=True)
        cells, actions, rewards, ends = episode_arrays(self.maze, self.expert_paths())
        producer = {
            "plugin": "ssilbench_maze",
            "complexity": COMPLEXITY,
            "density": DENSITY,
            **self.data_key,
        }
        return TransitionStore.write(
            path,
            obs=self.observe(cells),
            actions=actions,
            rewards=rewards,
            episode_ends=ends,
            producer=producer,
            metadata=dict(self.spec.metadata),
        )

    def make_vec_env(self, num_envs: int, seed: int) -> MazeVectorEnv:
        return MazeVectorEnv(
            self.maze, num_envs, obs_kind=self.options.state, horizon=self.horizon, seed=seed
        )

    def video_model(self) -> MazeVideoModel:
        return MazeVideoModel(self.maze, self.options.state)

    def _test_batch(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Every feasible non-goal state as model input, with its expert action (cached)."""
        key = str(device)
        if key not in self._metric_batches:
            sources = self.maze.expert.sources
            obs = as_model_input(self.observe(sources), device)
            actions = torch.as_tensor(self.maze.expert.action[sources], device=device)
            self._metric_batches[key] = (obs, actions)
        return self._metric_batches[key]

    def metrics(self, policy: Policy, device: torch.device) -> dict[str, float]:
        """The paper's test accuracy: argmax pi(a|s) == pi*(s) over all feasible states."""
        obs, actions = self._test_batch(device)
        correct = 0
        with torch.no_grad():
            for start in range(0, len(obs), _METRIC_CHUNK):
                probs = policy.probs(obs[start : start + _METRIC_CHUNK])
                chosen = probs.argmax(dim=-1).to(actions.device)
                correct += int((chosen == actions[start : start + _METRIC_CHUNK]).sum())
        return {"test_accuracy": correct / len(obs)}


class MazeEnvironment(Environment):
    """Random mazes of three sizes with a fixed goal and a deterministic shortest-path expert."""

    description: ClassVar[str] = (
        "Random mazes (mazelab's random-walk walls) of 11x11, 21x21 and 51x51 cells with a "
        "fixed goal, a BFS expert, positions or images, and the ground-truth video model."
    )
    Options: ClassVar[type[BaseModel]] = MazeOptions

    def tasks(self) -> list[str]:
        return list(TASK_SIZES)

    def load(self, task: str, options: BaseModel | None = None) -> MazeTask:
        if task not in TASK_SIZES:
            raise unknown("maze task", task, self.tasks())
        if not isinstance(options, MazeOptions):
            options = MazeOptions.model_validate(options.model_dump() if options else {})
        return MazeTask(task, options)


__all__ = [
    "COLOURS",
    "GENERATOR",
    "MazeEnvironment",
    "MazeOptions",
    "MazeTask",
    "MazeVideoModel",
    "TASK_SIZES",
]
