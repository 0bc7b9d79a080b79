"""The pusht environment family: registration, options, spec, the vector env (frame stack,
seeding, autoreset, success, score) and its agreement with gym-pusht itself."""

from __future__ import annotations

import numpy as np
import pytest

from ssilbench.api import UnknownNameError
from ssilbench.testing import imported_after, load_plugins
from ssilbench_pusht.environment import MAX_EPISODE_STEPS, PushTEnvironment, PushTOptions
from ssilbench_pusht.vec_env import pusht_available

needs_pusht = pytest.mark.skipif(
    not pusht_available(), reason="gym-pusht is not importable: pip install 'ssilbench[pusht]'"
)


def _task(**options):
    return PushTEnvironment().load("pusht", PushTOptions(**options))


def test_registered_with_one_task_and_light_imports():
    plugins = load_plugins()
    assert "pusht" in plugins.environments
    environment = plugins.environments.create("pusht")
    # One task: '--env pusht', the bare family, expands to every task, i.e. 'pusht:pusht'.
    assert environment.tasks() == ["pusht"]
    # Loading a task must not import the simulator, zarr or torch (listing stays fast).
    load = "from ssilbench_pusht.environment import PushTEnvironment as E; E().load('pusht')"
    assert imported_after(load, ["gym_pusht", "pygame", "pymunk", "zarr", "torch"]) == []


def test_spec():
    spec = _task().spec
    assert spec.env_id == "pusht:pusht"
    assert spec.obs_shape == (96, 96, 3) and spec.obs_dtype == "uint8"
    assert spec.obs_kind == "image"
    assert spec.action_kind == "continuous" and spec.num_actions == 2
    assert spec.action_low == (0.0, 0.0) and spec.action_high == (512.0, 512.0)
    assert spec.extra_obs == {"agent_pos": ((2,), "float32")}
    assert (spec.frame_stack, spec.action_chunk, spec.action_execute) == (13, 16, 8)
    assert spec.horizon == 300 and spec.eval_episodes == 50
    assert spec.episode_score == "max_reward" and spec.report == "final"
    assert spec.budget_unit == "demonstrations" and spec.default_arch == "uva"
    assert (spec.normaliser.low, spec.normaliser.high) == (0.0, 1.0)
    assert spec.normaliser(0.73) == pytest.approx(0.73)
    assert spec.metadata["gym_id"] == "gym_pusht/PushT-v0"
    other = _task(frame_stack=2, action_chunk=8, action_execute=4, eval_episodes=5).spec
    assert (other.frame_stack, other.action_chunk, other.action_execute) == (2, 8, 4)
    assert other.eval_episodes == 5


def test_options_and_names_are_checked():
    with pytest.raises(UnknownNameError, match="Did you mean 'pusht'"):
        PushTEnvironment().load("pushT", PushTOptions())
    with pytest.raises(ValueError, match="extra"):
        PushTOptions(frame_stak=3)
    with pytest.raises(ValueError, match="action_execute=9 exceeds action_chunk=8"):
        PushTOptions(action_chunk=8, action_execute=9)
    with pytest.raises(ValueError):
        PushTOptions(dataset="../elsewhere")
    with pytest.raises(ValueError):
        PushTOptions(max_steps=301)
    assert PushTOptions().model_dump() == {
        "frame_stack": 13,
        "action_chunk": 16,
        "action_execute": 8,
        "eval_episodes": 50,
        "max_steps": 300,
        "dataset": "demos",
    }


@needs_pusht
def test_time_limit_matches_the_gymnasium_registration():
    from ssilbench_pusht.vec_env import max_episode_steps

    assert max_episode_steps() == MAX_EPISODE_STEPS == 300


def _trace(venv, seed: int, steps: int) -> list[np.ndarray]:
    rng = np.random.Generator(np.random.PCG64(seed))
    obs, _ = venv.reset(seed=seed)
    out = [obs["obs"], obs["agent_pos"]]
    for _ in range(steps):
        actions = rng.uniform(0, 512, size=(venv.num_envs, 2)).astype(np.float32)
        obs, reward, terminated, truncated, info = venv.step(actions)
        out += [obs["obs"], obs["agent_pos"], reward, terminated, truncated, info["coverage"]]
    return out


