"""Seeded random mazes: the random-walk wall algorithm of mazelab's ``random_maze``.

The grid has odd shape ((height // 2) * 2 + 1, (width // 2) * 2 + 1) and walls on its
border. ``density`` wall "islands" start at random even coordinates; each extends by up to
``complexity`` random 2-cell steps, moving only into free cells and walling the cell in
between. The walls therefore form trees hanging off the border or floating inside, never
closing a loop, so the free cells stay connected. The goal is a free cell drawn with the
same seeded generator; the feasible states are the free cells from which it is reachable.

Two layouts per size (the maze option ``layout``):

- ``suite``: every draw comes from ``np.random.Generator(np.random.PCG64(seed))``, one
  layout per ``maze_seed``; a walker boxed in by walls stops early (its draws are made up
  front, so stopping changes nothing).
- ``paper``: the paper's code's (its vendored mazelab ``random_maze``, called with its
  default ``random_state=42``): numpy's legacy ``RandomState(42)``, one integer draw per
  island coordinate and per step of a walk, boxed in or not, so one layout per size
  whatever ``maze_seed`` is: 50, 205 and 1,281 free cells for 10x10, 20x20 and 50x50. The
  paper's code drew its goal (and start) cells with numpy's unseeded global generator, so
  they cannot be recovered; here the goal is a free cell drawn uniformly with
  ``PCG64(maze_seed)``, as for the suite's layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from ssilbench_maze.expert import Expert, solve

COMPLEXITY = 0.75
DENSITY = 0.75
PAPER_LAYOUT_SEED = 42
"""The ``random_state`` of the paper's code's maze generator: one layout per size."""
Layout = Literal["suite", "paper"]


def odd_shape(width: int, height: int) -> tuple[int, int]:
    """The (rows, columns) of the cell grid for a ``width`` x ``height`` maze."""
    return (height // 2) * 2 + 1, (width // 2) * 2 + 1


def random_walls(
    width: int,
    height: int,
    rng: np.random.Generator,
    complexity: float = COMPLEXITY,
    density: float = DENSITY,
) -> np.ndarray:
    """A boolean wall grid (True = wall) of shape ``odd_shape(width, height)``."""
    rows, cols = odd_shape(width, height)
    steps = int(complexity * (5 * (rows + cols)))
    islands = int(density * ((rows // 2) * (cols // 2)))
    grid = [[False] * cols for _ in range(rows)]
    for x in range(cols):
        grid[0][x] = grid[rows - 1][x] = True
    for y in range(rows):
        grid[y][0] = grid[y][cols - 1] = True
    # All draws happen up front (vectorised); the walk itself is plain Python on lists,
    # which is far faster than per-step numpy calls for ~10^5 steps.
    starts_x = (rng.integers(0, cols // 2 + 1, size=islands) * 2).tolist()
    starts_y = (rng.integers(0, rows // 2 + 1, size=islands) * 2).tolist()
    choices = rng.random((islands, steps)).tolist()
    for x, y, draws in zip(starts_x, starts_y, choices, strict=True):
        grid[y][x] = True
        for u in draws:
            neighbours = []
            if x > 1:
                neighbours.append((y, x - 2))
            if x < cols - 2:
                neighbours.append((y, x + 2))
            if y > 1:
                neighbours.append((y - 2, x))
            if y < rows - 2:
                neighbours.append((y + 2, x))
            free = [cell for cell in neighbours if not grid[cell[0]][cell[1]]]
            if not free:
                # Walls are never removed, so a walker boxed in now stays boxed in.
                break
            ny, nx = neighbours[int(u * len(neighbours))]
            if not grid[ny][nx]:
                grid[ny][nx] = True
                grid[(y + ny) // 2][(x + nx) // 2] = True
                x, y = nx, ny
    return np.array(grid, dtype=bool)


class LegacyIntegers:
    """``np.random.RandomState(seed).randint(0, n)``, one scalar at a time, from the raw
    32-bit Mersenne Twister stream drawn in blocks: numpy's legacy bounded integers take
    the next 32-bit word masked to the smallest all-ones mask that covers n - 1 and draw
    again while the value is above n - 1 (n = 1 draws nothing). The same values as the
    scalar calls, about ten times faster in a Python loop."""

    BLOCK = 1 << 16

    def __init__(self, seed: int) -> None:
        self._bits = np.random.MT19937()
        self._bits.state = np.random.RandomState(seed).get_state(legacy=False)
        self._words: list[int] = []
        self._next = 0

    def _word(self) -> int:
        if self._next == len(self._words):
            self._words = self._bits.random_raw(self.BLOCK).tolist()
            self._next = 0
        self._next += 1
        return self._words[self._next - 1]

    def below(self, n: int) -> int:
        """The next ``randint(0, n)``."""
        top = n - 1
        if top == 0:
            return 0
        mask = (1 << top.bit_length()) - 1
        while (value := self._word() & mask) > top:
            pass
        return value


@lru_cache(maxsize=8)
def paper_walls(width: int, height: int) -> np.ndarray:
    """The wall grid (True = wall, read-only) the paper's code generates for a ``width`` x
    ``height`` maze: the same random walk as :func:`random_walls`, drawn with
    ``RandomState(PAPER_LAYOUT_SEED)`` in its order (x then y of each island, then one draw
    per step of the walk, also where every neighbour is already a wall)."""
    draw = LegacyIntegers(PAPER_LAYOUT_SEED).below
    rows, cols = odd_shape(width, height)
    steps = int(COMPLEXITY * (5 * (rows + cols)))
    islands = int(DENSITY * ((rows // 2) * (cols // 2)))
    grid = [[False] * cols for _ in range(rows)]
    for x in range(cols):
        grid[0][x] = grid[rows - 1][x] = True
    for y in range(rows):
        grid[y][0] = grid[y][cols - 1] = True
    for _ in range(islands):
        x = draw(cols // 2 + 1) * 2
        y = draw(rows // 2 + 1) * 2
        grid[y][x] = True
        for _ in range(steps):
            neighbours = []
            if x > 1:
                neighbours.append((y, x - 2))
            if x < cols - 2:
                neighbours.append((y, x + 2))
            if y > 1:
                neighbours.append((y - 2, x))
            if y < rows - 2:
                neighbours.append((y + 2, x))
            ny, nx = neighbours[draw(len(neighbours))]
            if not grid[ny][nx]:
                grid[ny][nx] = True
                grid[(y + ny) // 2][(x + nx) // 2] = True
                x, y = nx, ny
    walls = np.array(grid, dtype=bool)
    walls.setflags(write=False)
    return walls


@dataclass(frozen=True)
class Maze:
    """One generated layout with its goal and expert."""

    seed: int
    walls: np.ndarray
    goal: int
    expert: Expert

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.walls.shape[0]), int(self.walls.shape[1])

    @property
    def goal_position(self) -> tuple[int, int]:
        x, y = self.expert.positions(self.goal)
        return int(x), int(y)

    @property
    def feasible(self) -> np.ndarray:
        """(rows, cols) mask of the free cells from which the goal is reachable."""
        return (self.expert.distance >= 0).reshape(self.walls.shape)


def generate_maze(size: int, seed: int, layout: Layout = "suite") -> Maze:
    """The ``size`` x ``size`` maze (an odd grid of ``size // 2 * 2 + 1`` cells) of ``seed``:
    its layout drawn from ``seed`` (``suite``) or the paper's code's (``paper``), and its
    goal drawn from ``seed``."""
    rng = np.random.Generator(np.random.PCG64(seed))
    if layout == "paper":
        walls = paper_walls(size, size)
    else:
        walls = random_walls(size, size, rng)
        walls.setflags(write=False)
    free = np.flatnonzero(~walls.reshape(-1))
    goal = int(free[rng.integers(len(free))])
    return Maze(seed=seed, walls=walls, goal=goal, expert=solve(walls, goal))
