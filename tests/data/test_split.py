"""Tests of label budgets and the SSIL split into a labeled and an action-free view."""

from __future__ import annotations

import dataclasses
import gc
import mmap
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from ssilbench.data.datasets import TransitionStore
from ssilbench.data.split import (
    LabeledView,
    UnlabeledView,
    budget_sort_key,
    parse_budget,
    parse_budgets,
    resolve_budget,
    split,
)
from ssilbench.errors import UsageError

# 12 episodes, 90 frames, 78 transitions
EPISODE_LENGTHS = (3, 9, 5, 12, 7, 2, 10, 6, 8, 11, 4, 13)
NUM_FRAMES = sum(EPISODE_LENGTHS)
NUM_TRANSITIONS = NUM_FRAMES - len(EPISODE_LENGTHS)
FILLER = -1


def write_store(root: Path) -> TransitionStore:
    """A store whose obs row i is (i, -i) and whose action i is (3 i) mod 5 (filler at ends)."""
    ends = np.cumsum(EPISODE_LENGTHS).astype(np.int64)
    frames = np.arange(NUM_FRAMES)
    obs = np.stack([frames, -frames], axis=1).astype(np.float32)
    actions = (3 * frames % 5).astype(np.int64)
    actions[ends - 1] = FILLER
    rewards = np.zeros(NUM_FRAMES, dtype=np.float32)
    return TransitionStore.write(root, obs, actions, rewards, ends, producer={"test": True})


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> TransitionStore:
    return write_store(tmp_path_factory.mktemp("split") / "store")


# --- budgets -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("16", "16"),
        (" 016 ", "16"),
        ("1", "1"),
        ("0.25", "0.25"),
        (".5", "0.5"),
        ("0.50", "0.5"),
        ("1.0", "1.0"),
        ("1.", "1.0"),
        ("all", "all"),
        ("ALL", "all"),
        (" All ", "all"),
    ],
)
def test_parse_budget_accepts(text, label):
    assert parse_budget(text) == label


@pytest.mark.parametrize("text", ["0", "00", "-3", "abc", "1.5", "0.0", ".0", "", "2.0", "1e3"])
def test_parse_budget_rejects(text):
    with pytest.raises(UsageError, match="Label budget"):
        parse_budget(text)


def test_parse_budget_rejects_non_ascii_digits():
    with pytest.raises(UsageError):
        parse_budget("\u00b2")  # '²'


def test_parse_budgets_keeps_order_and_removes_duplicates():
    assert parse_budgets("64,16,0.5,all,16,016, 64 ,ALL") == ["64", "16", "0.5", "all"]


def test_parse_budgets_refuses_empty_items_but_allows_a_trailing_comma():
    assert parse_budgets(" 16 , 32 ,") == ["16", "32"]
    for text in ("16,,32", " 16 , , 32", ",16"):
        with pytest.raises(UsageError, match="has an empty item"):
            parse_budgets(text)


@pytest.mark.parametrize("text", ["", " ", ",", " , ,"])
def test_parse_budgets_rejects_an_empty_list(text):
    with pytest.raises(UsageError, match="empty"):
        parse_budgets(text)


@pytest.mark.parametrize("text", ["16,0", "16,-3", "abc", "16,1.5"])
def test_parse_budgets_rejects_a_bad_item(text):
    with pytest.raises(UsageError):
        parse_budgets(text)


def test_budget_sort_key_orders_counts_fractions_all():
    labels = ["all", "0.5", "256", "16", "0.05", "64", "1.0"]
    assert sorted(labels, key=budget_sort_key) == ["16", "64", "256", "0.05", "0.5", "1.0", "all"]


def test_resolve_budget_counts_and_all():
    assert resolve_budget("16", 78) == 16
    assert resolve_budget("78", 78) == 78
    assert resolve_budget("all", 78) == 78


def test_resolve_budget_too_large_mentions_the_dataset_size():
    with pytest.raises(UsageError) as info:
        resolve_budget("79", 78)
    assert "N_L=79" in str(info.value)
    assert "78 transitions" in str(info.value)
    with pytest.raises(UsageError, match="12 demonstrations"):
        resolve_budget("13", 12, unit="demonstrations")


