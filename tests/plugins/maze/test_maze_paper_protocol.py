"""The maze options that follow the protocol of the paper's code: a seeded set of G goals
(number of goals study), repeated copies of D^full with their own no-op draws (stochastic
environment study), and the data keys that must not move for earlier option sets."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest
import torch

from ssilbench.api import ConfigError
from ssilbench.testing import check_task, rollout_returns
from ssilbench_maze import environment
from ssilbench_maze.environment import MazeOptions, data_key, short_hash

from .test_maze_studies_env import CPU, GoalExpertPolicy, frame_cells, frame_goals, load, scores


def transitions(task, store) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source cells, goals, actions and next cells of every stored transition, in order."""
    idx = store.transition_indices()
    cells = frame_cells(task, store.obs)
    goals = frame_goals(task, store.obs) if task.tables is not None else None
    src_goals = goals[idx] if goals is not None else np.full(len(idx), task.maze.goal)
    return cells[idx], src_goals, store.actions[idx], cells[idx + 1]


# --- data keys -------------------------------------------------------------------------

BASE_KEY = {
    "generator": "ssilbench_maze/random-walk-v1",
    "task": "10x10",
    "state": "position",
    "data": "rollouts",
    "maze_seed": 0,
    "episodes": 200,
}


@pytest.mark.parametrize(
    ("options", "key", "digest"),
    [
        ({}, BASE_KEY, "bf3a007dfd61"),
        ({"goals": "per_episode"}, {**BASE_KEY, "goals": "per_episode"}, "02318a96ee68"),
        (
            {"data": "states", "noop": 0.5},
            {k: v for k, v in BASE_KEY.items() if k != "episodes"}
            | {"data": "states", "noop": 0.5},
            "6c773883d5fd",
        ),
    ],
)
def test_data_keys_of_earlier_option_sets_are_unchanged(options, key, digest):
    got = data_key("10x10", MazeOptions(**options))
    assert got == key
    assert short_hash(got) == digest
    # Explicit defaults of the new options leave the key alone too.
    assert data_key("10x10", MazeOptions(**options, copies=1)) == key


def test_goal_count_and_copies_enter_the_data_key_only_when_set():
    three = data_key("10x10", MazeOptions(goals=3))
    assert three == {**BASE_KEY, "goals": 3}
    one = data_key("10x10", MazeOptions(goals=1))
    assert one["goals"] == 1 and one != data_key("10x10", MazeOptions())
    copies = data_key("10x10", MazeOptions(data="states", noop=0.5, copies=4))
    assert copies["copies"] == 4
    assert {k: v for k, v in copies.items() if k != "copies"} == data_key(
        "10x10", MazeOptions(data="states", noop=0.5)
    )
    digests = {
        short_hash(data_key("10x10", MazeOptions(**o)))
        for o in ({}, {"goals": 1}, {"goals": 3}, {"goals": "per_episode"})
    }
    assert len(digests) == 4


# --- a seeded set of G goals -----------------------------------------------------------


@pytest.mark.parametrize("goals", [1, 3, 10])
def test_goal_count_is_a_whole_number_from_one(goals):
    assert MazeOptions(goals=goals).goals == goals


@pytest.mark.parametrize("bad", [0, -2, True, False, 2.0, "3", "all"])
def test_goal_count_refuses_what_is_not_a_whole_number_from_one(bad):
    with pytest.raises(pydantic.ValidationError, match="goals"):
        MazeOptions(goals=bad)


def test_goal_count_draws_distinct_seeded_nested_goals():
    cells = {g: load(goals=g).goal_cells for g in (1, 3, 10)}
    tables = load(goals=10).tables
    for g, drawn in cells.items():
        assert len(drawn) == len(np.unique(drawn)) == g
        assert np.isin(drawn, tables.goals).all()
    # Each G's goals are the first G of the same seeded draw.
    assert np.array_equal(cells[10][:3], cells[3]) and np.array_equal(cells[3][:1], cells[1])
    assert np.array_equal(load(goals=10).goal_cells, cells[10])
    assert not np.array_equal(load(goals=10, maze_seed=1).goal_cells, cells[10])
    # The goal stream is its own: it does not depend on the data or the no-ops.
    assert np.array_equal(load(goals=3, data="states", noop=0.5).goal_cells, cells[3])
    assert load().goal_cells is None and load(goals="per_episode").goal_cells is None


