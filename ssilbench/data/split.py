"""The SSIL split: a labeled view of D_L (s, a, s') and an action-free view of D_U (s, s').

Label budgets are nested: for one seed, the transitions labeled at N_L = 16 are among those
labeled at N_L = 64, because every budget takes a prefix of the same seeded permutation.

A store of several tasks (LIBERO-10's multitask store) may group its demonstrations:
``manifest["metadata"]["episode_groups"]`` lists each episode's group (its task). Such a
store's budget counts demonstrations *per group* (the paper's N_L = 2 per task): each group
takes a prefix of its own seeded permutation, so budgets stay nested within every group.
D_U is every transition of the dataset with its action removed (the paper's D^full without
labels); the unlabeled view is built from the frames alone and holds no reference to any
action array.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ssilbench.data.datasets import TransitionStore
from ssilbench.errors import UsageError

_FRACTION = re.compile(r"^(0?\.[0-9]+|1(\.0*)?|[0-9]*\.?[0-9]+e-?[0-9]+)$")  # ASCII only
MAX_COUNT = 2**63 - 1  # a count budget beyond this cannot be a dataset's size


def parse_budget(text: str) -> str:
    """Validate one label budget and return its canonical label: '16', '0.25' or 'all'.

    A count is written in ASCII digits and lies in 1..2^63-1; a fraction in (0, 1] may be
    written with an exponent (1e-05). The label a budget gets parses back to itself."""
    label = str(text).strip().lower()
    if label == "all":
        return label
    if label.isascii() and label.isdigit():
        digits = label.lstrip("0") or "0"  # int() refuses strings of over 4300 digits
        if len(digits) > len(str(MAX_COUNT)) or int(digits) > MAX_COUNT:
            raise UsageError(
                f"Label budget {text!r} is out of range: a count is at most {MAX_COUNT} "
                "(2^63 - 1); use 'all' for the whole dataset."
            )
        if int(digits) <= 0:
            raise UsageError(f"Label budget {text!r} must be a positive count (N_L >= 1).")
        return digits
    if _FRACTION.match(label):
        value = float(label)
        if not 0 < value <= 1:
            raise UsageError(f"Label budget {text!r} must be a positive fraction in (0, 1].")
        return repr(value) if value < 1 else "1.0"
    raise UsageError(
        f"Label budget {text!r} is not a positive count, a fraction in (0, 1] or 'all'; "
        "write e.g. --budgets 16,64,256 or --budgets 0.05,0.5,all."
    )


def parse_budgets(text: str) -> list[str]:
    """A comma-separated, non-empty list of budgets, duplicates removed, order kept. An empty
    item between two commas (16,,64) is refused: it is a budget left out by mistake; one
    trailing comma is allowed."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise UsageError("The budget list is empty: write e.g. --budgets 16,64,256.")
    if not all(parts[:-1]):
        raise UsageError(
            f"The budget list {text!r} has an empty item (two commas in a row, or a comma "
            "first): write e.g. --budgets 16,64,256."
        )
    out: list[str] = []
    for item in filter(None, parts):
        label = parse_budget(item)
        if label not in out:
            out.append(label)
    return out


def budget_sort_key(label: str) -> tuple[int, float]:
    """Counts ascending, then fractions ascending, then 'all'."""
    if label == "all":
        return (2, 0.0)
    if label.isascii() and label.isdigit():
        return (0, float(label))
    return (1, float(label))


def resolve_budget(label: str, available: int, unit: str = "transitions") -> int:
    """The number of items (transitions or demonstrations) a budget label stands for."""
    if label == "all":
        return available
    if label.isascii() and label.isdigit():
        count = int(label)
        if count > available:
            raise UsageError(
                f"Label budget N_L={count} is larger than the dataset ({available} {unit}); "
                f"use at most {available} or 'all'."
            )
        return count
    return max(1, round(float(label) * available))


def permutation(n: int, seed: int) -> np.ndarray:
    """The seeded order in which items are labeled; budgets take prefixes of it."""
    return np.random.Generator(np.random.PCG64(seed)).permutation(n)