@pytest.mark.parametrize(
    ("label", "available", "expected"),
    [
        ("0.5", 78, 39),
        ("0.1", 78, 8),  # 7.8 -> 8
        ("0.3", 10, 3),
        ("0.26", 10, 3),  # 2.6 -> 3
        ("0.24", 10, 2),  # 2.4 -> 2
        ("0.01", 10, 1),  # never zero
        ("1.0", 78, 78),
    ],
)
def test_resolve_budget_fractions_round(label, available, expected):
    assert resolve_budget(label, available) == expected


# --- the split ---------------------------------------------------------------------------


def test_labeled_view_is_consistent_with_the_store(store):
    labeled, _ = split(store, "32", seed=0)
    ends = store.episode_ends
    assert len(labeled) == 32
    assert len(np.unique(labeled.index)) == 32
    assert not np.isin(labeled.index, ends - 1).any()  # never an episode's last frame
    assert np.array_equal(labeled.obs(), np.asarray(store.obs)[labeled.index])
    assert np.array_equal(labeled.next_obs(), np.asarray(store.obs)[labeled.index + 1])
    assert np.array_equal(labeled.actions, np.asarray(store.actions)[labeled.index])
    assert not (labeled.actions == FILLER).any()
    # obs rows encode their frame number: next_obs really is frame i + 1
    assert np.array_equal(labeled.next_obs()[:, 0], labeled.obs()[:, 0] + 1)


def test_labeled_view_rows(store):
    labeled, _ = split(store, "16", seed=3)
    rows = np.array([0, 5, 7])
    assert np.array_equal(labeled.obs(rows)[:, 0], labeled.index[rows])
    assert np.array_equal(labeled.next_obs(rows)[:, 0], labeled.index[rows] + 1)


def test_unlabeled_view_holds_every_transition(store):
    _, unlabeled = split(store, "16", seed=0)
    assert len(unlabeled) == NUM_TRANSITIONS == store.num_transitions
    assert np.array_equal(unlabeled.index, store.transition_indices())
    assert not np.isin(unlabeled.index, store.episode_ends - 1).any()
    assert np.array_equal(unlabeled.next_obs()[:, 0], unlabeled.obs()[:, 0] + 1)


@pytest.mark.parametrize("seed", [0, 1, 2, 7, 123])
def test_budgets_are_nested(store, seed):
    sets = [set(split(store, b, seed)[0].index.tolist()) for b in ("16", "32", "64", "all")]
    assert [len(s) for s in sets] == [16, 32, 64, NUM_TRANSITIONS]
    assert sets[0] < sets[1] < sets[2] < sets[3]


def test_fraction_budget_is_nested_with_counts(store):
    half = set(split(store, "0.5", 4)[0].index.tolist())
    assert len(half) == 39
    assert set(split(store, "32", 4)[0].index.tolist()) < half


def test_split_is_deterministic(store):
    a, _ = split(store, "16", seed=5)
    b, _ = split(store, "16", seed=5)
    assert np.array_equal(a.index, b.index)
    assert np.array_equal(a.actions, b.actions)


def test_different_seeds_label_different_transitions(store):
    indices = {tuple(split(store, "16", seed)[0].index.tolist()) for seed in range(5)}
    assert len(indices) == 5


def test_split_too_large_budget(store):
    with pytest.raises(UsageError, match=f"{NUM_TRANSITIONS} transitions"):
        split(store, str(NUM_TRANSITIONS + 1), seed=0)


