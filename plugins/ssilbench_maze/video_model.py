"""The maze's ground-truth video model v*: a lookup table over cells (and goals), in torch.

Kept apart from ``environment.py`` so that listing the maze environment imports no torch.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from ssilbench.api import VideoModel
from ssilbench.kit import as_model_input
from ssilbench_maze.expert import GoalTables
from ssilbench_maze.generate import Maze
from ssilbench_maze.gym_env import PALETTES, MazeObserver, Palette


class MazeVideoModel(VideoModel):
    """The ground-truth video model as a lookup table over cells (and goals).

    Without no-ops v*(s) = f(s, pi*(s)); with goals per episode v*(s, g) = f(s, pi*_g(s))
    and the goal (features or pixel) is kept. With no-op probability p the next state is s
    with probability p and v*(s) otherwise: :meth:`outcomes` lists both (leaving out one of
    probability 0) and :meth:`predict` returns the more likely (v*(s) on a tie, p = 0.5).
    States without an expert action (the goal, walls, positions off the grid, images with
    no agent pixel) move to themselves.
    """

    def __init__(
        self,
        maze: Maze,
        kind: Literal["position", "image"],
        noop: float = 0.0,
        tables: GoalTables | None = None,
        palette: Palette = "ssilbench",
    ) -> None:
        self.maze = maze
        self.kind = kind
        self.noop = float(noop)
        self.per_episode = tables is not None
        # One row of next cells per goal; a fixed-goal maze has a single row, row 0.
        self._row: torch.Tensor | None = None
        if tables is None:
            self._next = torch.from_numpy(maze.expert.next_cell.copy())[None]
        else:
            self._next = torch.from_numpy(tables.next_cell.copy())
            self._row = torch.from_numpy(tables.row.copy())
        self._positions = torch.as_tensor(maze.expert.positions(np.arange(maze.walls.size)))
        if kind == "image":
            observer = MazeObserver(maze, "image", goal_features=self.per_episode, palette=palette)
            self._background = as_model_input(observer.base)
            colours = [PALETTES[palette]["agent"], PALETTES[palette]["agent_on_goal"]]
            self._agent_colours = torch.tensor(colours, dtype=torch.float32) / 255.0

    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        if self.noop > 0.5:
            return obs.clone()
        return self.move(obs)

    def outcomes(self, obs: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out = []
        if self.noop > 0.0:
            out.append((torch.full((len(obs),), self.noop, device=obs.device), obs))
        if self.noop < 1.0:
            out.append(
                (torch.full((len(obs),), 1.0 - self.noop, device=obs.device), self.move(obs))
            )
        return out

    def move(self, obs: torch.Tensor) -> torch.Tensor:
        """v*(s): the state after the expert's action when it is not a no-op."""
        if self.kind == "position":
            return self._move_positions(obs)
        return self._move_images(obs)

    def _next_cells(self, cells: torch.Tensor, goals: torch.Tensor | None) -> torch.Tensor:
        device = cells.device
        if goals is None or self._row is None:
            rows = torch.zeros_like(cells)
        else:
            rows = self._row.to(device)[goals]
        valid = rows >= 0
        nxt = self._next.to(device)[rows.clamp_min(0), cells]
        return torch.where(valid, nxt, cells)

    def _cells(self, xy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Flat cells of rounded (x, y) columns, and whether each lies on the grid."""
        rows, cols = self.maze.shape
        xy = xy.round().long()
        x, y = xy[:, 0], xy[:, 1]
        inside = (x >= 0) & (x < cols) & (y >= 0) & (y < rows)
        return torch.where(inside, y * cols + x, torch.zeros_like(x)), inside

    def _move_positions(self, obs: torch.Tensor) -> torch.Tensor:
        cells, inside = self._cells(obs[:, :2])
        goals = None
        if self.per_episode:
            goals, goal_inside = self._cells(obs[:, 2:4])
            inside = inside & goal_inside
        table = self._positions.to(obs.device)
        moved = table[self._next_cells(cells, goals)].to(obs.dtype)
        out = obs.clone()
        out[:, :2] = torch.where(inside[:, None], moved, obs[:, :2])
        return out

    def _move_images(self, obs: torch.Tensor) -> torch.Tensor:
        # The agent is the only pixel with a full red channel and an empty blue one.
        agent = ((obs[:, 0] > 0.5) & (obs[:, 2] < 0.5)).flatten(1)
        rows = agent.any(dim=1).nonzero().squeeze(1)
        cells = agent[rows].to(torch.uint8).argmax(dim=1)
        goals = None
        if self.per_episode:
            # The goal is the green pixel, or the agent's own cell when it stands on it.
            green = ((obs[:, 0] < 0.5) & (obs[:, 1] > 0.5) & (obs[:, 2] < 0.5)).flatten(1)[rows]
            goals = torch.where(green.any(dim=1), green.to(torch.uint8).argmax(dim=1), cells)
        nxt = self._next_cells(cells, goals)
        goal_reached = nxt == (goals if goals is not None else self.maze.goal)
        positions = self._positions.to(obs.device)
        here, there = positions[cells], positions[nxt]
        background = self._background.to(obs.device, obs.dtype)
        colours = self._agent_colours.to(obs.device, obs.dtype)
        out = obs.clone()
        # Move the agent: restore the background under it, then draw it at v*(s).
        out[rows, :, here[:, 1], here[:, 0]] = background[:, here[:, 1], here[:, 0]].T
        out[rows, :, there[:, 1], there[:, 0]] = colours[goal_reached.long()]
        return out
