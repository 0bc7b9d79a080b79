"""The ``grid`` environment family: the open 20x20 grid with a stochastic expert."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest
import torch

from ssilbench.api import Policy, UnknownNameError
from ssilbench.testing import check_task, load_plugins, rollout_returns
from ssilbench_maze.expert import ACTION_NAMES
from ssilbench_maze.grid import DOWN, RIGHT, GridEnvironment, GridTask, expert_episodes

CPU = torch.device("cpu")
LEFT = ACTION_NAMES.index("left")


def load(**options) -> GridTask:
    return GridEnvironment().load("20x20", GridEnvironment.Options(**options))


def xy(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    obs = np.asarray(obs).round().astype(np.int64)
    return obs[:, 0], obs[:, 1]


class GridExpertPolicy(Policy):
    """The stochastic expert as a policy on positions."""

    def __init__(self, p_right: float) -> None:
        self.p_right = p_right

    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        x, y = obs[:, 0].round(), obs[:, 1].round()
        right = torch.full((len(obs),), self.p_right)
        right = torch.where(x == 19, 0.0, torch.where(y == 19, 1.0, right))
        out = torch.zeros(len(obs), 4)
        out[:, RIGHT], out[:, DOWN] = right, 1.0 - right
        return out


class ConstantPolicy(Policy):
    def __init__(self, action: int) -> None:
        self.action = action

    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.full((len(obs),), self.action), 4).float()


def test_dataset_is_26_episodes_of_38_steps_from_start_to_goal(tmp_path):
    task = load()
    store = task.dataset(tmp_path)
    assert store.num_episodes == 26 and store.num_frames == 26 * 39
    assert store.num_transitions == 988
    assert np.array_equal(store.episode_ends, 39 * np.arange(1, 27))
    x, y = xy(store.obs)
    ends = store.episode_ends
    starts = ends - 39
    assert (x[starts] == 0).all() and (y[starts] == 0).all()
    assert (x[ends - 1] == 19).all() and (y[ends - 1] == 19).all()
    # Every transition moves one cell right or down, as its action says.
    idx = store.transition_indices()
    dx, dy = x[idx + 1] - x[idx], y[idx + 1] - y[idx]
    actions = store.actions[idx]
    assert set(np.unique(actions)) <= {RIGHT, DOWN}
    assert ((actions == RIGHT) == (dx == 1)).all() and ((actions == DOWN) == (dy == 1)).all()
    assert (dx + dy == 1).all()
    assert store.rewards.sum() == 26 and (store.rewards[ends - 2] == 1.0).all()
    assert (store.actions[ends - 1] == 0).all()
    assert store.obs.dtype == np.float32 and store.obs.shape[1:] == (2,)


@pytest.mark.parametrize(("p_right", "first"), [(1.0, RIGHT), (0.0, DOWN)])
def test_deterministic_experts_go_along_one_border_then_the_other(p_right, first):
    cells, actions = load(p_right=p_right).expert_episodes()
    second = DOWN if first == RIGHT else RIGHT
    expected = [first] * 19 + [second] * 19
    assert (actions == np.array(expected)).all()
    assert (cells[:, -1] == 399).all()


def test_borders_force_the_only_optimal_action():
    cells, actions = expert_episodes(20, 0.5, 200, np.random.default_rng(1))
    x, y = cells[:, :-1] % 20, cells[:, :-1] // 20
    assert (actions[x == 19] == DOWN).all() and (actions[y == 19] == RIGHT).all()
    assert (x == 19).any() and (y == 19).any()
    assert (cells[:, -1] == 399).all()


@pytest.mark.parametrize("p_right", [0.5, 0.8, 0.2])
def test_right_frequency_off_the_borders_is_p_right(p_right):
    cells, actions = expert_episodes(20, p_right, 400, np.random.default_rng(2))
    x, y = cells[:, :-1] % 20, cells[:, :-1] // 20
    interior = (x < 19) & (y < 19)
    assert abs((actions[interior] == RIGHT).mean() - p_right) < 0.02
    # The 26 dataset episodes show the same frequency, more loosely.
    store_cells, store_actions = load(p_right=p_right).expert_episodes()
    sx, sy = store_cells[:, :-1] % 20, store_cells[:, :-1] // 20
    inside = (sx < 19) & (sy < 19)
    assert abs((store_actions[inside] == RIGHT).mean() - p_right) < 0.08


def test_dataset_is_seeded_and_cached_by_its_options(tmp_path):
    first = load().dataset(tmp_path)
    assert first.root.parent == tmp_path / "grid" and first.root.name.startswith("20x20-")
    again = load().dataset(tmp_path)
    assert again.root == first.root and np.array_equal(again.obs, first.obs)
    for options in ({"p_right": 0.8}, {"data_seed": 1}, {"trajectories": 5}):
        other = load(**options).dataset(tmp_path)
        assert other.root != first.root
    assert load(trajectories=5).dataset(tmp_path).num_transitions == 5 * 38
    assert not np.array_equal(load(data_seed=1).dataset(tmp_path).obs, first.obs)


def test_spec_follows_the_paper_protocol():
    task = load()
    spec = task.spec
    assert spec.env_id == "grid:20x20" and spec.horizon == 38 and spec.eval_episodes == 25
    assert spec.action_selection == "greedy" and spec.num_actions == 4
    assert spec.normaliser.name == "success rate"
    assert (spec.normaliser.low, spec.normaliser.high) == (0.0, 1.0)
    assert spec.default_arch == "mlp5" and spec.obs_shape == (2,) and spec.goal_dims == ()
    assert spec.metadata["expert_entropy_interior"] == pytest.approx(np.log(2))
    assert load(p_right=1.0).spec.metadata["expert_entropy_interior"] == 0.0
    assert task.video_model() is None and task.test_set() is None
    image = load(state="image").spec
    assert image.obs_shape == (3, 20, 20) and image.default_arch == "cnn1"


def test_rollouts_start_top_left_and_only_optimal_play_succeeds():
    task = load()
    spec = task.spec
    venv = task.make_vec_env(spec.eval_episodes, seed=spec.eval_seed)
    obs, _ = venv.reset(seed=0)
    assert (obs == 0).all()
    generator = torch.Generator().manual_seed(0)
    for p_right in (0.5, 0.0, 0.9):
        expert = GridExpertPolicy(p_right)
        returns = rollout_returns(venv, expert, spec, 0, CPU, generator)
        assert (returns == 1.0).all()
    for action in range(4):
        returns = rollout_returns(venv, ConstantPolicy(action), spec, 0, CPU, generator)
        assert (returns == 0.0).all()


class DetourPolicy(Policy):
    """Optimal as argmax, but off the borders it steps left with probability 0.3."""

    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        x, y = obs[:, 0].round(), obs[:, 1].round()
        out = torch.zeros(len(obs), 4)
        out[:, RIGHT], out[:, DOWN], out[:, LEFT] = 0.4, 0.3, 0.3
        right_border, bottom_border = x == 19, (y == 19) & (x < 19)
        out[right_border] = torch.nn.functional.one_hot(torch.tensor(DOWN), 4).float()
        out[bottom_border] = torch.nn.functional.one_hot(torch.tensor(RIGHT), 4).float()
        return out


def test_evaluation_is_greedy_by_default_and_samples_on_request(tmp_path):
    greedy, sampled = load(), load(action_selection="sample")
    assert greedy.spec.action_selection == "greedy" and sampled.spec.action_selection == "sample"
    # The choice is evaluation's only: both read the same dataset.
    assert greedy.data_key == sampled.data_key
    assert greedy.dataset_path(tmp_path) == sampled.dataset_path(tmp_path)
    scores = {}
    for task in (greedy, sampled):
        spec = task.spec
        venv = task.make_vec_env(spec.eval_episodes, seed=spec.eval_seed)
        generator = torch.Generator().manual_seed(0)
        scores[spec.action_selection] = rollout_returns(
            venv, DetourPolicy(), spec, spec.eval_seed, CPU, generator
        ).mean()
    # Argmax always goes right then down (38 steps, the horizon); a single sampled step left
    # costs two steps, so sampled rollouts almost never arrive in time.
    assert scores["greedy"] == 1.0 and scores["sample"] < 0.2


def test_options_and_tasks_are_validated():
    with pytest.raises(pydantic.ValidationError):
        GridEnvironment.Options(p_right=1.5)
    with pytest.raises(pydantic.ValidationError):
        GridEnvironment.Options(trajectories=0)
    with pytest.raises(pydantic.ValidationError):
        GridEnvironment.Options(noop=0.1)
    with pytest.raises(pydantic.ValidationError, match="action_selection"):
        GridEnvironment.Options(action_selection="argmax")
    with pytest.raises(UnknownNameError, match="20x20"):
        GridEnvironment().load("10x10", GridEnvironment.Options())
    assert GridEnvironment().tasks() == ["20x20"]


def test_grid_is_registered_by_the_maze_plugin():
    plugins = load_plugins()
    assert "grid" in plugins.environments.names()
    assert plugins.environments.entry("grid").origin.plugin == "maze"
    task = plugins.environments.create("grid").load("20x20", GridEnvironment.Options())
    assert isinstance(task, GridTask)


@pytest.mark.parametrize("state", ["position", "image"])
def test_grid_conforms(state, tmp_path):
    check_task(load(state=state, p_right=0.7), tmp_path)