@needs_pusht
def test_equal_seeds_give_equal_episodes_across_autoresets():
    task = _task(max_steps=6)
    venv = task.make_vec_env(2, seed=5)
    try:
        first = _trace(venv, 5, 14)  # two automatic resets per sub-environment
        second = _trace(venv, 5, 14)  # a reset with the same seed replays
        other = _trace(venv, 6, 14)
    finally:
        venv.close()
    twin = task.make_vec_env(2, seed=5)
    try:
        obs, _ = twin.reset()  # the constructor's seed
    finally:
        twin.close()
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert np.array_equal(obs["obs"], first[0])
    assert not np.array_equal(first[0], other[0])
    assert not np.array_equal(first[0][0], first[0][1])  # sub-environments differ


@needs_pusht
def test_observations_hold_the_frame_history_oldest_first():
    venv = _task(frame_stack=3).make_vec_env(2, seed=1)
    try:
        space = venv.single_observation_space
        assert space["obs"].shape == (3, 96, 96, 3) and space["obs"].dtype == np.uint8
        assert space["agent_pos"].shape == (3, 2) and space["agent_pos"].dtype == np.float32
        obs, info = venv.reset(seed=1)
        assert obs["obs"].shape == (2, 3, 96, 96, 3) and obs["obs"].dtype == np.uint8
        assert obs["agent_pos"].shape == (2, 3, 2) and obs["agent_pos"].dtype == np.float32
        # At reset the first frame fills the history.
        assert all(np.array_equal(obs["obs"][:, 0], obs["obs"][:, j]) for j in (1, 2))
        assert not info["is_success"].any()
        frames, positions = [obs["obs"][:, -1]], [obs["agent_pos"][:, -1]]
        targets = np.array([[100.0, 100.0], [400.0, 400.0]], dtype=np.float32)
        for _ in range(4):
            obs, *_ = venv.step(targets)
            frames.append(obs["obs"][:, -1])
            positions.append(obs["agent_pos"][:, -1])
        # After four steps the history is frames 2, 3, 4 (oldest first), each one new.
        for j, t in enumerate((2, 3, 4)):
            assert np.array_equal(obs["obs"][:, j], frames[t])
            assert np.array_equal(obs["agent_pos"][:, j], positions[t])
        assert not np.array_equal(frames[1], frames[4])
        # The agent moves toward its target.
        assert (
            np.linalg.norm(positions[4] - targets, axis=1).max()
            < np.linalg.norm(positions[0] - targets, axis=1).min()
        )
    finally:
        venv.close()
    single = _task(frame_stack=1).make_vec_env(2, seed=1)
    try:
        obs, _ = single.reset(seed=1)
        assert obs["obs"].shape == (2, 96, 96, 3) and obs["agent_pos"].shape == (2, 2)
    finally:
        single.close()


@needs_pusht
def test_steps_match_gym_pusht_one_action_at_a_time():
    """The vector env steps single actions (no chunks) and gives what gym.make gives."""
    import gymnasium

    from ssilbench_pusht.vec_env import import_gym_pusht

    import_gym_pusht()
    venv = _task(frame_stack=1).make_vec_env(1, seed=11)
    reference = gymnasium.make("gym_pusht/PushT-v0", obs_type="pixels_agent_pos")
    try:
        obs, _ = venv.reset(seed=11)
        ref, _ = reference.reset(seed=11)
        rng = np.random.Generator(np.random.PCG64(0))
        for _ in range(8):
            assert np.array_equal(obs["obs"][0], ref["pixels"])  # the faster render, same pixels
            assert np.allclose(obs["agent_pos"][0], ref["agent_pos"])
            action = rng.uniform(0, 512, size=2).astype(np.float32)
            obs, reward, *_, info = venv.step(action[None])
            ref, ref_reward, _, _, ref_info = reference.step(action)
            assert reward[0] == ref_reward and info["coverage"][0] == ref_info["coverage"]
        with pytest.raises(ValueError, match="shape \\(1, 2\\)"):
            venv.step(np.zeros((1, 16, 2), dtype=np.float32))  # a chunk is not an action
    finally:
        venv.close()
        reference.close()


def _near_goal(venv) -> None:
    """Put every sub-environment's block almost on its goal (a pose the block reaches)."""
    for env in venv.envs:
        # Angle first: pymunk turns a body about its centre of gravity, which moves its origin.
        env.block.angle = np.pi / 4
        env.block.position = (256.0, 256.0)
        env.agent.position = (60.0, 60.0)
        env.space.step(env.dt)