@dataclass(frozen=True)
class _Transitions:
    """Transitions (s, s') as frame indices into the stored frames.

    ``extras`` are the store's other per-frame observation arrays and ``episode_ends`` its
    episode boundaries, for methods that read windows of frames around a transition.
    """

    frames: np.ndarray
    index: np.ndarray
    extras: dict[str, np.ndarray] = field(default_factory=dict, kw_only=True)
    episode_ends: np.ndarray | None = field(default=None, kw_only=True)
    source: str = field(default="", kw_only=True)
    """The store's recorded sha256 of ``frames`` ("" when unknown): with the index, it
    identifies the view's transitions without reading a frame."""

    def __len__(self) -> int:
        return len(self.index)

    def obs(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        return np.asarray(self.frames[self.index[rows]])

    def next_obs(self, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
        return np.asarray(self.frames[self.index[rows] + 1])


@dataclass(frozen=True)
class UnlabeledView(_Transitions):
    """D_U: transitions (s, s') only. There is no action here to reach."""


@dataclass(frozen=True)
class LabeledView(_Transitions):
    """D_L: N_L transitions (s, a, s') with their actions (a copy of just those actions)."""

    actions: np.ndarray


def episode_groups(store: TransitionStore) -> np.ndarray | None:
    """Each episode's group where the store declares groups (``metadata.episode_groups``),
    else None. A declaration of the wrong length is a damaged store."""
    groups = store.manifest.get("metadata", {}).get("episode_groups")
    if groups is None:
        return None
    out = np.asarray(groups, dtype=np.int64)
    if out.shape != (store.num_episodes,):
        raise UsageError(
            f"The dataset at {store.root} declares {out.size} episode groups for "
            f"{store.num_episodes} episodes; import it again."
        )
    return out


def available_items(store: TransitionStore, unit: str = "transitions") -> int:
    """How many items a budget may take: transitions, demonstrations, or, for a store of
    grouped demonstrations, the demonstrations of its smallest group (a budget counts per
    group there)."""
    if unit != "demonstrations":
        return store.num_transitions
    groups = episode_groups(store)
    if groups is None:
        return store.num_episodes
    return int(np.bincount(groups).min(initial=store.num_episodes)) if len(groups) else 0


def grouped_episodes(groups: np.ndarray, budget: str, seed: int) -> np.ndarray:
    """The episodes a budget labels in a grouped store, ascending: in every group, the first
    N_L (or the fraction's share, at least one) of a permutation seeded by (seed, group),
    so that a larger budget keeps a smaller one's episodes in each group."""
    smallest = int(np.bincount(groups).min()) if len(groups) else 0
    resolve_budget(budget, smallest, "demonstrations of the smallest task")  # refuses too many
    chosen = []
    for group in np.unique(groups):
        members = np.flatnonzero(groups == group)
        n_l = resolve_budget(budget, len(members), "demonstrations")
        order = np.random.Generator(np.random.PCG64([seed, int(group)])).permutation(len(members))
        chosen.append(members[order[:n_l]])
    return np.sort(np.concatenate(chosen))


def split(
    store: TransitionStore, budget: str, seed: int, unit: str = "transitions"
) -> tuple[LabeledView, UnlabeledView]:
    """The labeled and unlabeled views for (dataset, N_L, seed): a pure function of them."""
    transitions = store.transition_indices()
    groups = episode_groups(store) if unit == "demonstrations" else None
    if groups is not None:
        chosen = grouped_episodes(groups, budget, seed)
        labeled = transitions[np.isin(store.episode_of_transitions(transitions), chosen)]
    elif unit == "demonstrations":
        n_l = resolve_budget(budget, store.num_episodes, unit)
        chosen = np.sort(permutation(store.num_episodes, seed)[:n_l])
        labeled = transitions[np.isin(store.episode_of_transitions(transitions), chosen)]
    else:
        n_l = resolve_budget(budget, len(transitions), unit)
        labeled = transitions[np.sort(permutation(len(transitions), seed)[:n_l])]
    actions = np.array(store.actions[labeled])  # a copy: the view cannot see other labels
    shared = {"frames": store.obs, "extras": store.extras, "episode_ends": store.episode_ends,
              "source": store.content_id("obs")}  # fmt: skip
    return (
        LabeledView(index=labeled, actions=actions, **shared),
        UnlabeledView(index=transitions, **shared),
    )
