"""Registers the ``maze`` and ``grid`` environment families; imports nothing heavy so listing
stays fast."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ssilbench.api import hookimpl

if TYPE_CHECKING:
    from ssilbench.api import BoundRegistry


@hookimpl
def ssilbench_register_environments(registry: BoundRegistry) -> None:
    registry.add(
        "maze",
        "ssilbench_maze.environment:MazeEnvironment",
        "Random mazes (10x10, 20x20, 50x50) with a shortest-path expert and the true v*(s); "
        "optional no-op dynamics and goals per episode.",
    )
    registry.add(
        "grid",
        "ssilbench_maze.grid:GridEnvironment",
        "Open 20x20 grid with a stochastic optimal expert (right w.p. p_right, else down).",
    )