@needs_pusht
def test_success_terminates_reports_is_success_and_resets():
    venv = _task(frame_stack=2).make_vec_env(2, seed=3)
    try:
        venv.reset(seed=3)
        _near_goal(venv)
        obs, reward, terminated, truncated, info = venv.step(
            np.array([[60.0, 60.0], [60.0, 60.0]], dtype=np.float32)
        )
        assert terminated.all() and not truncated.any()
        assert info["is_success"].all() and (info["coverage"] > 0.95).all()
        assert np.array_equal(reward, np.ones(2))  # clip(coverage / 0.95, 0, 1)
        # Same-step autoreset: the history restarts with a new episode's first frame.
        assert np.array_equal(obs["obs"][:, 0], obs["obs"][:, 1])
        _, _, terminated, _, info = venv.step(np.full((2, 2), 256.0, dtype=np.float32))
        assert not terminated.any() and not info["is_success"].any()
    finally:
        venv.close()


@needs_pusht
def test_episodes_are_truncated_at_max_steps():
    venv = _task(max_steps=5).make_vec_env(3, seed=0)
    try:
        venv.reset(seed=0)
        for step in range(1, 11):
            _, _, terminated, truncated, _ = venv.step(np.full((3, 2), 30.0, dtype=np.float32))
            assert not terminated.any()
            assert truncated.all() == (step % 5 == 0) and truncated.any() == (step % 5 == 0)
    finally:
        venv.close()


class _Placed:
    """Mixin for a vector env whose resets put the block at ``block`` (x, y, angle) and the
    agent at ``agent``: start states with a known coverage."""

    block = (286.0, 256.0, np.pi / 4)
    agent = (150.0, 150.0)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed, options=options)
        for env in self.envs:
            env.block.angle = self.block[2]  # angle first (see _near_goal)
            env.block.position = self.block[:2]
            env.agent.position = self.agent
            env.space.step(env.dt)
            self._start(self.envs.index(env), env.get_obs())
        return self._observation(), {}


class _Chunks:
    """A policy predicting chunks of 16 identical targets (the rollout runs 8 of each)."""

    def __init__(self, target):
        self.target = np.asarray(target, dtype=np.float32)
        self.calls = 0

    def act(self, obs, greedy, generator=None):
        import torch

        self.calls += 1
        assert obs["obs"].shape[1] == 4 and obs["agent_pos"].shape[1:] == (4, 2)
        n = obs["obs"].shape[0]
        return torch.as_tensor(np.broadcast_to(self.target, (n, 16, 2)).copy())


@needs_pusht
def test_episode_score_is_the_max_coverage_reward_and_success_is_reported():
    """The core's rollout on this env: each episode scores the largest reward
    clip(coverage/0.95, 0, 1) it reached, chunks run 8 actions at a time, and success
    (coverage > 0.95) is reported per episode."""
    import torch

    from ssilbench.testing import run_episodes
    from ssilbench_pusht.vec_env import PushTVectorEnv

    class Placed(_Placed, PushTVectorEnv):
        pass

    task = _task(max_steps=40)
    spec = task.spec
    # Driving the agent through a block that half covers its goal pushes it off the goal.
    venv = Placed(2, seed=0, frame_stack=4, max_steps=40)
    policy = _Chunks((480.0, 480.0))
    try:
        episodes = run_episodes(venv, policy, spec, 0, torch.device("cpu"), torch.Generator())
        # The same episode by hand: the max of the rewards, not the last one.
        venv.reset(seed=0)
        rewards = []
        for _ in range(40):
            _, reward, terminated, truncated, info = venv.step(np.full((2, 2), 480.0, np.float32))
            rewards.append(reward)
            assert not terminated.any()
    finally:
        venv.close()
    rewards = np.array(rewards)
    assert policy.calls == 5  # 40 steps, 8 actions of each 16-action chunk
    np.testing.assert_allclose(episodes.scores, rewards.max(axis=0))
    assert (rewards[0] > 0.1).all() and (rewards[-1] < rewards.max(axis=0)).all()
    assert episodes.successes is not None and not episodes.successes.any()

    class OnGoal(_Placed, PushTVectorEnv):
        block = (256.0, 256.0, np.pi / 4)
        agent = (60.0, 60.0)

    venv = OnGoal(2, seed=0, frame_stack=4, max_steps=40)
    try:
        episodes = run_episodes(venv, _Chunks((60.0, 60.0)), spec, 0, torch.device("cpu"),
                                torch.Generator())  # fmt: skip
    finally:
        venv.close()
    assert episodes.successes.all() and np.array_equal(episodes.scores, np.ones(2))
