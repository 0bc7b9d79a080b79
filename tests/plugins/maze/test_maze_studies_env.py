"""The maze's study variants: no-op dynamics (stochastic environment) and goals per episode."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ssilbench.api import ConfigError, Policy
from ssilbench.kit import VMIDMPolicy, as_model_input, pair
from ssilbench.testing import TestSetScorer, check_task, rollout_returns
from ssilbench_maze import environment
from ssilbench_maze.environment import MazeEnvironment, MazeTask
from ssilbench_maze.expert import MOVES, NO_ACTION, goal_tables, solve, split_at_noops
from ssilbench_maze.gym_env import MazeEnv

CPU = torch.device("cpu")


def load(task: str = "10x10", **options) -> MazeTask:
    return MazeEnvironment().load(task, MazeEnvironment.Options(**options))


def frame_cells(task: MazeTask, obs: np.ndarray) -> np.ndarray:
    """Agent cells of stored position frames (first two features)."""
    return task.maze.expert.cells(np.asarray(obs)[:, :2].round().astype(np.int64))


def frame_goals(task: MazeTask, obs: np.ndarray) -> np.ndarray:
    """Goal cells of stored goal-conditioned position frames (last two features)."""
    return task.maze.expert.cells(np.asarray(obs)[:, 2:4].round().astype(np.int64))


def scores(task: MazeTask, policy: Policy) -> dict[str, float]:
    return TestSetScorer(task.test_set(), CPU)(policy)


# --- no-op dynamics ------------------------------------------------------------------


def stay_fraction(noop: float, steps: int = 40, num_envs: int = 64) -> float:
    """Fraction of expert moves (never into a wall) that left the agent in place."""
    task = load(noop=noop)
    action = np.maximum(task.maze.expert.action, 0)
    venv = task.make_vec_env(num_envs, seed=3)
    _, info = venv.reset(seed=3)
    cells, done = info["cell"], np.zeros(num_envs, dtype=bool)
    stayed = total = 0
    for _ in range(steps):
        _, _, terminated, truncated, info = venv.step(action[cells])
        stayed += int(((info["cell"] == cells) & ~done).sum())
        total += int((~done).sum())
        cells, done = info["cell"], terminated | truncated
    return stayed / total


def test_noop_probability_is_the_fraction_of_moves_that_stay_put():
    assert stay_fraction(0.0) == 0.0
    assert stay_fraction(1.0) == 1.0
    assert abs(stay_fraction(0.5) - 0.5) < 0.05
    assert abs(stay_fraction(0.2) - 0.2) < 0.05


def test_noop_envs_are_seed_deterministic_and_match_the_single_env():
    task = load(noop=0.4)
    actions = np.random.default_rng(0).integers(0, 4, size=(50, 6))

    def play(seed):
        venv = task.make_vec_env(6, seed=seed)
        out = [venv.reset(seed=seed)[0]]
        for step in actions:
            out.extend(venv.step(step)[:4])
        return out

    a, b = play(5), play(5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, play(6), strict=True))
    # Sub-env 2 draws its start and its no-ops like a single env seeded 5 + 2.
    single = MazeEnv(task.maze, noop=0.4, horizon=task.horizon)
    obs = [single.reset(seed=7)[0]]
    for step in actions:
        o, _, terminated, truncated, _ = single.step(step[2])
        obs.append(o)
        if terminated or truncated:
            break
    vector_obs = [a[0]] + a[1::4]
    assert len(obs) > 3
    assert all(np.array_equal(o, vector_obs[t][2]) for t, o in enumerate(obs))


def test_noop_horizon_grows_with_expected_steps_and_is_capped():
    longest = load().spec.metadata["longest_expert_path"]
    assert load(noop=0.5).spec.horizon == 4 * longest
    assert load(noop=0.99).spec.horizon == 10 * 2 * longest
    assert load(noop=1.0).spec.horizon == 2 * longest
    assert load(noop=0.5, horizon=9).spec.horizon == 9


def test_split_at_noops_keeps_each_source_once():
    path = np.array([5, 6, 7, 8])
    parts = split_at_noops(path, np.array([False, True, False]))
    assert [p.tolist() for p in parts] == [[5, 6, 6], [7, 8]]
    assert [p.tolist() for p in split_at_noops(path, np.array([True, True, True]))] == [
        [5, 5],
        [6, 6],
        [7, 7],
    ]


def test_noop_states_dataset_has_each_state_once_with_stochastic_next(tmp_path):
    task = load("50x50", noop=0.5, data="states")
    store = task.dataset(tmp_path)
    expert = task.maze.expert
    idx = store.transition_indices()
    cells = frame_cells(task, store.obs)
    src, nxt = cells[idx], cells[idx + 1]
    assert np.array_equal(np.sort(src), expert.sources)
    assert np.array_equal(store.actions[idx], expert.action[src])
    stayed = nxt == src
    assert (stayed | (nxt == expert.next_cell[src])).all()
    assert abs(stayed.mean() - 0.5) < 0.05
    assert store.rewards.sum() == int((nxt == task.maze.goal).sum()) <= 4
    deterministic = load("50x50", data="states")
    assert deterministic.dataset(tmp_path).root != store.root
    assert "noop" not in deterministic.data_key and task.data_key["noop"] == 0.5


def test_noop_seed_draws_other_noops_from_the_same_states(tmp_path):
    def transitions(**options):
        store = load("10x10", noop=0.5, data="states", copies=4, **options).dataset(tmp_path)
        idx = store.transition_indices()
        return store.obs[idx], store.actions[idx], store.obs[idx + 1]

    before = transitions()  # noop_seed="maze": maze_seed's stream, as before the option
    same = transitions(noop_seed=0)  # maze_seed is 0: the same stream
    other = transitions(noop_seed=1)
    for a, b in zip(before, same, strict=True):
        assert np.array_equal(a, b)
    # Another draw: other next states (and so other episode cuts), the same (s, a) pairs.
    assert not np.array_equal(np.sort(before[2], axis=0), np.sort(other[2], axis=0))
    assert np.array_equal(np.unique(np.column_stack(before[:2]), axis=0),
                          np.unique(np.column_stack(other[:2]), axis=0))  # fmt: skip
    key = load("10x10", noop=0.5, noop_seed=1).data_key
    assert key["noop_seed"] == 1
    assert "noop_seed" not in load("10x10", noop=0.5).data_key
    assert "noop_seed" not in load("10x10", noop_seed=1).data_key  # no no-ops: no draw


def test_noop_rollouts_follow_the_stochastic_dynamics(tmp_path):
    task = load(noop=0.5, episodes=40)
    store = task.dataset(tmp_path)
    expert = task.maze.expert
    idx = store.transition_indices()
    cells = frame_cells(task, store.obs)
    src, nxt = cells[idx], cells[idx + 1]
    assert np.array_equal(store.actions[idx], expert.action[src])
    stayed = nxt == src
    assert (stayed | (nxt == expert.next_cell[src])).all()
    assert 0.4 < stayed.mean() < 0.6
    ends = store.episode_ends
    lengths = np.diff(np.concatenate([[0], ends]))
    at_goal = cells[ends - 1] == task.maze.goal
    # Each episode reaches the goal or is cut at the default horizon.
    assert (at_goal | (lengths == task.data_horizon + 1)).all() and at_goal.mean() > 0.9
    assert store.rewards.sum() == at_goal.sum()


@pytest.mark.parametrize("state", ["position", "image"])
@pytest.mark.parametrize("noop", [0.0, 0.3, 0.7, 1.0])
def test_video_model_outcomes_are_stay_or_v_star(state, noop):
    task = load(state=state, noop=noop)
    test = task.test_set()
    obs, moved = as_model_input(test.obs), as_model_input(test.next_obs)
    model = task.video_model()
    outcomes = model.outcomes(obs)
    assert len(outcomes) == (1 if noop in (0.0, 1.0) else 2)
    total = sum(prob for prob, _ in outcomes)
    assert torch.allclose(total, torch.ones(len(obs)))
    expected = {"stay": (noop, obs), "move": (1.0 - noop, moved)}
    for prob, nxt in outcomes:
        kind = "stay" if torch.equal(nxt, obs) else "move"
        assert torch.equal(nxt, expected[kind][1])
        assert torch.allclose(prob, torch.full_like(prob, expected[kind][0]))
    assert torch.equal(model.predict(obs), obs if noop > 0.5 else moved)


def test_vm_idm_policy_mixes_the_idm_over_noop_outcomes():
    task = load(noop=0.3)
    obs = as_model_input(task.test_set().obs)
    torch.manual_seed(0)
    idm = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 4))
    policy = VMIDMPolicy(idm, task.video_model())
    with torch.no_grad():
        stay = torch.softmax(idm(pair(obs, obs)), dim=-1)
        move = torch.softmax(idm(pair(obs, task.video_model().move(obs))), dim=-1)
    assert torch.allclose(policy.probs(obs), 0.3 * stay + 0.7 * move, atol=1e-6)


class MoveReadingIDM(nn.Module):
    """The ground-truth IDM under no-ops: the move s' - s names the action; for s' = s it
    falls back to the expert (the paper's closed form with tau -> 0)."""

    def __init__(self, task: MazeTask) -> None:
        super().__init__()
        self.task = task
        self.moves = torch.as_tensor(MOVES, dtype=torch.float32)
        self.expert = torch.as_tensor(np.maximum(task.maze.expert.action, 0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, s_next = x[:, :2], x[:, 2:]
        by_move = 20.0 * (s_next - s) @ self.moves.T
        cells = torch.as_tensor(frame_cells(self.task, s.numpy()))
        by_expert = 20.0 * nn.functional.one_hot(self.expert[cells], 4).float()
        still = (s_next == s).all(dim=1, keepdim=True)
        return torch.where(still, by_expert, by_move)


@pytest.mark.parametrize("noop", [0.0, 0.5, 0.9])
def test_vm_star_idm_with_the_true_idm_scores_perfectly(noop):
    task = load(noop=noop)
    out = scores(task, VMIDMPolicy(MoveReadingIDM(task), task.video_model()))
    assert out["test_accuracy"] == 1.0 and out["idm_accuracy"] == 1.0
    assert out["policy_entropy"] < 1e-3 and out["idm_entropy"] < 1e-3


# --- goals per episode ---------------------------------------------------------------


class GoalExpertPolicy(Policy):
    """pi*_g(s) looked up from goal-conditioned position observations."""

    def __init__(self, task: MazeTask) -> None:
        self.task = task

    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        cells, goals = frame_cells(self.task, obs.numpy()), frame_goals(self.task, obs.numpy())
        action = np.maximum(self.task.expert_actions(cells, goals), 0)
        return nn.functional.one_hot(torch.as_tensor(action), 4).float()


def test_goal_tables_agree_with_the_single_goal_expert():
    maze = load().maze
    tables = goal_tables(maze.walls)
    assert goal_tables(maze.walls) is tables
    assert np.array_equal(tables.goals, np.flatnonzero(~maze.walls.reshape(-1)))
    for goal in tables.goals[::7]:
        single, stacked = solve(maze.walls, int(goal)), tables.expert(int(goal))
        for name in ("distance", "action", "next_cell"):
            assert np.array_equal(getattr(single, name), getattr(stacked, name))


def test_goal_conditioned_spec_and_observations():
    task = load(goals="per_episode")
    spec = task.spec
    assert spec.obs_shape == (4,) and spec.goal_dims == (2, 3) and spec.obs_dtype == "float32"
    assert spec.horizon == 2 * task.tables.longest_path
    assert spec.metadata["goal"] is None and spec.metadata["feasible_pairs"] == 50 * 49
    image = load(goals="per_episode", state="image").spec
    assert image.obs_shape == (3, 11, 11) and image.goal_dims == ()
    assert load().spec.goal_dims == ()


def test_goal_conditioned_states_dataset_has_every_pair_once(tmp_path):
    task = load(goals="per_episode", data="states")
    store = task.dataset(tmp_path)
    idx = store.transition_indices()
    cells, goals = frame_cells(task, store.obs), frame_goals(task, store.obs)
    src, goal = cells[idx], goals[idx]
    pairs = set(zip(src.tolist(), goal.tolist(), strict=True))
    expected_cells, expected_goals = task.tables.pairs()
    assert len(src) == len(pairs) == len(expected_cells) == 50 * 49
    assert pairs == set(zip(expected_cells.tolist(), expected_goals.tolist(), strict=True))
    assert (src != goal).all()
    assert np.array_equal(store.actions[idx], task.expert_actions(src, goal))
    # s' = v*_g(s), and the goal features never change within an episode.
    assert np.array_equal(cells[idx + 1], task.expert_next(src, goal))
    assert np.array_equal(goals[idx + 1], goal)
    assert store.rewards.sum() == int((cells[idx + 1] == goal).sum())


def test_goal_conditioned_rollouts_reach_their_own_goals(tmp_path):
    task = load(goals="per_episode", episodes=60)
    store = task.dataset(tmp_path)
    ends = store.episode_ends
    starts = np.concatenate([[0], ends[:-1]])
    cells, goals = frame_cells(task, store.obs), frame_goals(task, store.obs)
    assert (cells[ends - 1] == goals[ends - 1]).all() and (cells[starts] != goals[starts]).all()
    assert len(np.unique(goals[starts])) > 20
    assert store.rewards.sum() == 60
    # Every feasible (state, goal) pair: the expert reaches the goal in its distance.
    tables = task.tables
    pair_cells, pair_goals = tables.pairs()
    position = pair_cells.copy()
    for _ in range(tables.longest_path):
        position = tables.next_cells(position, pair_goals)
    assert np.array_equal(position, pair_goals)


@pytest.mark.parametrize("state", ["position", "image"])
def test_goal_conditioned_test_set_and_video_model_keep_the_goal(state):
    task = load(goals="per_episode", state=state)
    test = task.test_set()
    cells, goals = task.test_pairs
    assert len(test.actions) == 50 * 49 and (test.actions != NO_ACTION).all()
    assert np.array_equal(test.obs, task.observe(cells, goals))
    predicted = task.video_model().predict(as_model_input(test.obs))
    assert torch.equal(predicted, as_model_input(test.next_obs))
    if state == "position":
        assert torch.equal(predicted[:, 2:], as_model_input(test.obs)[:, 2:])
        assert scores(task, GoalExpertPolicy(task))["test_accuracy"] == 1.0
    else:
        # The goal pixel stays green unless the agent reached it (then it turns yellow).
        goal_pixel = task.maze.expert.positions(goals)
        rgb = test.next_obs[np.arange(len(goals)), :, goal_pixel[:, 1], goal_pixel[:, 0]]
        reached = task.expert_next(cells, goals) == goals
        assert (rgb[~reached] == (0, 255, 0)).all() and (rgb[reached] == (255, 255, 0)).all()


def test_goal_conditioned_envs_draw_goals_and_the_expert_reaches_them():
    task = load(goals="per_episode")
    venv = task.make_vec_env(32, seed=1)
    obs, info = venv.reset(seed=1)
    assert (info["cell"] != info["goal"]).all() and len(np.unique(info["goal"])) > 10
    assert np.array_equal(frame_goals(task, obs), info["goal"])
    generator = torch.Generator().manual_seed(0)
    returns = rollout_returns(venv, GoalExpertPolicy(task), task.spec, 1, CPU, generator)
    assert (returns == 1.0).all()


def test_test_set_is_sampled_when_too_large(monkeypatch):
    full = load(goals="per_episode").test_pairs
    monkeypatch.setattr(environment, "TEST_SET_BYTES", 32 * 1000)
    cells, goals = load(goals="per_episode").test_pairs
    assert len(cells) == 1000 and len(set(zip(cells, goals, strict=True))) == 1000
    assert set(zip(cells, goals, strict=True)) <= set(zip(*full, strict=True))
    again = load(goals="per_episode").test_pairs
    assert np.array_equal(again[0], cells) and np.array_equal(again[1], goals)


def test_oversized_goal_conditioned_states_dataset_is_refused(monkeypatch):
    monkeypatch.setattr(environment, "STATES_DATASET_BYTES", 1000)
    with pytest.raises(ConfigError, match="data=rollouts"):
        load(goals="per_episode", data="states", state="image")


# --- conformance ---------------------------------------------------------------------


@pytest.mark.parametrize("state", ["position", "image"])
@pytest.mark.parametrize(
    "options",
    [
        {"noop": 0.5},
        {"noop": 0.5, "data": "states"},
        {"goals": "per_episode"},
        {"goals": "per_episode", "data": "states", "noop": 0.25},
    ],
)
def test_study_variants_conform(options, state, tmp_path):
    check_task(load(state=state, **options), tmp_path)
