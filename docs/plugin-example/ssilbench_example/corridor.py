"""The ``corridor`` environment family: walk right along a line of cells to reach the goal.

A corridor is a line of N cells 0 .. N-1 with the goal at cell N-1. Action 0 steps left,
action 1 steps right; a step past either end stays put. Reaching the goal gives reward 1 and
ends the episode; otherwise the episode is truncated after 4 N steps. The observation is the
agent's cell as a float32 vector of one number, and start cells are uniform over the
non-goal cells. The expert steps right, except that with probability ``expert_noise`` it
steps left, so the dataset holds both actions.

Tasks: ``short`` (N = 8) and ``long`` (N = 32).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import (
    Environment,
    EnvSpec,
    Normaliser,
    Policy,
    Task,
    TransitionStore,
    VideoModel,
)

TASK_LENGTHS = {"short": 8, "long": 32}
ACTION_NAMES = ("left", "right")
LEFT, RIGHT = 0, 1
# Part of the dataset's cache key: bump it whenever the generated data would change.
GENERATOR = "ssilbench_example/corridor-v1"


class CorridorOptions(BaseModel):
    """Options of every corridor task (``-o KEY=VALUE``)."""

    model_config = ConfigDict(extra="forbid")

    episodes: int = Field(64, ge=1, description="Number of expert episodes in the dataset.")
    expert_noise: float = Field(
        0.1, ge=0, lt=0.5, description="Probability that the expert steps left instead of right."
    )
    data_seed: int = Field(0, ge=0, description="Seed of the dataset's start cells and noise.")


def horizon(length: int) -> int:
    """Evaluation steps before truncation: four times the corridor's length."""
    return 4 * length


def move(cells: np.ndarray | int, actions: np.ndarray | int, length: int) -> np.ndarray:
    """The dynamics, shared by the dataset and the environment."""
    return np.clip(cells + np.where(actions == RIGHT, 1, -1), 0, length - 1)


def expert_episodes(length: int, options: CorridorOptions) -> dict[str, np.ndarray]:
    """Frames, actions, rewards and episode ends of the expert dataset (deterministic).

    Each frame is stored once; the last frame of an episode carries the filler action 0.
    """
    rng = np.random.Generator(np.random.PCG64([options.data_seed, length]))
    goal = length - 1
    cells: list[int] = []
    actions: list[int] = []
    rewards: list[float] = []
    ends: list[int] = []
    for _ in range(options.episodes):
        cell = int(rng.integers(goal))
        for _ in range(horizon(length)):
            action = LEFT if rng.random() < options.expert_noise else RIGHT
            cells.append(cell)
            actions.append(action)
            cell = int(move(cell, action, length))
            rewards.append(float(cell == goal))
            if cell == goal:
                break
        cells.append(cell)
        actions.append(0)
        rewards.append(0.0)
        ends.append(len(cells))
    return {
        "obs": np.array(cells, dtype=np.float32)[:, None],
        "actions": np.array(actions, dtype=np.int64),
        "rewards": np.array(rewards, dtype=np.float32),
        "episode_ends": np.array(ends, dtype=np.int64),
    }