def test_demonstration_budget_picks_whole_episodes(store):
    labeled, unlabeled = split(store, "3", seed=0, unit="demonstrations")
    all_transitions = store.transition_indices()
    episode_of_all = store.episode_of_transitions(all_transitions)
    chosen = np.unique(store.episode_of_transitions(labeled.index))
    assert len(chosen) == 3
    expected = all_transitions[np.isin(episode_of_all, chosen)]
    assert np.array_equal(labeled.index, expected)
    assert len(labeled) == sum(EPISODE_LENGTHS[e] - 1 for e in chosen)
    assert len(unlabeled) == NUM_TRANSITIONS


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_demonstration_budgets_are_nested(store, seed):
    def episodes(budget):
        labeled, _ = split(store, budget, seed, unit="demonstrations")
        return set(store.episode_of_transitions(labeled.index).tolist())

    small, large = episodes("2"), episodes("5")
    assert len(small) == 2 and len(large) == 5
    assert small < large


def test_demonstration_budget_too_large(store):
    with pytest.raises(UsageError, match="12 demonstrations"):
        split(store, "13", seed=0, unit="demonstrations")


# --- no label leaks into D_U -------------------------------------------------------------

_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)


def reachable(root: object, limit: int = 10_000) -> list[object]:
    """Every object reachable from ``root`` (classes and modules are not walked into)."""
    seen: dict[int, object] = {}
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj
        assert len(seen) <= limit, "object graph larger than expected"
        if isinstance(obj, _OPAQUE):
            continue
        stack.extend(gc.get_referents(obj))
        if isinstance(obj, np.ndarray) and obj.base is not None:
            stack.append(obj.base)
    return list(seen.values())


def leaks(root: object, store: TransitionStore) -> list[str]:
    """What reachable from ``root`` gives access to the store's actions."""
    actions = store.actions
    found = []
    for obj in reachable(root):
        if isinstance(obj, TransitionStore):
            found.append("TransitionStore")
        elif isinstance(obj, np.ndarray) and np.shares_memory(obj, actions):
            found.append(f"array {obj.shape}")
        elif (
            isinstance(obj, mmap.mmap)
            and not obj.closed
            and len(obj)
            and np.shares_memory(np.frombuffer(obj, dtype=np.uint8), actions)
        ):
            found.append("mmap of actions")
    return found


@dataclass(frozen=True)
class _LeakyView:
    frames: np.ndarray
    extra: dict


def test_leak_detector_finds_leaks(store):
    # the detector itself must be able to fail
    assert leaks(_LeakyView(store.obs, {"k": [store.actions[3:10]]}), store)
    assert "TransitionStore" in leaks(_LeakyView(store.obs, {"k": (store,)}), store)
    assert leaks(_LeakyView(store.obs, {"k": store.actions.base}), store) == ["mmap of actions"]


def test_unlabeled_view_cannot_reach_any_action(store):
    labeled, unlabeled = split(store, "16", seed=0)
    assert leaks(unlabeled, store) == []
    assert len(reachable(unlabeled)) > 3  # the walk did visit the view's contents
    assert any(obj is store.obs for obj in reachable(unlabeled))


def test_unlabeled_view_has_no_action_attribute(store):
    _, unlabeled = split(store, "16", seed=0)
    assert isinstance(unlabeled, UnlabeledView)
    assert [f.name for f in dataclasses.fields(unlabeled)] == [
        "frames",
        "index",
        "extras",
        "episode_ends",
        "source",
    ]
    assert unlabeled.source == store.manifest["files"]["obs.npy"]["sha256"]  # the frames'
    assert not [name for name in dir(unlabeled) if "action" in name.lower()]
    assert not hasattr(unlabeled, "actions")
    with pytest.raises(dataclasses.FrozenInstanceError):
        unlabeled.actions = store.actions  # type: ignore[misc]


def test_labeled_actions_are_a_copy_of_just_the_labels(store):
    labeled, _ = split(store, "16", seed=0)
    assert isinstance(labeled, LabeledView)
    assert labeled.actions.shape == (16,)
    assert not isinstance(labeled.actions, np.memmap)
    assert not np.shares_memory(labeled.actions, store.actions)
    assert labeled.actions.base is None or not np.shares_memory(labeled.actions.base, store.actions)
    # the labeled view reaches the frames and its own 16 labels, never the action file
    assert leaks(labeled, store) == []