def test_goal_count_spec_observes_the_goal():
    task = load(goals=3)
    spec = task.spec
    assert spec.obs_shape == (4,) and spec.goal_dims == (2, 3)
    positions = task.maze.expert.positions(task.goal_cells).tolist()
    assert spec.metadata["goal_cells"] == positions and spec.metadata["goal"] is None
    assert spec.metadata["goals"] == 3
    longest = max(task.tables.expert(g).longest_path for g in task.goal_cells)
    assert task.sampler.longest_path == longest and spec.horizon == 2 * longest
    image = load(goals=3, state="image").spec
    assert image.obs_shape == (3, 11, 11) and image.goal_dims == ()
    assert "goal_cells" not in load().spec.metadata
    assert "goal_cells" not in load(goals="per_episode").spec.metadata


def test_too_many_goals_are_refused():
    with pytest.raises(ConfigError, match="50 possible goal cells; goals=51"):
        load(goals=51)


@pytest.mark.parametrize("goals", [1, 3, 10])
def test_goal_count_states_dataset_is_every_state_for_each_goal_once(goals, tmp_path):
    task = load(goals=goals, data="states")
    store = task.dataset(tmp_path)
    src, goal, actions, nxt = transitions(task, store)
    expected = [(int(c), int(g)) for g in task.goal_cells for c in task.expert(g).sources]
    assert len(src) == len(expected) == goals * 49 == task.spec.metadata["feasible_pairs"]
    assert sorted(zip(src.tolist(), goal.tolist(), strict=True)) == sorted(expected)
    # One block per goal, in the order of the drawn goals (the paper's concatenation).
    assert np.array_equal(goal, np.repeat(task.goal_cells, 49))
    assert np.array_equal(actions, task.expert_actions(src, goal))
    assert np.array_equal(nxt, task.expert_next(src, goal))
    obs_goals = frame_goals(task, store.obs)
    assert np.isin(obs_goals, task.goal_cells).all()
    assert store.rewards.sum() == int((nxt == goal).sum())


def test_goal_count_test_set_is_the_datasets_pairs(tmp_path):
    task = load(goals=3, data="states")
    src, goal, _, _ = transitions(task, task.dataset(tmp_path))
    cells, goals = task.test_pairs
    assert len(cells) == task.spec.metadata["test_states"] == 3 * 49
    assert set(zip(cells.tolist(), goals.tolist(), strict=True)) == set(
        zip(src.tolist(), goal.tolist(), strict=True)
    )
    test = task.test_set()
    assert np.array_equal(test.obs, task.observe(cells, goals))
    assert np.array_equal(test.actions, task.expert_actions(cells, goals))
    # The rollout dataset's task has the same test set: it depends on the goals only.
    assert np.array_equal(load(goals=3).test_set().obs, test.obs)
    assert scores(task, GoalExpertPolicy(task))["test_accuracy"] == 1.0


def test_goal_count_rollouts_and_envs_draw_only_the_chosen_goals(tmp_path):
    task = load(goals=3, episodes=60)
    store = task.dataset(tmp_path)
    ends = store.episode_ends
    starts = np.concatenate([[0], ends[:-1]])
    cells, goals = frame_cells(task, store.obs), frame_goals(task, store.obs)
    assert set(goals.tolist()) == set(task.goal_cells.tolist())
    assert (cells[ends - 1] == goals[ends - 1]).all() and (cells[starts] != goals[starts]).all()
    assert store.rewards.sum() == 60
    venv = task.make_vec_env(32, seed=1)
    obs, info = venv.reset(seed=1)
    assert set(info["goal"].tolist()) == set(task.goal_cells.tolist())
    assert np.array_equal(frame_goals(task, obs), info["goal"])
    generator = torch.Generator().manual_seed(0)
    returns = rollout_returns(venv, GoalExpertPolicy(task), task.spec, 1, CPU, generator)
    assert (returns == 1.0).all()


def test_goal_count_dataset_is_deterministic_given_the_maze_seed(tmp_path):
    first = load(goals=3, data="states", noop=0.3).dataset(tmp_path / "a")
    again = load(goals=3, data="states", noop=0.3).dataset(tmp_path / "b")
    assert np.array_equal(first.obs, again.obs) and np.array_equal(first.actions, again.actions)
    other = load(goals=3, data="states", noop=0.3, maze_seed=1).dataset(tmp_path / "c")
    assert other.root.name != first.root.name
    assert other.obs.shape != first.obs.shape or not np.array_equal(other.obs, first.obs)


# --- copies of D^full --------------------------------------------------------------------


