"""A gymnasium VectorEnv over LIBERO environments, one simulator per sub-environment.

Sub-environments are stepped one after the other in this process (rendering dominates and
takes both cores' worth of llvmpipe anyway). Each observation is a dict::

    {"obs": agent-view camera, "wrist": eye-in-hand camera, "proprio": gripper + joints}

with a frame-stack axis of ``frame_stack`` frames after the env axis (oldest first; at reset
the first frame is repeated). Camera images are (128, 128, 3) uint8 turned upright: MuJoCo
reads pixels bottom row first, so rows are reversed (the importer does the same to the
demonstrations, which were recorded from the same renderer).

Episodes start either from one of the task's fixed initial states (LIBERO's evaluation) or
from LIBERO's random object placement seeded per episode, followed by ``SETTLE_STEPS`` zero
actions, as LIBERO's own evaluation does. Every reset rebuilds the simulator from its model
(robosuite's hard reset, LIBERO's default), so equal seeds give equal episodes whatever ran
before. An episode ends with ``terminated`` when the task succeeds (reward 1,
``info["is_success"]``) and with ``truncated`` at ``max_steps``. A finished sub-environment
is not reset automatically (gymnasium's ``AutoresetMode.DISABLED``: a reset costs seconds):
it keeps its last observation and reports reward 0 and the same end flags until
``reset()`` (optionally with ``options={"reset_mask": mask}``) starts its next episode.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ssilbench_libero.tasks import (
    ABSOLUTE_ACTION_HIGH,
    ABSOLUTE_ACTION_LOW,
    ACTION_DIM,
    IMAGE_SHAPE,
    IMAGE_SIZE,
    PROPRIO_DIM,
    SETTLE_STEPS,
    LiberoTask,
)

Start = Literal["init_states", "seeded"]


def observation_layout() -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """One frame of a sub-environment, key by key."""
    return {
        "obs": (IMAGE_SHAPE, np.dtype(np.uint8)),
        "wrist": (IMAGE_SHAPE, np.dtype(np.uint8)),
        "proprio": ((PROPRIO_DIM,), np.dtype(np.float32)),
    }


def frame_from_libero(raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """LIBERO's observation dict -> one frame of ours (images upright, proprio float32)."""
    proprio = np.concatenate([raw["robot0_gripper_qpos"], raw["robot0_joint_pos"]])
    return {
        "obs": np.ascontiguousarray(raw["agentview_image"][::-1]),
        "wrist": np.ascontiguousarray(raw["robot0_eye_in_hand_image"][::-1]),
        "proprio": proprio.astype(np.float32),
    }


def episode_seed(seed: int, env_index: int, episode: int) -> int:
    """A 32-bit seed for one episode of one sub-environment."""
    sequence = np.random.SeedSequence([int(seed) % 2**63, env_index, episode])
    return int(sequence.generate_state(1, dtype=np.uint32)[0])


