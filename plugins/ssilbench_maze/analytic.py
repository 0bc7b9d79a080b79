"""Exact inverse dynamics models of the maze, written as members of the low-capacity classes.

The paper's appendix "Explicit expressions for simple ground-truth IDM" shows that the maze's
ground-truth IDM h*(a | s, s') lies in the closure of the small model classes: a linear
classifier (LC) for position states and a one-layer CNN with global max-pooling (1L CNN) for
image states. This module builds both with exactly the modules of the ``lc`` and ``cnn1``
architectures, looked up by name in the architecture registry (whichever plugin provides
them), and overwrites their weights, so that a test can check the claim on real mazes:
``VMIDMPolicy(linear_idm(), task.video_model())`` is the expert.

Both models return logits; softmax(logits) tends to h* as ``temperature`` goes to 0.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ssilbench.kit import architecture, as_model_input
from ssilbench_maze.expert import MOVES, solve
from ssilbench_maze.generate import Maze
from ssilbench_maze.gym_env import background, render_cells

__all__ = ["conv_idm", "kernel_patterns", "linear_idm", "move_patches"]

NUM_ACTIONS = len(MOVES)
# A 5x5 grid of border walls around a 3x3 free room: the room is exactly one kernel patch,
# and the agent in its centre can move in all four directions without leaving it.
_ROOM = 5
_CENTRE = 2
_PATCH = slice(1, 4)
# A corner of the room is never reached by one move from the centre: the goal sits there
# when a pattern should show a move between free cells only.
_CORNER = (1, 1)


def linear_idm(temperature: float = 0.01) -> nn.Module:
    """The LC IDM of the appendix (section "Positions as states"): softmax(W (s' - s) / tau).

    Row a of W (4 x 2) is the displacement (dx, dy) of action a, so the logit of a is the
    inner product of the observed move with a's move: 1/tau for the action taken, 0 or -1/tau
    for the others. The paper writes W = [[1, -1, 0, 0], [0, 0, 1, -1]]^T with "up" as +y;
    this maze draws row 0 at the top, so "up" is -y and W's rows are ``expert.MOVES``
    (right (1, 0), left (-1, 0), up (0, -1), down (0, 1)). The map (s, s') -> W (s' - s) / tau
    is the linear layer [-W, W] / tau on the stacked input (x, y, x', y') with bias 0.

    Returns the ``lc`` architecture's module ``Sequential(Flatten, Linear(4, 4))``.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    net = architecture("lc").build((4,), NUM_ACTIONS)
    w = torch.as_tensor(MOVES, dtype=torch.float32)
    linear = net[1]
    with torch.no_grad():
        linear.weight.copy_(torch.cat([-w, w], dim=1) / temperature)
        linear.bias.zero_()
    return net.eval()


def _room(goal: tuple[int, int]) -> Maze:
    walls = np.ones((_ROOM, _ROOM), dtype=bool)
    walls[_PATCH, _PATCH] = False
    walls.setflags(write=False)
    cell = goal[1] * _ROOM + goal[0]
    return Maze(seed=0, walls=walls, goal=cell, expert=solve(walls, cell))


def move_patches(action: int, onto_goal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_a, x'_a): 3x3 patches (3, 3, 3) of s and s' around a move ``action`` from the centre.

    The frames are drawn by the maze's own renderer (``gym_env.background`` and
    ``render_cells``) and scaled like every model input (``as_model_input``: /255), so the
    patterns use exactly the colours the network sees. With ``onto_goal`` the agent steps
    onto the goal cell (the goal pixel turns from the goal colour to the agent-on-goal
    colour); otherwise it steps between free cells and the goal is outside the move.
    """
    dx, dy = (int(v) for v in MOVES[action])
    target = (_CENTRE + dx, _CENTRE + dy)
    maze = _room(target if onto_goal else _CORNER)
    cells = maze.expert.cells(np.array([(_CENTRE, _CENTRE), target]))
    before, after = as_model_input(render_cells(maze, background(maze), cells))
    return before[:, _PATCH, _PATCH], after[:, _PATCH, _PATCH]


def kernel_patterns(goal_moves: bool = True) -> torch.Tensor:
    """V^a for every action, shape (4, 3, 3, 3): the sum of x'_a - x_a over a's move patterns.

    ``goal_moves=False`` is the appendix's kernel V^a = x'_a - x_a of a move between free
    cells. The appendix ignores the goal pixel; in this renderer the agent turns yellow on
    the goal, so the goal pixel of a move onto the goal changes by agent_on_goal - goal =
    (1, 0, 0), which is orthogonal to every V^a (agent - free = (0, -1, -1)). That move then
    scores the same for all four actions, and the IDM is uniform there. ``goal_moves=True``
    adds the move onto the goal as a second pattern, V^a = (x'_a - x_a) + (x'^g_a - x^g_a),
    which ranks the action taken first on every move out of a non-goal cell (see
    :func:`conv_idm`).
    """
    patterns = []
    for action in range(NUM_ACTIONS):
        before, after = move_patches(action)
        v = after - before
        if goal_moves:
            before, after = move_patches(action, onto_goal=True)
            v = v + (after - before)
        patterns.append(v)
    return torch.stack(patterns)


def conv_idm(temperature: float = 0.01, goal_moves: bool = True) -> nn.Module:
    """The 1L-CNN IDM of the appendix (section "Images as states").

    Kernel a over the 6 input channels (s first, then s') is K^a = (W^a, V^a) with
    W^a = -V^a, so its response on patches (x, x') is <V^a, x' - x>: only pixels that changed
    count, and a patch that changed the way action a changes it scores highest. The global
    max-pool picks the location of the move, and the logits are those maxima over tau. No
    bias (it is set to zero in the ``cnn1`` module, whose structure this keeps).

    With the renderer's colours in model-input scale, a move out of a non-goal cell changes
    its source pixel by free - agent = (0, 1, 1) and its target by agent - free =
    (0, -1, -1), or by agent_on_goal - goal = (1, 0, 0) on the goal. With ``goal_moves=True``
    (kernel centre (0, 2, 2), target pixel (1, -1, -1)) the action taken scores 6 (5 onto
    the goal) and every other action at most 4, everywhere in the image: the logit margin
    is at least 1/tau. With ``goal_moves=False`` (the appendix's V^a) the action taken scores
    4 and the others at most 2, except on moves onto the goal, where all four score 2.

    Returns the ``cnn1`` architecture's module ``Sequential(Conv2d(6, 4, 3), global
    max-pool)``; the kernels do not depend on the image size.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    # The spatial size given to build() does not change the module (no padding, global pool).
    net = architecture("cnn1").build((6, 3, 3), NUM_ACTIONS)
    v = kernel_patterns(goal_moves)
    conv = net[0]
    with torch.no_grad():
        conv.weight.copy_(torch.cat([-v, v], dim=1) / temperature)
        conv.bias.zero_()
    return net.eval()
