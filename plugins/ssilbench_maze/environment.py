"""The ``maze`` environment family: tasks, options, the expert dataset, v* and the test set."""

from __future__ import annotations

import math
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from ssilbench.api import (
    ConfigError,
    Environment,
    EnvSpec,
    Normaliser,
    Task,
    TestSet,
)
from ssilbench.kit import TransitionStore
from ssilbench_maze.expert import (
    ACTION_NAMES,
    Expert,
    GoalTables,
    cover_paths,
    goal_tables,
    noisy_path,
    split_at_noops,
)
from ssilbench_maze.generate import COMPLEXITY, DENSITY, generate_maze
from ssilbench_maze.gym_env import (
    COLOURS,
    PALETTES,
    FixedGoal,
    GoalPerEpisode,
    MazeObserver,
    MazeVectorEnv,
    default_horizon,
)
from ssilbench_maze.options import (
    GENERATOR,
    MazeOptions,
    data_key,
    noop_seed,
    other_palette,
    short_hash,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pydantic import BaseModel

    from ssilbench_maze.video_model import MazeVideoModel

TASK_SIZES = {"10x10": 10, "20x20": 20, "50x50": 50}
# Seed streams of the dataset, kept apart from the layout's stream: start cells (and
# goals), no-op draws, the sample of a test set too large to hold whole, and the goal set
# of ``goals=G``.
_START_STREAM = 1
_NOOP_STREAM = 2
_TEST_STREAM = 3
_GOALS_STREAM = 4
TEST_SET_BYTES = 64 << 20
"""Most bytes of stored frames (s and s' together) a test set holds; a larger goal-
conditioned test set is a seeded uniform sample of its (state, goal) pairs."""
STATES_DATASET_BYTES = 2 << 30
"""Most bytes of frames a ``data=states`` dataset may take (else the options are refused)."""


def episode_arrays(
    episodes: Sequence[tuple[np.ndarray, int]],
    expert_action: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cells, goals, actions, rewards and episode ends of (cells, goal) episodes.

    Every frame but the last of an episode carries the expert's action in its cell (also
    where a no-op kept the agent in place); the last frame carries the filler action 0 and
    reward 0.
    """
    cells = np.concatenate([path for path, _ in episodes])
    goals = np.concatenate([np.full(len(path), goal, dtype=np.int64) for path, goal in episodes])
    ends = np.cumsum([len(path) for path, _ in episodes]).astype(np.int64)
    last = np.zeros(len(cells), dtype=bool)
    last[ends - 1] = True
    actions = np.where(last, 0, expert_action(cells, goals)).astype(np.int64)
    # The reward is for the action at frame i, so it is 1 where the next frame is the goal.
    reaches_goal = np.zeros(len(cells), dtype=bool)
    reaches_goal[:-1] = (cells[1:] == goals[:-1]) & ~last[:-1]
    return cells, goals, actions, reaches_goal.astype(np.float32), ends


def cell_world_spec(
    env_id: str,
    observe: MazeObserver,
    *,
    horizon: int,
    eval_episodes: int,
    action_selection: Literal["greedy", "sample"],
    success: str,
    metadata: dict[str, Any],
) -> EnvSpec:
    """The spec shared by the maze and the grid: 4 moves, positions or images, and the
    success rate as the normalised score; ``success`` says what counts as success."""
    image = observe.kind == "image"
    return EnvSpec(
        env_id=env_id,
        obs_shape=tuple(observe.space.shape),
        obs_dtype="uint8" if image else "float32",
        obs_kind="image" if image else "vector",
        num_actions=len(ACTION_NAMES),
        action_names=ACTION_NAMES,
        horizon=horizon,
        eval_episodes=eval_episodes,
        eval_every=500,
        action_selection=action_selection,
        default_steps=1500,
        default_arch="cnn1" if image else "mlp5",
        normaliser=Normaliser(name="success rate", low=0.0, high=1.0, source=success),
        goal_dims=observe.goal_dims,
        budget_unit="transitions",
        metadata=metadata,
    )


class MazeTask(Task):
    """One maze task with its options applied."""

    def __init__(self, task: str, options: MazeOptions) -> None:
        self.task = task
        self.options = options
        self.maze = generate_maze(TASK_SIZES[task], options.maze_seed, options.layout)
        varies_goal = options.goals != "fixed"
        self.tables: GoalTables | None = goal_tables(self.maze.walls) if varies_goal else None
        # The G goals of goals=G (None otherwise), in the order of their dataset blocks.
        self.goal_cells: np.ndarray | None = (
            self._draw_goals(self.tables, options.goals)
            if self.tables is not None and isinstance(options.goals, int)
            else None
        )
        self.sampler: FixedGoal | GoalPerEpisode = (
            GoalPerEpisode(self.tables, self.goal_cells)
            if self.tables is not None
            else FixedGoal.from_expert(self.maze.expert)
        )
        self.observe = MazeObserver(
            self.maze, options.state, goal_features=varies_goal, palette=options.palette
        )
        # Dataset rollouts are cut at the default horizon, which depends only on the key.
        self.data_horizon = default_horizon(self.sampler.longest_path, options.noop)
        self.horizon = options.horizon or self.data_horizon
        self._check_size()
        self.spec = self._spec()

    def _draw_goals(self, tables: GoalTables, count: int) -> np.ndarray:
        """``count`` distinct goals: the first ``count`` of a seeded permutation of the
        maze's possible goals, so that the goals of G are among those of every larger G."""
        candidates = tables.goals
        if count > len(candidates):
            raise ConfigError(
                f"maze:{self.task} (maze_seed={self.options.maze_seed}) has "
                f"{len(candidates)} possible goal cells; goals={count} asks for more."
            )
        rng = np.random.Generator(np.random.PCG64([self.options.maze_seed, _GOALS_STREAM]))
        return candidates[rng.permutation(len(candidates))[:count]]

    def _frame_bytes(self) -> int:
        return math.prod(self.observe.space.shape) * np.dtype(self.observe.space.dtype).itemsize

    def _check_size(self) -> None:
        if self.options.data != "states":
            return
        # Each transition stores at least its source frame; no-ops add end frames on top.
        frames = len(self.source_pairs[0]) * self.options.copies
        size = frames * self._frame_bytes()
        if size > STATES_DATASET_BYTES:
            raise ConfigError(
                f"maze:{self.task} with goals={self.options.goals}, "
                f"copies={self.options.copies}, state={self.options.state} and data=states "
                f"would store {frames:,} frames ({size / 2**30:.1f} GiB, over the "
                f"{STATES_DATASET_BYTES / 2**30:g} GiB limit); use state=position, fewer "
                "copies or goals, data=rollouts or a smaller maze."
            )

    def _spec(self) -> EnvSpec:
        metadata: dict[str, Any] = {
            "test_states": len(self.test_pairs[0]),
            "longest_expert_path": self.sampler.longest_path,
            "grid_size": list(self.maze.shape),
            "maze_seed": self.options.maze_seed,
            "noop": self.options.noop,
            "goals": self.options.goals,
        }
        if self.tables is None:
            metadata["feasible_states"] = int((self.maze.expert.distance >= 0).sum())
            metadata["goal"] = list(self.maze.goal_position)
        else:
            metadata["feasible_states"] = len(self.tables.goals)
            metadata["feasible_pairs"] = len(self.source_pairs[0])
            metadata["goal"] = None
        # Only where set, so that the datasets of earlier option sets keep their bytes.
        if self.goal_cells is not None:
            metadata["goal_cells"] = self.maze.expert.positions(self.goal_cells).tolist()
        if self.options.copies != 1:
            metadata["copies"] = self.options.copies
        if palette := other_palette(self.options):
            metadata["palette"] = palette
        if self.options.layout != "suite":
            metadata["layout"] = self.options.layout
        return cell_world_spec(
            f"maze:{self.task}",
            self.observe,
            horizon=self.horizon,
            eval_episodes=64,
            action_selection="greedy",
            success="rollout success: reward 1 on reaching the goal",
            metadata=metadata,
        )

    # --- the expert over (cell, goal) ----------------------------------------------------

    def expert(self, goal: int) -> Expert:
        """The expert of one goal (the maze's own expert for a fixed goal)."""
        if self.tables is None:
            if int(goal) != self.maze.goal:
                raise ValueError(f"cell {goal} is not the goal of this maze")
            return self.maze.expert
        return self.tables.expert(goal)

    def expert_actions(self, cells: np.ndarray, goals: np.ndarray) -> np.ndarray:
        """pi*_g(s) for batches of cells and their goals."""
        cells = np.asarray(cells, dtype=np.int64)
        if self.tables is None:
            return self.maze.expert.action[cells]
        return self.tables.actions(cells, np.asarray(goals, dtype=np.int64))

    def expert_next(self, cells: np.ndarray, goals: np.ndarray) -> np.ndarray:
        """v*_g(s) = f(s, pi*_g(s)) for batches of cells and their goals."""
        cells = np.asarray(cells, dtype=np.int64)
        if self.tables is None:
            return self.maze.expert.next_cell[cells]
        return self.tables.next_cells(cells, np.asarray(goals, dtype=np.int64))

    def _goals(self) -> np.ndarray:
        """The goals of the dataset, one block each in this order."""
        if self.tables is None:
            return np.array([self.maze.goal], dtype=np.int64)
        return self.sampler.goals

    @cached_property
    def source_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(cell, goal) of every transition source of D^full once: every feasible non-goal
        state for each goal of the task, goal by goal in :meth:`_goals` order."""
        if self.tables is None:
            sources = self.maze.expert.sources
            return sources, np.full(len(sources), self.maze.goal, dtype=np.int64)
        if self.goal_cells is None:
            return self.tables.pairs()
        blocks = [self.tables.expert(goal).sources for goal in self.goal_cells.tolist()]
        goals = np.repeat(self.goal_cells, [len(block) for block in blocks])
        return np.concatenate(blocks), goals

    def expert_episodes(self) -> list[tuple[np.ndarray, int]]:
        """The (cells, goal) episodes of the dataset."""
        options = self.options
        noop = options.noop
        noop_rng = np.random.Generator(np.random.PCG64([noop_seed(options), _NOOP_STREAM]))
        episodes: list[tuple[np.ndarray, int]] = []
        if options.data == "states":
            covers = [(goal, cover_paths(self.expert(goal))) for goal in self._goals().tolist()]
            # Copy after copy of the whole of D^full; the no-op draws go on from one copy to
            # the next, so each copy has its own (and copies=1 draws what it always drew).
            for _ in range(options.copies):
                for goal, paths in covers:
                    for path in paths:
                        if noop > 0.0:
                            noops = noop_rng.random(len(path) - 1) < noop
                            parts = split_at_noops(path, noops)
                        else:
                            parts = [path]
                        episodes.extend((part, goal) for part in parts)
            return episodes
        rng = np.random.Generator(np.random.PCG64([options.maze_seed, _START_STREAM]))
        if self.tables is None:
            sources = self.maze.expert.sources
            starts = sources[rng.integers(len(sources), size=options.episodes)]
            pairs = [(int(start), self.maze.goal) for start in starts]
        else:
            pairs = [self.sampler.draw(rng) for _ in range(options.episodes)]
        for start, goal in pairs:
            path = noisy_path(self.expert(goal), start, noop, noop_rng, self.data_horizon)
            episodes.append((path, goal))
        return episodes

    # --- dataset, environments, v* and the test set --------------------------------------

    @cached_property
    def data_key(self) -> dict[str, Any]:
        return data_key(self.task, self.options)

    def dataset_path(self, root: Path) -> Path:
        return Path(root) / "maze" / f"{self.task}-{short_hash(self.data_key)}"

    def dataset(self, root: Path) -> TransitionStore:
        path = self.dataset_path(root)
        if path.exists():
            return TransitionStore.open(path, verify=True)
        cells, goals, actions, rewards, ends = episode_arrays(
            self.expert_episodes(), self.expert_actions
        )
        producer = {
            "plugin": "ssilbench_maze",
            "complexity": COMPLEXITY,
            "density": DENSITY,
            **self.data_key,
        }
        return TransitionStore.write(
            path,
            obs=self.observe(cells, goals),
            actions=actions,
            rewards=rewards,
            episode_ends=ends,
            producer=producer,
            metadata=dict(self.spec.metadata),
        )

    def frames(self, venv: MazeVectorEnv, obs: Any, info: dict[str, Any]) -> np.ndarray:
        """The maze and the agents drawn from their cells (a video of any observation kind)."""
        from ssilbench_maze.gym_env import vector_frames

        return vector_frames(venv, info)

    def make_vec_env(self, num_envs: int, seed: int) -> MazeVectorEnv:
        return MazeVectorEnv(
            self.maze,
            num_envs,
            obs_kind=self.options.state,
            horizon=self.horizon,
            seed=seed,
            noop=self.options.noop,
            sampler=self.sampler,
            palette=self.options.palette,
        )

    def video_model(self) -> MazeVideoModel:
        # Imported here, so that `ssilbench list` and `--help` do not import torch.
        from ssilbench_maze.video_model import MazeVideoModel

        return MazeVideoModel(
            self.maze, self.options.state, self.options.noop, self.tables, self.options.palette
        )

    @cached_property
    def test_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """The (cell, goal) of each test transition: every feasible non-goal state (with goals
        per episode, every feasible (state, goal) pair; with G goals, every feasible
        non-goal state for each of them), sampled down to TEST_SET_BYTES where goals vary."""
        cells, goals = self.source_pairs
        if self.tables is None:
            return cells, goals
        limit = max(1, TEST_SET_BYTES // (2 * self._frame_bytes()))
        if len(cells) > limit:
            rng = np.random.Generator(np.random.PCG64([self.options.maze_seed, _TEST_STREAM]))
            keep = np.sort(rng.choice(len(cells), size=limit, replace=False))
            cells, goals = cells[keep], goals[keep]
        return cells, goals

    @cached_property
    def _test_set(self) -> TestSet:
        cells, goals = self.test_pairs
        return TestSet(
            obs=self.observe(cells, goals),
            actions=self.expert_actions(cells, goals),
            next_obs=self.observe(self.expert_next(cells, goals), goals),
        )

    def test_set(self) -> TestSet:
        """(s, pi*(s), v*(s)) for every feasible non-goal state, as stored observations.

        v*(s) is the move without a no-op, whatever ``noop`` is; the core scores the test
        accuracy of argmax pi(a|s) and the policy's and IDM's entropies on it.
        """
        return self._test_set


class MazeEnvironment(Environment):
    """Random mazes of three sizes with a shortest-path expert, optionally with no-op
    dynamics or a goal per episode."""

    description: ClassVar[str] = (
        "Random mazes (mazelab's random-walk walls) of 11x11, 21x21 and 51x51 cells with a "
        "BFS expert, positions or images, the ground-truth video model, optional no-op "
        "dynamics, optional goals per episode (or a seeded set of G goals) and repeated "
        "copies of D^full."
    )
    Options: ClassVar[type[MazeOptions]] = MazeOptions
    task_class = MazeTask
    task_kind = "maze task"
    # The paper's code draws each seed's no-ops (np.random.seed(seed), then the data).
    per_seed_options: ClassVar[tuple[str, ...]] = ("noop_seed",)

    @classmethod
    def seeded_options(cls, options: BaseModel) -> tuple[str, ...]:
        # Without no-ops the draw changes nothing: those runs keep their ids.
        return cls.per_seed_options if getattr(options, "noop", 0.0) > 0.0 else ()

    @classmethod
    def run_defaults(cls, options: BaseModel) -> dict[str, Any]:
        # New runs are on the paper's mazes, their images in its colours. The model keeps
        # 'suite' and 'ssilbench', what a spec recorded without the options (before 0.3.0)
        # was run on; positions ignore the palette, so their specs leave it out.
        images = getattr(options, "state", None) == "image"
        return {"layout": "paper", **({"palette": "paper"} if images else {})}

    def tasks(self) -> list[str]:
        return list(TASK_SIZES)


__all__ = [
    "COLOURS",
    "data_key",
    "short_hash",
    "PALETTES",
    "GENERATOR",
    "MazeEnvironment",
    "MazeOptions",
    "MazeTask",
    "TASK_SIZES",
]
