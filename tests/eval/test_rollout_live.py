"""Rollouts ask the policy to act only for sub-environments whose episode is still running."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.vector import VectorEnv

from ssilbench.api import EnvSpec, Normaliser, Policy
from ssilbench.eval.rollout import Evaluator, run_episodes
from ssilbench.plugins import load_plugins

CPU = torch.device("cpu")
LENGTHS = (1, 3, 5, 7)  # first-episode length of each sub-environment


class Countdown(VectorEnv):
    """Sub-environment i's first episode lasts ``LENGTHS[i]`` steps (reward 1 per step), then
    it restarts by itself. Observations name their sub-environment: ``(i, t)`` per frame, with
    a frame-stack axis and a dict with an extra array where asked. Every action array it is
    given is kept."""

    def __init__(self, frame_stack: int = 1, extra: bool = False) -> None:
        self.num_envs = len(LENGTHS)
        self.frame_stack, self.extra = frame_stack, extra
        self.t = np.zeros(self.num_envs, dtype=int)
        self.given: list[np.ndarray] = []
        self.single_action_space = spaces.Discrete(4)

    def _obs(self):
        frame = np.stack([np.arange(self.num_envs), self.t], axis=1).astype(np.float32)
        stack = np.repeat(frame[:, None], self.frame_stack, axis=1)
        if not self.extra:
            return stack
        return {"obs": stack, "proprio": stack[..., :1] * 10}

    def reset(self, *, seed=None, options=None):
        self.t[:] = 0
        self.given.clear()
        return self._obs(), {}

    def step(self, actions):
        self.given.append(np.array(actions))
        self.t += 1
        ended = self.t >= np.array(LENGTHS)
        self.t[ended] = 0
        return self._obs(), np.ones(self.num_envs), ended, np.zeros_like(ended), {}


def _spec(**fields) -> EnvSpec:
    fields = {"num_actions": 4, **fields}
    return EnvSpec(env_id="test:countdown", obs_shape=(2,), obs_dtype="float32",
                   obs_kind="vector", horizon=20, eval_episodes=len(LENGTHS),
                   eval_every=10, default_steps=10, default_arch="mlp5",
                   normaliser=Normaliser(name="raw", low=0.0, high=1.0), **fields)  # fmt: skip


class Echo(Policy):
    """Acts with its sub-environment's index (as read from the observation) and records
    which sub-environments each call saw."""

    def __init__(self, chunk: int = 0) -> None:
        self.chunk = chunk
        self.seen: list[list[int]] = []

    def probs(self, obs):
        raise AssertionError("act is overridden")

    def act(self, obs, greedy, generator=None):
        frames = obs["obs"] if isinstance(obs, dict) else obs
        if isinstance(obs, dict):  # the extra array comes from the same rows
            torch.testing.assert_close(obs["proprio"], frames[..., :1] * 10)
        index = frames[:, -1, 0] if frames.ndim == 3 else frames[:, 0]
        self.seen.append(index.long().tolist())
        if not self.chunk:
            return index.long()
        steps = torch.arange(self.chunk, dtype=torch.float32) / 10  # (K,)
        return (index[:, None, None] + steps[None, :, None]).expand(-1, -1, 2)  # (B, K, 2)


def test_finished_episodes_leave_the_batch():
    venv, policy = Countdown(), Echo()
    episodes = run_episodes(venv, policy, _spec(), 0, CPU, torch.Generator())
    assert episodes.scores.tolist() == list(LENGTHS)
    assert policy.seen == [[0, 1, 2, 3], [1, 2, 3], [1, 2, 3], [2, 3], [2, 3], [3], [3]]
    assert episodes.forwarded == sum(LENGTHS) == sum(len(s) for s in policy.seen)
    # A finished sub-environment repeats its last action: a valid one, of the right dtype.
    given = np.stack(venv.given)
    assert given.shape == (7, 4) and given.dtype == np.int64
    assert (given == np.arange(4)).all()


def test_the_old_way_forwards_every_observation_to_the_last_end():
    venv, policy = Countdown(), Echo()
    episodes = run_episodes(venv, policy, _spec(), 0, CPU, torch.Generator(),
                            forward_finished=True)  # fmt: skip
    assert episodes.scores.tolist() == list(LENGTHS)
    assert episodes.forwarded == 7 * 4 and all(s == [0, 1, 2, 3] for s in policy.seen)


def test_dict_frame_stacks_and_action_chunks_keep_their_rows():
    """Extra observations and frame stacks are cut to the live rows together; each live
    sub-environment executes its own chunk, finished ones their last action."""
    venv, policy = Countdown(frame_stack=3, extra=True), Echo(chunk=4)
    spec = _spec(action_kind="continuous", num_actions=2, frame_stack=3, action_chunk=4,
                 action_execute=2, extra_obs={"proprio": ((1,), "float32")})  # fmt: skip
    episodes = run_episodes(venv, policy, spec, 0, CPU, torch.Generator())
    assert episodes.scores.tolist() == list(LENGTHS)
    assert policy.seen == [[0, 1, 2, 3], [1, 2, 3], [2, 3], [3]]  # a call per 2 steps
    given = np.stack(venv.given)  # (steps, envs, 2)
    assert given.shape == (7, 4, 2) and given.dtype == np.float32
    step_in_chunk = np.arange(7) % 2 / 10
    for env, length in enumerate(LENGTHS):
        live = np.arange(7) < length + length % 2  # a chunk started goes on to its end
        np.testing.assert_allclose(given[live, env, 0], env + step_in_chunk[live])
        np.testing.assert_allclose(given[~live, env, 0], env + 0.1)  # its last action


class Linear(Policy):
    """A fixed random linear policy over maze positions (episodes of many lengths)."""

    def __init__(self, seed: int) -> None:
        self.weight = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))

    def probs(self, obs):
        return torch.softmax(obs @ self.weight * 3, dim=-1)


def _maze(action_selection: str):
    maze = load_plugins().environments.create("maze")
    task = maze.load("10x10", maze.Options())
    task.spec = task.spec.model_copy(update={"action_selection": action_selection})
    return task


def test_greedy_scores_are_those_of_forwarding_everything():
    task = _maze("greedy")
    venv = task.make_vec_env(task.spec.eval_episodes, seed=task.spec.eval_seed)
    try:
        runs = [run_episodes(venv, Linear(0), task.spec, 3, CPU, torch.Generator(),
                             forward_finished=old) for old in (False, True)]  # fmt: skip
    finally:
        venv.close()
    live, every = runs
    np.testing.assert_array_equal(live.scores, every.scores)
    assert 0 < live.scores.mean() < 1  # some episodes reached the goal, some did not
    assert live.forwarded < every.forwarded


@pytest.mark.parametrize("selection", ["greedy", "sample"])
def test_an_evaluator_gives_the_same_scores_every_call(selection):
    evaluator = Evaluator(_maze(selection), CPU)
    try:
        first, second = evaluator(Linear(1)), evaluator(Linear(1))
        other = evaluator(Linear(2))
    finally:
        evaluator.close()
    assert first == second
    assert first.returns != other.returns