def test_copies_store_every_source_copies_times_with_their_own_noops(tmp_path):
    task = load("20x20", data="states", noop=0.5, copies=4)
    store = task.dataset(tmp_path)
    src, _, actions, nxt = transitions(task, store)
    expert = task.maze.expert
    n = len(expert.sources)
    assert len(src) == 4 * n and task.spec.metadata["copies"] == 4
    stayed = (nxt == src).reshape(4, n)
    for k in range(4):
        # Copy k is the whole of D^full once more.
        assert np.array_equal(np.sort(src[k * n : (k + 1) * n]), expert.sources)
        assert abs(stayed[k].mean() - 0.5) < 0.1
    assert np.array_equal(actions, expert.action[src])
    assert ((nxt == src) | (nxt == expert.next_cell[src])).all()
    # Each copy draws its own no-ops: the copies' no-op patterns differ, and a source's four
    # outcomes are mixed about as often as four independent fair coins (1 - 2/16).
    order = np.argsort(src.reshape(4, n), axis=1, kind="stable")
    by_source = np.take_along_axis(stayed, order, axis=1)
    assert all(not np.array_equal(by_source[0], by_source[k]) for k in (1, 2, 3))
    mixed = (by_source.any(axis=0) & ~by_source.all(axis=0)).mean()
    assert abs(mixed - 0.875) < 0.1
    # The first copy is the copies=1 dataset: the no-op stream just goes on.
    single = load("20x20", data="states", noop=0.5).dataset(tmp_path)
    first = single.num_frames
    assert np.array_equal(store.obs[:first], single.obs)
    assert np.array_equal(store.actions[:first], single.actions)


def test_copies_without_noops_repeat_the_dataset(tmp_path):
    single = load(data="states").dataset(tmp_path)
    double = load(data="states", copies=2).dataset(tmp_path)
    assert double.root != single.root
    assert np.array_equal(double.obs, np.concatenate([single.obs, single.obs]))
    assert double.num_transitions == 2 * single.num_transitions == 2 * 49


def test_copies_combine_with_a_goal_count(tmp_path):
    task = load(goals=3, data="states", copies=2, noop=0.25)
    src, goal, actions, _ = transitions(task, task.dataset(tmp_path))
    pairs = list(zip(src.tolist(), goal.tolist(), strict=True))
    assert len(pairs) == 2 * 3 * 49 and len(set(pairs)) == 3 * 49
    assert np.array_equal(actions, task.expert_actions(src, goal))
    # The test set holds every pair once, whatever the copies.
    assert len(task.test_set().actions) == 3 * 49


def test_copies_leave_the_test_set_alone():
    with_copies, without = load(data="states", noop=0.5, copies=4), load(data="states")
    assert np.array_equal(with_copies.test_set().obs, without.test_set().obs)
    assert np.array_equal(with_copies.test_set().next_obs, without.test_set().next_obs)


def test_copies_dataset_is_deterministic_given_the_maze_seed(tmp_path):
    first = load(data="states", noop=0.5, copies=3).dataset(tmp_path / "a")
    again = load(data="states", noop=0.5, copies=3).dataset(tmp_path / "b")
    assert np.array_equal(first.obs, again.obs)
    assert np.array_equal(first.episode_ends, again.episode_ends)
    other = load(data="states", noop=0.5, copies=3, maze_seed=2).dataset(tmp_path / "c")
    assert other.obs.shape != first.obs.shape or not np.array_equal(other.obs, first.obs)


def test_copies_are_refused_with_rollouts():
    with pytest.raises(pydantic.ValidationError, match="copies=4 needs data=states"):
        MazeOptions(copies=4)
    with pytest.raises(pydantic.ValidationError, match="copies"):
        MazeOptions(data="states", copies=0)
    assert MazeOptions(copies=1).copies == 1


def test_copies_count_towards_the_dataset_size_limit(monkeypatch):
    frames = 49 * 4 * 11 * 11 * 3
    monkeypatch.setattr(environment, "STATES_DATASET_BYTES", frames)
    load(data="states", state="image", copies=4)
    with pytest.raises(ConfigError, match="copies=5"):
        load(data="states", state="image", copies=5)


# --- conformance -------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["position", "image"])
@pytest.mark.parametrize(
    "options",
    [
        {"goals": 3},
        {"goals": 3, "data": "states", "noop": 0.25},
        {"data": "states", "noop": 0.5, "copies": 2},
    ],
)
def test_paper_protocol_variants_conform(options, state, tmp_path):
    check_task(load(state=state, **options), tmp_path)
