"""An evaluation's episodes over one or several LIBERO-10 tasks, played in waves.

Episode ``i`` of an evaluation over ``T`` tasks plays task ``i % T``, as that task's
episode ``i // T`` (its fixed initial state ``first_init_state + i // T``, or its seeded
placement): the same start whatever else is evaluated beside it. :class:`EpisodeEnv` is a
gymnasium VectorEnv over a contiguous range of these episodes, one simulator per episode
(per-task :class:`~ssilbench_libero.vec_env.Libero10VectorEnv` s side by side), with a
``language`` observation (each episode's task's conditioning vector) where a multitask model
reads one.

A simulator holds up to ~1.3 GB (llvmpipe keeps textures in RAM), so the official protocol's
200 episodes of the ten tasks cannot all be alive at once. :meth:`EpisodeEnv.waves` yields
vector envs of at most ``max_alive`` consecutive episodes, each closed before the next is
built; the core's evaluator plays them one after the other and joins their scores.
``episode_groups`` names each task's episodes, so that the evaluator reports the success
rate of every task beside the mean.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ssilbench_libero.tasks import ACTION_DIM, IMAGE_SHAPE, PROPRIO_DIM, LiberoTask
from ssilbench_libero.vec_env import Libero10VectorEnv, Start


class EpisodeEnv(VectorEnv):
    """Episodes ``episodes`` (a range of an evaluation of ``total`` episodes) of ``tasks``."""

    metadata = {"autoreset_mode": AutoresetMode.DISABLED}

    def __init__(
        self,
        tasks: Sequence[LiberoTask],
        total: int,
        seed: int = 0,
        *,
        start: Start = "init_states",
        max_steps: int = 600,
        frame_stack: int = 1,
        first_init_state: int = 0,
        language: np.ndarray | None = None,
        max_alive: int | None = None,
        episodes: range | None = None,
        names: Sequence[str] | None = None,
        control: str = "delta",
    ) -> None:
        if total < 1:
            raise ValueError(f"an evaluation needs at least 1 episode, got {total}")
        self.tasks = list(tasks)
        self.total = total
        self.episodes = episodes if episodes is not None else range(total)
        self.num_envs = len(self.episodes)
        self.max_alive = max_alive
        self.language = None if language is None else np.asarray(language, dtype=np.float32)
        self._settings = dict(start=start, max_steps=max_steps, frame_stack=frame_stack,
                              first_init_state=first_init_state, control=control)  # fmt: skip
        self._seed = seed
        n_tasks = len(self.tasks)
        global_ids = np.arange(self.episodes.start, self.episodes.stop)
        self.task_index = global_ids % n_tasks
        local = global_ids // n_tasks
        # One per-task vector env over the task's (consecutive) episodes in the range.
        self._parts: list[Libero10VectorEnv] = []
        self._position: list[np.ndarray] = []  # positions (in this env) of each part's envs
        for k in np.unique(self.task_index).tolist():
            where = np.flatnonzero(self.task_index == k)
            first = int(local[where[0]])
            self._parts.append(Libero10VectorEnv(
                self.tasks[k], len(where), seed, start=start, max_steps=max_steps,
                frame_stack=frame_stack, first_init_state=(first_init_state + first) % 50,
                env_offset=first, control=control,
            ))  # fmt: skip
            self._position.append(where)
        order = np.concatenate(self._position)
        self._gather = np.argsort(order)  # concatenated parts' rows -> this env's order
        labels = list(names) if names is not None else [t.id for t in self.tasks]
        # Episodes of each task among this env's (the evaluator's per-task rates).
        self.episode_groups = {
            labels[k]: np.flatnonzero(self.task_index == k) for k in range(n_tasks)
        }
        stack = (frame_stack,) if frame_stack > 1 else ()
        single = {
            "obs": spaces.Box(0, 255, (*stack, *IMAGE_SHAPE), np.uint8),
            "wrist": spaces.Box(0, 255, (*stack, *IMAGE_SHAPE), np.uint8),
            "proprio": spaces.Box(-np.inf, np.inf, (*stack, PROPRIO_DIM), np.float32),
        }
        if self.language is not None:
            dim = self.language.shape[1]
            single["language"] = spaces.Box(-np.inf, np.inf, (*stack, dim), np.float32)
        self.single_observation_space = spaces.Dict(single)
        # Every part has the same action space (delta's [-1, 1] or absolute's bounds).
        self.single_action_space = self._parts[0].single_action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    @property
    def init_state_index(self) -> np.ndarray:
        return np.concatenate([p.init_state_index for p in self._parts])[self._gather]

    def _join(self, parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        out = {key: np.concatenate([p[key] for p in parts])[self._gather] for key in parts[0]}
        if self.language is not None:
            rows = self.language[self.task_index]
            stack = self._settings["frame_stack"]
            if stack > 1:
                rows = np.repeat(rows[:, None], stack, axis=1)
            out["language"] = rows
        return out

    def _split(self, values: np.ndarray) -> list[np.ndarray]:
        return [values[where] for where in self._position]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        masks: list[Any] = [None] * len(self._parts)
        if options and options.get("reset_mask") is not None:
            mask = np.asarray(options["reset_mask"], dtype=bool).reshape(self.num_envs)
            masks = self._split(mask)
        obs = []
        for part, mask in zip(self._parts, masks, strict=True):
            o, _ = part.reset(seed=seed, options=None if mask is None else {"reset_mask": mask})
            obs.append(o)
        return self._join(obs), {"init_state": self.init_state_index}

    def step(self, actions: np.ndarray):
        actions = np.asarray(actions, dtype=np.float32).reshape(self.num_envs, ACTION_DIM)
        results = [part.step(a) for part, a in zip(self._parts, self._split(actions), strict=True)]

        def joined(i: int) -> np.ndarray:
            return np.concatenate([r[i] for r in results])[self._gather]

        success = np.concatenate([r[4]["is_success"] for r in results])[self._gather]
        info = {"is_success": success, "init_state": self.init_state_index}
        return self._join([r[0] for r in results]), joined(1), joined(2), joined(3), info

    def waves(self) -> Iterator[VectorEnv]:
        """Vector envs of at most ``max_alive`` consecutive episodes, built one at a time and
        closed after use; all of them at once when they fit."""
        if self.max_alive is None or self.num_envs <= self.max_alive:
            yield self
            return
        self.close_extras()  # simulators of an earlier all-at-once use
        for start in range(self.episodes.start, self.episodes.stop, self.max_alive):
            stop = min(start + self.max_alive, self.episodes.stop)
            wave = EpisodeEnv(self.tasks, self.total, self._seed, language=self.language,
                              episodes=range(start, stop), **self._settings)  # fmt: skip
            try:
                yield wave
            finally:
                wave.close()

    def close_extras(self, **kwargs: Any) -> None:
        for part in self._parts:
            part.close_extras()