class Libero10VectorEnv(VectorEnv):
    """``num_envs`` LIBERO simulators of one task; equal seeds give equal episodes.

    With ``start="init_states"`` episode ``e`` of sub-environment ``i`` (counted from the
    last seeded reset) starts from fixed initial state
    ``(first_init_state + i + e * num_envs) % 50``: the seed does not move the start states,
    which are the protocol. With ``start="seeded"`` LIBERO places the objects at random from
    a seed derived from (seed, env_offset + i, e). Simulators are built at the first reset.
    """

    metadata = {"autoreset_mode": AutoresetMode.DISABLED}

    def __init__(
        self,
        task: LiberoTask,
        num_envs: int,
        seed: int = 0,
        *,
        start: Start = "init_states",
        max_steps: int = 600,
        frame_stack: int = 1,
        first_init_state: int = 0,
        settle_steps: int = SETTLE_STEPS,
        env_offset: int = 0,
        control: str = "delta",
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.task = task
        self.num_envs = num_envs
        self.start = start
        self.max_steps = int(max_steps)
        self.frame_stack = int(frame_stack)
        self.first_init_state = int(first_init_state)
        self.settle_steps = int(settle_steps)
        # Sub-environment i seeds its episodes as sub-environment env_offset + i would: a
        # wave of an evaluation (EpisodeWaves) plays the same episodes as one env of all.
        self.env_offset = int(env_offset)
        if control not in ("delta", "absolute"):
            raise ValueError(f"control must be 'delta' or 'absolute', got {control!r}")
        self.control = control
        stack = (self.frame_stack,) if self.frame_stack > 1 else ()
        layout = observation_layout()
        self.single_observation_space = spaces.Dict({
            "obs": spaces.Box(0, 255, (*stack, *IMAGE_SHAPE), np.uint8),
            "wrist": spaces.Box(0, 255, (*stack, *IMAGE_SHAPE), np.uint8),
            "proprio": spaces.Box(-np.inf, np.inf, (*stack, PROPRIO_DIM), np.float32),
        })  # fmt: skip
        if control == "absolute":
            low, high = ABSOLUTE_ACTION_LOW, ABSOLUTE_ACTION_HIGH
        else:
            low, high = (-1.0,) * ACTION_DIM, (1.0,) * ACTION_DIM
        self._low = np.asarray(low, dtype=np.float64)
        self._high = np.asarray(high, dtype=np.float64)
        self.single_action_space = spaces.Box(self._low.astype(np.float32),
                                              self._high.astype(np.float32), (ACTION_DIM,),
                                              np.float32)  # fmt: skip
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._seed = int(seed)
        self._envs: list[Any] = []
        self._init_states: np.ndarray | None = None
        # Frames of every sub-environment: (num_envs, frame_stack, *shape) per key.
        self._frames = {
            key: np.zeros((num_envs, self.frame_stack, *shape), dtype=dtype)
            for key, (shape, dtype) in layout.items()
        }
        self._episode = np.zeros(num_envs, dtype=np.int64)
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._terminated = np.zeros(num_envs, dtype=bool)
        self._truncated = np.zeros(num_envs, dtype=bool)
        self._started = np.zeros(num_envs, dtype=bool)
        self.init_state_index = np.full(num_envs, -1, dtype=np.int64)
        """The fixed initial state each sub-environment's current episode started from
        (-1 for seeded starts)."""

    # --- simulators -------------------------------------------------------------------

    def _build(self) -> None:
        if self._envs:
            return
        from ssilbench_libero.sim import make_libero_env, task_files

        bddl_file, init_states = task_files(self.task)
        self._init_states = init_states
        try:
            for _ in range(self.num_envs):
                self._envs.append(make_libero_env(bddl_file, IMAGE_SIZE, self.control))
        except BaseException:
            self.close_extras()
            raise

    def _start_episode(self, i: int) -> None:
        env = self._envs[i]
        seed = episode_seed(self._seed, self.env_offset + i, int(self._episode[i]))
        # LIBERO draws object placements from numpy's global generator: seed it for this
        # reset only, and give everyone else theirs back.
        saved = np.random.get_state()
        try:
            from ssilbench_libero.sim import hold_action

            np.random.seed(seed)
            raw = env.reset()
            if self.start == "init_states":
                assert self._init_states is not None
                index = (self.first_init_state + i + int(self._episode[i]) * self.num_envs) % len(
                    self._init_states
                )
                raw = env.set_init_state(self._init_states[index])
                self.init_state_index[i] = index
            else:
                self.init_state_index[i] = -1
            zero = np.zeros(ACTION_DIM, dtype=np.float64)
            for _ in range(self.settle_steps):
                # Under absolute control a zero action is the world origin: hold the pose.
                action = zero if self.control == "delta" else hold_action(env)
                raw, _, _, _ = env.step(action)
        finally:
            np.random.set_state(saved)
        frame = frame_from_libero(raw)
        for key, value in frame.items():
            self._frames[key][i] = value  # the first frame repeated over the stack
        self._episode[i] += 1
        self._steps[i] = 0
        self._terminated[i] = self._truncated[i] = False
        self._started[i] = True

    def _observation(self) -> dict[str, np.ndarray]:
        if self.frame_stack > 1:
            return {key: value.copy() for key, value in self._frames.items()}
        return {key: value[:, 0].copy() for key, value in self._frames.items()}

    # --- gymnasium --------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Start the next episode of every sub-environment (or of those in
        ``options["reset_mask"]``); a seed restarts the episode count, so equal seeds give
        equal episodes."""
        self._build()
        mask = np.ones(self.num_envs, dtype=bool)
        if options and options.get("reset_mask") is not None:
            mask = np.asarray(options["reset_mask"], dtype=bool).reshape(self.num_envs)
        if seed is not None:
            self._seed = int(seed)
            self._episode[mask] = 0
        for i in np.flatnonzero(mask).tolist():
            self._start_episode(i)
        return self._observation(), {"init_state": self.init_state_index.copy()}

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        if not self._started.all():
            raise RuntimeError("call reset() before step()")
        actions = np.asarray(actions, dtype=np.float64).reshape(self.num_envs, ACTION_DIM)
        actions = np.clip(actions, self._low, self._high)
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        success = np.zeros(self.num_envs, dtype=bool)
        for i, env in enumerate(self._envs):
            if self._terminated[i] or self._truncated[i]:
                continue  # finished: frozen until reset
            raw, _, done, _ = env.step(actions[i])
            self._steps[i] += 1
            success[i] = bool(done)  # LIBERO's done is its task's success check
            rewards[i] = 1.0 if success[i] else 0.0
            self._terminated[i] = success[i]
            self._truncated[i] = not success[i] and self._steps[i] >= self.max_steps
            frame = frame_from_libero(raw)
            for key, value in frame.items():
                stack = self._frames[key][i]
                stack[:-1] = stack[1:].copy()
                stack[-1] = value
        info = {"is_success": success, "init_state": self.init_state_index.copy()}
        return self._observation(), rewards, self._terminated.copy(), self._truncated.copy(), info

    def close_extras(self, **kwargs: Any) -> None:
        envs, self._envs = self._envs, []
        for env in envs:
            # A GL context that fails to die must not mask the caller's error.
            with contextlib.suppress(Exception):
                env.close()
        self._started[:] = False
