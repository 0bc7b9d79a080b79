"""A lean vectorised Push-T: ``num_envs`` gym-pusht environments stepped in one process,
with the observation history (frame stack) kept here.

Observations are a dict ``{"obs": (num_envs, k, 96, 96, 3) uint8, "agent_pos": (num_envs, k,
2) float32}`` holding the last k frames, oldest first; at a reset the first frame fills the
whole history. With ``frame_stack=1`` the history axis is left out. A finished sub-environment
resets itself in the same step (gymnasium's "same-step" autoreset, as the Procgen env): the
observation returned with ``terminated`` or ``truncated`` already starts the next episode,
while reward, ``info["is_success"]`` and ``info["coverage"]`` describe the step that ended.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from ssilbench.api import UsageError
from ssilbench.kit import available, import_optional

GYM_ID = "gym_pusht/PushT-v0"
OBS_TYPE = "pixels_agent_pos"
IMAGE_SHAPE = (96, 96, 3)
ACTION_LOW, ACTION_HIGH = 0.0, 512.0
INSTALL_HINT = "Install it with: pip install 'ssilbench[pusht]' (gym-pusht and zarr)."


def import_gym_pusht() -> Any:
    """The ``gym_pusht`` module (registers ``gym_pusht/PushT-v0``), or a PluginError saying
    how to install it."""
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    return import_optional("gym_pusht", "The pusht environment needs", INSTALL_HINT)


def pusht_available() -> bool:
    return available(import_gym_pusht)


def max_episode_steps() -> int:
    """The time limit gymnasium registers for ``gym_pusht/PushT-v0`` (300)."""
    import gymnasium

    import_gym_pusht()
    return int(gymnasium.spec(GYM_ID).max_episode_steps)


_FAST_CLASS: type | None = None


def pusht_env_class() -> type:
    """gym-pusht's environment class with a faster, pixel-identical observation render.

    The upstream render copies the 512x512 pygame surface through a transposed view
    (``np.array(surfarray.pixels3d(...)).transpose``), about two thirds of a step's render
    time; ``pygame.image.tobytes`` yields the same row-major RGB bytes directly. The resize
    and everything else is the upstream code; a test compares both renders pixel by pixel.
    """
    global _FAST_CLASS
    if _FAST_CLASS is None:
        import gymnasium

        import_gym_pusht()
        import cv2
        import pygame

        base = gymnasium.spec(GYM_ID).entry_point
        module, _, name = str(base).partition(":")
        upstream = getattr(__import__(module, fromlist=[name]), name)

        class FastRenderPushT(upstream):  # type: ignore[misc, valid-type]
            def _get_img(self, screen, width, height, render_action=False):  # noqa: ANN001
                if render_action:  # the visualisation with the action marker: upstream's
                    return super()._get_img(screen, width, height, render_action)
                w, h = screen.get_size()
                rgb = np.frombuffer(pygame.image.tobytes(screen, "RGB"), np.uint8)
                return cv2.resize(rgb.reshape(h, w, 3), (width, height))

        _FAST_CLASS = FastRenderPushT
    return _FAST_CLASS


def make_pusht_env(fast_render: bool = True) -> Any:
    """One unwrapped Push-T environment with pixel + agent-position observations.

    The vector env counts the time limit itself, so gymnasium's wrappers (time limit,
    order enforcing, passive checker) are not stacked on every step.
    """
    if fast_render:
        return pusht_env_class()(obs_type=OBS_TYPE, render_mode="rgb_array")
    import gymnasium

    import_gym_pusht()
    return gymnasium.make(GYM_ID, obs_type=OBS_TYPE, render_mode="rgb_array").unwrapped


class PushTVectorEnv(VectorEnv):
    """``num_envs`` Push-T environments; equal seeds give equal episodes.

    ``reset(seed=s)`` seeds sub-environment i with ``s + i`` (gymnasium's convention); a
    reset without a seed uses the constructor's seed the first time and continues every
    sub-environment's random stream afterwards, as do the automatic resets.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self, num_envs: int, seed: int = 0, frame_stack: int = 4, max_steps: int = 300
    ) -> None:
        if num_envs < 1:
            raise UsageError(f"num_envs must be at least 1, got {num_envs}.")
        if frame_stack < 1:
            raise UsageError(f"frame_stack must be at least 1, got {frame_stack}.")
        self.num_envs = num_envs
        self.frame_stack = frame_stack
        self.max_steps = max_steps
        self._seed: int | None = seed
        self.envs = [make_pusht_env() for _ in range(num_envs)]
        k = frame_stack
        history = (k,) if k > 1 else ()
        self.single_observation_space = spaces.Dict(
            {
                "obs": spaces.Box(0, 255, shape=(*history, *IMAGE_SHAPE), dtype=np.uint8),
                "agent_pos": spaces.Box(
                    ACTION_LOW, ACTION_HIGH, shape=(*history, 2), dtype=np.float32
                ),  # fmt: skip
            }
        )
        self.single_action_space = spaces.Box(ACTION_LOW, ACTION_HIGH, shape=(2,),
                                              dtype=np.float32)  # fmt: skip
        self.observation_space = spaces.Dict(
            {
                "obs": spaces.Box(
                    0, 255, shape=(num_envs, *history, *IMAGE_SHAPE), dtype=np.uint8
                ),  # fmt: skip
                "agent_pos": spaces.Box(
                    ACTION_LOW, ACTION_HIGH, shape=(num_envs, *history, 2), dtype=np.float32
                ),  # fmt: skip
            }
        )
        self.action_space = spaces.Box(ACTION_LOW, ACTION_HIGH, shape=(num_envs, 2),
                                       dtype=np.float32)  # fmt: skip
        # The histories, (num_envs, k, ...) whatever k; the k == 1 axis is dropped on output.
        self._frames = np.zeros((num_envs, k, *IMAGE_SHAPE), dtype=np.uint8)
        self._pos = np.zeros((num_envs, k, 2), dtype=np.float32)
        self._steps = np.zeros(num_envs, dtype=np.int64)

    # --- helpers ------------------------------------------------------------------------

    def _start(self, i: int, observation: dict[str, np.ndarray]) -> None:
        """A new episode in sub-environment i: its first frame fills the whole history."""
        self._frames[i] = observation["pixels"]
        self._pos[i] = np.asarray(observation["agent_pos"], dtype=np.float32)
        self._steps[i] = 0

    def _push(self, i: int, observation: dict[str, np.ndarray]) -> None:
        # Shift the history one frame to the past (numpy copies overlapping slices safely).
        self._frames[i, :-1] = self._frames[i, 1:]
        self._pos[i, :-1] = self._pos[i, 1:]
        self._frames[i, -1] = observation["pixels"]
        self._pos[i, -1] = np.asarray(observation["agent_pos"], dtype=np.float32)

    def _observation(self) -> dict[str, np.ndarray]:
        if self.frame_stack == 1:
            return {"obs": self._frames[:, 0].copy(), "agent_pos": self._pos[:, 0].copy()}
        return {"obs": self._frames.copy(), "agent_pos": self._pos.copy()}

    # --- gymnasium API ------------------------------------------------------------------

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if seed is None and self._seed is not None:
            seed = self._seed
        self._seed = None  # later unseeded resets continue the random streams
        seeds: list[int | None]
        if seed is None:
            seeds = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise UsageError(f"reset got {len(seeds)} seeds for {self.num_envs} envs.")
        for i, (env, s) in enumerate(zip(self.envs, seeds, strict=True)):
            observation, _ = env.reset(seed=s, options=options)
            self._start(i, observation)
        info = {
            "is_success": np.zeros(self.num_envs, dtype=bool),
            "coverage": np.zeros(self.num_envs, dtype=np.float64),
        }
        return self._observation(), info

    def step(
        self, actions: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions, dtype=np.float32)
        if actions.shape != (self.num_envs, 2):
            raise ValueError(
                f"Push-T actions are target positions of shape ({self.num_envs}, 2), got "
                f"{actions.shape}."
            )
        # The env would chase a target outside its walls; its action space is [0, 512]^2.
        actions = np.clip(actions, ACTION_LOW, ACTION_HIGH)
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        success = np.zeros(n, dtype=bool)
        covered = np.zeros(n, dtype=np.float64)
        for i, env in enumerate(self.envs):
            observation, reward, term, _, info = env.step(actions[i])
            self._steps[i] += 1
            rewards[i] = reward
            terminated[i] = term
            truncated[i] = not term and self._steps[i] >= self.max_steps
            success[i] = info["is_success"]
            covered[i] = info["coverage"]
            if term or truncated[i]:
                observation, _ = env.reset()
                self._start(i, observation)
            else:
                self._push(i, observation)
        info = {"is_success": success, "coverage": covered}
        return self._observation(), rewards, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        for env in self.envs:
            env.close()
