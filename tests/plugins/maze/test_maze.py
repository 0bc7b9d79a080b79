"""Tests of the maze environment family (generator, expert, envs, dataset, v*, test set)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pydantic
import pytest
import torch

from ssilbench.api import DatasetError, Policy, UnknownNameError
from ssilbench.kit import as_model_input
from ssilbench.testing import TestSetScorer, rollout_returns
from ssilbench_maze.environment import MazeEnvironment, MazeTask
from ssilbench_maze.expert import MOVES, NO_ACTION, transition
from ssilbench_maze.generate import Maze, generate_maze
from ssilbench_maze.gym_env import COLOURS, PALETTES, MazeEnv

CPU = torch.device("cpu")
REPO = Path(__file__).resolve().parents[3]


def load(task: str = "10x10", **options) -> MazeTask:
    env = MazeEnvironment()
    return env.load(task, MazeEnvironment.Options(**options))


@pytest.fixture(scope="module")
def maze10() -> Maze:
    return generate_maze(10, seed=0)


@pytest.fixture(scope="module")
def maze50() -> Maze:
    return generate_maze(50, seed=0)


class ExpertTablePolicy(Policy):
    """Plays the expert's action (or a fixed one) by looking up the agent's cell."""

    def __init__(self, maze: Maze, constant: int | None = None) -> None:
        self.maze = maze
        action = np.maximum(maze.expert.action, 0)
        if constant is not None:
            action = np.full_like(action, constant)
        self.table = torch.from_numpy(action)

    def cells(self, obs: torch.Tensor) -> torch.Tensor:
        cols = self.maze.shape[1]
        if obs.dim() == 2:
            xy = obs.round().long()
            return xy[:, 1] * cols + xy[:, 0]
        return ((obs[:, 0] > 0.5) & (obs[:, 2] < 0.5)).flatten(1).to(torch.uint8).argmax(1)

    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(self.table[self.cells(obs)], 4).float()


def frame_cells(maze: Maze, obs: np.ndarray) -> np.ndarray:
    """Cells of stored position frames."""
    return maze.expert.cells(np.asarray(obs).round().astype(np.int64))


# --- generation ----------------------------------------------------------------------


def test_generation_is_deterministic_per_seed_and_differs_across_seeds():
    a, b = generate_maze(10, seed=3), generate_maze(10, seed=3)
    assert np.array_equal(a.walls, b.walls) and a.goal == b.goal
    layouts = {generate_maze(10, seed=s).walls.tobytes() for s in range(6)}
    assert len(layouts) == 6


def test_grid_sizes_and_border_walls(maze10, maze50):
    sizes = {10: maze10, 20: generate_maze(20, seed=0), 50: maze50}
    for size, maze in sizes.items():
        cells = size + 1
        assert maze.shape == (cells, cells)
        walls = maze.walls
        assert walls[0].all() and walls[-1].all() and walls[:, 0].all() and walls[:, -1].all()
        # Interior is a real maze: both walls and free cells, odd-odd cells always free.
        assert 0 < walls[1:-1, 1:-1].mean() < 1
        assert not walls[1::2, 1::2].any()
        assert not walls.reshape(-1)[maze.goal]


def test_random_walk_walls_leave_every_free_cell_connected(maze50):
    # Wall walks only step into free cells, so walls never enclose a pocket.
    assert np.array_equal(maze50.feasible, ~maze50.walls)


# --- expert and dynamics -------------------------------------------------------------


def test_expert_reaches_goal_in_exactly_its_distance_without_bumping(maze50):
    expert = maze50.expert
    cells = expert.sources.copy()
    remaining = expert.distance[cells].copy()
    assert (remaining > 0).all()
    for _ in range(expert.longest_path):
        moving = remaining > 0
        nxt = transition(maze50.walls, cells, np.maximum(expert.action[cells], 0))
        assert (nxt[moving] != cells[moving]).all(), "the expert walked into a wall"
        cells = np.where(moving, nxt, cells)
        remaining -= moving
    assert (cells == maze50.goal).all()


def test_bfs_distances_are_shortest(maze10):
    # Bellman check: every feasible non-goal cell has a neighbour exactly one step closer
    # and none more than one step closer.
    expert = maze10.expert
    cells = expert.sources
    neighbours = np.stack(
        [transition(maze10.walls, cells, np.full_like(cells, a)) for a in range(4)]
    )
    d = expert.distance[neighbours]
    d = np.where(neighbours == cells, np.iinfo(np.int64).max, d)
    assert (d.min(axis=0) == expert.distance[cells] - 1).all()
    assert expert.distance[maze10.goal] == 0
    assert (expert.action[maze10.walls.reshape(-1)] == NO_ACTION).all()
    assert expert.action[maze10.goal] == NO_ACTION


def test_walls_block_moves(maze10):
    walls, cols = maze10.walls, maze10.shape[1]
    start = 1 * cols + 1  # (1, 1) is free; (0, 1) and (1, 0) are border walls
    assert transition(walls, np.array([start]), np.array([1]))[0] == start  # left
    assert transition(walls, np.array([start]), np.array([2]))[0] == start  # up
    free = ~walls.reshape(-1)
    for a, (dx, dy) in enumerate(MOVES):
        target = start + dy * cols + dx
        expected = target if free[target] else start
        assert transition(walls, np.array([start]), np.array([a]))[0] == expected
    corner = 0  # a wall cell on the grid's corner: moves off the grid stay put
    assert transition(walls, np.array([corner]), np.array([1]))[0] == corner


# --- datasets ------------------------------------------------------------------------


def check_frames_follow_actions(task: MazeTask, store) -> None:
    cells = frame_cells(task.maze, store.obs)
    idx = store.transition_indices()
    moved = transition(task.maze.walls, cells[idx], store.actions[idx])
    assert np.array_equal(moved, cells[idx + 1])
    assert (cells[idx] != cells[idx + 1]).all()


def test_states_dataset_has_each_feasible_state_once_with_expert_actions(tmp_path):
    task = load(data="states")
    store = task.dataset(tmp_path)
    expert = task.maze.expert
    idx = store.transition_indices()
    sources = frame_cells(task.maze, store.obs[idx])
    assert store.num_transitions == len(expert.sources)
    assert np.array_equal(np.sort(sources), expert.sources)
    assert np.array_equal(store.actions[idx], expert.action[sources])
    assert store.actions.dtype == np.int64 and store.rewards.dtype == np.float32
    check_frames_follow_actions(task, store)


def test_rollouts_dataset_episodes_end_at_goal(tmp_path):
    task = load(data="rollouts", episodes=30)
    store = task.dataset(tmp_path)
    assert store.num_episodes == 30
    cells = frame_cells(task.maze, store.obs)
    ends = store.episode_ends
    assert (cells[ends - 1] == task.maze.goal).all()
    starts = np.concatenate([[0], ends[:-1]])
    assert (cells[starts] != task.maze.goal).all()
    # One reward of 1 per episode, on the transition into the goal; filler action 0.
    assert store.rewards.sum() == 30 and (store.rewards[ends - 2] == 1.0).all()
    assert (store.actions[ends - 1] == 0).all()
    check_frames_follow_actions(task, store)


def test_dataset_is_cached_and_corruption_is_detected(tmp_path):
    task = load(data="rollouts", episodes=5)
    first = task.dataset(tmp_path)
    assert first.root.parent == tmp_path / "maze" and first.root.name.startswith("10x10-")
    stamp = (first.root / "manifest.json").stat().st_mtime_ns
    again = load(data="rollouts", episodes=5).dataset(tmp_path)
    assert again.root == first.root
    assert (again.root / "manifest.json").stat().st_mtime_ns == stamp
    assert np.array_equal(np.asarray(again.obs), np.asarray(first.obs))
    assert load(data="rollouts", episodes=6).dataset(tmp_path).root != first.root

    obs_file = first.root / "obs.npy"
    data = bytearray(obs_file.read_bytes())
    data[-1] ^= 0xFF
    obs_file.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="obs.npy"):
        task.dataset(tmp_path)


@pytest.mark.parametrize("palette", sorted(PALETTES))
def test_images_encode_walls_goal_and_agent(tmp_path, palette):
    COLOURS = PALETTES[palette]
    task = load(state="image", data="states", palette=palette)
    store = task.dataset(tmp_path)
    maze = task.maze
    assert task.spec.obs_shape == (3, 11, 11) and store.obs.dtype == np.uint8
    frame = np.asarray(store.obs[0])
    assert set(np.unique(frame)) <= {0, 255}
    rgb = frame.transpose(1, 2, 0)
    assert (rgb[maze.walls] == COLOURS["wall"]).all()
    gx, gy = maze.goal_position
    agent = (rgb == COLOURS["agent"]).all(axis=-1)
    assert agent.sum() == 1
    ay, ax = np.argwhere(agent)[0]
    assert maze.expert.cells(np.array([ax, ay])) == frame_cells_image(store.obs[:1], maze)[0]
    assert tuple(rgb[gy, gx]) == COLOURS["goal"]
    last = np.asarray(store.obs[store.episode_ends[0] - 1]).transpose(1, 2, 0)
    assert tuple(last[gy, gx]) == COLOURS["agent_on_goal"]
    free = ~maze.walls & ~agent
    free[gy, gx] = False
    assert (rgb[free] == COLOURS["free"]).all()


def test_palettes_are_ssilbench_by_default_and_the_papers_on_request(tmp_path):
    # In each palette the agent (also on the goal) is the one colour with a full red
    # channel and an empty blue one; the other kinds are told apart.
    for colours in PALETTES.values():
        agent_like = {k for k, (r, _, b) in colours.items() if r == 255 and b == 0}
        assert agent_like == {"agent", "agent_on_goal"}
        others = [v for k, v in colours.items() if k != "agent_on_goal"]
        assert len(set(others)) == len(others)
    assert PALETTES["ssilbench"] == COLOURS
    # The paper's code (its utils.get_base_maze_from_policy and state_to_img): walls blue,
    # and the agent drawn red over the goal.
    assert PALETTES["paper"]["wall"] == (0, 0, 255)
    assert PALETTES["paper"]["agent_on_goal"] == PALETTES["paper"]["agent"] == (255, 0, 0)
    ours, papers = (
        load(state="image", data="states"),
        load(state="image", data="states", palette="paper"),
    )
    # Left out of the options and the data key at its default, so that the datasets and
    # run ids recorded before the option keep theirs; the paper's colours are a new dataset.
    assert "palette" not in ours.options.model_dump() and "palette" not in ours.data_key
    assert papers.options.model_dump()["palette"] == "paper"
    assert papers.data_key == {**ours.data_key, "palette": "paper"}
    assert papers.dataset_path(tmp_path) != ours.dataset_path(tmp_path)
    assert papers.spec.metadata == {**ours.spec.metadata, "palette": "paper"}
    # Positions have no colours: the option changes neither their data nor their spec.
    assert load(palette="paper").data_key == load().data_key
    # The same cells in both palettes, the environments' frames included.
    venvs = [task.make_vec_env(4, seed=3) for task in (ours, papers)]
    frames = [venv.reset(seed=3)[0] for venv in venvs]
    walls = ours.maze.walls
    assert (frames[0][:, :, walls] == 0).all() and (frames[1][:, 2, walls] == 255).all()
    assert np.array_equal(
        frame_cells_image(frames[0], ours.maze), frame_cells_image(frames[1], papers.maze)
    )
    on_goal = MazeEnv(ours.maze, "image", palette="paper")
    on_goal.reset(seed=0)
    on_goal._cell = ours.maze.goal
    gx, gy = ours.maze.goal_position
    assert tuple(on_goal.render()[gy, gx]) == (255, 0, 0)


def test_a_palette_that_does_not_exist_is_refused():
    with pytest.raises(pydantic.ValidationError, match="palette"):
        load(state="image", palette="blue")


def frame_cells_image(obs: np.ndarray, maze: Maze) -> np.ndarray:
    agent = (obs[:, 0] == 255) & (obs[:, 2] == 0)
    return agent.reshape(len(obs), -1).argmax(axis=1)


@pytest.mark.parametrize(
    "state, palette", [("position", "ssilbench"), ("image", "ssilbench"), ("image", "paper")]
)
def test_video_model_matches_f_of_expert_action(state, palette):
    task = load(state=state, palette=palette)
    expert = task.maze.expert
    sources = expert.sources
    target = transition(task.maze.walls, sources, expert.action[sources])
    model = task.video_model()
    predicted = model.predict(as_model_input(task.observe(sources)))
    assert torch.equal(predicted, as_model_input(task.observe(target)))
    # The goal is absorbing: v*(goal) = goal.
    goal = as_model_input(task.observe([task.maze.goal]))
    assert torch.equal(model.predict(goal), goal)


# --- environments --------------------------------------------------------------------


def play(venv, actions: np.ndarray):
    out = [venv.reset(seed=7)[0]]
    for step_actions in actions:
        obs, reward, terminated, truncated, _ = venv.step(step_actions)
        out.extend([obs, reward, terminated, truncated])
    return out


def test_vector_env_is_seed_deterministic():
    task = load()
    actions = np.random.default_rng(0).integers(0, 4, size=(60, 8))
    a = play(task.make_vec_env(8, seed=1), actions)
    b = play(task.make_vec_env(8, seed=1), actions)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    other = task.make_vec_env(8, seed=1).reset(seed=8)[0]
    assert not np.array_equal(a[0], other)
    # Sub-env i plays the episodes of a single MazeEnv reset with seed + i.
    single = MazeEnv(task.maze)
    assert np.array_equal(single.reset(seed=7 + 3)[0], a[0][3])


def test_single_env_expert_episode_ends_at_goal_with_reward(maze10):
    env = MazeEnv(maze10)
    obs, info = env.reset(seed=4)
    steps, done, reward = 0, False, 0.0
    while not done:
        action = maze10.expert.action[info["cell"]]
        obs, reward, terminated, truncated, info = env.step(action)
        steps, done = steps + 1, terminated or truncated
    assert terminated and reward == 1.0 and info["cell"] == maze10.goal
    assert tuple(obs) == maze10.goal_position
    assert steps == maze10.expert.distance[env.reset(seed=4)[1]["cell"]]
    assert env.render().shape == (11, 11, 3)


def test_vector_env_autoresets_next_step():
    task = load(horizon=3)
    venv = task.make_vec_env(2, seed=0)
    venv.reset(seed=0)
    for _ in range(3):
        _, _, terminated, truncated, _ = venv.step(np.array([0, 0]))
    assert (terminated | truncated).all()
    obs, reward, terminated, truncated, _ = venv.step(np.array([0, 0]))
    assert not (terminated | truncated).any() and (reward == 0).all()
    assert np.isin(frame_cells(task.maze, obs), task.maze.expert.sources).all()


@pytest.mark.parametrize("state", ["position", "image"])
def test_expert_rollout_reaches_goal_in_every_sub_env(state):
    task = load(state=state)
    venv = task.make_vec_env(16, seed=task.spec.eval_seed)
    policy = ExpertTablePolicy(task.maze)
    returns = rollout_returns(
        venv, policy, task.spec, 5, torch.device("cpu"), torch.Generator().manual_seed(0)
    )
    assert (returns == 1.0).all()
    stuck = ExpertTablePolicy(task.maze, constant=2)
    returns = rollout_returns(
        venv, stuck, task.spec, 5, torch.device("cpu"), torch.Generator().manual_seed(0)
    )
    assert returns.mean() < 1.0


# --- test set, spec and options -------------------------------------------------------


def scored_accuracy(task: MazeTask, policy: Policy) -> float:
    return TestSetScorer(task.test_set(), CPU)(policy)["test_accuracy"]


@pytest.mark.parametrize("state", ["position", "image"])
def test_test_set_is_every_feasible_state_with_expert_action_and_v_star(state):
    task = load(state=state)
    expert = task.maze.expert
    test = task.test_set()
    assert test.obs.dtype == (np.float32 if state == "position" else np.uint8)
    assert test.next_obs.dtype == test.obs.dtype
    assert np.array_equal(test.obs, task.observe(expert.sources))
    assert np.array_equal(test.actions, expert.action[expert.sources])
    assert np.array_equal(test.next_obs, task.observe(expert.next_cell[expert.sources]))
    assert task.spec.metadata["test_states"] == len(expert.sources)


def test_test_accuracy_is_one_for_the_expert_only():
    task = load()
    assert "metrics" not in vars(MazeTask)  # the core scores the test set
    scores = TestSetScorer(task.test_set(), CPU)(ExpertTablePolicy(task.maze))
    assert scores["test_accuracy"] == 1.0 and scores["policy_entropy"] == pytest.approx(0.0)
    for a in range(4):
        assert scored_accuracy(task, ExpertTablePolicy(task.maze, constant=a)) < 1.0
    image_task = load(state="image")
    assert scored_accuracy(image_task, ExpertTablePolicy(image_task.maze)) == 1.0


def test_spec_describes_the_task():
    spec = load("20x20", state="image").spec
    assert spec.env_id == "maze:20x20" and spec.obs_shape == (3, 21, 21)
    assert spec.obs_kind == "image" and spec.default_arch == "cnn1"
    assert spec.horizon == 2 * spec.metadata["longest_expert_path"]
    spec = load(horizon=17).spec
    assert spec.obs_shape == (2,) and spec.obs_dtype == "float32" and spec.horizon == 17
    assert spec.action_names == ("right", "left", "up", "down") and spec.default_arch == "mlp5"


def test_unknown_task_and_option_fail():
    with pytest.raises(UnknownNameError, match="20x20"):
        MazeEnvironment().load("30x30", MazeEnvironment.Options())
    with pytest.raises(pydantic.ValidationError):
        MazeEnvironment.Options(foo=1)
    with pytest.raises(pydantic.ValidationError):
        MazeEnvironment.Options(episodes=0)
    assert MazeEnvironment().tasks() == ["10x10", "20x20", "50x50"]


def test_plugin_module_imports_nothing_heavy():
    code = (
        "import sys, ssilbench_maze.plugin; "
        "print(sorted(m for m in ('torch', 'numpy', 'gymnasium') if m in sys.modules))"
    )
    env = {"PYTHONPATH": f"{REPO}{':'}{REPO / 'plugins'}"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"
