"""An evaluation played in waves (a vector env offering ``waves()``) scores exactly the
episodes one vector env of all of them scores, and named groups of episodes
(``episode_groups``: a multitask evaluation's tasks) get their own rates."""

from __future__ import annotations

import numpy as np
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from ssilbench.api import EnvSpec, Normaliser, Policy, Task
from ssilbench.eval.rollout import Evaluator

CPU = torch.device("cpu")
# Episode i lasts LENGTHS[i] steps and succeeds when i is even.
LENGTHS = (2, 4, 3, 5, 1)


class Episodes(VectorEnv):
    """Episodes ``index`` of the evaluation; ``alive`` counts envs alive at once."""

    alive = 0
    most_alive = 0

    def __init__(self, index: np.ndarray, max_alive: int | None = None) -> None:
        self.index = np.asarray(index)
        self.num_envs = len(self.index)
        self.max_alive = max_alive
        self.single_action_space = spaces.Discrete(2)
        self.t = np.zeros(self.num_envs, dtype=int)
        self.episode_groups = {"even": np.flatnonzero(self.index % 2 == 0),
                               "odd": np.flatnonzero(self.index % 2 == 1)}  # fmt: skip

    def reset(self, *, seed=None, options=None):
        Episodes.alive += self.num_envs
        Episodes.most_alive = max(Episodes.most_alive, Episodes.alive)
        self.t[:] = 0
        return self.index[:, None].astype(np.float32), {}

    def step(self, actions):
        self.t += 1
        ended = self.t >= np.array(LENGTHS)[self.index]
        success = ended & (self.index % 2 == 0)
        reward = success.astype(np.float64)
        obs = self.index[:, None].astype(np.float32)
        return obs, reward, ended, np.zeros_like(ended), {"is_success": success}

    def close_extras(self, **kwargs):
        pass

    def waves(self):
        if self.max_alive is None:
            yield self
            return
        for start in range(0, self.num_envs, self.max_alive):
            wave = Episodes(self.index[start : start + self.max_alive])
            try:
                yield wave
            finally:
                Episodes.alive -= wave.num_envs


class Plain(Episodes):
    """The same episodes without waves (one vector env of all)."""

    waves = None  # type: ignore[assignment]


class Coin(Policy):
    def probs(self, obs):
        return torch.full((len(obs), 2), 0.5)


class Fake(Task):
    def __init__(self, make) -> None:
        self.make = make
        self.spec = EnvSpec(env_id="test:waves", obs_shape=(1,), obs_dtype="float32",
                            obs_kind="vector", num_actions=2, horizon=10,
                            eval_episodes=len(LENGTHS), eval_every=10, default_steps=10,
                            default_arch="mlp5",
                            normaliser=Normaliser(name="raw", low=0.0, high=1.0))  # fmt: skip

    def dataset(self, root):
        raise NotImplementedError

    def make_vec_env(self, num_envs, seed):
        return self.make(np.arange(num_envs))


def test_waves_score_the_same_episodes_with_fewer_alive_and_rates_per_group():
    Episodes.alive = Episodes.most_alive = 0
    waved = Evaluator(Fake(lambda i: Episodes(i, max_alive=2)), CPU)(Coin())
    assert Episodes.most_alive == 2  # never more than a wave at once
    whole = Evaluator(Fake(Plain), CPU)(Coin())
    assert waved.returns == whole.returns == (1.0, 0.0, 1.0, 0.0, 1.0)
    assert waved.metrics["success_rate"] == whole.metrics["success_rate"] == 0.6
    assert waved.metrics["success_rate/even"] == 1.0
    assert waved.metrics["success_rate/odd"] == 0.0
    assert waved.metrics["score/even"] == 1.0 and waved.metrics["score/odd"] == 0.0
