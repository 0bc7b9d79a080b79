"""The deterministic shortest-path expert, the dynamics f(s, a) and v*(s) = f(s, pi*(s)).

Cells are addressed by their flat index ``y * width + x`` so that every table below is a
plain 1-D array and lookups stay vectorised. Positions are (x, y): x is the column, y the
row, and "up" decreases y (row 0 is drawn at the top of an image).
"""

from __future__ import annotations

from collections import deque
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
