"""Registers the ``maze`` and ``grid`` environment families; imports nothing heavy so listing
stays fast."""

from ssilbench.api import registers

ssilbench_register_environments = registers(
    (
        "maze",
        "ssilbench_maze.environment:MazeEnvironment",
        "Random mazes (10x10, 20x20, 50x50) with a shortest-path expert and the true v*(s); "
        "optional no-op dynamics and goals per episode.",
    ),
    (
        "grid",
        "ssilbench_maze.grid:GridEnvironment",
        "Open 20x20 grid with a stochastic optimal expert (right w.p. p_right, else down).",
    ),
)
