"""Seeded random mazes: the random-walk wall algorithm of mazelab's ``random_maze``.

The grid has odd shape ((height // 2) * 2 + 1, (width // 2) * 2 + 1) and walls on its
border. ``density`` wall "islands" start at random even coordinates; each extends by up to
``complexity`` random 2-cell steps, moving only into free cells and walling the cell in
between. The walls therefore form trees hanging off the border or floating inside, never
closing a loop, so the free cells stay connected. The goal is a free cell drawn with the
same seeded generator; the feasible states are the free cells from which it is reachable.

mazelab draws from numpy's global legacy generator; here every draw comes from
``np.random.Generator(np.random.PCG64(seed))``, so layouts differ from mazelab's for the
same seed while the distribution of mazes is the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ssilbench_maze.expert import Expert, solve

COMPLEXITY = 0.75
DENSITY = 0.75


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


def generate_maze(size: int, seed: int) -> Maze:
    """The ``size`` x ``size`` maze (an odd grid of ``size // 2 * 2 + 1`` cells) of ``seed``."""
    rng = np.random.Generator(np.random.PCG64(seed))
    walls = random_walls(size, size, rng)
    walls.setflags(write=False)
    free = np.flatnonzero(~walls.reshape(-1))
    goal = int(free[rng.integers(len(free))])
    return Maze(seed=seed, walls=walls, goal=goal, expert=solve(walls, goal))