class CorridorVectorEnv(VectorEnv):
    """``num_envs`` corridors stepped together with numpy; equal seeds give equal episodes.

    Autoreset follows gymnasium's default (NEXT_STEP): the step that ends a sub-env's
    episode returns its final observation; the next step ignores that sub-env's action and
    returns the first observation of a new episode with reward 0.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, length: int, num_envs: int, seed: int | None = None) -> None:
        self.length = length
        self.num_envs = num_envs
        self.horizon = horizon(length)
        self.single_observation_space = spaces.Box(0.0, length - 1, shape=(1,), dtype=np.float32)
        self.single_action_space = spaces.Discrete(len(ACTION_NAMES))
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._seed = seed
        self._rng: np.random.Generator | None = None
        self._cells = np.zeros(num_envs, dtype=np.int64)
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._done = np.zeros(num_envs, dtype=bool)

    def _observe(self) -> np.ndarray:
        return self._cells[:, None].astype(np.float32)

    def _starts(self, n: int) -> np.ndarray:
        return self._rng.integers(self.length - 1, size=n)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None or self._rng is None:
            self._rng = np.random.default_rng(self._seed if seed is None else seed)
        self._cells = self._starts(self.num_envs)
        self._t[:] = 0
        self._done[:] = False
        return self._observe(), {}

    def step(self, actions: np.ndarray):
        if self._rng is None:
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions, dtype=np.int64).reshape(-1)
        if actions.shape != (self.num_envs,) or not self.action_space.contains(actions):
            raise ValueError(f"actions {actions!r} are not in {self.action_space}")
        restarting = self._done
        self._cells = np.where(restarting, self._cells, move(self._cells, actions, self.length))
        self._cells[restarting] = self._starts(int(restarting.sum()))
        self._t = np.where(restarting, 0, self._t + 1)
        terminated = (self._cells == self.length - 1) & ~restarting
        truncated = (self._t >= self.horizon) & ~terminated & ~restarting
        self._done = terminated | truncated
        return self._observe(), terminated.astype(np.float64), terminated, truncated, {}


class CorridorVideoModel(VideoModel):
    """v*(s): one cell to the right (the expert's intended step); the goal maps to itself."""

    def __init__(self, length: int) -> None:
        self.length = length

    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.clamp(obs + 1, max=self.length - 1)


class CorridorTask(Task):
    """One corridor with its options applied."""

    def __init__(self, task: str, options: CorridorOptions) -> None:
        self.task = task
        self.options = options
        self.length = TASK_LENGTHS[task]
        self.spec = EnvSpec(
            env_id=f"corridor:{task}",
            obs_shape=(1,),
            obs_dtype="float32",
            obs_kind="vector",
            num_actions=len(ACTION_NAMES),
            action_names=ACTION_NAMES,
            horizon=horizon(self.length),
            eval_episodes=16,
            eval_every=100,
            action_selection="greedy",
            default_steps=300,
            default_arch="mlp5",
            normaliser=Normaliser(
                name="success rate", low=0.0, high=1.0, source="reward 1 on reaching the goal"
            ),
            metadata={"length": self.length, "goal": self.length - 1},
        )

    def dataset_path(self, root: Path) -> Path:
        """One folder per set of data-changing options, under ``root/corridor/<task>``."""
        key = {"generator": GENERATOR, "task": self.task, **self.options.model_dump()}
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        return Path(root) / "corridor" / self.task / digest

    def dataset(self, root: Path) -> TransitionStore:
        path = self.dataset_path(root)
        if not path.exists():
            TransitionStore.write(
                path,
                **expert_episodes(self.length, self.options),
                producer={"plugin": "ssilbench_example", "generator": GENERATOR},
                metadata={"task": self.task, **self.options.model_dump()},
            )
        return TransitionStore.open(path, verify=True)

    def make_vec_env(self, num_envs: int, seed: int) -> CorridorVectorEnv:
        return CorridorVectorEnv(self.length, num_envs, seed=seed)

    def video_model(self) -> CorridorVideoModel:
        return CorridorVideoModel(self.length)

    def metrics(self, policy: Policy, device: torch.device) -> dict[str, float]:
        """test_accuracy: the share of non-goal cells where the most likely action is right."""
        obs = torch.arange(self.length - 1, dtype=torch.float32)[:, None]
        chosen = policy.probs(obs.to(device)).argmax(dim=-1).cpu()
        return {"test_accuracy": float((chosen == RIGHT).float().mean())}


class CorridorEnvironment(Environment):
    description: ClassVar[str] = (
        "A line of cells with the goal at the right end; a (slightly noisy) expert walks right."
    )
    Options: ClassVar[type[BaseModel]] = CorridorOptions
    task_class = CorridorTask  # load(task, options) checks the name and builds this
    task_kind = "corridor task"

    def tasks(self) -> list[str]:
        return list(TASK_LENGTHS)
