"""The deterministic shortest-path expert, the dynamics f(s, a) and v*(s) = f(s, pi*(s)).

Cells are addressed by their flat index ``y * width + x`` so that every table below is a
plain 1-D array and lookups stay vectorised. Positions are (x, y): x is the column, y the
row, and "up" decreases y (row 0 is drawn at the top of an image).

:class:`Expert` holds the tables for one goal; :class:`GoalTables` stacks them for every
goal of a maze (goal-conditioned tasks). The no-op helpers implement the stochastic
dynamics in which the agent stays where it is with probability ``noop`` whatever it does.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass
from functools import cached_property

import numpy as np

ACTION_NAMES = ("right", "left", "up", "down")
# (dx, dy) per action; the order is also the expert's tie-break order.
MOVES = np.array([[1, 0], [-1, 0], [0, -1], [0, 1]], dtype=np.int64)
NO_ACTION = -1


def transition(walls: np.ndarray, cells: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """f(s, a) for batches of cells and actions: a move into a wall (or off the grid) stays."""
    height, width = walls.shape
    cells = np.asarray(cells, dtype=np.int64)
    moves = MOVES[np.asarray(actions, dtype=np.int64)]
    x = cells % width + moves[..., 0]
    y = cells // width + moves[..., 1]
    inside = (x >= 0) & (x < width) & (y >= 0) & (y < height)
    target = np.where(inside, y * width + x, cells)
    return np.where(walls.reshape(-1)[target], cells, target)


def distances_to_goal(walls: np.ndarray, goal: int) -> np.ndarray:
    """BFS distance (in moves) from every cell to ``goal``; -1 for walls and cut-off cells."""
    height, width = walls.shape
    free = ~walls.reshape(-1)
    distance = np.full(height * width, -1, dtype=np.int64)
    distance[goal] = 0
    queue = deque([goal])
    # Moves are reversible, so distances from the goal equal distances to it.
    steps = (1, -1, -width, width)
    while queue:
        cell = queue.popleft()
        x = cell % width
        for step in steps:
            if (step == 1 and x == width - 1) or (step == -1 and x == 0):
                continue
            other = cell + step
            if 0 <= other < height * width and free[other] and distance[other] < 0:
                distance[other] = distance[cell] + 1
                queue.append(other)
    return distance


def expert_actions(walls: np.ndarray, distance: np.ndarray) -> np.ndarray:
    """The first action (in ``MOVES`` order) that brings each cell one move closer to the goal.

    Cells without such an action (walls, cut-off cells, the goal) get ``NO_ACTION``.
    """
    cells = np.arange(distance.size)
    action = np.full(distance.size, NO_ACTION, dtype=np.int64)
    # Go through the actions in reverse so that the earliest one wins the tie-break.
    for a in reversed(range(len(MOVES))):
        target = transition(walls, cells, np.full_like(cells, a))
        closer = (distance > 0) & (target != cells) & (distance[target] == distance - 1)
        action[closer] = a
    return action


@dataclass(frozen=True)
class Expert:
    """The expert's tables over all cells of one maze with a fixed goal."""

    walls: np.ndarray
    goal: int
    distance: np.ndarray
    action: np.ndarray
    next_cell: np.ndarray

    @property
    def height(self) -> int:
        return int(self.walls.shape[0])

    @property
    def width(self) -> int:
        return int(self.walls.shape[1])

    @cached_property
    def sources(self) -> np.ndarray:
        """Feasible non-goal cells, ascending: the states with an expert action (the test set)."""
        return np.flatnonzero(self.action != NO_ACTION)

    @property
    def longest_path(self) -> int:
        return int(self.distance.max())

    def positions(self, cells: np.ndarray) -> np.ndarray:
        """(x, y) of each cell as int64, shape (..., 2)."""
        cells = np.asarray(cells, dtype=np.int64)
        return np.stack([cells % self.width, cells // self.width], axis=-1)

    def cells(self, positions: np.ndarray) -> np.ndarray:
        """Flat cell index of each (x, y) position."""
        positions = np.asarray(positions, dtype=np.int64)
        return positions[..., 1] * self.width + positions[..., 0]

    def path(self, start: int) -> np.ndarray:
        """The cells the expert visits from ``start`` to the goal, both included."""
        length = int(self.distance[start])
        if length < 0:
            raise ValueError(f"cell {start} cannot reach the goal")
        cells = np.empty(length + 1, dtype=np.int64)
        cells[0] = start
        for i in range(length):
            cells[i + 1] = self.next_cell[cells[i]]
        return cells


def solve(walls: np.ndarray, goal: int) -> Expert:
    """The expert for ``walls`` and ``goal``: BFS distances, actions and v*."""
    distance = distances_to_goal(walls, goal)
    action = expert_actions(walls, distance)
    cells = np.arange(distance.size)
    moved = transition(walls, cells, np.maximum(action, 0))
    # v* of a cell without an expert action (the goal, walls) is the cell itself.
    next_cell = np.where(action != NO_ACTION, moved, cells)
    for table in (distance, action, next_cell):
        table.setflags(write=False)
    return Expert(walls=walls, goal=goal, distance=distance, action=action, next_cell=next_cell)


def rollout_paths(expert: Expert, starts: np.ndarray) -> list[np.ndarray]:
    """One expert path (start ... goal) per start cell."""
    return [expert.path(int(start)) for start in starts]


def cover_paths(expert: Expert) -> list[np.ndarray]:
    """Paths in which every feasible non-goal cell is a transition source exactly once.

    The shortest-path tree is cut into paths: starting from the deepest uncovered cell
    (ties by cell index), follow the expert until the goal or an already-covered cell.
    The end cell of each path is the only frame that repeats (a junction or the goal).
    """
    order = expert.sources[np.argsort(-expert.distance[expert.sources], kind="stable")]
    covered = np.zeros(expert.distance.size, dtype=bool)
    paths = []
    for start in order:
        if covered[start]:
            continue
        cells = [int(start)]
        while cells[-1] != expert.goal and not covered[cells[-1]]:
            covered[cells[-1]] = True
            cells.append(int(expert.next_cell[cells[-1]]))
        paths.append(np.asarray(cells, dtype=np.int64))
    return paths


def stays(rng: np.random.Generator, noop: float) -> bool:
    """Whether one step is a no-op: always for ``noop >= 1``, never (and no draw) for 0."""
    if noop <= 0.0:
        return False
    return noop >= 1.0 or bool(rng.random() < noop)


def noisy_path(
    expert: Expert, start: int, noop: float, rng: np.random.Generator, max_steps: int
) -> np.ndarray:
    """The cells of one expert episode under no-op dynamics, cut after ``max_steps`` steps.

    Each step draws from ``rng`` (see :func:`stays`); with ``noop = 0`` this is
    ``expert.path(start)`` (as long as that fits in ``max_steps``).
    """
    cells = [int(start)]
    cell = int(start)
    while cell != expert.goal and len(cells) <= max_steps:
        if not stays(rng, noop):
            cell = int(expert.next_cell[cell])
        cells.append(cell)
    return np.asarray(cells, dtype=np.int64)


def split_at_noops(path: np.ndarray, noops: np.ndarray) -> list[np.ndarray]:
    """Episodes holding the transitions of ``path`` with some turned into no-ops.

    Transition i of ``path`` goes from ``path[i]`` to ``path[i + 1]``; where ``noops[i]`` is
    true it goes from ``path[i]`` to ``path[i]`` instead, which ends the episode there (its
    last frame repeats its source) and a new one starts at ``path[i + 1]``. Every source of
    ``path`` stays the source of exactly one transition; an episode of a single frame (a
    no-op on the last transition) is dropped.
    """
    episodes: list[np.ndarray] = []
    current = [int(path[0])]
    for i in range(len(path) - 1):
        if noops[i]:
            current.append(int(path[i]))
            episodes.append(np.asarray(current, dtype=np.int64))
            current = [int(path[i + 1])]
        else:
            current.append(int(path[i + 1]))
    if len(current) >= 2:
        episodes.append(np.asarray(current, dtype=np.int64))
    return episodes


def neighbour_table(walls: np.ndarray) -> np.ndarray:
    """f(s, a) for every cell and action, shape (cells, actions)."""
    cells = np.arange(walls.size)
    return np.stack(
        [transition(walls, cells, np.full_like(cells, a)) for a in range(len(MOVES))], axis=1
    )


def all_distances(walls: np.ndarray, goals: np.ndarray) -> np.ndarray:
    """BFS distances from every cell to each of ``goals``: shape (goals, cells), int32."""
    free = ~walls.reshape(-1)
    adjacency = [
        sorted({int(n) for n in row if n != cell}) if free[cell] else []
        for cell, row in enumerate(neighbour_table(walls).tolist())
    ]
    out = np.full((len(goals), walls.size), -1, dtype=np.int32)
    for index, goal in enumerate(np.asarray(goals).tolist()):
        distance = [-1] * walls.size
        distance[goal] = 0
        queue = [goal]
        # Iterating a list while appending to it visits the cells in BFS order.
        for cell in queue:
            step = distance[cell] + 1
            for other in adjacency[cell]:
                if distance[other] < 0:
                    distance[other] = step
                    queue.append(other)
        out[index] = distance
    return out


class GoalTables:
    """The expert's tables for every goal of one maze (goal-conditioned tasks).

    A free cell is a possible goal when at least one other cell can reach it. Row ``r`` of
    ``distance``, ``action`` and ``next_cell`` belongs to goal ``goals[r]``; ``row[cell]``
    is the row of a goal cell and -1 for any other cell. The tables agree with
    :func:`solve` for each goal (same BFS distances and tie-break).
    """

    def __init__(self, walls: np.ndarray) -> None:
        self.walls = walls
        free = np.flatnonzero(~walls.reshape(-1))
        distance = all_distances(walls, free)
        keep = (distance > 0).any(axis=1)
        self.goals = free[keep]
        self.distance = distance[keep]
        self.row = np.full(walls.size, -1, dtype=np.int64)
        self.row[self.goals] = np.arange(len(self.goals))
        nbr = neighbour_table(walls)
        cells = np.arange(walls.size)
        action = np.full(self.distance.shape, NO_ACTION, dtype=np.int8)
        # As in expert_actions: the earliest action that gets one step closer wins.
        for a in reversed(range(len(MOVES))):
            target = nbr[:, a]
            closer = (
                (self.distance > 0)
                & (target != cells)
                & (self.distance[:, target] == self.distance - 1)
            )
            action[closer] = a
        self.action = action
        moved = nbr[cells[None, :], np.maximum(action, 0)]
        self.next_cell = np.where(action != NO_ACTION, moved, cells[None, :]).astype(np.int64)
        for table in (self.goals, self.distance, self.row, self.action, self.next_cell):
            table.setflags(write=False)
        self._experts: dict[int, Expert] = {}

    @property
    def longest_path(self) -> int:
        """The longest shortest path over all (start, goal) pairs."""
        return int(self.distance.max())

    @property
    def num_pairs(self) -> int:
        """Feasible (state, goal) pairs with state != goal."""
        return int((self.action != NO_ACTION).sum())

    def expert(self, goal: int) -> Expert:
        """The expert of one goal (cached)."""
        goal = int(goal)
        if goal not in self._experts:
            r = int(self.row[goal])
            if r < 0:
                raise ValueError(f"cell {goal} is not a goal of this maze")
            self._experts[goal] = Expert(
                walls=self.walls,
                goal=goal,
                distance=self.distance[r].astype(np.int64),
                action=self.action[r].astype(np.int64),
                next_cell=self.next_cell[r],
            )
        return self._experts[goal]

    def pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """Every feasible (state, goal) pair with state != goal: goals ascending, then states."""
        rows, cells = np.nonzero(self.action != NO_ACTION)
        return cells.astype(np.int64), self.goals[rows]

    def actions(self, cells: np.ndarray, goals: np.ndarray) -> np.ndarray:
        """pi*_g(s) for batches of cells and goals (NO_ACTION where there is none)."""
        return self.action[self.row[goals], cells].astype(np.int64)

    def next_cells(self, cells: np.ndarray, goals: np.ndarray) -> np.ndarray:
        """v*_g(s) = f(s, pi*_g(s)) for batches of cells and goals."""
        return self.next_cell[self.row[goals], cells]


_TABLES: OrderedDict[tuple[tuple[int, ...], bytes], GoalTables] = OrderedDict()
_TABLES_KEPT = 4


def goal_tables(walls: np.ndarray) -> GoalTables:
    """The :class:`GoalTables` of a wall grid, computed once per layout (a small LRU cache)."""
    key = (tuple(walls.shape), np.packbits(walls).tobytes())
    if key in _TABLES:
        _TABLES.move_to_end(key)
        return _TABLES[key]
    tables = GoalTables(walls)
    _TABLES[key] = tables
    while len(_TABLES) > _TABLES_KEPT:
        _TABLES.popitem(last=False)
    return tables
