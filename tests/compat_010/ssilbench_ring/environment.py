"""The ``ring`` family: N cells on a circle, the goal at cell N // 2.

The observation is the agent's position as (cos, sin) of its angle; action 0 steps
counter-clockwise, action 1 clockwise. Reaching the goal gives reward 1 and ends the
episode; episodes are truncated after 2 N steps. The expert takes the shorter way round,
except that with probability ``noise`` it steps the other way.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import Environment, EnvSpec, Normaliser, Policy, Task, VideoModel
from ssilbench.data.store import TransitionStore
from ssilbench.errors import unknown

SIZES = {"small": 6, "big": 12}
GENERATOR = "ssilbench_ring/expert-v1"


class RingOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episodes: int = Field(40, ge=1, description="Expert episodes in the dataset.")
    noise: float = Field(0.1, ge=0, lt=0.5, description="Probability of a wrong-way step.")


def position(cells, size: int) -> np.ndarray:
    angle = 2 * np.pi * np.asarray(cells, dtype=np.float64) / size
    return np.stack([np.cos(angle), np.sin(angle)], axis=-1).astype(np.float32)


def step(cells, actions, size: int):
    return (np.asarray(cells) + np.where(np.asarray(actions) == 1, 1, -1)) % size


def expert_action(cell: int, size: int) -> int:
    return 1 if (size // 2 - cell) % size <= size // 2 else 0


class RingVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, size: int, num_envs: int, seed: int | None = None) -> None:
        self.size, self.num_envs, self.horizon = size, num_envs, 2 * size
        self.single_observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.single_action_space = spaces.Discrete(2)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._seed, self._rng = seed, None
        self._cells = np.zeros(num_envs, dtype=np.int64)
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._done = np.zeros(num_envs, dtype=bool)

    def _starts(self, n: int) -> np.ndarray:
        cells = self._rng.integers(self.size - 1, size=n)
        return np.where(cells >= self.size // 2, cells + 1, cells)  # never the goal

    def reset(self, *, seed=None, options=None):
        if seed is not None or self._rng is None:
            self._rng = np.random.default_rng(self._seed if seed is None else seed)
        self._cells = self._starts(self.num_envs)
        self._t[:] = 0
        self._done[:] = False
        return position(self._cells, self.size), {}

    def step(self, actions):
        actions = np.asarray(actions, dtype=np.int64).reshape(-1)
        restart = self._done
        self._cells = np.where(restart, self._cells, step(self._cells, actions, self.size))
        self._cells[restart] = self._starts(int(restart.sum()))
        self._t = np.where(restart, 0, self._t + 1)
        terminated = (self._cells == self.size // 2) & ~restart
        truncated = (self._t >= self.horizon) & ~terminated & ~restart
        self._done = terminated | truncated
        reward = terminated.astype(np.float64)
        return position(self._cells, self.size), reward, terminated, truncated, {}


class RingVideoModel(VideoModel):
    """v*(s): the expert's intended next position."""

    def __init__(self, size: int) -> None:
        self.size = size

    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        angle = torch.atan2(obs[:, 1], obs[:, 0])
        cells = torch.round(angle / (2 * np.pi) * self.size).long() % self.size
        ahead = torch.tensor([expert_action(int(c), self.size) for c in cells])
        nxt = step(cells.numpy(), ahead.numpy(), self.size)
        return torch.from_numpy(position(nxt, self.size)).to(obs.device)


class RingTask(Task):
    def __init__(self, task: str, options: RingOptions) -> None:
        self.task, self.options, self.size = task, options, SIZES[task]
        self.spec = EnvSpec(
            env_id=f"ring:{task}",
            obs_shape=(2,),
            obs_dtype="float32",
            obs_kind="vector",
            num_actions=2,
            action_names=("ccw", "cw"),
            horizon=2 * self.size,
            eval_episodes=8,
            eval_every=10,
            action_selection="greedy",
            default_steps=100,
            default_arch="mlp5",
            normaliser=Normaliser(name="success rate", low=0.0, high=1.0),
        )

    def dataset(self, root: Path) -> TransitionStore:
        key = {"generator": GENERATOR, "task": self.task, **self.options.model_dump()}
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
        path = Path(root) / "ring" / self.task / digest
        if not path.exists():
            rng = np.random.default_rng(len(self.task))
            cells, actions, rewards, ends = [], [], [], []
            for _ in range(self.options.episodes):
                cell = int(rng.choice([c for c in range(self.size) if c != self.size // 2]))
                while cell != self.size // 2 and len(cells) - (ends[-1] if ends else 0) < 40:
                    action = expert_action(cell, self.size)
                    if rng.random() < self.options.noise:
                        action = 1 - action
                    cells.append(cell)
                    actions.append(action)
                    cell = int(step(cell, action, self.size))
                    rewards.append(float(cell == self.size // 2))
                cells.append(cell)
                actions.append(0)
                rewards.append(0.0)
                ends.append(len(cells))
            TransitionStore.write(
                path,
                obs=position(cells, self.size),
                actions=np.array(actions, dtype=np.int64),
                rewards=np.array(rewards, dtype=np.float32),
                episode_ends=np.array(ends, dtype=np.int64),
                producer={"plugin": "ssilbench_ring", "generator": GENERATOR},
                metadata=key,
            )
        return TransitionStore.open(path)

    def make_vec_env(self, num_envs: int, seed: int) -> RingVectorEnv:
        return RingVectorEnv(self.size, num_envs, seed=seed)

    def video_model(self) -> RingVideoModel:
        return RingVideoModel(self.size)

    def metrics(self, policy: Policy, device: torch.device) -> dict[str, float]:
        cells = [c for c in range(self.size) if c != self.size // 2]
        obs = torch.from_numpy(position(cells, self.size)).to(device)
        chosen = policy.probs(obs).argmax(dim=-1).cpu().tolist()
        right = np.array([expert_action(c, self.size) for c in cells])
        return {"test_accuracy": float(np.mean(np.array(chosen) == right))}


class RingEnvironment(Environment):
    description = "A ring of cells; the expert walks the shorter way to the opposite cell."
    Options = RingOptions

    def tasks(self) -> list[str]:
        return list(SIZES)

    def load(self, task: str, options: BaseModel | None = None) -> RingTask:
        if task not in SIZES:
            raise unknown("ring task", task, self.tasks())
        return RingTask(task, RingOptions() if options is None else options)
